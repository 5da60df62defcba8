"""GGUF's 256-element super-blocks Q4_K, Q5_K, Q6_K (and Q2_K, Q3_K, IQ4_XS): one super-block to one record.

Q2_K's functions are in :mod:`~nbquant.element.gguf_q2k`, Q3_K's in :mod:`~nbquant.element.gguf_q3k`,
IQ4_XS's in :mod:`~nbquant.element.gguf_iq4`.

The quantize functions follow ggml's ``quantize_row_q{4,5,6}_K_ref`` (no importance
matrix) and ``quantize_row_q{4,5,6}_K_impl`` (with one), in its float32 arithmetic. They
take a float32 scratch array ``fs`` of at least :data:`SCRATCH` values from the kernel
(per-sub-block scales, minima and search results). Records (little-endian):

=====  ====  ======================================================================
Q4_K   144   d, dmin (float16), scales[12] (6-bit scales and mins), qs[128]
Q5_K   176   d, dmin, scales[12], qh[32], qs[128]
Q6_K   210   ql[128], qh[64], int8 scales[16], d
=====  ====  ======================================================================
"""

from __future__ import annotations

import math

import numpy as np

from .bits import canonical_f32, element_function, load_f32
from .gguf_common import (
    get_u16,
    ggml_f16,
    largest_magnitude,
    mul_f32,
    nearest_int,
    nonnegative_maxima,
    put_u16,
    sum_squares,
)
from .gguf_iq4 import IQ4_XS, iq4_xs_block, iq4_xs_dequantize_block
from .gguf_q2k import Q2_K, Q2K_SCRATCH, q2k_dequantize_block, q2k_quantize_block
from .gguf_q3k import Q3_K, Q3K_SCRATCH, q3k_dequantize_block, q3k_quantize_block
from .gguf_search import (
    KX_ISCALE,
    KX_LOW,
    KX_MIN,
    KX_SCALE,
    KX_STATE_ROWS,
    QX_ISCALE,
    QX_SCALE,
    W_AVX,
    W_DIRECT,
    W_SIGMA,
    W_SQUARE,
    kx_search,
    kx_search_lanes,
    kx_stored_level,
    nearest_clamped,
    qp_search,
    qx_search,
    qx_search_lanes,
    search_weight,
)

__all__ = ["Q4_K", "Q5_K", "Q6_K", "SCRATCH", "KQUANT_QUANTIZERS", "KQUANT_DEQUANTIZERS", "kmin_blocks", "q6k_blocks"]

#: ggml type ids.
Q4_K, Q5_K, Q6_K = 12, 13, 14
#: Scratch floats a quantize call needs (Q3_K's codes are the most).
SCRATCH = max(Q3K_SCRATCH, Q2K_SCRATCH)


@element_function
def _f16_value(rec, o):
    return load_f32(np.uint16(get_u16(rec, o)))


@element_function
def _scale_min(rec, o, j):
    """ggml's ``get_scale_min_k4``: the 6-bit scale and min of sub-block ``j`` from the 12 bytes at ``rec[o:]``."""
    if j < 4:
        return np.int64(rec[o + j]) & 63, np.int64(rec[o + j + 4]) & 63
    sc = (np.int64(rec[o + j + 4]) & 0xF) | ((np.int64(rec[o + j - 4]) >> 6) << 4)
    m = (np.int64(rec[o + j + 4]) >> 4) | ((np.int64(rec[o + j]) >> 6) << 4)
    return sc, m


@element_function
def _kmin_sigma2(x, c, use_qw):
    """``quantize_row_q{4,5}_K_impl``'s ``sigma2`` of the super-block (0 without importance weights)."""
    return mul_f32(np.float32(2.0), sum_squares(x, c, 256)) / np.float32(256.0) if use_qw else np.float32(0.0)


