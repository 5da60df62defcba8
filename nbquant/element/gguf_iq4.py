"""GGUF's non-linear 4-bit formats IQ4_NL (32 values) and IQ4_XS (256): ggml's ``quantize_row_iq4_nl_impl``.

Codes index ggml's table :data:`KVALUES` (``kvalues_iq4nl``); a block's scale comes from a
weighted search over 15 candidate steps (``ntry`` 7, what ``ggml_quantize_chunk`` runs with
or without an importance matrix). Weights are ``x**2``, or ``qw * sqrt(sigma2 + x**2)``
with ``sigma2 = 2 * sum(x**2) / size`` over the block (IQ4_NL) or super-block (IQ4_XS).
IQ4_XS then stores each 32-value sub-block's scale as a 6-bit multiple of
``d = -max_scale / 32``. The searches return only the scale; codes are recomputed as
``best_index(x / step)`` with ggml's float32 operations. Records (little-endian; ``qs``
holds element ``j`` of each 32 in the low nibble and ``j + 16`` in the high):

======  ====  =================================================================
IQ4_NL  18    d (float16), qs[16]
IQ4_XS  136   d (float16), scales_h (uint16, 2 high bits a sub-block),
              scales_l[4] (4 low bits a sub-block), qs[128]
======  ====  =================================================================
"""

from __future__ import annotations

import numpy as np

from .bits import canonical_f32, element_function, load_f32
from .gguf_common import get_u16, ggml_f16, largest_magnitude, mul_f32, nearest_int, put_u16, sum_squares
from .gguf_search import W_SIGMA, W_SQUARE, search_weight

__all__ = ["IQ4_NL", "IQ4_XS", "KVALUES", "iq4_nearest", "best_index", "iq4_accumulate", "iq4_try_inv", "iq4_better",
           "iq4_sigma2", "iq4_search", "iq4_nl_block", "iq4_nl_record", "iq4_xs_block", "iq4_xs_record",
           "iq4_nl_dequantize_block", "iq4_xs_dequantize_block"]

#: ggml type ids.
IQ4_NL, IQ4_XS = 20, 23
#: ggml's ``kvalues_iq4nl`` as float32 (exact); a global array, a constant to Numba.
KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)
KVALUES.flags.writeable = False
_EPS = np.float32(1e-15)


@element_function
def iq4_nearest(v):
    """ggml's ``best_index_int8(16, kvalues_iq4nl, v)`` and its table value: ``(index, KVALUES[index])``.

    The nearest table entry (a tie goes up; NaN 15), found without branches: the bracketing
    pair is the last entry not above ``v`` (what the binary search finds) and the next one,
    so that a loop over many values compiles to vector selects.
    """
    v = np.float32(v)
    lo = np.int64(0)
    a = KVALUES[0]
    b = KVALUES[1]
    for k in range(1, 15):
        up = not v < KVALUES[k]
        lo = np.int64(k) if up else lo
        a = KVALUES[k] if up else a
        b = KVALUES[k + 1] if up else b
    below = v - a < b - v
    index = lo if below else lo + 1
    q = a if below else b
    first = v <= KVALUES[0]
    last = v >= KVALUES[15]
    index = np.int64(0) if first else np.int64(15) if last else index
    q = KVALUES[0] if first else KVALUES[15] if last else q
    return index, q


@element_function
def best_index(v):
    """ggml's ``best_index_int8(16, kvalues_iq4nl, v)``: the nearest table entry's index (a tie goes up; NaN 15)."""
    return iq4_nearest(v)[0]


@element_function
def iq4_accumulate(sumqx, sumq2, w, v, inv):
    """A value's terms of a step's sums: ``(sumqx + w * q * v, sumq2 + w * q * q)``, ``q`` the level of ``inv * v``."""
    v = np.float32(v)
    q = iq4_nearest(mul_f32(inv, v))[1]
    wq = mul_f32(w, q)
    return np.float32(sumqx) + mul_f32(wq, v), np.float32(sumq2) + mul_f32(wq, q)


@element_function
def iq4_try_inv(itry, mx):
    """The inverse scale that try ``itry`` (-7..7) of the search uses: ``(itry - 127) / mx``."""
    return np.float32(itry - 127) / np.float32(mx)


@element_function
def iq4_better(sumqx, sumq2, best):
    """Whether a try's sums beat the best so far: ``sumq2 > 0 and sumqx**2 > best * sumq2``."""
    return (sumq2 > 0) & (mul_f32(sumqx, sumqx) > mul_f32(best, sumq2))  # no short circuit: no branch


@element_function
def iq4_sigma2(x, c, n):
    """``sigma2`` of ``quantize_row_iq4_nl_impl``: ``sum(x[c:c + n]**2)`` in order, times ``2 / n``."""
    return mul_f32(sum_squares(x, c, n), np.float32(2.0) / np.float32(n))


@element_function
def _sums(x, qw, c, aux, wmode, inv):
    sumqx = np.float32(0.0)
    sumq2 = np.float32(0.0)
    for j in range(32):
        sumqx, sumq2 = iq4_accumulate(sumqx, sumq2, search_weight(x, qw, c, j, aux, wmode), x[c + j], inv)
    return sumqx, sumq2


