"""GGUF's Q2_K super-block (256 values, 84 bytes): ggml's ``quantize_row_q2_K_ref`` and ``quantize_row_q2_K_impl``.

Sixteen 16-value sub-blocks get 2-bit codes, a 4-bit scale and a 4-bit minimum each,
relative to two float16s ``d`` and ``dmin``. Without an importance matrix each
sub-block runs ``make_qkx2_quants`` weighted by ``|x|`` with absolute errors, and the
sixteen scales (minima) are coded against the largest one; with one, each sub-block
runs ``make_qkx3_quants`` weighted by the importance and the row's mean square, and the
scales and the minima run ``make_qp_quants`` weighted by the sub-blocks' summed
weights. The codes are then recomputed from the stored scales (where a sub-block's
scale is 0, the search's codes stay). Record: ``scales[16]`` (scale in the low nibble,
minimum in the high one), ``qs[64]`` (four codes a byte: code ``i`` in byte
``32 * (i // 128) + i % 32`` at bit ``2 * (i // 32 % 4)``), ``d``, ``dmin``.
"""

from __future__ import annotations

import numpy as np

from .bits import canonical_f32, element_function, load_f32
from .gguf_common import get_u16, ggml_f16, mul_f32, nearest_int, nonnegative_maxima, put_u16, sum_squares
from .gguf_search import W_AVX, W_SIGMA, kx_search, kx_stored_level, qp_search, search_weight

__all__ = ["Q2_K", "Q2K_SCRATCH", "q2k_search_params", "q2k_sigma2", "q2k_quantize_block", "q2k_record",
           "q2k_dequantize_block"]

#: ggml type id.
Q2_K = 10
#: Scratch floats: scales [0:16], minima [16:32], the searches' code iscales [32:48] and lows [48:64],
#: summed weights [64:80], scale codes [80:96], minimum codes [96:112], stored scales [112:128] and minima [128:144].
Q2K_SCRATCH = 144


@element_function
def q2k_search_params(use_qw):
    """The sub-block search of ``quantize_row_q2_K_impl`` (``use_qw``) or ``_ref``: ``(wmode, rmin, rdelta, nstep,
    flat_below, use_mad)`` (the ``_ref`` rows weigh by ``|x|``, W_AVX with a 0 average, and add absolute errors)."""
    if use_qw:
        return W_SIGMA, np.float32(-0.9), np.float32(0.05), 36, True, False
    return W_AVX, np.float32(-0.5), np.float32(0.1), 15, False, True


@element_function
def q2k_sigma2(x, c, use_qw):
    """``quantize_row_q2_K_impl``'s ``sigma2`` of the super-block at ``x[c:]`` (0 without importance weights)."""
    return sum_squares(x, c, 256) / np.float32(256.0) if use_qw else np.float32(0.0)


@element_function
def _sub_blocks(x, c, qw, use_qw, fs):
    """The sixteen sub-block searches into ``fs[0:80]``."""
    sigma2 = q2k_sigma2(x, c, use_qw)
    wmode, rmin, rdelta, nstep, flat_below, use_mad = q2k_search_params(use_qw)
    for j in range(16):
        cj = c + 16 * j
        sw = np.float32(0.0)
        for i in range(16):
            sw = sw + search_weight(x, qw, cj, i, sigma2, wmode)
        fs[64 + j] = sw
        scale, low, iscale, code_low = kx_search(x, qw, cj, 16, sigma2, wmode, np.int64(3), rmin, rdelta, nstep,
                                                 flat_below, use_mad)
        fs[j] = scale
        fs[16 + j] = -low
        fs[32 + j] = iscale
        fs[48 + j] = code_low


