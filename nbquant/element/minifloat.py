"""Sign/exponent/mantissa element formats (fp8, fp6, fp4) and the E8M0 scale, bit-exact with ml_dtypes.

A format reaches these functions as the tuple
``fp = (ebits, mbits, max_code, overflow_code, nan_code, nan_flips_sign, nan_rule)``
of :attr:`nbquant.formats.QuantFormat.fp_params`, whose entries are derived from
``ml_dtypes.finfo`` and ml_dtypes' own casts.
"""

from __future__ import annotations

import numpy as np

from ..modes import NanRule
from .affine import AMAX_TINY, scaled
from .bits import ashr32, bits_f32, element_function, f32_bits, load_f32, max_f32, min_f32, rint_f32, shl32

__all__ = [
    "encode_minifloat",
    "decode_minifloat",
    "encode_e8m0",
    "decode_e8m0",
    "encode_fp",
    "decode_fp",
    "quantize_float_value",
    "encode_product",
    "encode_quotient",
    "float_value",
    "e4m3_scales",
    "scaled_minifloat_fake",
]


@element_function
def encode_minifloat(v, ebits, mbits, max_code, overflow_code, nan_code, nan_flips_sign, saturate):
    """Round float32 ``v`` to a sign/exponent/mantissa code, ties to even.

    The format has ``ebits`` exponent bits (bias ``2**(ebits-1) - 1``), ``mbits``
    mantissa bits, subnormals, and largest finite magnitude code ``max_code``.
    A magnitude that rounds above ``max_code`` (inf included) becomes ``max_code``
    when ``saturate``, else ``overflow_code`` (e4m3fn: NaN 0x7f; e5m2: inf 0x7c;
    formats without inf/NaN: ``max_code``). NaN becomes ``nan_code`` with its sign,
    flipped when ``nan_flips_sign`` (ml_dtypes' fp6/fp4 quirk: +NaN → -0).
    Returns the code as int64, sign in bit ``ebits + mbits``. The arithmetic is int32 throughout
    (:func:`~nbquant.element.bits.ashr32`), so a loop over it vectorizes 16 lanes wide on AVX-512.
    """
    b = np.int32(f32_bits(v))
    sign = np.int32(ashr32(b, 31) & 1)
    a = np.int32(b & 0x7FFFFFFF)
    bias = (1 << (ebits - 1)) - 1
    emin = 1 - bias
    shift = 23 - mbits
    t = np.int32(a - np.int32((127 - bias) << 23))
    normal = ashr32(np.int32(t + np.int32((1 << (shift - 1)) - 1) + np.int32(ashr32(t, shift) & 1)), shift)
    sub_scale = bits_f32((127 + mbits - emin) << 23)
    sub = np.int32(rint_f32(bits_f32(a) * sub_scale))
    code = sub if a < np.int32((127 + emin) << 23) else normal
    code = code if code <= np.int32(max_code) else np.int32(max_code if saturate else overflow_code)
    if a > np.int32(0x7F800000):
        code = np.int32(nan_code)
        sign = np.int32(sign ^ np.int32(nan_flips_sign))
    return np.int64(np.int32(shl32(sign, ebits + mbits) | code))


@element_function
def decode_minifloat(code, ebits, mbits, nan_rule):
    """The float32 value of a sign/exponent/mantissa code (exact); ``nan_rule`` is a :class:`~nbquant.modes.NanRule`.

    int32 arithmetic throughout, as in :func:`encode_minifloat`.
    """
    c = np.int32(code)
    nbits = ebits + mbits
    sign = np.int32(ashr32(c, nbits) & 1)
    a = np.int32(c & np.int32((1 << nbits) - 1))
    bias = (1 << (ebits - 1)) - 1
    e = ashr32(a, mbits)
    m = np.int32(a & np.int32((1 << mbits) - 1))
    normal = bits_f32(np.int32(shl32(np.int32(e + np.int32(127 - bias)), 23) | shl32(m, 23 - mbits)))
    sub = np.float32(m) * bits_f32((127 + 1 - bias - mbits) << 23)
    v = sub if e == 0 else normal
    all_ones = e == np.int32((1 << ebits) - 1)
    if nan_rule == NanRule.IEEE and all_ones:
        v = bits_f32(0x7F800000 if m == 0 else 0x7FC00000)
    if nan_rule == NanRule.ALL_ONES_NAN and a == np.int32((1 << nbits) - 1):
        v = bits_f32(0x7FC00000)
    return -v if sign else v


