"""Numerics guards on a fixed heavy-tailed matrix (:func:`.common.heavy_tailed`, 256 x 1024 float32).

``Numerics.track_sqnr`` is the SQNR (dB) of dequantize(quantize(x)) per scheme and
backend; ``BitsVsReference.track_mismatched_bytes`` counts the bytes of the codes and
scales of a compiled backend that differ from the ``reference`` backend's (0 on every
scheme today: any other value is a change of the bits). The input, the scales
(absmax for the static schemes) and the seeds are fixed, so a track moves only when
the numerics do; ``asv compare`` lists the moves (docs/performance.md).

Schemes: the static ones by their ``<format>_<granularity>[_packed]`` names
(:func:`.common.parse_scheme`), the block formats (``mxfp*``, ``mxint8``,
``nvfp4``), ``nf4_<variant>`` (:data:`.block_formats.NF4_VARIANTS`) and
``dynamic_<scheme>`` (:data:`.dynamic.DYNAMIC_SCHEMES`).
"""

from __future__ import annotations

import numpy as np

import nbquant

from .block_formats import BLOCK_FORMATS, NF4_VARIANTS, dequantize_block, quantize_block, quantize_nf4
from .common import BACKENDS, Device, Problem, heavy_tailed, schemes, sqnr_db
from .dynamic import DynamicProblem

#: The guarded schemes; quick mode runs the first two.
NUMERIC_SCHEMES = [
    "int4_g32_packed",
    "nvfp4",
    "fp8_e4m3_per_tensor",
    "mxfp4",
    "nf4_block64",
    "nf4_block64_double_quant",
    "int8_per_tensor",
    "int8_per_channel_axis1",
    "uint8_per_channel_axis0",
    "uint4_g128_packed",
    "int2_g16_packed",
    "fp8_e4m3_g32",
    "fp8_e5m2_per_channel_axis0",
    "fp6_e2m3_g32_packed",
    "fp6_e3m2_per_tensor",
    "fp4_e2m1_g32_packed",
    "mxfp8_e4m3",
    "mxfp8_e5m2",
    "mxfp6_e2m3",
    "mxfp6_e3m2",
    "mxint8",
    "dynamic_int8_per_row",
    "dynamic_uint4_asym_g32_packed",
    "dynamic_int4_sym_g32_packed",
    "dynamic_int2_sym_g32_packed",
]


def round_trip(scheme: str, backend: str, dev: Device, x: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """``(host arrays of the encoding: codes and scales, host float32 reconstruction)`` of ``x``."""
    xd = dev.put(x)
    if scheme in BLOCK_FORMATS:
        r = quantize_block(xd, scheme, backend)
        parts = [r.data, r.scales] + ([r.global_scale] if r.format == "nvfp4" else [])
        return [dev.get(a) for a in parts], dev.get(dequantize_block(r, backend))
    if scheme.startswith("nf4_") and scheme[4:] in NF4_VARIANTS:
        r = quantize_nf4(xd, scheme[4:], backend)
        parts = [r.data, r.scales] + ([r.double_scales, r.scale_mean] if r.double_scales is not None else [])
        return [dev.get(a) for a in parts], dev.get(r.dequantize(backend=backend))
    if scheme.startswith("dynamic_"):
        p = DynamicProblem(scheme.removeprefix("dynamic_"), x, backend)
        parts = [dev.get(a) for a in p.quantize(xd)]
        return parts, p.dequantize(*parts)
    p = Problem(scheme, x=x)
    q = nbquant.quantize(xd, p.scale, p.dtype, **p.qkwargs, backend=backend)
    y = nbquant.dequantize(q, p.scale, **p.dqkwargs, backend=backend)
    return [dev.get(q)], dev.get(y)


def mismatched_bytes(a: list[np.ndarray], b: list[np.ndarray]) -> int:
    """Bytes that differ between two encodings (an array of another size counts whole)."""
    total = 0
    for u, v in zip(a, b, strict=True):
        u, v = np.ascontiguousarray(u).view(np.uint8).ravel(), np.ascontiguousarray(v).view(np.uint8).ravel()
        total += int(np.count_nonzero(u != v)) if u.size == v.size else max(u.size, v.size)
    return total


class Numerics:
    """SQNR (dB) of the round trip of each guarded scheme on the fixed heavy-tailed matrix."""

    params = (BACKENDS, schemes(NUMERIC_SCHEMES))
    param_names = ["backend", "scheme"]
    timeout = 300

    def setup(self, backend, scheme):
        self.x = heavy_tailed()
        self.dev = Device(backend, self.x.size)
        _, self.y = round_trip(scheme, backend, self.dev, self.x)

    def track_sqnr(self, backend, scheme):
        """SQNR of dequantize(quantize(x)) against x on the heavy-tailed matrix."""
        return sqnr_db(self.x, self.y)

    track_sqnr.unit = "dB"


class BitsVsReference:
    """Bytes of a compiled backend's encoding that differ from the reference backend's (expected: 0)."""

    params = ([b for b in BACKENDS if b != "reference"], schemes(NUMERIC_SCHEMES))
    param_names = ["backend", "scheme"]
    timeout = 300

    def setup(self, backend, scheme):
        x = heavy_tailed()
        self.parts, _ = round_trip(scheme, backend, Device(backend, x.size), x)
        self.expected, _ = round_trip(scheme, "reference", Device("reference", x.size), x)

    def track_mismatched_bytes(self, backend, scheme):
        """Differing bytes of the codes and scales (0: bit-identical to the reference backend)."""
        return mismatched_bytes(self.parts, self.expected)

    track_mismatched_bytes.unit = "bytes"