@element_function
def _kmin_sub_block(x, cj, qw, use_qw, top, sigma2):
    """A sub-block's summed weights and its search's ``(aux, wmode, rmin, rdelta, nstep)``."""
    s = np.float32(0.0)
    for i in range(32):
        v = np.float32(x[cj + i])
        s = s + (mul_f32(np.float32(qw[cj + i]), np.float32(math.sqrt(sigma2 + mul_f32(v, v)))) if use_qw
                 else mul_f32(v, v))
    if use_qw:  # quantize_row_q{4,5}_K_impl: make_qkx3_quants on the importance weights
        return s, sigma2, W_SIGMA, np.float32(-0.9), np.float32(0.05), 36
    # the _ref rows: make_qkx2_quants on av_x + |x|
    aux = np.float32(math.sqrt(s / np.float32(32.0)))
    if top == 15:
        return s, aux, W_AVX, np.float32(-1.0), np.float32(0.1), 20
    return s, aux, W_AVX, np.float32(-0.5), np.float32(0.1), 15


@element_function
def _kmin_scales(x, c, qw, use_qw, top, fs):
    """Sub-block searches: scales fs[0:8], mins fs[8:16], codes' iscale/low fs[16:32], weights fs[32:40]."""
    sigma2 = _kmin_sigma2(x, c, use_qw)
    for j in range(8):
        cj = c + 32 * j
        s, aux, wmode, rmin, rdelta, nstep = _kmin_sub_block(x, cj, qw, use_qw, top, sigma2)
        scale, low, iscale, code_low = kx_search(x, qw, cj, 32, aux, wmode, top, rmin, rdelta, nstep, use_qw, False)
        fs[j] = scale
        fs[8 + j] = -low
        fs[16 + j] = iscale
        fs[24 + j] = code_low
        fs[32 + j] = s


@element_function
def _kmin_levels(use_qw, fs):
    """The 6-bit scale and min codes (fs[40:48], fs[48:56]) of the searches' fs[0:40]; returns ``(d, dmin)``."""
    max_scale, max_min = nonnegative_maxima(fs, 0, 8, 8)
    if use_qw:  # make_qp_quants of the scales (codes to fs[40:48]), then of the mins (fs[48:56])
        for t in range(2):
            fs[72 + t] = qp_search(fs, 8 * t, 8, 63, fs, 32, fs, 40 + 8 * t)
        return fs[72], fs[73]
    inv_scale = np.float32(63.0) / max_scale if max_scale > 0 else np.float32(0.0)
    inv_min = np.float32(63.0) / max_min if max_min > 0 else np.float32(0.0)
    for j in range(8):
        fs[40 + j] = np.float32(min(np.int64(63), nearest_int(mul_f32(inv_scale, fs[j])) & 0xFF))
        fs[48 + j] = np.float32(min(np.int64(63), nearest_int(mul_f32(inv_min, fs[8 + j])) & 0xFF))
    return max_scale / np.float32(63.0), max_min / np.float32(63.0)


@element_function
def _kmin(x, c, rec, o, qw, use_qw, top, fs):
    """Q4_K (``top`` 15) or Q5_K (31)."""
    _kmin_scales(x, c, qw, use_qw, top, fs)
    _kmin_record(x, c, rec, o, use_qw, top, fs)


@element_function
def kmin_blocks(x, c, nb, rec, o, type_size, qw, use_qw, top, xt, wt, lt, st, acc, fs):
    """Q4_K (``top`` 15) or Q5_K (31) records of the ``nb`` super-blocks at ``x[c:]`` into ``rec[o:]``, side by side.

    The ``8 * nb`` sub-block searches run as the lanes of one
    :func:`~nbquant.element.gguf_search.kx_search_lanes` (the same bits as :func:`q4k_block`
    and :func:`q5k_block`). Scratch: ``xt``, ``wt`` and ``lt`` float32 (32, ``>= 8 * nb``); ``st``
    (``KX_STATE_ROWS + 1``, ``>= 8 * nb``); ``acc`` (``KX_ACC_ROWS``, ``>= 8 * nb``); ``fs`` (``SCRATCH``).
    """
    for b in range(nb):
        cb = c + 256 * b
        sigma2 = _kmin_sigma2(x, cb, use_qw)
        for j in range(8):
            cj = cb + 32 * j
            lane = 8 * b + j
            s, aux, wmode, rmin, rdelta, nstep = _kmin_sub_block(x, cj, qw, use_qw, top, sigma2)
            st[KX_STATE_ROWS, lane] = s
            for i in range(32):
                xt[i, lane] = np.float32(x[cj + i])
                wt[i, lane] = search_weight(x, qw, cj, i, aux, wmode)
    kx_search_lanes(xt, wt, lt, st, acc, 8 * nb, 32, top, rmin, rdelta, nstep, use_qw, False)
    for b in range(nb):
        for j in range(8):
            lane = 8 * b + j
            fs[j] = st[KX_SCALE, lane]
            fs[8 + j] = -st[KX_MIN, lane]
            fs[16 + j] = st[KX_ISCALE, lane]
            fs[24 + j] = st[KX_LOW, lane]
            fs[32 + j] = st[KX_STATE_ROWS, lane]
        _kmin_record(x, c + 256 * b, rec, o + type_size * b, use_qw, top, fs)


