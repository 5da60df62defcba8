"""Static quantize of sub-byte integer formats: int4, uint4 and int2.

Every granularity (per-tensor, per-channel on both axes, groups of 16, 32 and 128)
packed along the last axis (two int4/uint4 or four int2 codes per byte), plus one
code per byte in groups of 32.
"""

from ._bases import _QuantizeBase
from .common import BACKENDS, SIZES, ordered, scheme_names, schemes
from .quantize_static import GRANULARITIES

_FORMATS = ["int4", "uint4", "int2"]
#: The sub-byte schemes; quick mode runs the first two.
SUBBYTE_SCHEMES = ordered(["int4_g32_packed", "uint4_g32_packed"], scheme_names(_FORMATS, GRANULARITIES, packed=True),
                          scheme_names(_FORMATS, ["g32"]))


class QuantizePacked(_QuantizeBase):
    params = (BACKENDS, SIZES, schemes(SUBBYTE_SCHEMES))
