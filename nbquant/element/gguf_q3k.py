"""GGUF's Q3_K super-block (256 values, 110 bytes): ggml's ``quantize_row_q3_K_ref`` and ``quantize_row_q3_K_impl``.

Sixteen 16-value sub-blocks get 3-bit codes and a 6-bit signed scale each, relative to
one float16 ``d``. Without an importance matrix each sub-block runs ``make_q3_quants``
(an iterative refinement of its codes; the codes go to the scratch array, where the
sub-block's quantized scale ends up 0 they are the ones stored) and ``d`` is
``max_scale / -32``; with one, each sub-block runs the weighted ``make_qx_quants``
and the sixteen scales another ``make_qx_quants`` weighted by the sub-blocks' summed
weights. Record: ``hmask[32]`` (bit ``i // 32`` of byte ``i % 32``: the code's high bit),
``qs[64]`` (2 low bits, four codes a byte), ``scales[12]`` (6-bit scales, low nibbles in
bytes 0-7, high pairs in 8-11), ``d``.
"""

from __future__ import annotations

import numpy as np

from .bits import canonical_f32, element_function, load_f32, pick
from .gguf_common import get_u16, ggml_f16, largest_magnitude, mul_f32, nearest_int, put_u16, sum_squares
from .gguf_search import W_DIRECT, W_SIGMA, nearest_clamped, qx_code, qx_level, qx_search, search_weight

__all__ = ["Q3_K", "Q3K_SCRATCH", "q3_level", "q3_add", "q3_refine", "q3k_quantize_block", "q3k_sigma2", "q3k_record",
           "q3k_dequantize_block"]

#: ggml type id.
Q3_K = 11
#: Scratch floats: scales [0:16], summed weights [16:32], code iscales [32:48], codes [48:304], stored scales
#: [304:320].
Q3K_SCRATCH = 320
_EPS = np.float32(1e-15)


@element_function
def _clamp(v, lo, hi):
    return max(np.int64(lo), min(np.int64(hi), v))


@element_function
def q3_level(v, iscale):
    """``make_q3_quants``' first code of ``v`` (float32): ``clamp(nearest_int(iscale * v), -4, 3)``."""
    return nearest_clamped(mul_f32(iscale, np.float32(v)), -4, 3)


@element_function
def q3_add(sumlx, suml2, v, fl):
    """``make_q3_quants``' sums with the value ``v`` at code ``fl`` added (weight ``v * v``)."""
    v = np.float32(v)
    w = mul_f32(v, v)
    return np.float32(sumlx) + mul_f32(mul_f32(w, v), fl), np.float32(suml2) + mul_f32(mul_f32(w, fl), fl)


@element_function
def q3_refine(v, fl, sumlx, suml2):
    """One value's step of ``make_q3_quants``' refinement: ``(code, sumlx, suml2, changed)``.

    The value's code moves to ``nearest_int(v * sl2 / slx)`` (clamped) where that raises
    ``sumlx**2 / suml2``; written as selects, so that a loop over many searches vectorizes.
    """
    v = np.float32(v)
    fl = np.float32(fl)
    w = mul_f32(v, v)
    slx = np.float32(sumlx) - mul_f32(mul_f32(w, v), fl)
    sl2 = np.float32(suml2) - mul_f32(mul_f32(w, fl), fl)
    new = nearest_clamped(mul_f32(v, sl2) / slx, -4, 3)
    slx_new = slx + mul_f32(mul_f32(w, v), new)
    sl2_new = sl2 + mul_f32(mul_f32(w, new), new)
    take = (slx > 0) & (new != fl) & (sl2_new > 0) & (
        mul_f32(mul_f32(slx_new, slx_new), suml2) > mul_f32(mul_f32(sumlx, sumlx), sl2_new))
    return pick(take, new, fl), pick(take, slx_new, np.float32(sumlx)), pick(take, sl2_new, np.float32(suml2)), take


