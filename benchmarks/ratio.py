"""Side-by-side ratio benchmark: nbquant against the roofline, NumPy and installed peers.

Run ``python -m benchmarks [--sizes 2^24,2^26] [--repeats 15] [--cases int8,int4]``.
For every case and size, nbquant, the roofline cast and each peer are called in one
process, interleaved (the order rotates every repeat), and the median of the repeats
is reported with the effective bandwidth (bytes read + bytes written per call; bytes
read only for the calibrator cases, which only reduce their input):

* ``%roof`` is ``t_roofline / t``: the share of a numba ``parallel=True`` cast of the
  same shapes and dtypes into a preallocated buffer (float32 -> int8, float32 ->
  packed uint8, int8 -> float32), or of a numba ``parallel=True`` ``max |x|`` over the
  input for the calibrator cases (``--device cuda``: a device-to-device copy of the
  same bytes);
* ``nbq x`` is ``t / t_nbquant``: how many times faster nbquant is than that row.

Peers are imported lazily and skipped silently when absent: NumPy always; torch
(``torch.quantize_per_*``, ``quantized_decomposed``, ``Tensor.dequantize``,
``torch.amax``, ``torch.histc``), torchao (``quantize_affine`` /
``dequantize_affine``) and onnxruntime (``QuantizeLinear`` / ``DequantizeLinear``)
when installed. nbquant never needs them.

``OMP_WAIT_POLICY=PASSIVE`` is set here, before numba or torch load an OpenMP
runtime: with spinning waiters, two OpenMP pools in one process stall each other.

Dynamic cases (``nbquant.quantize_dynamic``: per-row int8, group-wise uint4 asymmetric
as torchao's int4 weight-only; ``nbquant.quantize_nf4``) time the whole job (qparams,
codes and packing) for every contender, packed and unpacked.

Calibrator cases (``MaxCalibrator`` per tensor and ``HistogramCalibrator`` with its
default 2048 bins) time one ``collect`` of one batch, the amax included, and compare
the amax or the histogram counts with the peers' by value. ``compute_amax`` reads the
histogram, not the tensor, so it has no place in this per-element table: the asv suite
times it (``asv_bench/benchmarks/calibration.py``).

New cases are added by appending a :class:`Case` to :data:`CASES`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import nbquant


def _openmp_loaded() -> bool:
    """Whether an OpenMP runtime may already be loaded (numba's pool started, or torch imported)."""
    par = sys.modules.get("numba.np.ufunc.parallel")
    return bool(getattr(par, "_is_initialized", False)) or "torch" in sys.modules


# Read by libgomp when it loads: numba loads it at the first parallel call, torch on import.
_OPENMP_PRELOADED = _openmp_loaded()
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__all__ = ["Case", "Peer", "CASES", "main", "run_case", "parse_sizes"]

#: Columns of the 2-D benchmark arrays (rows = size // COLUMNS).
COLUMNS = 4096
INT8 = (-128, 127)
INT4 = (-8, 7)

Bench = Callable[[], object]


# --------------------------------------------------------------------------- problems


def _shape(n: int) -> tuple[int, int]:
    """A 2-D shape of ``n`` elements with rows of :data:`COLUMNS` (fewer for tiny sizes)."""
    cols = min(COLUMNS, n)
    return n // cols, cols


def _is_float(dtype: str) -> bool:
    return nbquant.get_format(dtype).is_float


def _absmax_scale(x: np.ndarray, block: tuple[int, int], qmax: int) -> np.ndarray:
    """Symmetric scales ``absmax / qmax`` over blocks of ``x``, shaped as the block grid."""
    r, c = x.shape
    br, bc = block
    a = np.abs(x).reshape(r // br, br, c // bc, bc).max(axis=(1, 3))
    return np.maximum(a / np.float32(qmax), np.float32(1e-8)).astype(np.float32)


@dataclass
class Problem:
    """The arrays of one case at one size.

    Attributes
    ----------
    src : numpy.ndarray
        The array the operation reads (float32 input or codes).
    out : numpy.ndarray
        A preallocated result (used by ``out=`` variants and the roofline).
    scale : numpy.ndarray
        Block-grid float32 scales.
    block : tuple of int
        The block of one scale, ``(rows, columns)``.
    qrange : tuple of int
        ``(qmin, qmax)`` of the format.
    kwargs : dict
        Keyword arguments for nbquant (``axis``, ``block_size``, ``packed``, ``dtype``).
    codes : numpy.ndarray
        Unpacked int8 codes (for peers that dequantize unpacked codes).
    """

    src: np.ndarray
    out: np.ndarray
    scale: np.ndarray
    block: tuple[int, int]
    qrange: tuple[int, int]
    kwargs: dict
    codes: np.ndarray | None = None

    @property
    def reduces(self) -> bool:
        """Whether the case only reads ``src`` (calibrators): ``out`` then has fewer dimensions.

        ``out`` holds the result of the roofline's ``max |x|`` and is not counted in :attr:`nbytes`.
        """
        return self.out.ndim < self.src.ndim

    @property
    def nbytes(self) -> int:
        """Bytes read plus bytes written by one call (scales excluded); bytes read only when it :attr:`reduces`."""
        return self.src.nbytes + (0 if self.reduces else self.out.nbytes)


def _block(shape: tuple[int, int], granularity: str) -> tuple[tuple[int, int], dict]:
    """The scale block and nbquant layout keywords of ``"tensor"``, ``"axis0"``, ``"axis1"`` or ``"gN"``."""
    r, c = shape
    if granularity == "tensor":
        return (r, c), {}
    if granularity == "axis0":
        return (1, c), {"axis": 0}
    if granularity == "axis1":
        return (r, 1), {"axis": 1}
    g = min(int(granularity[1:]), c)
    return (1, g), {"block_size": (1, g)}


def quantize_problem(n: int, rng: np.random.Generator, dtype: str, granularity: str,
                     packed: bool = False) -> Problem:
    """A float32 input with absmax scales, for a static quantize case."""
    shape = _shape(n)
    x = rng.standard_normal(shape, dtype=np.float32)
    fmt = nbquant.get_format(dtype)
    qrange = (fmt.qmin, fmt.qmax) if not _is_float(dtype) else (-fmt.max_value, fmt.max_value)
    block, kwargs = _block(shape, granularity)
    scale = _absmax_scale(x, block, qrange[1])
    kwargs = {**kwargs, "dtype": dtype, "packed": packed}
    codes = nbquant.quantize(x, scale, dtype, **{k: v for k, v in kwargs.items() if k != "dtype"})
    return Problem(x, np.empty_like(codes), scale, block, qrange, kwargs)


def dequantize_problem(n: int, rng: np.random.Generator, dtype: str, granularity: str,
                       packed: bool = False) -> Problem:
    """Codes (packed or not) of a random input, for a dequantize case."""
    p = quantize_problem(n, rng, dtype, granularity, packed)
    layout = {k: v for k, v in p.kwargs.items() if k not in ("dtype", "packed")}
    q = nbquant.quantize(p.src, p.scale, dtype, packed=packed, **layout)
    codes = None if _is_float(dtype) else nbquant.quantize(p.src, p.scale, dtype, **layout).astype(np.int8)
    return Problem(q, np.empty(p.src.shape, np.float32), p.scale, p.block, p.qrange, p.kwargs, codes)


def mx_problem(n: int, rng: np.random.Generator, fmt: str) -> Problem:
    """A float32 input for a fused block-format quantize (``"mxfp4"``, ``"mxfp8_e4m3"``, ``"nvfp4"``, ...)."""
    x = rng.standard_normal(_shape(n), dtype=np.float32)
    r = _mx_quantize(x, fmt)
    return Problem(x, np.empty_like(r.data), np.ones((1, 1), np.float32), (1, r.block_size), (0, 0),
                   {"dtype": fmt, "packed": r.packed, "block_formats": r})


def mx_dequantize_problem(n: int, rng: np.random.Generator, fmt: str) -> Problem:
    """Codes and block scales of a random input, for a block-format dequantize."""
    p = mx_problem(n, rng, fmt)
    r = p.kwargs["block_formats"]
    return Problem(r.data, np.empty(p.src.shape, np.float32), p.scale, p.block, p.qrange, p.kwargs)


def _mx_quantize(x, fmt: str, backend: str | None = None):
    if fmt == "nvfp4":
        return nbquant.quantize_nvfp4(x, backend=backend)
    return nbquant.quantize_mx(x, fmt, backend=backend)


def nbq_mx_quantize(p: Problem, backend: str | None = None) -> Bench:
    """``nbquant.quantize_mx`` / ``quantize_nvfp4`` (fused amax, scale and encode; no ``out=``)."""
    x, fmt = p.src, p.kwargs["dtype"]
    return lambda: _mx_quantize(x, fmt, backend)


def nbq_mx_dequantize(p: Problem, backend: str | None = None) -> Bench:
    """``nbquant.dequantize_mx`` / ``dequantize_nvfp4`` into a fresh float32 array."""
    r, data, fmt = p.kwargs["block_formats"], p.src, p.kwargs["dtype"]
    if fmt == "nvfp4":
        return lambda: nbquant.dequantize_nvfp4(data, r.scales, r.global_scale, backend=backend)
    return lambda: nbquant.dequantize_mx(data, r.scales, fmt, backend=backend)


# --------------------------------------------------------------------------- nbquant calls


def _layout_kwargs(p: Problem) -> dict:
    return {k: v for k, v in p.kwargs.items() if k in ("axis", "block_size")}


def nbq_quantize(p: Problem, out: bool = False, backend: str | None = None) -> Bench:
    """``nbquant.quantize`` of the problem (into ``p.out`` when ``out``)."""
    kw = dict(_layout_kwargs(p), packed=p.kwargs["packed"], backend=backend)
    if out:
        kw["out"] = p.out
    src, scale, dtype = p.src, p.scale, p.kwargs["dtype"]
    return lambda: nbquant.quantize(src, scale, dtype, **kw)


def nbq_dequantize(p: Problem, out: bool = False, backend: str | None = None) -> Bench:
    """``nbquant.dequantize`` of the problem (into ``p.out`` when ``out``)."""
    kw = dict(_layout_kwargs(p), backend=backend)
    if p.kwargs["packed"]:
        kw["dtype"] = p.kwargs["dtype"]
    if out:
        kw["out"] = p.out
    src, scale = p.src, p.scale
    return lambda: nbquant.dequantize(src, scale, **kw)


# --------------------------------------------------------------------------- peers


@dataclass(frozen=True)
class Peer:
    """One competitor: a label, the modules it needs, and a factory of the timed call.

    ``make(problem)`` returns the zero-argument callable to time; it may raise to
    say the peer cannot do this case, which skips the row.
    """

    label: str
    make: Callable[[Problem], Bench]
    needs: tuple[str, ...] = ()

    def available(self) -> bool:
        """Whether every module in ``needs`` is importable."""
        return all(importlib.util.find_spec(m) is not None for m in self.needs)


def _np_expand(p: Problem) -> np.ndarray:
    """Scales broadcastable against the (rows, groups, group) view of the input."""
    r, c = p.out.shape if p.codes is not None else p.src.shape
    br, bc = p.block
    return p.scale.reshape(r // br, 1, c // bc, 1) if br > 1 else p.scale.reshape(r, c // bc, 1)


def _np_view(a: np.ndarray, p: Problem) -> np.ndarray:
    r, c = a.shape
    br, bc = p.block
    return a.reshape(r // br, br, c // bc, bc) if br > 1 else a.reshape(r, c // bc, bc)


def _np_pack(q: np.ndarray) -> np.ndarray:
    u = q.view(np.uint8)
    return (u[:, 0::2] & np.uint8(15)) | (u[:, 1::2] << np.uint8(4))


def numpy_quantize(p: Problem) -> Bench:
    """``clip(rint(x / s))`` in NumPy, packed with shifts for int4."""
    x, s, (lo, hi), packed = p.src, _np_expand(p), p.qrange, p.kwargs["packed"]

    def run():
        q = np.clip(np.rint(_np_view(x, p) / s), lo, hi).astype(np.int8).reshape(x.shape)
        return _np_pack(q) if packed else q

    return run


def numpy_quantize_out(p: Problem) -> Bench:
    """As :func:`numpy_quantize`, storing into the preallocated output."""
    run, out = numpy_quantize(p), p.out
    return lambda: np.copyto(out, run(), casting="unsafe")


def _np_unpack(q: np.ndarray) -> np.ndarray:
    lo = (q << np.uint8(4)).view(np.int8) >> np.int8(4)
    hi = q.view(np.int8) >> np.int8(4)
    return np.stack([lo, hi], axis=-1).reshape(q.shape[0], -1)


def numpy_dequantize(p: Problem) -> Bench:
    """``codes * s`` in NumPy (unpacking int4 first)."""
    q, s, packed, shape = p.src, _np_expand(p), p.kwargs["packed"], p.out.shape

    def run():
        codes = _np_unpack(q) if packed else q
        return np.multiply(_np_view(codes, p), s, dtype=np.float32).reshape(shape)

    return run


def numpy_dequantize_out(p: Problem) -> Bench:
    """As :func:`numpy_dequantize`, with ``out=`` (int8 only)."""
    if p.kwargs["packed"]:
        raise NotImplementedError("NumPy has no packed dequantize into out=")
    q, s, out = p.src, _np_expand(p), p.out
    return lambda: np.multiply(_np_view(q, p), s, out=_np_view(out, p), dtype=np.float32)


#: Thread count requested with ``--threads`` (None: each library's default).
_THREADS: list[int] = []


def _torch():
    torch = importlib.import_module("torch")
    if _THREADS and torch.get_num_threads() != _THREADS[0]:
        torch.set_num_threads(_THREADS[0])
    return torch


def _torch_scale(p: Problem):
    """(scale, zero point) tensors of the squeezed grid shape, as torchao expects."""
    torch = _torch()
    s = torch.from_numpy(np.ascontiguousarray(p.scale.squeeze()))
    return s, torch.zeros(s.shape, dtype=torch.int32)


def _per_channel_axis(p: Problem) -> int:
    if p.kwargs.get("axis") is None or "block_size" in p.kwargs:
        raise NotImplementedError("not a per-channel case")
    return p.kwargs["axis"]


def torch_quantize_per_tensor(p: Problem) -> Bench:
    """``torch.quantize_per_tensor`` (fbgemm, fused)."""
    torch = _torch()
    if p.scale.size != 1 or p.kwargs["dtype"] != "int8":
        raise NotImplementedError
    x, s = torch.from_numpy(p.src), float(p.scale.item())
    return lambda: torch.quantize_per_tensor(x, s, 0, torch.qint8)


def torch_quantize_per_channel(p: Problem) -> Bench:
    """``torch.quantize_per_channel``."""
    torch = _torch()
    axis = _per_channel_axis(p)
    x, (s, zp) = torch.from_numpy(p.src), _torch_scale(p)
    s = s.double()
    zp = zp.long()
    return lambda: torch.quantize_per_channel(x, s, zp, axis, torch.qint8)


def _decomposed():
    torch = _torch()
    importlib.import_module("torch.ao.quantization.fx._decomposed")
    return torch, torch.ops.quantized_decomposed


def torch_decomposed_quantize(p: Problem) -> Bench:
    """``torch.ops.quantized_decomposed.quantize_per_tensor`` / ``quantize_per_channel``."""
    torch, ops = _decomposed()
    x, (lo, hi) = torch.from_numpy(p.src), p.qrange
    if p.kwargs["dtype"] != "int8":
        raise NotImplementedError
    if p.scale.size == 1:
        s = float(p.scale.item())
        return lambda: ops.quantize_per_tensor(x, s, 0, lo, hi, torch.int8)
    axis = _per_channel_axis(p)
    s, zp = _torch_scale(p)
    return lambda: ops.quantize_per_channel(x, s, zp, axis, lo, hi, torch.int8)


def _torchao_primitives():
    return importlib.import_module("torchao.quantization.quant_primitives")


def torchao_quantize(p: Problem) -> Bench:
    """``torchao quantize_affine`` (int8 storage; int4 codes are left unpacked)."""
    prim, torch = _torchao_primitives(), _torch()
    x, (s, zp), (lo, hi) = torch.from_numpy(p.src), _torch_scale(p), p.qrange
    return lambda: prim.quantize_affine(x, p.block, s, zp, torch.int8, lo, hi)


def torch_dequantize(p: Problem) -> Bench:
    """``Tensor.dequantize`` of a per-tensor or per-channel quantized tensor."""
    torch = _torch()
    if p.kwargs["packed"]:
        raise NotImplementedError
    x = torch.from_numpy(p.src.astype(np.float32) * p.scale.reshape(_grid_shape(p)))
    maker = torch_quantize_per_tensor if p.scale.size == 1 else torch_quantize_per_channel
    qt = maker(Problem(x.numpy(), p.out, p.scale, p.block, p.qrange, p.kwargs))()
    return qt.dequantize


def _grid_shape(p: Problem) -> tuple[int, int]:
    r, c = p.out.shape
    return (r // p.block[0], 1 if p.block[1] == c else c // p.block[1])


def torchao_dequantize(p: Problem) -> Bench:
    """``torchao dequantize_affine`` of int8 codes (int4 unpacked)."""
    prim, torch = _torchao_primitives(), _torch()
    q = torch.from_numpy(p.codes if p.codes is not None else p.src)
    (s, zp), (lo, hi) = _torch_scale(p), p.qrange
    return lambda: prim.dequantize_affine(q, p.block, s, zp, torch.int8, lo, hi)


def _ort_session(p: Problem, op: str, src: np.ndarray):
    onnx, ort = importlib.import_module("onnx"), importlib.import_module("onnxruntime")
    helper, tp = onnx.helper, onnx.TensorProto
    if p.kwargs["dtype"] != "int8" or "block_size" in p.kwargs:
        raise NotImplementedError("only int8 per-tensor / per-axis")
    scale = p.scale.reshape(-1) if p.scale.size > 1 else p.scale.reshape(())
    init = [helper.make_tensor("s", tp.FLOAT, scale.shape, scale.ravel()),
            helper.make_tensor("z", tp.INT8, scale.shape, np.zeros(scale.size, np.int8))]
    attrs = {"axis": p.kwargs["axis"]} if p.scale.size > 1 else {}
    in_t, out_t = (tp.FLOAT, tp.INT8) if op == "QuantizeLinear" else (tp.INT8, tp.FLOAT)
    graph = helper.make_graph([helper.make_node(op, ["x", "s", "z"], ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info("x", in_t, src.shape)],
                              [helper.make_tensor_value_info("y", out_t, src.shape)], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"x": src})


def ort_quantize(p: Problem) -> Bench:
    """onnxruntime ``QuantizeLinear`` (int8, per-tensor or per-axis)."""
    return _ort_session(p, "QuantizeLinear", p.src)


def ort_dequantize(p: Problem) -> Bench:
    """onnxruntime ``DequantizeLinear`` (int8, per-tensor or per-axis)."""
    return _ort_session(p, "DequantizeLinear", p.src)


def _fp8(p: Problem):
    if p.kwargs["dtype"] != "float8_e4m3fn":
        raise NotImplementedError("e4m3fn only")
    torch = _torch()
    return torch, torch.from_numpy(np.ascontiguousarray(p.scale.reshape(_grid_shape(p))))


def numpy_fp8_quantize(p: Problem) -> Bench:
    """``clip(x / s, -max, max).astype(float8)`` with ml_dtypes (its cast gives NaN on overflow)."""
    x, s, (lo, hi) = p.src, p.scale.reshape(_grid_shape(p)), p.qrange
    dt = nbquant.get_format(p.kwargs["dtype"]).dtype
    return lambda: np.clip(x / s, lo, hi).astype(dt)


def torch_fp8_quantize(p: Problem) -> Bench:
    """``(x / s).to(torch.float8_e4m3fn)`` (torch 2.13 saturates on overflow)."""
    torch, s = _fp8(p)
    x = torch.from_numpy(p.src)
    return lambda: (x / s).to(torch.float8_e4m3fn)


def torchao_fp8_quantize(p: Problem) -> Bench:
    """torchao ``_quantize_affine_float8`` (clamp, then cast)."""
    torch, s = _fp8(p)
    prim, x = _torchao_primitives(), torch.from_numpy(p.src)
    return lambda: prim._quantize_affine_float8(x, s, torch.float8_e4m3fn)


def numpy_fp8_dequantize(p: Problem) -> Bench:
    """``q.astype(float32) * s`` with ml_dtypes."""
    q, s = p.src, p.scale.reshape(_grid_shape(p))
    return lambda: np.multiply(q.astype(np.float32), s)


def torch_fp8_dequantize(p: Problem) -> Bench:
    """``q.to(torch.float32) * s``."""
    torch, s = _fp8(p)
    q = torch.from_numpy(p.src.view(np.uint8)).view(torch.float8_e4m3fn)
    return lambda: q.to(torch.float32) * s


def torchao_fp8_dequantize(p: Problem) -> Bench:
    """torchao ``_dequantize_affine_float8``."""
    torch, s = _fp8(p)
    prim = _torchao_primitives()
    q = torch.from_numpy(p.src.view(np.uint8)).view(torch.float8_e4m3fn)
    return lambda: prim._dequantize_affine_float8(q, s)


QUANTIZE_PEERS = (
    Peer("numpy", numpy_quantize),
    Peer("torch.quantize_per_tensor", torch_quantize_per_tensor, ("torch",)),
    Peer("torch.quantize_per_channel", torch_quantize_per_channel, ("torch",)),
    Peer("torch quantized_decomposed", torch_decomposed_quantize, ("torch",)),
    Peer("torchao quantize_affine", torchao_quantize, ("torch", "torchao")),
    Peer("onnxruntime QuantizeLinear", ort_quantize, ("onnx", "onnxruntime")),
)
DEQUANTIZE_PEERS = (
    Peer("numpy", numpy_dequantize),
    Peer("torch Tensor.dequantize", torch_dequantize, ("torch",)),
    Peer("torchao dequantize_affine", torchao_dequantize, ("torch", "torchao")),
    Peer("onnxruntime DequantizeLinear", ort_dequantize, ("onnx", "onnxruntime")),
)


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One row group of the table.

    Attributes
    ----------
    name : str
        Label; ``--cases`` selects by substring.
    setup : callable
        ``setup(n, rng) -> Problem``.
    nbquant : callable
        ``nbquant(problem, backend) -> timed callable``.
    peers : tuple of Peer
        Competitors on the CPU.
    compare : callable, optional
        ``compare(nbquant_result, peer_result) -> str``, the ``same`` column
        (default :func:`compare`: codes or values by their bits).
    """

    name: str
    setup: Callable[[int, np.random.Generator], Problem]
    nbquant: Callable[[Problem, str | None], Bench]
    peers: tuple[Peer, ...] = field(default=())
    compare: Callable[[object, object], str] | None = None


def _q(dtype: str, gran: str, packed: bool = False, out: bool = False, peers=QUANTIZE_PEERS) -> tuple:
    def setup(n, rng):
        return quantize_problem(n, rng, dtype, gran, packed)

    def call(p, backend):
        return nbq_quantize(p, out, backend)

    return setup, call, peers


def _dq(dtype: str, gran: str, packed: bool = False, out: bool = False, peers=DEQUANTIZE_PEERS) -> tuple:
    def setup(n, rng):
        return dequantize_problem(n, rng, dtype, gran, packed)

    def call(p, backend):
        return nbq_dequantize(p, out, backend)

    return setup, call, peers


_TORCHAO_MX = {"mxfp4": "float4_e2m1fn_x2", "mxfp8_e4m3": "float8_e4m3fn", "mxfp8_e5m2": "float8_e5m2"}


def torchao_to_mx(p: Problem) -> Bench:
    """torchao ``prototype.mx_formats.mx_tensor.to_mx`` (floor scale, like OCP MX), returns (scales, data)."""
    torch = _torch()
    to_mx = importlib.import_module("torchao.prototype.mx_formats.mx_tensor").to_mx
    elem = getattr(torch, _TORCHAO_MX[p.kwargs["dtype"]])
    x, block = torch.from_numpy(p.src), p.block[1]
    return lambda: to_mx(x, elem, block)


MX_QUANTIZE_PEERS = (Peer("torchao to_mx", torchao_to_mx, ("torch", "torchao")),)
FP8_QUANTIZE_PEERS = (
    Peer("numpy + ml_dtypes", numpy_fp8_quantize),
    Peer("torch (x / s).to(fp8)", torch_fp8_quantize, ("torch",)),
    Peer("torchao _quantize_affine_float8", torchao_fp8_quantize, ("torch", "torchao")),
)
FP8_DEQUANTIZE_PEERS = (
    Peer("numpy + ml_dtypes", numpy_fp8_dequantize),
    Peer("torch q.to(float32) * s", torch_fp8_dequantize, ("torch",)),
    Peer("torchao _dequantize_affine_float8", torchao_fp8_dequantize, ("torch", "torchao")),
)
def _mx(fmt: str, peers=(), dequantize: bool = False) -> tuple:
    def setup(n, rng):
        return (mx_dequantize_problem if dequantize else mx_problem)(n, rng, fmt)

    return setup, nbq_mx_dequantize if dequantize else nbq_mx_quantize, peers


# --------------------------------------------------------------------------- dynamic quantization


def dynamic_problem(n: int, rng: np.random.Generator, dtype: str, group: int | None, mapping: str,
                    packed: bool = False) -> Problem:
    """A float32 input for :func:`nbquant.quantize_dynamic` with blocks ``(1, group)`` (a whole row when None).

    ``p.scale`` holds nbquant's scales (for reference only: every contender chooses its own).
    """
    x = rng.standard_normal(_shape(n), dtype=np.float32)
    r, c = x.shape
    g = c if group is None else min(group, c)
    fmt = nbquant.get_format(dtype)
    kwargs = {"dtype": dtype, "block_size": (1, g), "mapping": mapping, "packed": packed}
    _, scale, _ = nbquant.quantize_dynamic(x, dtype, block_size=(1, g), mapping=mapping)
    out = np.empty((r, c // 2) if packed else (r, c), np.uint8)
    return Problem(x, out, scale.reshape(r, c // g), (1, g), (fmt.qmin, fmt.qmax), kwargs)


def nbq_quantize_dynamic(p: Problem, backend: str | None = None) -> Bench:
    """``nbquant.quantize_dynamic`` (qparams and codes in one fused pass); returns (codes, scale, zero_point)."""
    kw = {k: v for k, v in p.kwargs.items() if k != "dtype"}
    src, dtype = p.src, p.kwargs["dtype"]
    return lambda: nbquant.quantize_dynamic(src, dtype, backend=backend, **kw)


#: torchao 0.18's default ``eps`` (float32's smallest normal), as nbquant's.
_EPS = np.finfo(np.float32).smallest_normal


def numpy_quantize_dynamic(p: Problem) -> Bench:
    """torchao's ``choose_qparams_affine`` + ``quantize_affine`` in NumPy passes (float32, NEP 50).

    min/max per block, scale (``amax / ((qmax - qmin) / 2)`` symmetric, ``(max - min) /
    (qmax - qmin)`` asymmetric), zero point, ``clip(rint(x * (1 / s)) + zp)``, then
    packing for packed cases; returns (codes, scale, zero_point).
    """
    x, (lo, hi), g = p.src, p.qrange, p.block[1]
    asym, packed = p.kwargs["mapping"] == "asymmetric", p.kwargs["packed"]
    storage = np.uint8 if lo == 0 else np.int8
    r, c = x.shape

    def run():
        v = x.reshape(r, c // g, g)
        mn, mx = np.minimum(v.min(axis=-1), np.float32(0)), np.maximum(v.max(axis=-1), np.float32(0))
        if asym:
            s = np.maximum((mx - mn) / np.float32(hi - lo), _EPS)
            zp = np.clip(lo - np.rint(mn / s), lo, hi)
        else:
            s = np.maximum(np.maximum(-mn, mx) / np.float32((hi - lo) / 2), _EPS)
            zp = np.full_like(s, int((hi + lo + 1) / 2))
        q = np.rint(v * (np.float32(1) / s)[..., None]) + zp[..., None]
        q = np.clip(q, lo, hi).astype(storage).reshape(x.shape)
        return (_np_pack(q) if packed else q), s, zp.astype(np.int32)

    return run


def torchao_quantize_dynamic(p: Problem) -> Bench:
    """torchao ``choose_qparams_affine`` + ``quantize_affine`` (+ two nibbles per byte with torch ops).

    int8 per-row: ``MappingType.SYMMETRIC``, ``torch.int8``; 4-bit: ``ASYMMETRIC``,
    ``torch.uint8`` with ``quant_min=0, quant_max=15`` (int4 weight-only's codes).
    Packing puts the even column in the low nibble, as nbquant. Returns (codes, scale, zero_point).
    """
    prim, torch = _torchao_primitives(), _torch()
    (lo, hi), block, packed = p.qrange, p.block, p.kwargs["packed"]
    asym = p.kwargs["mapping"] == "asymmetric"
    mapping = prim.MappingType.ASYMMETRIC if asym else prim.MappingType.SYMMETRIC
    target = torch.uint8 if lo == 0 else torch.int8
    x = torch.from_numpy(p.src)

    def run():
        s, zp = prim.choose_qparams_affine(x, mapping, block, target, lo, hi)
        q = prim.quantize_affine(x, block, s, zp, target, lo, hi)
        if packed:
            q = q[:, 0::2] | (q[:, 1::2] << 4)
        return q, s, zp

    return run


DYNAMIC_PEERS = (
    Peer("numpy (multi-pass)", numpy_quantize_dynamic),
    Peer("torchao choose_qparams+quantize", torchao_quantize_dynamic, ("torch", "torchao")),
)


def _qdyn(dtype: str, group: int | None, mapping: str, packed: bool = False, peers=DYNAMIC_PEERS) -> tuple:
    def setup(n, rng):
        return dynamic_problem(n, rng, dtype, group, mapping, packed)

    return setup, nbq_quantize_dynamic, peers


def nf4_problem(n: int, rng: np.random.Generator, block: int = 64) -> Problem:
    """A float32 input for :func:`nbquant.quantize_nf4` (blocks of ``block`` over the flattened input)."""
    x = rng.standard_normal(_shape(n), dtype=np.float32)
    r, c = x.shape
    return Problem(x, np.empty((r, c // 2), np.uint8), np.ones((1, 1), np.float32), (1, block), (0, 15),
                   {"dtype": "nf4", "packed": True, "block_size": block})


def nbq_quantize_nf4(p: Problem, backend: str | None = None) -> Bench:
    """``nbquant.quantize_nf4`` (fused absmax and nearest NF4 code, packed; no double quantization)."""
    x, block = p.src, p.kwargs["block_size"]
    return lambda: nbquant.quantize_nf4(x, block_size=block, backend=backend)


def _nf4(block: int = 64) -> tuple:
    def setup(n, rng):
        return nf4_problem(n, rng, block)

    return setup, nbq_quantize_nf4, ()


# --------------------------------------------------------------------------- calibration


def calibration_problem(n: int, rng: np.random.Generator, calibrator: str) -> Problem:
    """A float32 batch for a calibrator's ``collect``: ``"max"`` (per tensor) or ``"histogram"``.

    ``p.out`` is one float32, the result of the roofline's ``max |x|``: the case only
    reads ``x`` (:attr:`Problem.reduces`). ``p.kwargs`` holds the calibrator and, for
    the histogram, its default bin count.
    """
    x = rng.standard_normal(_shape(n), dtype=np.float32)
    kwargs = {"calibrator": calibrator}
    if calibrator == "histogram":
        kwargs["num_bins"] = nbquant.HistogramCalibrator().num_bins
    return Problem(x, np.empty(1, np.float32), np.ones((1, 1), np.float32), x.shape, (0, 0), kwargs)


def nbq_max_collect(p: Problem, backend: str | None = None) -> Bench:
    """``MaxCalibrator.collect`` (per tensor), then ``compute_amax`` (a copy of one float); returns the amax.

    One calibrator serves every call: its running max over the same batch stays that
    batch's amax, so each call is one steady-state ``collect`` with a result the peers
    can be compared with.
    """
    cal, x = nbquant.MaxCalibrator(backend=backend), p.src

    def run():
        cal.collect(x)
        return cal.compute_amax()

    return run


def nbq_histogram_collect(p: Problem, backend: str | None = None) -> Bench:
    """``HistogramCalibrator.collect`` of the batch into a fresh calibrator; returns its counts.

    A fresh calibrator per call (its constructor is O(1)) keeps the timed call one
    ``collect`` of one batch whose result is that batch's histogram. A kept calibrator
    would add the same counts up call after call, and its later batches make the same
    two passes over ``x`` (the amax, then the counts), merely adding the old counts
    where the first batch builds the ``linspace`` edges.
    """
    x, bins = p.src, p.kwargs["num_bins"]

    def run():
        cal = nbquant.HistogramCalibrator(bins, backend=backend)
        cal.collect(x)
        return cal.histogram

    return run


def numpy_absmax(p: Problem) -> Bench:
    """``np.abs(x).max()``."""
    x = p.src
    return lambda: np.abs(x).max()


def torch_absmax(p: Problem) -> Bench:
    """``torch.amax(x.abs())``."""
    torch = _torch()
    x = torch.from_numpy(p.src)
    return lambda: torch.amax(x.abs())


def numpy_abs_histogram(p: Problem) -> Bench:
    """``np.histogram(|x|, bins, range=(0, max |x|))`` counts, the amax included.

    NumPy's bins are ``[edge_i, edge_i+1)`` of float32 ``linspace`` edges, not
    torch.histc's ``int(|x| * bins / max)``: values on or next to an edge may land
    one bin apart, which ``same`` shows as ``≠k``.
    """
    x, bins = p.src, p.kwargs["num_bins"]

    def run():
        a = np.abs(x)
        return np.histogram(a, bins, range=(0, a.max()))[0]

    return run


def torch_abs_histc(p: Problem) -> Bench:
    """``torch.histc(|x|, bins, 0, max |x|)`` counts (float32), the amax included."""
    torch = _torch()
    x, bins = torch.from_numpy(p.src), p.kwargs["num_bins"]

    def run():
        a = x.abs()
        return torch.histc(a, bins, 0, float(a.max()))

    return run


def compare_values(ref, result) -> str:
    """``"="`` when ``result`` holds the same values as nbquant's ``ref`` whatever the dtypes, ``"≠k"`` for k.

    For calibrators: an amax (0-d array, NumPy scalar or tensor) or histogram counts
    (int64, or torch.histc's float32), where k counts the bins whose counts differ;
    ``"-"`` when the sizes differ.
    """
    a, b = (np.asarray(_host(r), np.float64).reshape(-1) for r in (ref, result))
    if a.size != b.size:
        return "-"
    bad = int(np.count_nonzero(a != b))
    return "=" if bad == 0 else f"≠{bad}"


CALIB_MAX_PEERS = (
    Peer("numpy np.abs(x).max()", numpy_absmax),
    Peer("torch.amax(x.abs())", torch_absmax, ("torch",)),
)
CALIB_HISTOGRAM_PEERS = (
    Peer("numpy np.histogram(|x|)", numpy_abs_histogram),
    Peer("torch.histc(|x|)", torch_abs_histc, ("torch",)),
)


def _calib(calibrator: str, call: Callable[[Problem, str | None], Bench], peers: tuple[Peer, ...]) -> tuple:
    def setup(n, rng):
        return calibration_problem(n, rng, calibrator)

    return setup, call, peers, compare_values


_NP_Q_OUT = (Peer("numpy (copyto out)", numpy_quantize_out),)
_NP_DQ_OUT = (Peer("numpy (out=)", numpy_dequantize_out),)

#: The benchmark table; append a Case to add one (dynamic, fp8, MX formats, ...).
CASES: list[Case] = [
    Case("q int8 per-tensor", *_q("int8", "tensor")),
    Case("q int8 per-tensor out=", *_q("int8", "tensor", out=True, peers=_NP_Q_OUT)),
    Case("q int8 per-channel axis0", *_q("int8", "axis0")),
    Case("q int8 per-channel axis1", *_q("int8", "axis1")),
    Case("q int4 g32 packed", *_q("int4", "g32", packed=True)),
    Case("q int4 g128 packed", *_q("int4", "g128", packed=True)),
    Case("q int4 g32 packed out=", *_q("int4", "g32", packed=True, out=True, peers=_NP_Q_OUT)),
    Case("q fp8 e4m3 per-tensor", *_q("float8_e4m3fn", "tensor", peers=FP8_QUANTIZE_PEERS)),
    Case("q fp8 e4m3 per-channel axis0", *_q("float8_e4m3fn", "axis0", peers=FP8_QUANTIZE_PEERS)),
    Case("dq int8 per-tensor", *_dq("int8", "tensor")),
    Case("dq int8 per-tensor out=", *_dq("int8", "tensor", out=True, peers=_NP_DQ_OUT)),
    Case("dq int8 per-channel axis0", *_dq("int8", "axis0")),
    Case("dq int4 g32 packed", *_dq("int4", "g32", packed=True)),
    Case("dq fp8 e4m3 per-tensor", *_dq("float8_e4m3fn", "tensor", peers=FP8_DEQUANTIZE_PEERS)),
    Case("q mxfp4 (dynamic, block 32)", *_mx("mxfp4", MX_QUANTIZE_PEERS)),
    Case("q mxfp8 e4m3 (dynamic, blk 32)", *_mx("mxfp8_e4m3", MX_QUANTIZE_PEERS)),
    Case("q nvfp4 (dynamic, block 16)", *_mx("nvfp4")),
    Case("dq mxfp4 (block 32)", *_mx("mxfp4", dequantize=True)),
    Case("q int8 per-row dynamic", *_qdyn("int8", None, "symmetric")),
    Case("q int4 g32 dynamic packed", *_qdyn("uint4", 32, "asymmetric", packed=True)),
    Case("q int4 g128 dynamic packed", *_qdyn("uint4", 128, "asymmetric", packed=True)),
    Case("q int4 g32 dynamic", *_qdyn("uint4", 32, "asymmetric")),
    Case("q int4 g128 dynamic", *_qdyn("uint4", 128, "asymmetric")),
    Case("q nf4 (block 64)", *_nf4(64)),
    Case("calib max collect", *_calib("max", nbq_max_collect, CALIB_MAX_PEERS)),
    Case("calib histogram collect", *_calib("histogram", nbq_histogram_collect, CALIB_HISTOGRAM_PEERS)),
]


# --------------------------------------------------------------------------- roofline


def _roof_kernels():
    """Numba parallel casts of 2-D arrays (same shape, 2:1 packing, 1:2 unpacking) and a ``max |x|``."""
    from numba import njit, prange

    @njit(parallel=True, cache=False)
    def cast(src, out):
        for r in prange(src.shape[0]):
            s, o = src[r], out[r]
            for c in range(s.size):
                o[c] = s[c]

    @njit(parallel=True, cache=False)
    def pack2(src, out):
        for r in prange(src.shape[0]):
            s, o = src[r], out[r]
            for j in range(o.size):
                o[j] = (np.int32(s[2 * j]) & 15) | (np.int32(s[2 * j + 1]) << 4)

    @njit(parallel=True, cache=False)
    def unpack2(src, out):
        for r in prange(src.shape[0]):
            s, o = src[r], out[r]
            for j in range(s.size):
                o[2 * j] = np.float32(s[j] & 15)
                o[2 * j + 1] = np.float32(s[j] >> 4)

    @njit(inline="always")
    def row_abs_bits_max(s):
        m = np.int32(0)
        for c in range(s.size):
            m = np.int32(max(m, s[c] & 0x7FFFFFFF))
        return m

    @njit(parallel=True, cache=False)
    def absmax(src, out):
        # |x| of a float32 orders as its bits with the sign cleared; int32 lanes vectorize 8 wide.
        m = np.int32(0)
        for r in prange(src.shape[0]):
            m = max(m, row_abs_bits_max(src[r].view(np.int32)))
        out.view(np.int32)[0] = m

    return cast, pack2, unpack2, absmax


_ROOF = []


def _numba_view(a: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays (fp8, ...) as same-width unsigned integers, which numba can type."""
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "V" else a


def cpu_roofline(p: Problem) -> Bench:
    """A numba parallel cast from ``p.src`` into ``p.out`` (same bytes as the case), or ``max |x|`` of a reduction."""
    if not _ROOF:
        _ROOF.extend(_roof_kernels())
    cast, pack2, unpack2, absmax = _ROOF
    src, out = _numba_view(p.src), _numba_view(p.out)
    if p.reduces:
        kernel = absmax
    elif src.shape == out.shape:
        kernel = cast
    else:
        kernel = pack2 if src.shape[1] > out.shape[1] else unpack2
    return lambda: kernel(src, out)


# --------------------------------------------------------------------------- timing


def interleaved(calls: dict[str, Bench], repeats: int, sync: Callable[[], None] = lambda: None) -> dict[str, list]:
    """Time each callable ``repeats`` times, interleaved, after two warm-up calls each.

    The order rotates every repeat so no contender always follows the same one.
    """
    for fn in calls.values():
        fn()
        fn()
    sync()
    labels = list(calls)
    times: dict[str, list[float]] = {k: [] for k in labels}
    for rep in range(repeats):
        k = rep % len(labels)
        for label in labels[k:] + labels[:k]:
            fn = calls[label]
            t0 = time.perf_counter()
            fn()
            sync()
            times[label].append(time.perf_counter() - t0)
    return times


@dataclass
class Row:
    """One line of the printed table."""

    case: str
    n: int
    impl: str
    median: float
    best: float
    gbps: float
    roof: float
    speedup: float
    match: str = ""


def _rows(case: str, n: int, nbytes: int, times: dict[str, list], matches: dict[str, str] | None = None) -> list[Row]:
    med = {k: statistics.median(v) for k, v in times.items()}
    t_nbq, t_roof = med["nbquant"], med["roofline"]
    return [Row(case, n, k, med[k], min(v), nbytes / med[k] / 1e9, t_roof / med[k], med[k] / t_nbq,
                (matches or {}).get(k, "")) for k, v in times.items()]


def _host(result) -> np.ndarray | None:
    """A peer's result as a NumPy array of the stored bits or values (None when there is none)."""
    if isinstance(result, np.generic):  # a NumPy scalar (np.abs(x).max())
        result = np.asarray(result)
    if isinstance(result, list):  # onnxruntime
        result = result[0]
    if isinstance(result, tuple):  # torchao to_mx: (scales, data)
        result = result[1]
    if hasattr(result, "scales") and hasattr(result, "block_size"):  # nbquant BlockQuantized
        result = result.data
    if result is None or isinstance(result, np.ndarray):
        return result.view(f"u{result.dtype.itemsize}") if result is not None and result.dtype.kind == "V" else result
    torch = sys.modules["torch"]
    if result.is_quantized:
        result = result.int_repr()
    elif result.dtype.is_floating_point and result.element_size() == 1:
        result = result.view(torch.uint8)
    return result.numpy()


def _mismatches(ref, result) -> int | None:
    """Elements of ``result`` whose bits differ from nbquant's ``ref`` (None when not comparable)."""
    a, b = _host(ref), _host(result)
    if a is None or b is None or a.size != b.size or a.dtype.itemsize != b.dtype.itemsize:
        return None
    if a.dtype != b.dtype:
        a, b = a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}")
    return int(np.count_nonzero(a.reshape(-1) != b.reshape(-1)))


def _compare_dynamic(ref: tuple, result: tuple) -> str:
    """Codes by bits, then scales and zero points by value (peers may keep other shapes or int widths)."""
    bad = _mismatches(ref[0], result[0])
    if bad is None:
        return "-"
    for a, b in zip(ref[1:], result[1:], strict=True):
        a, b = np.asarray(_host(a), np.float64).reshape(-1), np.asarray(_host(b), np.float64).reshape(-1)
        if a.size != b.size:
            return "-"
        bad += int(np.count_nonzero(a != b))
    return "=" if bad == 0 else f"≠{bad}"


def compare(ref, result) -> str:
    """``"="`` when ``result`` holds the same values (or bits) as nbquant's ``ref``, ``"≠k"`` for k mismatches.

    Dynamic cases return ``(codes, scale, zero_point)``: all three are compared.
    """
    if isinstance(ref, tuple) and isinstance(result, tuple) and len(ref) == len(result) == 3:
        return _compare_dynamic(ref, result)
    bad = _mismatches(ref, result)
    return "-" if bad is None else ("=" if bad == 0 else f"≠{bad}")


def _peer_calls(case: Case, p: Problem, ref) -> tuple[dict[str, Bench], dict[str, str]]:
    calls, matches = {}, {}
    same = case.compare or compare
    for peer in case.peers:
        if not peer.available():
            continue
        try:
            fn = peer.make(p)
            matches[peer.label] = same(ref, fn())
            calls[peer.label] = fn
        except Exception:  # noqa: BLE001 - a peer that cannot do this case is skipped
            pass
    return calls, matches


def run_case(case: Case, n: int, repeats: int, seed: int = 0) -> list[Row]:
    """Time nbquant, the roofline and every available peer on ``case`` at ``n`` elements (CPU)."""
    p = case.setup(n, np.random.default_rng(seed))
    nbq = case.nbquant(p, None)
    peers, matches = _peer_calls(case, p, nbq())
    calls = {"nbquant": nbq, "roofline": cpu_roofline(p), **peers}
    return _rows(case.name, n, p.nbytes, interleaved(calls, repeats), matches)


# --------------------------------------------------------------------------- cuda


def cuda_unavailable_reason() -> str:
    """Empty when nbquant's cuda backend can run, else why not."""
    info = {b.name: b for b in nbquant.backends()}
    if "cuda" not in info:
        return "nbquant has no cuda backend yet"
    return "" if info["cuda"].available else info["cuda"].reason


def _to_device(p: Problem) -> Problem:
    from numba import cuda

    dev = [cuda.to_device(a) for a in (p.src, p.out)]
    return Problem(dev[0], dev[1], p.scale, p.block, p.qrange, p.kwargs, p.codes)


def cuda_roofline(p: Problem, dev: Problem) -> Bench:
    """A device-to-device copy moving the case's bytes (``nbytes / 2`` read and written)."""
    from numba import cuda

    half = max(p.nbytes // 2, 1)
    a = cuda.device_array(half, np.uint8)
    b = cuda.device_array(half, np.uint8)
    return lambda: b.copy_to_device(a)


def run_case_cuda(case: Case, n: int, repeats: int, seed: int = 0) -> list[Row]:
    """Time nbquant's cuda backend on device arrays against a device copy of the same bytes."""
    from numba import cuda

    p = case.setup(n, np.random.default_rng(seed))
    dev = _to_device(p)
    calls = {"nbquant": case.nbquant(dev, "cuda"), "roofline": cuda_roofline(p, dev)}
    return _rows(case.name, n, p.nbytes, interleaved(calls, repeats, cuda.synchronize))


# --------------------------------------------------------------------------- report


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str:
    try:
        here = Path(nbquant.__file__).parent
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=here, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], capture_output=True, text=True,
                               cwd=here, timeout=5).stdout.strip()
        return (head + (" + uncommitted changes in nbquant/" if dirty else "")) or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_info(commit: str | None = None) -> list[str]:
    """Lines describing the machine and the software (call after the first parallel call).

    ``commit`` is the git state taken when the run started (default: now).
    """
    import numba

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        layer = numba.threading_layer()
    except ValueError:
        layer = "not initialised"
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    peers = [f"{m} {importlib.import_module(m).__version__}" for m in ("torch", "torchao", "onnxruntime")
             if m in sys.modules]
    return [
        f"machine: {cores} usable cores ({os.cpu_count()} online), {_cpu_model()}, {platform.platform()}; "
        f"load average {load} (1/5/15 min, at the end)",
        f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__} "
        f"(threading layer {layer}, {numba.get_num_threads()} threads), nbquant {nbquant.__version__} "
        f"(git {commit or _git_commit()} at the start)",
        f"peers: {', '.join(peers) or 'none installed'}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}"
        + (" (an OpenMP runtime was loaded before benchmarks: it may not apply)" if _OPENMP_PRELOADED else ""),
    ]


def format_table(rows: Sequence[Row]) -> str:
    """The result table as fixed-width text."""
    head = (f"{'case':<30} {'n':>5} {'impl':<33} {'median ms':>10} {'best ms':>9} {'GB/s':>6} {'%roof':>6} "
            f"{'nbq x':>6} {'same':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.case:<30} {_pow2(r.n):>5} {r.impl:<33} {r.median * 1e3:>10.3f} {r.best * 1e3:>9.3f} "
                     f"{r.gbps:>6.1f} {r.roof:>6.0%} {r.speedup:>6.2f} {r.match:>6}")
    return "\n".join(lines)


def _pow2(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def parse_sizes(text: str) -> list[int]:
    """Parse ``"2^20,2^24"``, ``"2**20"`` or ``"1048576"`` into element counts.

    Examples
    --------
    >>> parse_sizes("2^10,2**12,4096")
    [1024, 4096, 4096]
    """
    sizes = []
    for tok in filter(None, (t.strip() for t in text.split(","))):
        base, _, exp = tok.replace("**", "^").partition("^")
        sizes.append(int(base) ** int(exp) if exp else int(base))
    return sizes


def select_cases(patterns: str | None) -> list[Case]:
    """Cases whose name contains any comma-separated pattern (all when ``None``)."""
    if not patterns:
        return list(CASES)
    pats = [s.strip() for s in patterns.split(",") if s.strip()]
    return [c for c in CASES if any(s in c.name for s in pats)]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2^24,2^26", help="element counts, e.g. 2^20,2^24 (default 2^24,2^26)")
    ap.add_argument("--repeats", type=int, default=15, help="timed calls per contender (median reported)")
    ap.add_argument("--cases", default=None, help="comma-separated substrings of case names (default: all)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for numba and torch (default: theirs; 1 is steadier on a busy machine)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table; returns the exit status."""
    args = _parser().parse_args(argv)
    warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions.*deprecated")
    cases, sizes = select_cases(args.cases), parse_sizes(args.sizes)
    commit = _git_commit()
    if args.device == "cuda" and (reason := cuda_unavailable_reason()):
        print(f"cuda benchmark skipped: {reason}")
        return 0
    if args.threads:
        import numba

        numba.set_num_threads(args.threads)
        _THREADS[:] = [args.threads]
    runner = run_case_cuda if args.device == "cuda" else run_case
    rows: list[Row] = []
    for n in sizes:
        for case in cases:
            try:
                rows.extend(runner(case, n, args.repeats))
            except Exception as exc:  # noqa: BLE001 - report and go on with the other cases
                print(f"{case.name} at {_pow2(n)}: skipped ({type(exc).__name__}: {exc})")
    print("\n".join(machine_info(commit)))
    print(f"device {args.device}; {args.repeats} interleaved repeats, medians; %roof = t_roofline / t; "
          "nbq x = t / t_nbquant; GB/s = (bytes read + written) / median (calib: bytes read);\n"
          "same: '=' same codes/values as nbquant (dynamic cases: codes, scales and zero points; "
          "calib: amax or histogram counts), '≠k' k elements differ, '-' not comparable (unpacked int4, no result)")
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