@element_function
def iq4_search(x, qw, c, use_qw, sigma2):
    """The scale ggml's search picks for the 32 values ``x[c:c + 32]`` (0 for an all-but-zero block)."""
    wmode = W_SIGMA if use_qw else W_SQUARE
    amax, mx = largest_magnitude(x, c, 32)
    if amax < _EPS:
        return np.float32(0.0)
    d = -mx / KVALUES[0]
    sumqx, sumq2 = _sums(x, qw, c, sigma2, wmode, np.float32(1.0) / d)
    d = sumqx / sumq2 if sumq2 > 0 else np.float32(0.0)
    best = mul_f32(d, sumqx)
    for itry in range(-7, 8):
        sumqx, sumq2 = _sums(x, qw, c, sigma2, wmode, iq4_try_inv(itry, mx))
        if iq4_better(sumqx, sumq2, best):
            d = sumqx / sumq2
            best = mul_f32(d, sumqx)
    return d


@element_function
def _pack(x, c, rec, o, inv):
    """``qs`` of the 32 values ``x[c:c + 32]`` at ``rec[o:o + 16]``, codes ``best_index(inv * x)``."""
    for j in range(16):
        a = best_index(mul_f32(inv, np.float32(x[c + j])))
        b = best_index(mul_f32(inv, np.float32(x[c + 16 + j])))
        rec[o + j] = np.uint8(a | (b << 4))


@element_function
def iq4_nl_block(x, c, rec, o, qw, use_qw):
    """IQ4_NL: the 32 floats ``x[c:c + 32]`` into the 18-byte record at ``rec[o:]`` (``qw`` read at ``c + j``)."""
    sigma2 = iq4_sigma2(x, c, 32) if use_qw else np.float32(0.0)
    iq4_nl_record(x, c, rec, o, iq4_search(x, qw, c, use_qw, sigma2))


@element_function
def iq4_nl_record(x, c, rec, o, d):
    """The IQ4_NL record of ``x[c:c + 32]`` at ``rec[o:]`` under its searched scale ``d``."""
    put_u16(rec, o, ggml_f16(d))
    _pack(x, c, rec, o + 2, np.float32(1.0) / d if d != 0 else np.float32(0.0))


@element_function
def iq4_xs_block(x, c, rec, o, qw, use_qw, fs):
    """IQ4_XS: the 256 floats ``x[c:c + 256]`` into the 136-byte record at ``rec[o:]`` (scratch ``fs[0:8]``)."""
    sigma2 = iq4_sigma2(x, c, 256) if use_qw else np.float32(0.0)
    for ib in range(8):
        fs[ib] = iq4_search(x, qw, c + 32 * ib, use_qw, sigma2)
    iq4_xs_record(x, c, rec, o, fs)


@element_function
def iq4_xs_record(x, c, rec, o, fs):
    """The IQ4_XS record of ``x[c:c + 256]`` at ``rec[o:]`` from its sub-blocks' searched scales ``fs[0:8]``."""
    max_scale = largest_magnitude(fs, 0, 8)[1]
    d = -max_scale / np.float32(32.0)
    put_u16(rec, o, ggml_f16(d))
    inv = np.float32(1.0) / d if d != 0 else np.float32(0.0)
    scales_h = np.int64(0)
    for k in range(4):
        rec[o + 4 + k] = np.uint8(0)
    for ib in range(8):
        sc = max(np.int64(-32), min(np.int64(31), nearest_int(mul_f32(inv, np.float32(fs[ib])))))
        dl = mul_f32(d, np.float32(sc))
        _pack(x, c + 32 * ib, rec, o + 8 + 16 * ib, np.float32(1.0) / dl if dl != 0 else np.float32(0.0))
        sc += 32
        rec[o + 4 + ib // 2] = np.uint8(np.int64(rec[o + 4 + ib // 2]) | ((sc & 0xF) << (4 * (ib & 1))))
        scales_h |= (sc >> 4) << (2 * ib)
    put_u16(rec, o + 2, scales_h)


@element_function
def iq4_nl_dequantize_block(rec, o, out, c):
    """Decode the IQ4_NL record at ``rec[o:]`` into ``out[c:c + 32]`` (gguf-py's float32 arithmetic)."""
    d = load_f32(np.uint16(get_u16(rec, o)))
    for j in range(32):
        q = (np.int64(rec[o + 2 + (j & 15)]) >> (4 * (j >> 4))) & 0xF
        out[c + j] = canonical_f32(d * KVALUES[q])


@element_function
def iq4_xs_dequantize_block(rec, o, out, c):
    """Decode the IQ4_XS record at ``rec[o:]`` into ``out[c:c + 256]`` (gguf-py's float32 arithmetic)."""
    d = load_f32(np.uint16(get_u16(rec, o)))
    scales_h = get_u16(rec, o + 2)
    for ib in range(8):
        sc = ((np.int64(rec[o + 4 + ib // 2]) >> (4 * (ib & 1))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4)
        dl = d * np.float32(sc - 32)
        for j in range(32):
            q = (np.int64(rec[o + 8 + 16 * ib + (j & 15)]) >> (4 * (j >> 4))) & 0xF
            out[c + 32 * ib + j] = canonical_f32(dl * KVALUES[q])
