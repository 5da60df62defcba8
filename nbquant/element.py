"""Scalar element functions: the numeric core that every compiled backend shares.

Everything here is ``numba.njit(inline='always')``. Inlining happens on Numba IR
before typing, so the same functions compile inside CPU ``njit`` kernels, inside
``numba.cuda.jit`` kernels, and in a GPU-less ``cuda.compile_ptx`` (see
``numba-notes.md``). Target-specific instructions sit in ``@intrinsic`` functions
that branch on the LLVM target triple; kernel bodies never call an intrinsic
directly (the CUDA simulator cannot run them), only the wrappers below.

All arithmetic stays in float32: constants are ``np.float32`` and every function
casts its float inputs to float32 first (a no-op once compiled; it stops the CUDA
simulator from handing float64 Python floats to the next helper).

Storage conventions
-------------------
* Float inputs reach kernels as float32, float64, or 16-bit patterns:
  float16 as ``uint16`` and bfloat16 as ``int16`` views. :func:`load_f32` decodes
  all four by type.
* Integer codes are stored unsigned (``uint8``/``uint16``), low bits holding the
  two's complement code (``ml_dtypes`` sub-byte storage). :func:`code_bits` and
  :func:`code_value` convert between a float32 code value and those bits.
* Packed codes: ``codes_per_byte`` codes in one byte, the first element in the
  lowest bits (``byte = c0 | c1 << 4`` for 4-bit formats).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = [
    "SCALE_DIVIDE",
    "SCALE_MULTIPLY",
    "load_f32",
    "store_float",
    "rint_f32",
    "quantize_value",
    "dequantize_value",
    "code_bits",
    "code_value",
    "f32_bits",
    "bits_f32",
    "encode_minifloat",
    "decode_minifloat",
    "encode_e8m0",
    "decode_e8m0",
    "quantize_float_value",
]

from .spec import SCALE_DIVIDE, SCALE_MULTIPLY  # noqa: E402  (scale_op codes for quantize_value)

_F32 = ir.FloatType()
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)


def _is_nvptx(builder) -> bool:
    return "nvptx" in builder.module.triple


@intrinsic
def _f32_to_bits(typingctx, value):
    """The IEEE bits of a float32, zero-extended to int64."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.zext(builder.bitcast(args[0], _I32), ir.IntType(64))

    return types.int64(types.float32), codegen


@intrinsic
def _bits_to_f32(typingctx, value):
    """The float32 whose IEEE bits are the low 32 bits of an int64."""
    if value != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.trunc(args[0], _I32), _F32)

    return types.float32(types.int64), codegen


