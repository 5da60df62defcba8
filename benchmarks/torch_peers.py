"""torch and torchao peers of the ratio benchmark: ``make(problem)`` returns the call to time.

torch and torchao are imported when a factory is called, never at import time, so the
benchmark runs without them (:class:`benchmarks.cases.Peer` checks that they are
installed). A factory raises when the peer cannot do the case: the row is then skipped.
torch runs on the thread count given to ``--threads`` (:func:`benchmarks.threads.use_threads`).
Inside :func:`on_device` (``--device cuda``) the factories put their tensors on that torch device.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator

import numpy as np

from .problems import Bench, Problem, grid_shape
from .threads import requested_threads

#: torch element dtypes of torchao's ``to_mx`` for nbquant's MX formats.
_TORCHAO_MX = {"mxfp4": "float4_e2m1fn_x2", "mxfp8_e4m3": "float8_e4m3fn", "mxfp8_e5m2": "float8_e5m2"}
#: The torch device the factories put their tensors on (:func:`on_device`).
_DEVICE = ["cpu"]


@contextlib.contextmanager
def on_device(device: str) -> Iterator[None]:
    """Build the peers' tensors on the torch ``device`` (``"cuda"``) inside the ``with`` block."""
    _DEVICE.append(device)
    try:
        yield
    finally:
        _DEVICE.pop()


def _tensor(a: np.ndarray):
    """A NumPy array as a torch tensor on the current device (sharing memory on the CPU)."""
    t = _torch().from_numpy(a)
    return t if _DEVICE[-1] == "cpu" else t.to(_DEVICE[-1])


def _torch():
    """torch, on the requested thread count."""
    torch = importlib.import_module("torch")
    threads = requested_threads()
    if threads and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return torch


def _torchao_primitives():
    return importlib.import_module("torchao.quantization.quant_primitives")


def _torch_scale(p: Problem):
    """(scale, zero point) tensors of the squeezed grid shape, as torchao expects."""
    torch = _torch()
    s = _tensor(np.ascontiguousarray(p.scale.squeeze()))
    return s, torch.zeros(s.shape, dtype=torch.int32, device=s.device)


def _per_channel_axis(p: Problem) -> int:
    if p.kwargs.get("axis") is None or "block_size" in p.kwargs:
        raise NotImplementedError("not a per-channel case")
    return p.kwargs["axis"]


def torch_quantize_per_tensor(p: Problem) -> Bench:
    """``torch.quantize_per_tensor`` (fbgemm, fused)."""
    torch = _torch()
    if p.scale.size != 1 or p.kwargs["dtype"] != "int8":
        raise NotImplementedError
    x, s = _tensor(p.src), float(p.scale.item())
    return lambda: torch.quantize_per_tensor(x, s, 0, torch.qint8)


def torch_quantize_per_channel(p: Problem) -> Bench:
    """``torch.quantize_per_channel``."""
    torch = _torch()
    axis = _per_channel_axis(p)
    x, (s, zp) = _tensor(p.src), _torch_scale(p)
    s = s.double()
    zp = zp.long()
    return lambda: torch.quantize_per_channel(x, s, zp, axis, torch.qint8)


def torch_decomposed_quantize(p: Problem) -> Bench:
    """``torch.ops.quantized_decomposed.quantize_per_tensor`` / ``quantize_per_channel``."""
    torch = _torch()
    importlib.import_module("torch.ao.quantization.fx._decomposed")
    ops = torch.ops.quantized_decomposed
    x, (lo, hi) = _tensor(p.src), p.qrange
    if p.kwargs["dtype"] != "int8":
        raise NotImplementedError
    if p.scale.size == 1:
        s = float(p.scale.item())
        return lambda: ops.quantize_per_tensor(x, s, 0, lo, hi, torch.int8)
    axis = _per_channel_axis(p)
    s, zp = _torch_scale(p)
    return lambda: ops.quantize_per_channel(x, s, zp, axis, lo, hi, torch.int8)


def torchao_quantize(p: Problem) -> Bench:
    """``torchao quantize_affine`` (int8 storage; int4 codes are left unpacked)."""
    prim, torch = _torchao_primitives(), _torch()
    x, (s, zp), (lo, hi) = _tensor(p.src), _torch_scale(p), p.qrange
    return lambda: prim.quantize_affine(x, p.block, s, zp, torch.int8, lo, hi)


def torch_dequantize(p: Problem) -> Bench:
    """``Tensor.dequantize`` of a per-tensor or per-channel quantized tensor."""
    if p.kwargs["packed"]:
        raise NotImplementedError
    x = p.src.astype(np.float32) * p.scale.reshape(grid_shape(p))
    maker = torch_quantize_per_tensor if p.scale.size == 1 else torch_quantize_per_channel
    qt = maker(Problem(x, p.out, p.scale, p.block, p.qrange, p.kwargs))()
    return qt.dequantize