@element_function
def _kmin_record(x, c, rec, o, use_qw, top, fs):
    """The Q4_K/Q5_K record at ``rec[o:]`` from the sub-block searches' fs[0:40] (:func:`_kmin_scales`)."""
    d, dmin = _kmin_levels(use_qw, fs)
    put_u16(rec, o, ggml_f16(d))
    put_u16(rec, o + 2, ggml_f16(dmin))
    so = o + 4
    for j in range(12):
        rec[so + j] = np.uint8(0)
    for j in range(8):
        ls = np.int64(fs[40 + j]) & 0xFF
        lm = np.int64(fs[48 + j]) & 0xFF
        if j < 4:
            rec[so + j] = np.uint8(ls)
            rec[so + j + 4] = np.uint8(lm)
        else:
            rec[so + j + 4] = np.uint8(((ls & 0xF) | ((lm & 0xF) << 4)) & 0xFF)
            rec[so + j - 4] = np.uint8((np.int64(rec[so + j - 4]) | ((ls >> 4) << 6)) & 0xFF)
            rec[so + j] = np.uint8((np.int64(rec[so + j]) | ((lm >> 4) << 6)) & 0xFF)
    dq = _f16_value(rec, o)
    mq = _f16_value(rec, o + 2)
    for j in range(8):
        sc, m = _scale_min(rec, so, j)
        fs[56 + j] = dq * np.float32(sc)
        fs[64 + j] = mq * np.float32(m)
    qo = o + 16 if top == 15 else o + 48
    if top == 31:
        for j in range(32):
            rec[o + 16 + j] = np.uint8(0)
    for n in range(4):
        ja, jb = 2 * n, 2 * n + 1
        da, ma, ia, la = np.float32(fs[56 + ja]), np.float32(fs[64 + ja]), fs[16 + ja], fs[24 + ja]
        db, mb, ib, lb = np.float32(fs[56 + jb]), np.float32(fs[64 + jb]), fs[16 + jb], fs[24 + jb]
        for j in range(32):
            a = np.int64(kx_stored_level(x[c + 32 * ja + j], top, da, ma, ia, la))
            b = np.int64(kx_stored_level(x[c + 32 * jb + j], top, db, mb, ib, lb))
            if top == 31:
                h = np.int64(rec[o + 16 + j])
                if a > 15:
                    a -= 16
                    h |= np.int64(1) << (2 * n)
                if b > 15:
                    b -= 16
                    h |= np.int64(2) << (2 * n)
                rec[o + 16 + j] = np.uint8(h)
            rec[qo + 32 * n + j] = np.uint8((a | (b << 4)) & 0xFF)


@element_function
def _q6k_level(v, d, iscale):
    """A Q6_K code (float32) of ``v`` under the stored scale ``d`` (the search's code where ``d`` is 0)."""
    v = np.float32(v)
    d = np.float32(d)
    searched = np.float32(0.0) if iscale != iscale else nearest_clamped(mul_f32(iscale, v), -32, 31) + np.float32(32.0)
    stored = nearest_clamped(v / d, -32, 31) + np.float32(32.0)
    return searched if d == 0 else stored


