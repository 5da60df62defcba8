"""Static quantize, 8-bit integer formats: int8 and uint8 (mid zero point), every granularity.

Per-tensor, per-channel on both axes, and groups of 16, 32 and 128 along the last axis.
"""

from ._bases import _QuantizeBase
from .common import BACKENDS, SIZES, ordered, scheme_names, schemes

GRANULARITIES = ["per_tensor", "per_channel_axis0", "per_channel_axis1", "g16", "g32", "g128"]
#: int8 and uint8 at every granularity; quick mode runs the first two.
INT8_SCHEMES = ordered(["int8_per_tensor", "uint8_per_tensor"], scheme_names(["int8", "uint8"], GRANULARITIES))


class QuantizeStatic(_QuantizeBase):
    params = (BACKENDS, SIZES, schemes(INT8_SCHEMES))
