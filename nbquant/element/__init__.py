"""Scalar element functions: the numeric core, and the only numeric source, of every compiled backend.

Every function here is declared with :data:`~nbquant.element.bits.element_function`
(``numba.njit(inline="always", error_model="numpy")``). Inlining happens on Numba IR
before typing, so the same functions compile inside CPU ``njit`` kernels, inside
``numba.cuda.jit`` kernels, and in a GPU-less ``cuda.compile_ptx`` (see
``numba-notes.md``). Kernels are loops around these functions and hold no numerics
of their own.

All arithmetic stays in float32: constants are ``np.float32`` and every function
casts its float inputs to float32 first (a no-op once compiled; it stops the CUDA
simulator from handing float64 Python floats to the next helper).

Modules
-------
* :mod:`~nbquant.element.bits`: float32 bits, RNE rounding, input decoding and output
  encoding (float16/bfloat16 as bits), order keys and slice reductions.
* :mod:`~nbquant.element.affine`: integer quantize/dequantize, torchao and modelopt
  qparams, fake quantization, straight-through gradients, histogram bins.
* :mod:`~nbquant.element.minifloat`: fp8/fp6/fp4 and E8M0 encode/decode (ml_dtypes' bits).
* :mod:`~nbquant.element.blocks`: MX, NVFP4 and NF4 block math.
* :mod:`~nbquant.element.packing`: the packed-code bit layout.

Storage conventions
-------------------
* Float inputs reach kernels as float32, float64, or 16-bit patterns:
  float16 as ``uint16`` and bfloat16 as ``int16`` views. :func:`load_f32` decodes
  all four by type.
* Integer codes are stored unsigned (``uint8``/``uint16``), low bits holding the
  two's complement code (``ml_dtypes`` sub-byte storage). :func:`code_bits` and
  :func:`code_value` convert between a float32 code value and those bits.
* Modes (:class:`~nbquant.modes.ScaleOp`, :class:`~nbquant.modes.Mapping`,
  :class:`~nbquant.modes.NanRule`) arrive as ``int64`` and are compared with the members.

Examples
--------
>>> import numpy as np
>>> from nbquant.element import quantize_value
>>> from nbquant.modes import ScaleOp
>>> float(quantize_value(np.float32(2.5), np.float32(1.0), np.float32(0.0), ScaleOp.DIVIDE, False, -8.0, 7.0))
2.0
"""

from __future__ import annotations

from .affine import (
    AMAX_TINY,
    affine_fake_value,
    affine_qparams,
    amax_code,
    amax_scales,
    block_qparams,
    code_bits,
    code_value,
    dequantize_value,
    histogram_bin,
    quantize_value,
    scaled,
    ste_value,
)
from .bits import (
    abs_bits,
    absmax_bits,
    bits_f32,
    element_function,
    f32_bits,
    key_f32,
    load_f32,
    minmax_keys,
    order_key,
    range_keys,
    rint_f32,
    store_float,
)
from .blocks import (
    E2M1,
    E4M3,
    MXINT8_STEP,
    NF4_THRESHOLDS,
    NF4_VALUES,
    mx_int8,
    mx_inverse_scale,
    mx_scale_code,
    nf4_code,
    nvfp4_block_scale,
)
from .minifloat import (
    decode_e8m0,
    decode_fp,
    decode_minifloat,
    e4m3_scales,
    encode_e8m0,
    encode_fp,
    encode_minifloat,
    encode_product,
    encode_quotient,
    float_value,
    quantize_float_value,
    scaled_minifloat_fake,
)
from .packing import (
    pack_byte_codes,
    pack_field,
    pack_nf4_codes,
    pack_nf4_pair,
    pack_pair,
    pack_six_bit_codes,
    unpack_byte_codes,
    unpack_field,
    unpack_nf4_codes,
    unpack_six_bit_codes,
)

__all__ = [
    "AMAX_TINY", "E2M1", "E4M3", "MXINT8_STEP", "NF4_THRESHOLDS", "NF4_VALUES",
    "abs_bits", "absmax_bits", "affine_fake_value", "affine_qparams", "amax_code", "amax_scales", "bits_f32",
    "block_qparams", "code_bits", "code_value", "decode_e8m0", "decode_fp", "decode_minifloat", "dequantize_value",
    "e4m3_scales", "element_function", "encode_e8m0", "encode_fp", "encode_minifloat", "f32_bits", "float_value",
    "histogram_bin", "key_f32", "load_f32", "minmax_keys", "mx_int8", "mx_inverse_scale",
    "mx_scale_code", "nf4_code", "nvfp4_block_scale", "order_key", "pack_byte_codes", "pack_field", "range_keys",
    "pack_nf4_pair", "pack_pair", "quantize_float_value", "quantize_value", "rint_f32", "scaled",
    "scaled_minifloat_fake", "encode_product", "encode_quotient", "ste_value", "store_float", "unpack_byte_codes",
    "unpack_field", "pack_six_bit_codes",
    "pack_nf4_codes", "unpack_nf4_codes", "unpack_six_bit_codes",
]