@intrinsic
def _rint(typingctx, value):
    """Round float32 to the nearest integer, ties to even, staying in float32."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(_F32, [_F32])
        if _is_nvptx(builder):
            asm = ir.InlineAsm(fnty, "cvt.rni.f32.f32 $0, $1;", "=f,f")
            return builder.call(asm, args)
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.rint.f32")
        return builder.call(fn, args)

    return types.float32(types.float32), codegen


@intrinsic
def _to_f32(typingctx, value):
    """Decode one input element to float32 by its storage type.

    float32 passes through, float64 rounds (RNE), uint16 holds float16 bits,
    int16 holds bfloat16 bits.
    """
    if value not in (types.float32, types.float64, types.uint16, types.int16):
        return None

    def codegen(context, builder, signature, args):
        (v,) = args
        if value == types.float32:
            return v
        if value == types.float64:
            return builder.fptrunc(v, _F32)
        if value == types.uint16:
            return builder.fpext(builder.bitcast(v, ir.HalfType()), _F32)
        wide = builder.shl(builder.zext(v, _I32), ir.Constant(_I32, 16))
        return builder.bitcast(wide, _F32)

    return types.float32(value), codegen


@intrinsic
def _from_f32(typingctx, value, like):
    """Encode float32 into the storage type of ``like`` (RNE for the narrow types).

    ``like`` float32 → float32; uint16 → float16 bits; int16 → bfloat16 bits
    (NaN stays a quiet NaN with its sign).
    """
    if value != types.float32 or like not in (types.float32, types.uint16, types.int16):
        return None

    def codegen(context, builder, signature, args):
        v = args[0]
        if like == types.float32:
            return v
        if like == types.uint16:
            return builder.bitcast(builder.fptrunc(v, ir.HalfType()), _I16)
        bits = builder.bitcast(v, _I32)
        upper = builder.lshr(bits, ir.Constant(_I32, 16))
        lsb = builder.and_(upper, ir.Constant(_I32, 1))
        rounded = builder.add(bits, builder.add(lsb, ir.Constant(_I32, 0x7FFF)))
        rounded = builder.lshr(rounded, ir.Constant(_I32, 16))
        quiet = builder.or_(upper, ir.Constant(_I32, 0x0040))
        is_nan = builder.fcmp_unordered("uno", v, v)
        return builder.trunc(builder.select(is_nan, quiet, rounded), _I16)

    return like(types.float32, like), codegen


@njit(inline="always")
def rint_f32(v):
    """Round half to even in float32 (``cvt.rni.f32.f32`` on CUDA, ``llvm.rint`` on CPU)."""
    return _rint(np.float32(v))


@njit(inline="always")
def load_f32(v):
    """Decode a float32/float64/float16-bits/bfloat16-bits element to float32."""
    return _to_f32(v)


@njit(inline="always")
def store_float(v, like):
    """Encode a float32 value into the element type of ``like`` (see :func:`_from_f32`)."""
    return _from_f32(np.float32(v), like)


@njit(inline="always")
def quantize_value(x, scale, zero_point, scale_op, zero_point_before, qmin, qmax):
    """Quantize one element to a float32 code value in ``[qmin, qmax]``.

    ``v = x / scale`` (``scale_op == SCALE_DIVIDE``) or ``x * scale``
    (``SCALE_MULTIPLY``); NaN becomes 0; then ``clamp(rne(v + zp))`` when
    ``zero_point_before`` else ``clamp(rne(v) + zp)``. ±inf clamp to the bounds.

    The variants are selected arithmetically, not by branches, so a loop over this
    function stays vectorizable: ``(v * 1) / s == v / s`` and ``(v * s) / 1 == v * s``
    exactly, and ``rne(v + (-0.0)) + z`` is ``rne(v) + z``: adding ``-0.0`` is an identity
    the compiler removes when ``zero_point_before`` is a constant False (``+0.0`` is not:
    it turns ``-0.0`` into ``+0.0``; only the sign of a zero code could differ, and codes
    are integers).
    """
    one = np.float32(1.0)
    s = np.float32(scale)
    z = np.float32(zero_point)
    multiply = scale_op == SCALE_MULTIPLY
    v = (load_f32(x) * (s if multiply else one)) / (one if multiply else s)
    v = np.float32(0.0) if v != v else v
    z_before = z if zero_point_before else np.float32(-0.0)
    r = rint_f32(v + z_before) + (z - z_before)
    return min(max(r, np.float32(qmin)), np.float32(qmax))


@njit(inline="always")
def code_bits(code, mask):
    """The storage bits of a float32 code value: its two's complement, masked (an int32).

    Numba widens ``int32 & int32`` to int64; the outer cast keeps the vectorized loop in
    32-bit lanes (and, then one truncating store) instead of widening every code to 64 bits.
    """
    return np.int32(np.int32(code) & np.int32(mask))


@njit(inline="always")
def code_value(bits, nbits, signed):
    """The integer value (as float32) of ``nbits`` storage bits; sign-extends when ``signed``."""
    v = np.int32(bits) & np.int32((1 << nbits) - 1)
    if signed and v >= np.int32(1 << (nbits - 1)):
        v = v - np.int32(1 << nbits)
    return np.float32(v)


@njit(inline="always")
def dequantize_value(code, scale, zero_point):
    """``(code - zero_point) * scale`` in float32."""
    return (np.float32(code) - np.float32(zero_point)) * np.float32(scale)


@njit(inline="always")
def f32_bits(v):
    """The IEEE bits of ``v`` as float32, as a non-negative int64."""
    return _f32_to_bits(np.float32(v))


@njit(inline="always")
def bits_f32(bits):
    """The float32 with IEEE bits ``bits`` (an integer below 2**32)."""
    return _bits_to_f32(np.int64(bits))


@njit(inline="always")
def encode_minifloat(v, ebits, mbits, max_code, overflow_code, nan_code, nan_flips_sign, saturate):
    """Round float32 ``v`` to a sign/exponent/mantissa code, ties to even.

    The format has ``ebits`` exponent bits (bias ``2**(ebits-1) - 1``), ``mbits``
    mantissa bits, subnormals, and largest finite magnitude code ``max_code``.
    A magnitude that rounds above ``max_code`` (inf included) becomes ``max_code``
    when ``saturate``, else ``overflow_code`` (e4m3fn: NaN 0x7f; e5m2: inf 0x7c;
    formats without inf/NaN: ``max_code``). NaN becomes ``nan_code`` with its sign,
    flipped when ``nan_flips_sign`` (ml_dtypes' fp6/fp4 quirk: +NaN → -0).
    Returns the code as int64, sign in bit ``ebits + mbits``.
    """
    bits = f32_bits(v)
    sign = bits >> 31
    a = bits & 0x7FFFFFFF
    bias = (1 << (ebits - 1)) - 1
    emin = 1 - bias
    shift = 23 - mbits
    t = a - ((127 - bias) << 23)
    normal = (t + (1 << (shift - 1)) - 1 + ((t >> shift) & 1)) >> shift
    sub_scale = bits_f32((127 + mbits - emin) << 23)
    sub = np.int64(rint_f32(bits_f32(a) * sub_scale))
    code = sub if a < ((127 + emin) << 23) else normal
    code = code if code <= max_code else (max_code if saturate else overflow_code)
    if a > 0x7F800000:
        code = nan_code
        sign = sign ^ nan_flips_sign
    return (sign << (ebits + mbits)) | code


@njit(inline="always")
def decode_minifloat(code, ebits, mbits, nan_rule):
    """The float32 value of a sign/exponent/mantissa code (exact).

    ``nan_rule``: 0 every code is finite (fp6, fp4); 1 the all-ones magnitude is NaN
    (e4m3fn); 2 IEEE, an all-ones exponent is inf (mantissa 0) or NaN (e5m2).
    """
    c = np.int64(code)
    nbits = ebits + mbits
    sign = (c >> nbits) & 1
    a = c & ((1 << nbits) - 1)
    bias = (1 << (ebits - 1)) - 1
    e = a >> mbits
    m = a & ((1 << mbits) - 1)
    normal = bits_f32(((e - bias + 127) << 23) | (m << (23 - mbits)))
    sub = np.float32(m) * bits_f32((127 + 1 - bias - mbits) << 23)
    v = sub if e == 0 else normal
    all_ones = e == (1 << ebits) - 1
    if nan_rule == 2 and all_ones:
        v = bits_f32(0x7F800000 if m == 0 else 0x7FC00000)
    if nan_rule == 1 and a == (1 << nbits) - 1:
        v = bits_f32(0x7FC00000)
    return -v if sign else v


@njit(inline="always")
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


@njit(inline="always")
def decode_e8m0(code):
    """The float32 value of a float8_e8m0fnu code (0xff is NaN, 0 is ``2**-127``)."""
    c = np.int64(code)
    if c == 0xFF:
        return bits_f32(0x7FC00000)
    return bits_f32(c << 23) if c > 0 else bits_f32(0x00400000)


@njit(inline="always")
def quantize_float_value(x, scale, scale_op, fp, saturate):
    """``encode_minifloat(x / scale)`` (or ``x * scale``) for the format tuple ``fp``.

    ``fp = (ebits, mbits, max_code, overflow_code, nan_code, nan_flips_sign, nan_rule)``.
    """
    one = np.float32(1.0)
    s = np.float32(scale)
    multiply = scale_op == SCALE_MULTIPLY
    v = (load_f32(x) * (s if multiply else one)) / (one if multiply else s)
    return encode_minifloat(v, fp[0], fp[1], fp[2], fp[3], fp[4], fp[5], saturate)


@njit(inline="always")
def abs_bits(v):
    """``|v|`` as float32 bits (an int32): orders finite values, inf (0x7f800000) and NaN (above) as integers."""
    return np.int32(f32_bits(load_f32(v)) & 0x7FFFFFFF)


@njit(inline="always")
def mx_scale_code(amax_bits, emax, max_mantissa, round_up):
    """The E8M0 shared-scale code of an MX block from the bits of its ``amax``.

    OCP MX v1.0: ``2**(floor(log2(amax)) - emax)`` (``round_up=False``); with
    ``round_up`` the smallest power of two that keeps ``amax / scale`` within the
    element format's largest value (mantissa ``max_mantissa``), so nothing clips.
    NaN or inf in the block gives the NaN code 0xff; codes clamp to [0, 254].
    """
    e = amax_bits >> 23
    code = e - emax
    if round_up and (amax_bits & 0x7FFFFF) > max_mantissa:
        code += 1
    code = min(max(code, np.int64(0)), np.int64(254))
    return np.int64(0xFF) if e == 0xFF else code


@njit(inline="always")
def mx_inverse_scale(code):
    """``1 / scale`` for an E8M0 code (exact: ``2**(127 - code)``); 1.0 for the NaN code."""
    c = np.int64(code)
    return np.float32(1.0) if c == 0xFF else decode_e8m0(254 - c)


# --- dynamic quantization and amax-based (modelopt) quantizers (nbquant.dynamic, nbquant.modelopt_ops) ----------

#: modelopt's "amax is zero" threshold, ``2**-24``.
AMAX_TINY = np.float32(2.0 ** -24)


@njit(inline="always")
def order_key(v):
    """An int32 key whose integer order is the float order of ``v`` (-0.0 below +0.0; NaN beyond ±inf).

    Integer min/max reductions over these keys vectorize where float ones do not
    (keep the accumulator int32 too: 8 lanes per AVX2 vector instead of 4). The keys
    span the whole int32 range: -2**31 is the largest negative NaN, 2**31 - 1 the largest NaN.
    """
    b = np.int32(f32_bits(load_f32(v)))  # the bits, wrapped to a signed int32
    return np.int32((b & 0x7FFFFFFF) ^ (b >> 31))


@njit(inline="always")
def key_f32(key):
    """The float32 of an :func:`order_key` (exact inverse)."""
    k = np.int64(key)
    return bits_f32(k if k >= 0 else ((-k - 1) | 0x80000000))


@njit(inline="always")
def affine_qparams(mn, mx, mapping, qmin, qmax, half_range, eps, zp_sym):
    """torchao ``choose_qparams_affine`` for one block from its ``min`` and ``max`` (float32).

    ``mapping``: 0 symmetric ``s = max(-min_neg, max_pos) / half_range``; 1 asymmetric
    ``s = (max_pos - min_neg) / (qmax - qmin)``, ``zp = clamp(qmin - rne(min_neg / s))``;
    2 symmetric_no_clipping_err ``s = max(min_neg / qmin, max_pos / qmax)``; then
    ``s = max(s, eps)``. ``min_neg = min(mn, 0)``, ``max_pos = max(mx, 0)``. A NaN
    min or max gives a NaN scale (torch propagates NaN) and zero point ``qmin``
    (asymmetric) or ``zp_sym``. Returns ``(scale, zero_point)`` as float32.
    """
    zero = np.float32(0.0)
    lo = np.float32(qmin)
    hi = np.float32(qmax)
    a = np.float32(mn)
    b = np.float32(mx)
    nan = a != a or b != b
    min_neg = zero if a >= zero else a
    max_pos = zero if b <= zero else b
    if mapping == 0:
        s = max(-min_neg, max_pos) / np.float32(half_range)
    elif mapping == 2:
        smin = min_neg / lo
        smax = max_pos / hi
        s = smin if smin > smax else smax
    else:
        s = (max_pos - min_neg) / (hi - lo)
    s = max(s, np.float32(eps))
    z = np.float32(zp_sym)
    if mapping == 1:
        r = rint_f32(min_neg / s)
        r = zero if r != r else r
        z = min(max(lo - r, lo), hi)
    if nan:
        s = bits_f32(0x7FC00000)
        z = lo if mapping == 1 else z
    return s, z


@njit(inline="always")
def amax_scales(amax, maxbound):
    """modelopt's integer-path scales from ``amax``: ``(S_quant, S_dequant)``.

    ``S = maxbound / amax``; where ``amax <= 2**-24`` the quantizing multiplier is 0
    and the dequantizing divisor 1 (so finite values quantize to 0), as in
    ``tensor_quant._tensor_quant``. NaN amax gives NaN scales.
    """
    a = np.float32(amax)
    s = np.float32(maxbound) / a
    tiny = a <= AMAX_TINY
    return (np.float32(0.0) if tiny else s), (np.float32(1.0) if tiny else s)


@njit(inline="always")
def amax_code(x, s, qmin, qmax):
    """``clamp(rne(x * s), qmin, qmax)`` in float32; NaN propagates (torch.clamp keeps NaN)."""
    v = rint_f32(load_f32(x) * np.float32(s))
    c = min(max(v, np.float32(qmin)), np.float32(qmax))
    return v if v != v else c


@njit(inline="always")
def e4m3_scales(amax, maxval):
    """modelopt ``scaled_e4m3`` scales ``S = fl(fl(1 / amax) * maxval)`` and ``fl(1 / S)``.

    ``amax <= 2**-24`` is read as 1; NaN amax gives NaN scales.
    """
    a = np.float32(amax)
    a = np.float32(1.0) if a <= AMAX_TINY else a
    s = (np.float32(1.0) / a) * np.float32(maxval)
    return s, np.float32(1.0) / s


@njit(inline="always")
def scaled_minifloat_fake(x, s, inv_s, maxval, fp):
    """``decode(encode(clamp(x * s, -maxval, maxval))) * inv_s`` (NaN stays NaN): modelopt's fp8 fake quant."""
    m = np.float32(maxval)
    v = load_f32(x) * np.float32(s)
    c = min(max(v, -m), m)
    c = v if v != v else c
    code = encode_minifloat(c, fp[0], fp[1], fp[2], fp[3], fp[4], fp[5], True)
    return decode_minifloat(code, fp[0], fp[1], fp[6]) * np.float32(inv_s)


# --- NF4 (modelopt NF4QTensor) -------------------------------------------------------------------

#: modelopt's NF4 table, as stored there: the 4-decimal values rounded to bfloat16.
NF4_VALUES = (
    np.float32(-1.0), np.float32(-0.6953125), np.float32(-0.5234375), np.float32(-0.39453125),
    np.float32(-0.28515625), np.float32(-0.1845703125), np.float32(-0.09130859375), np.float32(0.0),
    np.float32(0.07958984375), np.float32(0.1611328125), np.float32(0.24609375), np.float32(0.337890625),
    np.float32(0.44140625), np.float32(0.5625), np.float32(0.72265625), np.float32(1.0),
)


@njit(inline="always")
def nf4_code(v):
    """Index of the NF4 table entry nearest to float32 ``v`` (the first on a tie; 0 for NaN), as argmin does."""
    x = np.float32(v)
    best = np.int64(0)
    best_d = abs(x - NF4_VALUES[0])
    for i in range(1, 16):
        d = abs(x - NF4_VALUES[i])
        if d < best_d:
            best = np.int64(i)
            best_d = d
    return best
