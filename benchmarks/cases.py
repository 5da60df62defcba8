"""The ratio benchmark's table of cases (:data:`CASES`) and the peers each case is timed against.

A :class:`Case` binds a setup of :mod:`benchmarks.problems`, nbquant's call of
:mod:`benchmarks.nbquant_calls` and a tuple of :class:`Peer`. New cases are added by
appending a :class:`Case` to :data:`CASES`; ``--cases`` selects them by substring
(:func:`select_cases`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from . import numpy_peers as np_peers
from . import onnxruntime_peers as ort_peers
from . import torch_peers
from .comparison import compare_values
from .nbquant_calls import (
    nbq_dequantize,
    nbq_dequantize_nf4,
    nbq_histogram_collect,
    nbq_max_collect,
    nbq_mx_dequantize,
    nbq_mx_quantize,
    nbq_quantize,
    nbq_quantize_dynamic,
    nbq_quantize_nf4,
)
from .problems import (
    Bench,
    Problem,
    calibration_problem,
    dequantize_problem,
    dynamic_problem,
    mx_dequantize_problem,
    mx_problem,
    nf4_dequantize_problem,
    nf4_problem,
    quantize_problem,
)


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
        (default :func:`benchmarks.comparison.compare`: codes or values by their bits).
    """

    name: str
    setup: Callable[[int, np.random.Generator], Problem]
    nbquant: Callable[[Problem, str | None], Bench]
    peers: tuple[Peer, ...] = field(default=())
    compare: Callable[[object, object], str] | None = None


NUMPY_QUANTIZE_PEERS = (Peer("numpy", np_peers.numpy_quantize),)
NUMPY_DEQUANTIZE_PEERS = (Peer("numpy", np_peers.numpy_dequantize),)
_TORCHAO_QUANTIZE = Peer("torchao quantize_affine", torch_peers.torchao_quantize, ("torch", "torchao"))
QUANTIZE_PEERS = (
    *NUMPY_QUANTIZE_PEERS,
    Peer("torch.quantize_per_tensor", torch_peers.torch_quantize_per_tensor, ("torch",)),
    Peer("torch.quantize_per_channel", torch_peers.torch_quantize_per_channel, ("torch",)),
    Peer("torch quantized_decomposed", torch_peers.torch_decomposed_quantize, ("torch",)),
    _TORCHAO_QUANTIZE,
    Peer("onnxruntime QuantizeLinear", ort_peers.ort_quantize, ("onnx", "onnxruntime")),
)
DEQUANTIZE_PEERS = (
    *NUMPY_DEQUANTIZE_PEERS,
    Peer("torch Tensor.dequantize", torch_peers.torch_dequantize, ("torch",)),
    Peer("torchao dequantize_affine", torch_peers.torchao_dequantize, ("torch", "torchao")),
    Peer("onnxruntime DequantizeLinear", ort_peers.ort_dequantize, ("onnx", "onnxruntime")),
)
#: Sub-byte codes the torch quantize peers would get wrong (``torch.quantize_per_channel`` makes qint8 whatever
#: the format): NumPy, and torchao's unpacked codes. Zero-point cases take the NumPy peers alone (the torch,
#: torchao and onnxruntime peers quantize with zero point 0).
SUBBYTE_QUANTIZE_PEERS = (*NUMPY_QUANTIZE_PEERS, _TORCHAO_QUANTIZE)
NUMPY_QUANTIZE_OUT_PEERS = (Peer("numpy (copyto out)", np_peers.numpy_quantize_out),)
NUMPY_DEQUANTIZE_OUT_PEERS = (Peer("numpy (out=)", np_peers.numpy_dequantize_out),)
#: fp6, fp4 and the other ml_dtypes element formats (torch has no fp6): NumPy's clip and ml_dtypes' cast.
MINIFLOAT_QUANTIZE_PEERS = (Peer("numpy + ml_dtypes", np_peers.numpy_fp8_quantize),)
FP8_QUANTIZE_PEERS = (
    *MINIFLOAT_QUANTIZE_PEERS,
    Peer("torch (x / s).to(fp8)", torch_peers.torch_fp8_quantize, ("torch",)),
    Peer("torchao _quantize_affine_float8", torch_peers.torchao_fp8_quantize, ("torch", "torchao")),
)
FP8_DEQUANTIZE_PEERS = (
    Peer("numpy + ml_dtypes", np_peers.numpy_fp8_dequantize),
    Peer("torch q.to(float32) * s", torch_peers.torch_fp8_dequantize, ("torch",)),
    Peer("torchao _dequantize_affine_float8", torch_peers.torchao_fp8_dequantize, ("torch", "torchao")),
)
MX_QUANTIZE_PEERS = (Peer("torchao to_mx", torch_peers.torchao_to_mx, ("torch", "torchao")),)
DYNAMIC_PEERS = (
    Peer("numpy (multi-pass)", np_peers.numpy_quantize_dynamic),
    Peer("torchao choose_qparams+quantize", torch_peers.torchao_quantize_dynamic, ("torch", "torchao")),
)
CALIB_MAX_PEERS = (
    Peer("numpy np.abs(x).max()", np_peers.numpy_absmax),
    Peer("torch.amax(x.abs())", torch_peers.torch_absmax, ("torch",)),
)
CALIB_HISTOGRAM_PEERS = (
    Peer("numpy np.histogram(|x|)", np_peers.numpy_abs_histogram),
    Peer("torch.histc(|x|)", torch_peers.torch_abs_histc, ("torch",)),
)


