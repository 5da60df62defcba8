"""GGUF's 32-element block formats Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4: one block to one record.

IQ4_NL's functions are in :mod:`~nbquant.element.gguf_iq4`, MXFP4's in :mod:`~nbquant.element.gguf_mxfp4`.

Each quantize function reads ``x[c:c + 32]`` (float32) and writes the block's record at
``rec[o:o + size]``, in ggml's float32 arithmetic (sequential, no FMA; see
:mod:`~nbquant.element.gguf_common`). With an importance matrix (``use_qw``) Q4_0/Q5_0
run ggml's ``make_qx_quants`` search and Q4_1/Q5_1 its ``make_qkx3_quants`` search, on
weights ``qw[j] * sqrt(sigma2 + x[j]**2)`` (``sigma2`` is the row's mean square,
:func:`row_sigma2`). The searches keep no scratch arrays: they remember the winning
step's parameters and recompute its codes, which are the same float32 operations.

Records (little-endian; ``d``/``m`` float16; ``qs`` holds element ``j`` in the low and
``j + 16`` in the high nibble; ``qh`` bit ``j`` is element ``j``'s fifth bit):

========  ====  ==============================
Q8_0      34    d, int8 qs[32]
Q4_0      18    d, qs[16]
Q4_1      20    d, m, qs[16]
Q5_0      22    d, qh (uint32), qs[16]
Q5_1      24    d, m, qh (uint32), qs[16]
========  ====  ==============================
"""

from __future__ import annotations

import numpy as np

from .bits import canonical_f32, element_function, load_f32
from .gguf_common import (
    get_u16,
    get_u32,
    ggml_f16,
    largest_magnitude,
    mul_f32,
    put_u16,
    put_u32,
    round_away,
    sum_squares,
    trunc_i64,
)
from .gguf_iq4 import IQ4_NL, iq4_nl_block, iq4_nl_dequantize_block
from .gguf_mxfp4 import MXFP4, mxfp4_dequantize_block, mxfp4_quantize_block
from .gguf_search import W_SIGMA, kx_code, kx_search, qx_code, qx_search

__all__ = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "square_add", "row_sigma2", "LEGACY_QUANTIZERS",
           "LEGACY_DEQUANTIZERS"]

#: ggml type ids of the formats (``kind`` arguments).
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = 2, 3, 6, 7, 8
_FLT_MAX = np.float32(3.4028234663852886e38)


@element_function
def square_add(s, v):
    """``s + v*v`` in float32, unfused: one step of a row's sum of squares."""
    v = np.float32(v)
    return np.float32(s) + mul_f32(v, v)


@element_function
def row_sigma2(x, n):
    """``sum(x[:n]**2) / n`` summed in order in float32 (ggml's ``sigma2`` of an importance-weighted row)."""
    return sum_squares(x, 0, n) / np.float32(n)


@element_function
def _int8(t):
    """C's conversion of an ``int`` to ``int8_t`` (two's complement wrap)."""
    return ((t + 128) & 255) - 128


@element_function
def _q8_0(x, c, rec, o):
    amax = np.float32(0.0)
    for j in range(32):
        a = abs(np.float32(x[c + j]))
        amax = amax if amax > a else a
    d = amax / np.float32(127.0)
    inv = np.float32(1.0) / d if d != 0 else np.float32(0.0)
    put_u16(rec, o, ggml_f16(d))
    for j in range(32):
        rec[o + 2 + j] = np.uint8(round_away(np.float32(x[c + j]) * inv) & 0xFF)


@element_function
def _sym_code(x, c, j, nmax, inv, searched):
    """Code ``j`` of a Q4_0 (``nmax`` 8) or Q5_0 (16) block, 0..2*nmax-1 as the byte C stores."""
    if searched:
        return qx_code(x, c, j, nmax, inv)
    v = np.float32(x[c + j])
    t = _int8(trunc_i64(mul_f32(v, inv) + np.float32(np.float32(nmax) + np.float32(0.5))))
    return min(2 * nmax - 1, t) & 0xFF


@element_function
def _sym(x, c, rec, o, nmax, qw, use_qw, sigma2):
    """Q4_0 (``nmax`` 8) or Q5_0 (16)."""
    if use_qw:
        d, inv = qx_search(x, qw, c, 32, sigma2, W_SIGMA, nmax)
    else:
        mx = largest_magnitude(x, c, 32)[1]
        d = mx / np.float32(-nmax)
        inv = np.float32(1.0) / d if d != 0 else np.float32(0.0)
    put_u16(rec, o, ggml_f16(d))
    _pack(x, c, rec, o + 2, nmax, inv, use_qw, np.float32(0.0), False)


@element_function
def _asym_code(x, c, j, top, inv, low, searched):
    """Code ``j`` of a Q4_1 (``top`` 15) or Q5_1 (31) block."""
    if searched:
        return kx_code(x, c, j, top, inv, low)
    v = np.float32(x[c + j]) - np.float32(low)
    t = trunc_i64(mul_f32(v, inv) + np.float32(0.5))
    return (min(np.int64(top), _int8(t)) if top == 15 else t) & 0xFF


@element_function
def _pack(x, c, rec, o, nmax, inv, searched, low, asym):
    """Write ``qs`` (and ``qh`` for 5-bit codes) at ``rec[o:]``: element j low nibble, j + 16 high."""
    qh = np.int64(0)
    five = (nmax == 31) if asym else (nmax == 16)
    base = o + 4 if five else o
    for j in range(16):
        if asym:
            a = _asym_code(x, c, j, nmax, inv, low, searched)
            b = _asym_code(x, c, j + 16, nmax, inv, low, searched)
        else:
            a = _sym_code(x, c, j, nmax, inv, searched)
            b = _sym_code(x, c, j + 16, nmax, inv, searched)
        rec[base + j] = np.uint8(((a & 0x0F) | ((b & 0x0F) << 4)) if five else ((a | (b << 4)) & 0xFF))
        qh |= ((a >> 4) & 1) << j
        qh |= ((b >> 4) & 1) << (j + 16)
    if five:
        put_u32(rec, o, qh)