@element_function
def _q6k(x, c, rec, o, qw, use_qw, fs):
    for j in range(16):
        scale, iscale = qx_search(x, qw, c + 16 * j, 16, np.float32(0.0), W_DIRECT if use_qw else W_SQUARE,
                                  np.int64(32))
        fs[j] = scale
        fs[16 + j] = iscale
    _q6k_record(x, c, rec, o, fs)


@element_function
def q6k_blocks(x, c, nb, rec, o, type_size, qw, use_qw, xt, wt, st, acc, fs):
    """Q6_K records of the ``nb`` super-blocks at ``x[c:]`` into ``rec[o:]``, their sub-block searches side by side.

    The ``16 * nb`` searches run as the lanes of one
    :func:`~nbquant.element.gguf_search.qx_search_lanes` (the same bits as the one-block
    function). Scratch: ``xt``, ``wt`` float32 (16, ``>= 16 * nb``); ``st`` (``QX_STATE_ROWS``,
    ``>= 16 * nb``); ``acc`` (2, ``>= 16 * nb``); ``fs`` (``SCRATCH``).
    """
    wmode = W_DIRECT if use_qw else W_SQUARE
    for b in range(nb):
        for j in range(16):
            cj = c + 256 * b + 16 * j
            lane = 16 * b + j
            for i in range(16):
                xt[i, lane] = np.float32(x[cj + i])
                wt[i, lane] = search_weight(x, qw, cj, i, np.float32(0.0), wmode)
    qx_search_lanes(xt, wt, st, acc, 16 * nb, 16, np.int64(32))
    for b in range(nb):
        for j in range(16):
            fs[j] = st[QX_SCALE, 16 * b + j]
            fs[16 + j] = st[QX_ISCALE, 16 * b + j]
        _q6k_record(x, c + 256 * b, rec, o + type_size * b, fs)


@element_function
def _q6k_record(x, c, rec, o, fs):
    """The Q6_K record at ``rec[o:]`` from the sub-block searches' scales fs[0:16] and codes' iscales fs[16:32]."""
    max_abs, max_scale = largest_magnitude(fs, 0, 16)
    if max_abs < np.float32(1e-15):
        for k in range(210):
            rec[o + k] = np.uint8(0)
        return
    iscale = np.float32(-128.0) / max_scale
    put_u16(rec, o + 208, ggml_f16(np.float32(1.0) / iscale))
    dq = _f16_value(rec, o + 208)
    for j in range(16):
        sc = min(np.int64(127), nearest_int(mul_f32(iscale, fs[j])))
        rec[o + 192 + j] = np.uint8(sc & 0xFF)
        fs[32 + j] = dq * np.float32(((sc & 0xFF) ^ 0x80) - 0x80)
    for h in range(2):
        for half in range(2):  # sub-block j + 2 * t holds elements 128 * h + 32 * t + k, k // 16 == half
            j = 8 * h + half
            d1, d2, d3, d4 = fs[32 + j], fs[34 + j], fs[36 + j], fs[38 + j]
            i1, i2, i3, i4 = fs[16 + j], fs[18 + j], fs[20 + j], fs[22 + j]
            for kk in range(16):
                k = 16 * half + kk
                base = c + 128 * h + k
                q1 = np.int64(_q6k_level(x[base], d1, i1))
                q2 = np.int64(_q6k_level(x[base + 32], d2, i2))
                q3 = np.int64(_q6k_level(x[base + 64], d3, i3))
                q4 = np.int64(_q6k_level(x[base + 96], d4, i4))
                _q6k_pack(rec, o, h, k, q1, q2, q3, q4)


@element_function
def _q6k_pack(rec, o, h, k, q1, q2, q3, q4):
    """Store the four 6-bit codes of column ``k`` of half ``h`` of a Q6_K record."""
    rec[o + 64 * h + k] = np.uint8(((q1 & 0xF) | ((q3 & 0xF) << 4)) & 0xFF)
    rec[o + 64 * h + 32 + k] = np.uint8(((q2 & 0xF) | ((q4 & 0xF) << 4)) & 0xFF)
    rec[o + 128 + 32 * h + k] = np.uint8(((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)) & 0xFF)


