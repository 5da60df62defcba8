"""Integer (affine) quantization of one element, and the qparams of one block.

``quantize_value`` / ``dequantize_value`` are the static formula; ``affine_qparams``
(torchao ``choose_qparams_affine``) and ``amax_scales`` (modelopt) choose the
parameters of a block from its reduced keys (``block_qparams``); the modelopt fake
quantizers, the straight-through gradient and the calibrator's histogram bin are the
remaining per-element rules.
"""

from __future__ import annotations

import numpy as np

from ..modes import Mapping
from .bits import (
    _from_f32,
    _to_f32,
    bits_f32,
    canonical_f32,
    element_function,
    key_f32,
    load_f32,
    max_f32,
    min_f32,
    rint_f32,
)

__all__ = [
    "AMAX_TINY",
    "in_precision",
    "scaled",
    "quantize_value",
    "dequantize_value",
    "code_bits",
    "code_value",
    "affine_qparams",
    "amax_scales",
    "block_qparams",
    "amax_code",
    "affine_fake_value",
    "ste_value",
    "histogram_bin",
]

#: modelopt's "amax is zero" threshold, ``2**-24``.
AMAX_TINY = np.float32(2.0 ** -24)
#: The largest finite float32.
F32_MAX = np.float32(np.finfo(np.float32).max)


@element_function
def in_precision(v, scale_op):
    """``v`` rounded (RNE) to the compute precision of ``scale_op`` (:class:`~nbquant.modes.ScaleOp`), as float32.

    float32 ops return ``v``; ``_F16`` ops round to float16 and ``_BF16`` ops to bfloat16
    (NaN becomes the canonical NaN). A float32 result of one operation on two float16 (or
    bfloat16) values, rounded so, is the correctly rounded float16 (bfloat16) result:
    float32 carries more than ``2p + 2`` bits for both.
    """
    precision = scale_op >> 1
    # load_f32(store_float(v, like)) spelled with the intrinsics those wrap: one quantize_value inlines this
    # four times, and each inlined call of an element function re-runs Numba's front end on it and deep-copies
    # its IR. The wrappers were 17 of quantize_value's 24 inlined calls; without them the int8 quantize kernel
    # compiles in 13.7 s of cpu instead of 21.8 s (benchmarks/compile_cost.py, a loaded 2-core machine).
    if precision == 1:
        return _to_f32(_from_f32(np.float32(v), np.uint16(0)))
    if precision == 2:
        return _to_f32(_from_f32(np.float32(v), np.int16(0)))
    return np.float32(v)


@element_function
def scaled(x, scale, scale_op):
    """``x / scale`` or ``x * scale`` (:class:`~nbquant.modes.ScaleOp`), in float32 or rounded to float16/bfloat16.

    The multiply or divide is selected arithmetically, not by a branch, so a loop over it
    vectorizes: ``(v * 1) / s == v / s`` and ``(v * s) / 1 == v * s`` exactly. In a half
    precision ``x`` is rounded to it first, and the result after (``scale`` already is).
    """
    one = np.float32(1.0)
    s = np.float32(scale)
    multiply = (scale_op & 1) == 1
    v = in_precision(_to_f32(x), scale_op)  # load_f32, one inlined call fewer (see in_precision)
    return in_precision((v * (s if multiply else one)) / (one if multiply else s), scale_op)