@element_function
def _q3_quants(x, c, fs, co):
    """``make_q3_quants(16, 4, x[c:], L, true)``: the scale; the codes (0..7, as floats) into ``fs[co:co + 16]``."""
    amax, mx = largest_magnitude(x, c, 16)
    if amax < _EPS:
        for i in range(16):
            fs[co + i] = np.float32(0.0)
        return np.float32(0.0)
    iscale = np.float32(-4.0) / mx
    sumlx = np.float32(0.0)
    suml2 = np.float32(0.0)
    for i in range(16):
        fl = q3_level(x[c + i], iscale)
        fs[co + i] = fl
        sumlx, suml2 = q3_add(sumlx, suml2, x[c + i], fl)
    for _ in range(5):
        changed = 0
        for i in range(16):
            fl, sumlx, suml2, take = q3_refine(x[c + i], fs[co + i], sumlx, suml2)
            fs[co + i] = fl
            if take:
                changed += 1
        if changed == 0:
            break
    for i in range(16):
        fs[co + i] = fs[co + i] + np.float32(4.0)
    return sumlx / suml2 if suml2 > 0 else np.float32(0.0)


@element_function
def _put_scale(rec, so, j, lv):
    """Store sub-block ``j``'s 6-bit scale code ``lv`` (0..63) in the 12 scale bytes at ``rec[so:]``."""
    if j < 8:
        rec[so + j] = np.uint8(lv & 0xF)
    else:
        rec[so + j - 8] = np.uint8(np.int64(rec[so + j - 8]) | ((lv & 0xF) << 4))
    k = so + 8 + (j & 3)
    rec[k] = np.uint8(np.int64(rec[k]) | (((lv >> 4) & 3) << (2 * (j // 4))))


@element_function
def _get_scale(rec, so, j):
    """Sub-block ``j``'s signed scale (-32..31) from the 12 scale bytes at ``rec[so:]``."""
    low = (np.int64(rec[so + j]) & 0xF) if j < 8 else (np.int64(rec[so + j - 8]) >> 4)
    return (low | (((np.int64(rec[so + 8 + (j & 3)]) >> (2 * (j // 4))) & 3) << 4)) - 32


@element_function
def q3k_quantize_block(x, c, rec, o, qw, use_qw, fs):
    """Q3_K: the 256 floats ``x[c:c + 256]`` into the 110-byte record at ``rec[o:]`` (``qw`` read at ``c + i``)."""
    if use_qw:
        sigma2 = q3k_sigma2(x, c)
        for j in range(16):
            sw = np.float32(0.0)
            for i in range(16):
                sw = sw + search_weight(x, qw, c + 16 * j, i, sigma2, W_SIGMA)
            fs[16 + j] = sw
            scale, iscale = qx_search(x, qw, c + 16 * j, 16, sigma2, W_SIGMA, np.int64(4))
            fs[j] = scale
            fs[32 + j] = iscale
    else:
        for j in range(16):
            fs[j] = _q3_quants(x, c + 16 * j, fs, 48 + 16 * j)
    q3k_record(x, c, rec, o, use_qw, fs)


@element_function
def q3k_sigma2(x, c):
    """``quantize_row_q3_K_impl``'s ``sigma2`` of the super-block at ``x[c:]``: ``2 * sum(x**2) / 256``."""
    return mul_f32(np.float32(2.0), sum_squares(x, c, 256)) / np.float32(256.0)


@element_function
def q3k_record(x, c, rec, o, use_qw, fs):
    """The Q3_K record of ``x[c:c + 256]`` at ``rec[o:]`` from its sub-block searches: scales ``fs[0:16]``; with an
    importance matrix summed weights ``fs[16:32]`` and code iscales ``fs[32:48]``, without one codes ``fs[48:304]``."""
    so = o + 96
    for k in range(12):
        rec[so + k] = np.uint8(0)
    if use_qw:
        d_block, biscale = qx_search(fs, fs[16:32], 0, 16, np.float32(0.0), W_DIRECT, np.int64(32))
        for j in range(16):
            _put_scale(rec, so, j, qx_code(fs, 0, j, np.int64(32), biscale))
        put_u16(rec, o + 108, ggml_f16(d_block))
    else:
        max_scale = largest_magnitude(fs, 0, 16)[1]
        if max_scale != 0:
            iscale = np.float32(-32.0) / max_scale
            for j in range(16):
                lv = nearest_int(mul_f32(iscale, np.float32(fs[j])))
                lv = ((lv + 128) & 255) - 128  # C stores it in an int8_t first
                _put_scale(rec, so, j, _clamp(lv, -32, 31) + 32)
            put_u16(rec, o + 108, ggml_f16(np.float32(1.0) / iscale))
        else:
            put_u16(rec, o + 108, ggml_f16(np.float32(0.0)))
    dq = load_f32(np.uint16(get_u16(rec, o + 108)))
    for j in range(16):  # the stored scales, then each value's code from its sub-block's (fs[304:320])
        fs[304 + j] = mul_f32(dq, np.float32(_get_scale(rec, so, j)))
    for h in range(2):
        for half in range(2):  # value i = 128 * h + 32 * t + 16 * half + kk is in sub-block 8 * h + 2 * t + half
            j = 8 * h + half
            for kk in range(16):
                k = 16 * half + kk
                i = 128 * h + k
                q0 = _q3k_level(x[c + i], use_qw, fs, j, i)
                q1 = _q3k_level(x[c + i + 32], use_qw, fs, j + 2, i + 32)
                q2 = _q3k_level(x[c + i + 64], use_qw, fs, j + 4, i + 64)
                q3 = _q3k_level(x[c + i + 96], use_qw, fs, j + 6, i + 96)
                _q3k_pack(rec, o, h, k, q0, q1, q2, q3)


@element_function
def _q3k_level(v, use_qw, fs, j, i):
    """The code (0..7, float32) of value ``i`` (``v``) of sub-block ``j`` under its stored scale ``fs[304 + j]`` (where
    that is 0: the search's code, ``fs[48 + i]`` or :func:`~nbquant.element.gguf_search.qx_level` of ``fs[32 + j]``)."""
    d = np.float32(fs[304 + j])
    stored = nearest_clamped(np.float32(v) / d, -4, 3) + np.float32(4.0)
    searched = qx_level(v, np.int64(4), fs[32 + j]) if use_qw else np.float32(fs[48 + i])
    return searched if d == 0 else stored


@element_function
def _q3k_pack(rec, o, h, k, q0, q1, q2, q3):
    """Store the codes (0..7, float32) of values ``128 * h + 32 * t + k`` (``qt``): their two low bits in ``qs``, their
    high bits in ``hmask`` (byte ``k``, bit ``4 * h + t``); sums of exact small floats, so that a loop vectorizes."""
    four = np.float32(4.0)
    h0 = np.float32(1.0) if q0 >= four else np.float32(0.0)
    h1 = np.float32(1.0) if q1 >= four else np.float32(0.0)
    h2 = np.float32(1.0) if q2 >= four else np.float32(0.0)
    h3 = np.float32(1.0) if q3 >= four else np.float32(0.0)
    # every product on its own (mul_f32): exact here, but NVVM would contract them, and the PTX check allows no FMA
    low = ((q0 - mul_f32(four, h0)) + mul_f32(np.float32(4.0), q1 - mul_f32(four, h1))) + (
        mul_f32(np.float32(16.0), q2 - mul_f32(four, h2)) + mul_f32(np.float32(64.0), q3 - mul_f32(four, h3)))
    high = (h0 + mul_f32(np.float32(2.0), h1)) + (mul_f32(np.float32(4.0), h2) + mul_f32(np.float32(8.0), h3))
    rec[o + 32 + 32 * h + k] = np.uint8(np.int32(low))
    if h == 0:
        rec[o + k] = np.uint8(np.int32(high))
    else:
        rec[o + k] = np.uint8(np.int32(rec[o + k]) | (np.int32(high) << 4))


@element_function
def q3k_dequantize_block(rec, o, out, c):
    """Decode the Q3_K record at ``rec[o:]`` into ``out[c:c + 256]`` (gguf-py's float32 arithmetic)."""
    d = load_f32(np.uint16(get_u16(rec, o + 108)))
    for j in range(16):  # sub-block j: elements 16 * j + k, k < 16
        dl = d * np.float32(_get_scale(rec, o + 96, j))
        lo = o + 32 + 32 * (j // 8) + 16 * (j & 1)
        ho = o + 16 * (j & 1)
        shift = 2 * ((j // 2) & 3)
        bit = j // 2
        for k in range(16):
            low = (np.int64(rec[lo + k]) >> shift) & 3
            high = (np.int64(rec[ho + k]) >> bit) & 1
            out[c + 16 * j + k] = canonical_f32(dl * np.float32(low - 4 * (1 - high)))