def torchao_dequantize(p: Problem) -> Bench:
    """``torchao dequantize_affine`` of int8 codes (int4 unpacked)."""
    prim, torch = _torchao_primitives(), _torch()
    q = _tensor(p.codes if p.codes is not None else p.src)
    (s, zp), (lo, hi) = _torch_scale(p), p.qrange
    return lambda: prim.dequantize_affine(q, p.block, s, zp, torch.int8, lo, hi)


def _fp8(p: Problem):
    """torch and the scale grid as a tensor, for an e4m3fn case (raises for any other format)."""
    if p.kwargs["dtype"] != "float8_e4m3fn":
        raise NotImplementedError("e4m3fn only")
    torch = _torch()
    return torch, _tensor(np.ascontiguousarray(p.scale.reshape(grid_shape(p))))


def _fp8_codes(torch, p: Problem):
    """The problem's float8_e4m3fn codes as a torch tensor (shared memory)."""
    return _tensor(p.src.view(np.uint8)).view(torch.float8_e4m3fn)


def torch_fp8_quantize(p: Problem) -> Bench:
    """``(x / s).to(torch.float8_e4m3fn)`` (torch 2.13 saturates on overflow)."""
    torch, s = _fp8(p)
    x = _tensor(p.src)
    return lambda: (x / s).to(torch.float8_e4m3fn)


def torchao_fp8_quantize(p: Problem) -> Bench:
    """torchao ``_quantize_affine_float8`` (clamp, then cast)."""
    torch, s = _fp8(p)
    prim, x = _torchao_primitives(), _tensor(p.src)
    return lambda: prim._quantize_affine_float8(x, s, torch.float8_e4m3fn)


def torch_fp8_dequantize(p: Problem) -> Bench:
    """``q.to(torch.float32) * s``."""
    torch, s = _fp8(p)
    q = _fp8_codes(torch, p)
    return lambda: q.to(torch.float32) * s


def torchao_fp8_dequantize(p: Problem) -> Bench:
    """torchao ``_dequantize_affine_float8``."""
    torch, s = _fp8(p)
    prim = _torchao_primitives()
    q = _fp8_codes(torch, p)
    return lambda: prim._dequantize_affine_float8(q, s)


def torchao_to_mx(p: Problem) -> Bench:
    """torchao ``prototype.mx_formats.mx_tensor.to_mx`` (floor scale, like OCP MX), returns (scales, data)."""
    torch = _torch()
    to_mx = importlib.import_module("torchao.prototype.mx_formats.mx_tensor").to_mx
    elem = getattr(torch, _TORCHAO_MX[p.kwargs["dtype"]])
    x, block = _tensor(p.src), p.block[1]
    return lambda: to_mx(x, elem, block)


def torchao_quantize_dynamic(p: Problem) -> Bench:
    """torchao ``choose_qparams_affine`` + ``quantize_affine`` (+ two nibbles per byte with torch ops).

    The problem's mapping and range: e.g. int8 per-row ``MappingType.SYMMETRIC``,
    ``torch.int8``; uint4 ``ASYMMETRIC``, ``torch.uint8`` with ``quant_min=0,
    quant_max=15`` (int4 weight-only's codes). 4-bit only when packed.
    Packing puts the even column in the low nibble, as nbquant. Returns (codes, scale, zero_point).
    """
    prim, torch = _torchao_primitives(), _torch()
    (lo, hi), block, packed = p.qrange, p.block, p.kwargs["packed"]
    if packed and hi - lo != 15:
        raise NotImplementedError("packs 4-bit codes only")
    asym = p.kwargs["mapping"] == "asymmetric"
    mapping = prim.MappingType.ASYMMETRIC if asym else prim.MappingType.SYMMETRIC
    signed = lo < 0
    target = torch.int8 if signed else torch.uint8
    x = _tensor(p.src)

    def run():
        s, zp = prim.choose_qparams_affine(x, mapping, block, target, lo, hi)
        q = prim.quantize_affine(x, block, s, zp, target, lo, hi)
        if packed:  # the low nibble masked when signed: a negative int8 code would fill the high one
            q = ((q[:, 0::2] & 15) if signed else q[:, 0::2]) | (q[:, 1::2] << 4)
        return q, s, zp

    return run


def torch_absmax(p: Problem) -> Bench:
    """``torch.amax(x.abs())``."""
    torch = _torch()
    x = _tensor(p.src)
    return lambda: torch.amax(x.abs())


def torch_abs_histc(p: Problem) -> Bench:
    """``torch.histc(|x|, bins, 0, max |x|)`` counts (float32), the amax included."""
    torch = _torch()
    x, bins = _tensor(p.src), p.kwargs["num_bins"]

    def run():
        a = x.abs()
        return torch.histc(a, bins, 0, float(a.max()))

    return run
