"""Dequantize to float32: 8-bit per-tensor and per-channel codes, packed int4 groups."""

from ._bases import _DequantizeBase
from .common import BACKENDS, SIZES, schemes


class Dequantize(_DequantizeBase):
    params = (BACKENDS, SIZES, schemes(["int8_per_tensor", "int4_g32_packed", "int8_per_channel_axis0"]))
