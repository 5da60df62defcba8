"""Floating-point element formats with given scales: fp8 (e4m3fn, e5m2), fp6 (e2m3fn, e3m2fn) and fp4 (e2m1fn).

fp8 e4m3fn at every granularity; e5m2 per-tensor, per-channel on both axes and in
groups of 32; fp6 per-tensor and in groups of 32, unpacked (one code per byte) and
packed (four codes in three bytes); fp4 packed (two codes per byte) per-tensor and
in groups of 16 and 32, and unpacked in groups of 32. Quantize and dequantize.
"""

from ._bases import _DequantizeBase, _QuantizeBase
from .common import BACKENDS, SIZES, ordered, scheme_names, schemes
from .quantize_static import GRANULARITIES

#: The float schemes; quick mode runs the first two.
FLOAT_SCHEMES = ordered(
    ["fp8_e4m3_per_tensor", "fp4_e2m1_g32_packed"],
    scheme_names(["fp8_e4m3"], GRANULARITIES),
    scheme_names(["fp8_e5m2"], ["per_tensor", "per_channel_axis0", "per_channel_axis1", "g32"]),
    scheme_names(["fp6_e2m3", "fp6_e3m2"], ["per_tensor", "g32"]),
    scheme_names(["fp6_e2m3", "fp6_e3m2"], ["g32"], packed=True),
    scheme_names(["fp4_e2m1"], ["per_tensor", "g16", "g32"], packed=True),
    ["fp4_e2m1_g32"],
)


class QuantizeFloat(_QuantizeBase):
    params = (BACKENDS, SIZES, schemes(FLOAT_SCHEMES))


class DequantizeFloat(_DequantizeBase):
    params = (BACKENDS, SIZES, schemes(FLOAT_SCHEMES))