def _q(dtype: str, granularity: str, packed: bool = False, out: bool = False, peers=QUANTIZE_PEERS,
       zp: bool = False) -> tuple:
    """Setup, nbquant call and peers of a static quantize case.

    ``out``: into a preallocated array; ``zp``: asymmetric, min/max scales with zero points.
    """
    return (partial(quantize_problem, dtype=dtype, granularity=granularity, packed=packed, zero_point=zp),
            partial(nbq_quantize, out=out), peers)


def _dq(dtype: str, granularity: str, packed: bool = False, out: bool = False, peers=DEQUANTIZE_PEERS,
        zp: bool = False) -> tuple:
    """Setup, nbquant call and peers of a static dequantize case (arguments as :func:`_q`)."""
    return (partial(dequantize_problem, dtype=dtype, granularity=granularity, packed=packed, zero_point=zp),
            partial(nbq_dequantize, out=out), peers)


def _mx(fmt: str, peers=(), dequantize: bool = False) -> tuple:
    """Setup, nbquant call and peers of a block-format (MX, NVFP4) quantize or dequantize case."""
    if dequantize:
        return partial(mx_dequantize_problem, fmt=fmt), nbq_mx_dequantize, peers
    return partial(mx_problem, fmt=fmt), nbq_mx_quantize, peers


def _qdyn(dtype: str, group: int | str | None, mapping: str, packed: bool = False, peers=DYNAMIC_PEERS) -> tuple:
    """Setup, nbquant call and peers of a dynamic quantize case.

    Blocks of ``group`` columns; a whole row when None, the whole input when ``"tensor"``.
    """
    return (partial(dynamic_problem, dtype=dtype, group=group, mapping=mapping, packed=packed),
            nbq_quantize_dynamic, peers)


def _calib(calibrator: str, call: Callable[[Problem, str | None], Bench], peers: tuple[Peer, ...]) -> tuple:
    """Setup, nbquant call, peers and value comparison of a calibrator ``collect`` case."""
    return partial(calibration_problem, calibrator=calibrator), call, peers, compare_values