@element_function
def _asym(x, c, rec, o, top, qw, use_qw, sigma2):
    """Q4_1 (``top`` 15) or Q5_1 (31)."""
    if use_qw:
        d, m, inv, low = kx_search(x, qw, c, 32, sigma2, W_SIGMA, top, np.float32(-0.9), np.float32(0.05), 36, True,
                                  False)
    else:
        m = _FLT_MAX
        hi = -_FLT_MAX
        for j in range(32):
            v = np.float32(x[c + j])
            if v < m:
                m = v
            if v > hi:
                hi = v
        d = (hi - m) / np.float32(top)
        inv = np.float32(1.0) / d if d != 0 else np.float32(0.0)
        low = m
    put_u16(rec, o, ggml_f16(d))
    put_u16(rec, o + 2, ggml_f16(m))
    _pack(x, c, rec, o + 4, top, inv, use_qw, low, True)


@element_function
def q8_0_block(x, c, rec, o, qw, use_qw, sigma2):
    """Q8_0's record of ``x[c:c + 32]`` at ``rec[o:]`` (no importance matrix, as ggml)."""
    _q8_0(x, c, rec, o)


def _fixed(block, param):
    """The quantize function ``fn(x, c, rec, o, qw, use_qw, sigma2)`` of ``block`` (:func:`_sym` or :func:`_asym`)
    with its format parameter ``param`` frozen in."""

    @element_function
    def quantize_block(x, c, rec, o, qw, use_qw, sigma2):
        block(x, c, rec, o, param, qw, use_qw, sigma2)
    return quantize_block


@element_function
def iq4_nl_quantize_block(x, c, rec, o, qw, use_qw, sigma2):
    """IQ4_NL's record of ``x[c:c + 32]`` at ``rec[o:]`` (weighed by the block's own mean square)."""
    iq4_nl_block(x, c, rec, o, qw, use_qw)


@element_function
def mxfp4_block(x, c, rec, o, qw, use_qw, sigma2):
    """MXFP4's record of ``x[c:c + 32]`` at ``rec[o:]`` (no importance matrix, as ggml)."""
    mxfp4_quantize_block(x, c, rec, o)


#: Each 32-element format's quantize function: ``fn(x, c, rec, o, qw, use_qw, sigma2)`` quantizes the 32 floats
#: ``x[c:c + 32]`` into the format's record at ``rec[o:]``; ``qw`` (the row's importance, read at ``c + j``) and
#: ``sigma2`` are used when ``use_qw`` (Q8_0 and MXFP4 ignore them, as ggml does; IQ4_NL weighs with its block's
#: own mean square). A kernel built around one of them compiles that format alone.
LEGACY_QUANTIZERS = {Q8_0: q8_0_block, Q4_0: _fixed(_sym, np.int64(8)), Q5_0: _fixed(_sym, np.int64(16)),
                     Q4_1: _fixed(_asym, np.int64(15)), Q5_1: _fixed(_asym, np.int64(31)),
                     IQ4_NL: iq4_nl_quantize_block, MXFP4: mxfp4_block}


@element_function
def q8_0_dequantize_block(rec, o, out, c):
    """Decode the Q8_0 record at ``rec[o:]`` into ``out[c:c + 32]`` (gguf-py's float32 arithmetic)."""
    d = load_f32(np.uint16(get_u16(rec, o)))
    for j in range(32):
        out[c + j] = canonical_f32(np.float32(_int8(np.int64(rec[o + 2 + j]))) * d)


@element_function
def _linear_decode(rec, o, out, c, asym, five):
    """Decode a Q4_0 (neither flag), Q5_0 (``five``), Q4_1 (``asym``) or Q5_1 (both) record into ``out[c:c + 32]``."""
    d = load_f32(np.uint16(get_u16(rec, o)))
    m = load_f32(np.uint16(get_u16(rec, o + 2))) if asym else np.float32(0.0)
    qo = o + (4 if asym else 2)
    qh = get_u32(rec, qo) if five else np.int64(0)
    qs = qo + 4 if five else qo
    for j in range(32):
        byte = np.int64(rec[qs + (j & 15)])
        q = ((byte >> 4) if j >= 16 else byte) & 0x0F
        q |= ((qh >> j) & 1) << 4
        if asym:
            out[c + j] = canonical_f32(mul_f32(d, np.float32(q)) + m)
        else:
            out[c + j] = canonical_f32(d * np.float32(q - (16 if five else 8)))


def _linear(asym, five):
    """The dequantize function ``fn(rec, o, out, c)`` of Q4_0, Q5_0, Q4_1 or Q5_1 (:func:`_linear_decode`)."""

    @element_function
    def dequantize_block(rec, o, out, c):
        _linear_decode(rec, o, out, c, asym, five)
    return dequantize_block


#: Each 32-element format's dequantize function: ``fn(rec, o, out, c)`` decodes the format's record at ``rec[o:]``
#: into ``out[c:c + 32]`` (gguf-py's float32 arithmetic).
LEGACY_DEQUANTIZERS = {Q8_0: q8_0_dequantize_block, Q4_0: _linear(False, False), Q5_0: _linear(False, True),
                       Q4_1: _linear(True, False), Q5_1: _linear(True, True), IQ4_NL: iq4_nl_dequantize_block,
                       MXFP4: mxfp4_dequantize_block}