@element_function
def encode_fp(v, fp, saturate):
    """:func:`encode_minifloat` of float32 ``v`` for the format tuple ``fp``."""
    return encode_minifloat(v, fp[0], fp[1], fp[2], fp[3], fp[4], fp[5], saturate)


@element_function
def decode_fp(code, fp):
    """:func:`decode_minifloat` of ``code`` for the format tuple ``fp``."""
    return decode_minifloat(code, fp[0], fp[1], fp[6])


@element_function
def encode_e8m0(v):
    """Encode float32 as float8_e8m0fnu (``2**(code - 127)``) exactly as ml_dtypes does.

    The mantissa rounds half up; zero, negatives, NaN, inf and overflow give the
    NaN code 0xff; float32 subnormals up to ``2**-127`` give 0 and larger ones 1.
    """
    bits = f32_bits(v)
    e = bits >> 23
    if e == 0:
        return np.int64(0xFF) if bits == 0 else np.int64(0) if bits <= 0x00400000 else np.int64(1)
    code = e + ((bits >> 22) & 1)
    return code if bits < 0x7F800000 and code < 0xFF else np.int64(0xFF)


@element_function
def decode_e8m0(code):
    """The float32 value of a float8_e8m0fnu code (0xff is NaN, 0 is ``2**-127``)."""
    c = np.int64(code)
    if c == 0xFF:
        return bits_f32(0x7FC00000)
    return bits_f32(c << 23) if c > 0 else bits_f32(0x00400000)


@element_function
def quantize_float_value(x, scale, scale_op, fp, saturate):
    """``encode_fp(x / scale)`` (or ``x * scale``, see :func:`~nbquant.element.affine.scaled`).

    A NaN ``x`` is encoded as itself: its sign picks the code (ml_dtypes' casts depend on it), and
    a GPU's division returns a canonical positive NaN where x86 keeps the dividend's sign.
    """
    u = load_f32(x)
    v = scaled(x, scale, scale_op)
    return encode_fp(u if u != u else v, fp, saturate)


@element_function
def encode_product(x, factor, fp):
    """Saturating ``encode_fp(x * factor)`` of an input element ``x`` (MX); a NaN ``x`` encoded as itself.

    The sign of a NaN picks its code in the formats without NaN (ml_dtypes' casts), and a GPU's
    multiply returns a positive canonical NaN where x86 keeps the operand's.
    """
    u = load_f32(x)
    v = u * np.float32(factor)
    return encode_fp(u if u != u else v, fp, True)


@element_function
def encode_quotient(x, divisor, fp):
    """Saturating ``encode_fp(x / divisor)`` of an input element ``x`` (NVFP4); NaN as :func:`encode_product`."""
    u = load_f32(x)
    v = u / np.float32(divisor)
    return encode_fp(u if u != u else v, fp, True)


@element_function
def float_value(code, scale, fp):
    """``decode_fp(code) * scale`` in float32."""
    return decode_fp(code, fp) * np.float32(scale)


@element_function
def e4m3_scales(amax, maxval):
    """modelopt ``scaled_e4m3`` scales ``S = fl(fl(1 / amax) * maxval)`` and ``fl(1 / S)``.

    ``amax <= 2**-24`` is read as 1; NaN amax gives NaN scales.
    """
    a = np.float32(amax)
    a = np.float32(1.0) if a <= AMAX_TINY else a
    s = (np.float32(1.0) / a) * np.float32(maxval)
    return s, np.float32(1.0) / s


@element_function
def scaled_minifloat_fake(x, s, inv_s, maxval, fp):
    """``decode(encode(clamp(x * s, -maxval, maxval))) * inv_s`` (NaN stays NaN): modelopt's fp8 fake quant."""
    m = np.float32(maxval)
    v = load_f32(x) * np.float32(s)
    c = min_f32(max_f32(v, -m), m)
    c = v if v != v else c
    return decode_fp(encode_fp(c, fp, True), fp) * np.float32(inv_s)