@element_function
def quantize_value(x, scale, zero_point, scale_op, zero_point_before, qmin, qmax):
    """Quantize one element to a float32 code value in ``[qmin, qmax]``.

    ``v = x / scale`` or ``x * scale`` (:func:`scaled`); NaN becomes 0; then
    ``clamp(rne(v + zp))`` when ``zero_point_before`` else ``clamp(rne(v) + zp)``.
    ±inf clamp to the bounds. In a half precision the sum is rounded to it too
    (:func:`in_precision`; the other rounding is then exact).

    Written as ``rne(v + zb) - (zb - z)`` with ``zb = z`` before and ``-0.0`` after:
    ``rne(v) - (-0.0 - z)`` is ``rne(v) + z``, and with no zero point (``z = -0.0``, the
    additive identity, as a constant) both operations are identities the compiler removes:
    ``v + (-0.0)`` and ``r - (+0.0)``. Only the sign of a zero code differs from other
    spellings, and codes are integers.
    """
    z = np.float32(zero_point)
    v = scaled(x, scale, scale_op)
    v = np.float32(0.0) if v != v else v
    z_before = z if zero_point_before else np.float32(-0.0)
    r = in_precision(rint_f32(in_precision(v + z_before, scale_op)) - (z_before - z), scale_op)
    return min_f32(max_f32(r, np.float32(qmin)), np.float32(qmax))


@element_function
def code_bits(code, mask):
    """The storage bits of a float32 code value: its two's complement, masked (a uint32).

    Numba widens ``int32 & int32`` to int64; the outer cast keeps the vectorized loop in
    32-bit lanes (and, then one truncating store) instead of widening every code to 64 bits.
    Unsigned, so the all-ones mask of int32 stores into uint32 storage as it is (the
    CUDA simulator checks the range of every store).
    """
    return np.uint32(np.int32(code) & np.int32(mask))


@element_function
def code_value(bits, nbits, signed):
    """The integer value (as float32) of ``nbits`` storage bits; sign-extends when ``signed``.

    For ``nbits == 32`` (int32) the mask is all ones and the bits already are the signed
    value; the float32 conversion rounds it (RNE). Narrower codes are exact in float32, so
    the sign step subtracts ``2**nbits`` in float32. Every integer step is cast back to int32
    (Numba widens ``int32 & int32`` to int64), so a loop over it vectorizes in 32-bit lanes:
    16 codes per AVX-512 vector instead of 8.
    """
    v = np.float32(np.int32(np.int32(bits) & np.int32((1 << nbits) - 1)))
    if signed and nbits < 32 and v >= np.float32(1 << (nbits - 1)):
        v = v - np.float32(1 << nbits)
    return v


@element_function
def dequantize_value(code, scale, zero_point):
    """``(code - zero_point) * scale`` in float32."""
    return (np.float32(code) - np.float32(zero_point)) * np.float32(scale)


@element_function
def affine_qparams(mn, mx, mapping, qmin, qmax, half_range, eps, zp_sym):
    """torchao ``choose_qparams_affine`` for one block from its ``min`` and ``max`` (float32).

    ``Mapping.SYMMETRIC`` ``s = max(-min_neg, max_pos) / half_range``; ``ASYMMETRIC``
    ``s = (max_pos - min_neg) / (qmax - qmin)``, ``zp = clamp(qmin - rne(min_neg / s))``;
    ``SYMMETRIC_NO_CLIPPING_ERR`` ``s = max(min_neg / qmin, max_pos / qmax)``; then
    ``s = max(s, eps)``. ``min_neg = min(mn, 0)``, ``max_pos = max(mx, 0)``. A NaN
    min or max gives a NaN scale (torch propagates NaN) and zero point ``qmin``
    (asymmetric) or ``zp_sym``. A finite range wider than FLT_MAX (``max_pos - min_neg``
    overflows, where torch's scale is inf and every code the zero point) takes
    ``max_pos / (qmax - qmin) - min_neg / (qmax - qmin)``, a finite scale that spans the
    data. Returns ``(scale, zero_point)`` as float32.
    """
    zero = np.float32(0.0)
    lo = np.float32(qmin)
    hi = np.float32(qmax)
    a = np.float32(mn)
    b = np.float32(mx)
    nan = a != a or b != b
    min_neg = zero if a >= zero else a
    max_pos = zero if b <= zero else b
    if mapping == Mapping.SYMMETRIC:
        s = max_f32(-min_neg, max_pos) / np.float32(half_range)
    elif mapping == Mapping.SYMMETRIC_NO_CLIPPING_ERR:
        smin = min_neg / lo
        smax = max_pos / hi
        s = smin if smin > smax else smax
    else:
        s = (max_pos - min_neg) / (hi - lo)
        if s == np.float32(np.inf):  # a finite range wider than FLT_MAX: divide each end first
            s = max_pos / (hi - lo) - min_neg / (hi - lo)
    s = max_f32(s, np.float32(eps))
    z = np.float32(zp_sym)
    if mapping == Mapping.ASYMMETRIC:
        r = rint_f32(min_neg / s)
        r = zero if r != r else r
        z = min_f32(max_f32(lo - r, lo), hi)
    if nan:
        s = bits_f32(0x7FC00000)
        z = lo if mapping == Mapping.ASYMMETRIC else z
    return s, z