#: The benchmark table; append a Case to add one. It covers every quantize and dequantize kernel family of the
#: cpu backend: static integer codes (unpacked, packed 4- and 2-bit, with and without zero points, per tensor, per
#: channel on either axis, per group, into ``out=``), the float element formats (fp8, fp6 and fp4, unpacked and
#: packed; 6-bit codes pack 4 in 3 bytes), the block formats (MX, NVFP4, NF4 with and without double
#: quantization), dynamic quantization (fused per-row and per-group passes, the two-pass per-tensor one) and the
#: calibrators.
CASES: list[Case] = [
    Case("q int8 per-tensor", *_q("int8", "tensor")),
    Case("q int8 per-tensor out=", *_q("int8", "tensor", out=True, peers=NUMPY_QUANTIZE_OUT_PEERS)),
    Case("q int8 per-channel axis0", *_q("int8", "axis0")),
    Case("q int8 per-channel axis1", *_q("int8", "axis1")),
    Case("q int8 per-channel axis1 out=", *_q("int8", "axis1", out=True, peers=NUMPY_QUANTIZE_OUT_PEERS)),
    Case("q int8 g32", *_q("int8", "g32")),
    Case("q uint8 per-tensor zp", *_q("uint8", "tensor", peers=NUMPY_QUANTIZE_PEERS, zp=True)),
    Case("q int4 g32 packed", *_q("int4", "g32", packed=True)),
    Case("q int4 g128 packed", *_q("int4", "g128", packed=True)),
    Case("q int4 g32 packed out=", *_q("int4", "g32", packed=True, out=True, peers=NUMPY_QUANTIZE_OUT_PEERS)),
    Case("q int4 g16 packed", *_q("int4", "g16", packed=True)),
    Case("q int4 per-channel axis1 packed", *_q("int4", "axis1", packed=True, peers=SUBBYTE_QUANTIZE_PEERS)),
    Case("q uint4 g128 packed zp", *_q("uint4", "g128", packed=True, peers=NUMPY_QUANTIZE_PEERS, zp=True)),
    Case("q int2 g32 packed", *_q("int2", "g32", packed=True, peers=SUBBYTE_QUANTIZE_PEERS)),
    Case("q fp8 e4m3 per-tensor", *_q("float8_e4m3fn", "tensor", peers=FP8_QUANTIZE_PEERS)),
    Case("q fp8 e4m3 per-channel axis0", *_q("float8_e4m3fn", "axis0", peers=FP8_QUANTIZE_PEERS)),
    Case("q fp8 e4m3 g32", *_q("float8_e4m3fn", "g32", peers=FP8_QUANTIZE_PEERS)),
    Case("q fp8 e5m2 per-tensor", *_q("float8_e5m2", "tensor", peers=MINIFLOAT_QUANTIZE_PEERS)),
    Case("q fp6 e3m2 per-tensor", *_q("float6_e3m2fn", "tensor", peers=MINIFLOAT_QUANTIZE_PEERS)),
    Case("q fp6 e3m2 per-tensor packed", *_q("float6_e3m2fn", "tensor", packed=True, peers=())),
    Case("q fp4 e2m1 per-tensor", *_q("float4_e2m1fn", "tensor", peers=MINIFLOAT_QUANTIZE_PEERS)),
    Case("q fp4 e2m1 per-tensor packed", *_q("float4_e2m1fn", "tensor", packed=True, peers=())),
    Case("q fp4 e2m1 g16 packed", *_q("float4_e2m1fn", "g16", packed=True, peers=())),
    Case("dq int8 per-tensor", *_dq("int8", "tensor")),
    Case("dq int8 per-tensor out=", *_dq("int8", "tensor", out=True, peers=NUMPY_DEQUANTIZE_OUT_PEERS)),
    Case("dq int8 per-channel axis0", *_dq("int8", "axis0")),
    Case("dq int8 per-channel axis1", *_dq("int8", "axis1")),
    Case("dq uint8 per-tensor zp", *_dq("uint8", "tensor", peers=NUMPY_DEQUANTIZE_PEERS, zp=True)),
    Case("dq int4 g32 packed", *_dq("int4", "g32", packed=True)),
    Case("dq int4 g128 packed", *_dq("int4", "g128", packed=True)),
    Case("dq int2 g32 packed", *_dq("int2", "g32", packed=True)),
    Case("dq fp8 e4m3 per-tensor", *_dq("float8_e4m3fn", "tensor", peers=FP8_DEQUANTIZE_PEERS)),
    Case("dq fp8 e4m3 per-tensor out=", *_dq("float8_e4m3fn", "tensor", out=True, peers=NUMPY_DEQUANTIZE_OUT_PEERS)),
    Case("dq fp4 e2m1 g16 packed", *_dq("float4_e2m1fn", "g16", packed=True, peers=())),
    Case("q mxfp4 (dynamic, block 32)", *_mx("mxfp4", MX_QUANTIZE_PEERS)),
    Case("q mxfp8 e4m3 (dynamic, blk 32)", *_mx("mxfp8_e4m3", MX_QUANTIZE_PEERS)),
    Case("q mxfp6 e2m3 (dynamic, blk 32)", *_mx("mxfp6_e2m3")),
    Case("q mxint8 (dynamic, block 32)", *_mx("mxint8")),
    Case("q nvfp4 (dynamic, block 16)", *_mx("nvfp4")),
    Case("dq mxfp4 (block 32)", *_mx("mxfp4", dequantize=True)),
    Case("dq mxfp8 e4m3 (block 32)", *_mx("mxfp8_e4m3", dequantize=True)),
    Case("dq nvfp4 (block 16)", *_mx("nvfp4", dequantize=True)),
    Case("q int8 per-row dynamic", *_qdyn("int8", None, "symmetric")),
    Case("q int8 per-tensor dynamic", *_qdyn("int8", "tensor", "symmetric")),
    Case("q uint8 per-row dynamic asym", *_qdyn("uint8", None, "asymmetric")),
    Case("q int4 g32 dynamic packed", *_qdyn("uint4", 32, "asymmetric", packed=True)),
    Case("q int4 g128 dynamic packed", *_qdyn("uint4", 128, "asymmetric", packed=True)),
    Case("q int4 g32 dynamic", *_qdyn("uint4", 32, "asymmetric")),
    Case("q int4 g128 dynamic", *_qdyn("uint4", 128, "asymmetric")),
    Case("q int4 g32 dynamic sym packed", *_qdyn("int4", 32, "symmetric", packed=True)),
    Case("q nf4 (block 64)", partial(nf4_problem, block=64), nbq_quantize_nf4),
    Case("q nf4 (block 64, double quant)", partial(nf4_problem, block=64, scale_block=256), nbq_quantize_nf4),
    Case("dq nf4 (block 64)", partial(nf4_dequantize_problem, block=64), nbq_dequantize_nf4),
    Case("calib max collect", *_calib("max", nbq_max_collect, CALIB_MAX_PEERS)),
    Case("calib histogram collect", *_calib("histogram", nbq_histogram_collect, CALIB_HISTOGRAM_PEERS)),
]


def select_cases(patterns: str | None) -> list[Case]:
    """Cases whose name contains any comma-separated pattern (all when ``None``).

    Examples
    --------
    >>> [c.name for c in select_cases("q int8 per-row,dq nf4")]
    ['q int8 per-row dynamic', 'dq nf4 (block 64)']
    """
    if not patterns:
        return list(CASES)
    pats = [s.strip() for s in patterns.split(",") if s.strip()]
    return [c for c in CASES if any(s in c.name for s in pats)]
