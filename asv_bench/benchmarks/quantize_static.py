"""Static quantize, 8-bit formats: per-tensor and per-channel (axis 0 and axis 1)."""

from ._bases import _QuantizeBase
from .common import BACKENDS, SIZES, schemes


class QuantizeStatic(_QuantizeBase):
    params = (BACKENDS, SIZES, schemes(["int8_per_tensor", "uint8_per_tensor", "int8_per_channel_axis0",
                                        "int8_per_channel_axis1"]))