@element_function
def q4k_block(x, c, rec, o, qw, use_qw, fs):
    """Q4_K's record of ``x[c:c + 256]`` at ``rec[o:]``."""
    _kmin(x, c, rec, o, qw, use_qw, np.int64(15), fs)


@element_function
def q5k_block(x, c, rec, o, qw, use_qw, fs):
    """Q5_K's record of ``x[c:c + 256]`` at ``rec[o:]``."""
    _kmin(x, c, rec, o, qw, use_qw, np.int64(31), fs)


@element_function
def _q6k_dequantize_block(rec, o, out, c):
    """Decode the Q6_K record at ``rec[o:]`` into ``out[c:c + 256]`` (gguf-py's float32 arithmetic)."""
    d = _f16_value(rec, o + 208)
    for j in range(16):  # sub-block j: elements 16 * j + k, k < 16
        dl = mul_f32(d, np.float32((np.int64(rec[o + 192 + j]) ^ 0x80) - 0x80))
        h = j // 8
        lo = o + 64 * h + 16 * (j & 3)
        ho = o + 128 + 32 * h + 16 * (j & 1)
        lshift = 4 if (j & 7) >= 4 else 0
        hshift = 2 * ((j & 7) // 2)
        for k in range(16):
            low = (np.int64(rec[lo + k]) >> lshift) & 0xF
            high = (np.int64(rec[ho + k]) >> hshift) & 3
            out[c + 16 * j + k] = canonical_f32(dl * np.float32((low | (high << 4)) - 32))


@element_function
def _kmin_decode(rec, o, out, c, five):
    """Decode the Q4_K (or, ``five``, Q5_K) record at ``rec[o:]`` into ``out[c:c + 256]``."""
    d = _f16_value(rec, o)
    dmin = _f16_value(rec, o + 2)
    qo = o + 48 if five else o + 16
    for j in range(8):  # sub-block j: elements 32 * j + k, k < 32
        sc, m = _scale_min(rec, o + 4, j)
        dl = mul_f32(d, np.float32(sc))
        ml = mul_f32(dmin, np.float32(m))
        so = qo + 32 * (j // 2)
        shift = 4 * (j & 1)
        for k in range(32):
            q = (np.int64(rec[so + k]) >> shift) & 0xF
            if five:
                q |= ((np.int64(rec[o + 16 + k]) >> j) & 1) << 4
            out[c + 32 * j + k] = canonical_f32(mul_f32(dl, np.float32(q)) - ml)


@element_function
def _q4k_dequantize_block(rec, o, out, c):
    _kmin_decode(rec, o, out, c, False)


@element_function
def _q5k_dequantize_block(rec, o, out, c):
    _kmin_decode(rec, o, out, c, True)


#: Each 256-element format's quantize function: ``fn(x, c, rec, o, qw, use_qw, fs)`` quantizes the 256 floats
#: ``x[c:c + 256]`` into the format's record at ``rec[o:]`` (``qw`` read at ``c + i`` when ``use_qw``; ``fs`` a
#: scratch of :data:`SCRATCH` floats). A kernel built around one compiles that format alone.
KQUANT_QUANTIZERS = {Q2_K: q2k_quantize_block, Q3_K: q3k_quantize_block, Q4_K: q4k_block, Q5_K: q5k_block,
                     Q6_K: _q6k, IQ4_XS: iq4_xs_block}
#: Each 256-element format's dequantize function: ``fn(rec, o, out, c)`` decodes the format's record at ``rec[o:]``
#: into ``out[c:c + 256]`` (gguf-py's float32 arithmetic).
KQUANT_DEQUANTIZERS = {Q2_K: q2k_dequantize_block, Q3_K: q3k_dequantize_block, Q4_K: _q4k_dequantize_block,
                       Q5_K: _q5k_dequantize_block, Q6_K: _q6k_dequantize_block, IQ4_XS: iq4_xs_dequantize_block}
