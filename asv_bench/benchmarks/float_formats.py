"""Floating-point element formats: fp8 e4m3fn / e5m2 (per-tensor, per-channel) and packed fp4 e2m1 groups."""

from ._bases import _DequantizeBase, _QuantizeBase
from .common import BACKENDS, SIZES, schemes


class QuantizeFloat(_QuantizeBase):
    params = (BACKENDS, SIZES, schemes(["fp8_e4m3_per_tensor", "fp4_e2m1_g32_packed", "fp8_e4m3_per_channel_axis0",
                                        "fp8_e5m2_per_tensor"]))


class DequantizeFloat(_DequantizeBase):
    params = (BACKENDS, SIZES, schemes(["fp8_e4m3_per_tensor", "fp4_e2m1_g32_packed"]))
