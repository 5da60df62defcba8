"""Static quantize of sub-byte formats: group-wise int4/uint4, packed two codes per byte, and unpacked."""

from ._bases import _QuantizeBase
from .common import BACKENDS, SIZES, schemes


class QuantizePacked(_QuantizeBase):
    params = (BACKENDS, SIZES, schemes(["int4_g32_packed", "uint4_g32_packed", "int4_g128_packed", "int4_g32"]))
