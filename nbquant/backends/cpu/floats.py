"""CPU kernels of the floating-point formats (fp8, fp6, fp4) with block-grid scales: quantize and dequantize.

Each is a :mod:`._codec` kernel of this module's families, one per mode: codes one per
byte, or packed through the codec's byte buffer (4-bit codes two per byte, 6-bit codes
four in three bytes; encoding group by group does not vectorize: 10x slower). All
numerics live in :mod:`nbquant.element`.
"""

from __future__ import annotations

from ...element import element_function, float_value, quantize_float_value, store_float
from ._codec import MAP, PACK, RUNTIME_OP, UNPACK, ZERO, Codec


@element_function
def _float_code(v, s, z, op, has_zp, params):
    """The floating-point code of ``v`` (a :class:`~._codec.Codec` value): ``params`` is ``(scale op, fp,
    saturate)``, the scale op ``op`` unless that is :data:`~._codec.RUNTIME_OP`."""
    scale_op, fp, saturate = params
    return quantize_float_value(v, s, scale_op if op == RUNTIME_OP else op, fp, saturate)


@element_function
def _float_value(q, s, z, op, has_zp, params):
    """The value of the floating-point code ``q`` times ``s`` (a :class:`~._codec.Codec` value): ``params`` is
    ``(fp, like)``."""
    fp, like = params
    return store_float(float_value(q, s, fp), like)


#: Floating-point quantize, by the format's bits: 8 one code per byte, 4 and 6 packed.
QUANTIZE_FLOAT = {8: Codec("quantize_float", _float_code, MAP),
                  4: Codec("quantize_float_packed", _float_code, PACK, bits=4),
                  6: Codec("quantize_float_packed6", _float_code, PACK, bits=6)}
#: Floating-point dequantize, by the format's bits.
DEQUANTIZE_FLOAT = {8: Codec("dequantize_float", _float_value, MAP, no_zero_point=ZERO),
                    4: Codec("dequantize_float_packed", _float_value, UNPACK, bits=4, no_zero_point=ZERO),
                    6: Codec("dequantize_float_packed6", _float_value, UNPACK, bits=6, no_zero_point=ZERO)}
