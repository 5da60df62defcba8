"""Dequantize to float32 of the integer formats: the schemes of ``quantize_static`` and ``packing``."""

from ._bases import _DequantizeBase
from .common import BACKENDS, SIZES, schemes
from .packing import SUBBYTE_SCHEMES
from .quantize_static import INT8_SCHEMES


class Dequantize(_DequantizeBase):
    """int8 and uint8 codes, every granularity."""

    params = (BACKENDS, SIZES, schemes(INT8_SCHEMES))


class DequantizePacked(_DequantizeBase):
    """int4, uint4 and int2 codes, packed at every granularity and one per byte in groups of 32."""

    params = (BACKENDS, SIZES, schemes(SUBBYTE_SCHEMES))