@element_function
def _scale_bytes(rec, o, use_qw, max_scale, max_min, fs):
    """Write the sixteen scale bytes at ``rec[o:]`` and return ``(d, dmin)`` before their float16 store."""
    if use_qw:  # make_qp_quants of the scales (codes to fs[80:96]), then of the minima (fs[96:112])
        d = qp_search(fs, 0, 16, 15, fs, 64, fs, 80)
        dmin = qp_search(fs, 16, 16, 15, fs, 64, fs, 96)
        for j in range(16):
            ls = np.int64(fs[80 + j]) & 0xFF
            lm = np.int64(fs[96 + j]) & 0xFF
            rec[o + j] = np.uint8((ls | (lm << 4)) & 0xFF)
        return d, dmin
    d = np.float32(0.0)
    dmin = np.float32(0.0)
    inv_scale = np.float32(15.0) / max_scale if max_scale > 0 else np.float32(0.0)
    inv_min = np.float32(15.0) / max_min if max_min > 0 else np.float32(0.0)
    for j in range(16):
        b = nearest_int(mul_f32(inv_scale, fs[j])) & 0xFF if max_scale > 0 else np.int64(0)
        if max_min > 0:
            b = (b | (nearest_int(mul_f32(inv_min, fs[16 + j])) << 4)) & 0xFF
        rec[o + j] = np.uint8(b)
    if max_scale > 0:
        d = max_scale / np.float32(15.0)
    if max_min > 0:
        dmin = max_min / np.float32(15.0)
    return d, dmin


@element_function
def _code(x, c, i, fs):
    """The 2-bit code (float32) of element ``i`` under its sub-block's stored scale and minimum (the search's code
    where the scale is 0)."""
    j = i // 16
    return kx_stored_level(x[c + i], np.int64(3), fs[112 + j], fs[128 + j], fs[32 + j], fs[48 + j])


@element_function
def q2k_quantize_block(x, c, rec, o, qw, use_qw, fs):
    """Q2_K: the 256 floats ``x[c:c + 256]`` into the 84-byte record at ``rec[o:]`` (``qw`` read at ``c + i``)."""
    _sub_blocks(x, c, qw, use_qw, fs)
    q2k_record(x, c, rec, o, use_qw, fs)


@element_function
def q2k_record(x, c, rec, o, use_qw, fs):
    """The Q2_K record of ``x[c:c + 256]`` at ``rec[o:]`` from its sub-block searches' ``fs[0:80]`` (scales, minima,
    the codes' iscales and lows, summed weights)."""
    max_scale, max_min = nonnegative_maxima(fs, 0, 16, 16)
    d, dmin = _scale_bytes(rec, o, use_qw, max_scale, max_min, fs)
    put_u16(rec, o + 80, ggml_f16(d))
    put_u16(rec, o + 82, ggml_f16(dmin))
    dq = load_f32(np.uint16(get_u16(rec, o + 80)))
    mq = load_f32(np.uint16(get_u16(rec, o + 82)))
    for j in range(16):
        b = np.int64(rec[o + j])
        fs[112 + j] = mul_f32(dq, np.float32(b & 0xF))
        fs[128 + j] = mul_f32(mq, np.float32(b >> 4))
    for h in range(2):
        for k in range(32):  # four codes a byte, as a sum of exact small floats (a loop that vectorizes)
            base = 128 * h + k
            q = ((_code(x, c, base, fs) + mul_f32(np.float32(4.0), _code(x, c, base + 32, fs)))
                 + (mul_f32(np.float32(16.0), _code(x, c, base + 64, fs))
                    + mul_f32(np.float32(64.0), _code(x, c, base + 96, fs))))
            rec[o + 16 + 32 * h + k] = np.uint8(np.int32(q))


@element_function
def q2k_dequantize_block(rec, o, out, c):
    """Decode the Q2_K record at ``rec[o:]`` into ``out[c:c + 256]`` (gguf-py's float32 arithmetic)."""
    d = load_f32(np.uint16(get_u16(rec, o + 80)))
    dmin = load_f32(np.uint16(get_u16(rec, o + 82)))
    for j in range(16):
        b = np.int64(rec[o + j])
        dl = mul_f32(d, np.float32(b & 0xF))
        ml = mul_f32(dmin, np.float32(b >> 4))
        qo = o + 16 + 32 * (j // 8) + 16 * (j & 1)
        shift = 2 * ((j // 2) & 3)
        for k in range(16):
            q = (np.int64(rec[qo + k]) >> shift) & 3
            out[c + 16 * j + k] = canonical_f32(mul_f32(dl, np.float32(q)) - ml)