@element_function
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


@element_function
def block_qparams(lo, hi, use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound):
    """``(scale, zero_point)`` of a block from its reduced keys.

    ``lo``/``hi`` are the block's min/max :func:`~nbquant.element.order_key` keys when
    ``use_minmax``, else ``hi`` holds its absmax bits (``min = -max``).
    """
    if use_minmax:
        mn = key_f32(lo)
        mx = key_f32(hi)
    else:
        mx = bits_f32(hi)
        mn = -mx
    if mapping == Mapping.MODELOPT:  # an output: its NaN canonical (a GPU's division writes its own)
        return canonical_f32(amax_scales(mx, maxbound)[1]), np.float32(0.0)
    return affine_qparams(mn, mx, mapping, qmin, qmax, half_range, eps, zp_sym)


@element_function
def amax_code(x, s, qmin, qmax):
    """``clamp(rne(x * s), qmin, qmax)`` in float32; NaN stays NaN (torch.clamp keeps it), the canonical one.

    The code is an output (``tensor_quant``), so its NaN is canonical: which NaN the multiply gives
    depends on the hardware (x86 keeps an operand's, a GPU writes 0x7fffffff).
    """
    v = rint_f32(load_f32(x) * np.float32(s))
    c = min_f32(max_f32(v, np.float32(qmin)), np.float32(qmax))
    return canonical_f32(v) if v != v else c


@element_function
def affine_fake_value(x, step, qz, lo, hi):
    """modelopt's legacy FakeAffine of one value: ``(clamp(rne(x / step) - qz, lo, hi) + qz) * step``.

    NaN propagates.
    """
    v = rint_f32(load_f32(x) / np.float32(step)) - qz
    q = min_f32(max_f32(v, lo), hi)
    q = v if v != v else q
    return (q + qz) * step


@element_function
def ste_value(g, x, lo, hi):
    """The straight-through gradient of one value: ``g`` where ``lo <= x <= hi`` (NaN x gives 0), else 0."""
    v = load_f32(x)
    return load_f32(g) if (v >= lo and v <= hi) else np.float32(0.0)


@element_function
def histogram_bin(x, fn, top, nbins):
    """The bin of ``|x|`` over ``[0, top]`` in ``nbins`` bins (torch.histc's rule), or -1 (NaN, above ``top``).

    ``int(|x| * nbins / top)`` in float32, the right edge in the last bin; where ``|x| * nbins``
    overflows (``|x| > FLT_MAX / nbins``, so only for a ``top`` that large) ``int(|x| * (nbins / top))``
    instead (a loop-invariant quotient: no second division per element). The quotient is
    selected before the int32 conversion, so NaN and values above ``top`` never reach it, and
    a loop of this function vectorizes (AVX2 has no packed float → int64 conversion).
    """
    v = abs(load_f32(x))
    p = v * fn
    q = (p / top if p <= F32_MAX else v * (fn / top)) if v <= top else np.float32(-1.0)
    return min(np.int32(q), np.int32(nbins - 1))
