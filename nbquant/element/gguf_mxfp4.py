"""GGUF's MXFP4 block (32 values, 17 bytes): ggml's ``quantize_row_mxfp4_ref``.

The block's E8M0 exponent is ``floorf(log2f(amax)) - 2 + 127`` stored through C's
float-to-``uint8_t`` conversion (x86-64: the low byte of ``cvttss2si``; ``amax`` infinite
gives 0). ``log2f`` rounds to float32, so an ``amax`` a few ulps below a power of two
``2**k`` (k above 1 or below 0) gets ``log2f(amax) == k`` and the exponent of ``2**k``:
:data:`LOG2_UP` holds, for every binade, the smallest float32 whose correctly rounded
``log2`` reaches the binade's top (computed once from float64 ``log2``). Each value's
code is the first of the 16 entries ``KVALUES * d`` (``d`` = half the E8M0 scale) with
the least ``|entry - x|``. Record: ``e`` (uint8), ``qs[16]`` (element ``j`` in the low
nibble, ``j + 16`` in the high).
"""

from __future__ import annotations

import numpy as np

from .bits import bits_f32, canonical_f32, element_function, f32_bits
from .gguf_common import mul_f32, trunc_i64

__all__ = ["MXFP4", "KVALUES", "LOG2_UP", "floor_log2f", "mxfp4_quantize_block", "mxfp4_dequantize_block"]

#: ggml type id.
MXFP4 = 39
#: ggml's ``kvalues_mxfp4``: twice the E2M1 values, positive then negative.
KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float32)
KVALUES.flags.writeable = False


def _log2_up() -> np.ndarray:
    """``t[k + 149]``: the least float32 below ``2**(k + 1)`` whose float32 ``log2`` is ``k + 1``, else ``2**(k + 1)``.

    Float32 ``log2`` is the float64 ``log2`` rounded to float32 (float64 is exact enough:
    none of these values sits on a float32 rounding midpoint). The candidates are the 256
    float32s below each power of two (the widest rounding reach is 44, near ``2**-125`` and ``2**128``).
    """
    k = np.arange(-149, 128)
    top_bits = np.where(k + 1 >= -126, (k + 128) << 23, 1 << np.clip(k + 150, 0, 30)).astype(np.int32)
    top = top_bits.view(np.float32)  # 2**(k + 1); 2**128 is inf
    cand = np.maximum(top_bits[:, None] - np.arange(1, 257)[None, :], 1).astype(np.int32).view(np.float32)
    up = np.log2(cand.astype(np.float64)).astype(np.float32) >= (k + 1)[:, None]
    return np.where(up, cand, top[:, None]).min(axis=1).astype(np.float32)


#: Per binade ``[2**k, 2**(k + 1))``, ``k`` from -149 to 127, at index ``k + 149``: see :func:`_log2_up`.
LOG2_UP = _log2_up()
LOG2_UP.flags.writeable = False


@element_function
def floor_log2f(a):
    """``floorf(log2f(a))`` of a finite positive float32 ``a``, as an integer (glibc's correctly rounded ``log2f``)."""
    bits = f32_bits(np.float32(a))
    biased = (bits >> 23) & 0xFF
    if biased == 0:
        k = np.int64(-150)
        m = bits & 0x7FFFFF
        while m != 0:
            m >>= 1
            k += 1
    else:
        k = np.int64(biased) - 127
    if np.float32(a) >= LOG2_UP[k + 149]:
        k += 1
    return k


@element_function
def _e8m0_half(e):
    """ggml's ``ggml_e8m0_to_fp32_half``: ``2**(e - 128)`` as float32 bits (subnormal for e < 2)."""
    if e < 2:
        return bits_f32(np.int64(0x00200000) << e)
    return bits_f32((e - 1) << 23)


@element_function
def _best(v, d):
    """ggml's ``best_index_mxfp4``: the first index of the least ``|KVALUES[i] * d - v|``."""
    v = np.float32(v)
    best = np.int64(0)
    best_err = abs(mul_f32(KVALUES[0], d) - v)
    for i in range(1, 16):
        err = abs(mul_f32(KVALUES[i], d) - v)
        if err < best_err:
            best = np.int64(i)
            best_err = err
    return best


@element_function
def mxfp4_quantize_block(x, c, rec, o):
    """MXFP4: the 32 floats ``x[c:c + 32]`` into the 17-byte record at ``rec[o:]``."""
    amax = np.float32(0.0)
    for j in range(32):
        a = abs(np.float32(x[c + j]))
        if amax < a:
            amax = a
    e = np.int64(0)
    if amax > 0:
        if amax == np.float32(np.inf):
            e = trunc_i64(amax) & 0xFF
        else:
            e = (floor_log2f(amax) + 125) & 0xFF
    rec[o] = np.uint8(e)
    d = _e8m0_half(e)
    for j in range(16):
        rec[o + 1 + j] = np.uint8(_best(x[c + j], d) | (_best(x[c + 16 + j], d) << 4))


@element_function
def mxfp4_dequantize_block(rec, o, out, c):
    """Decode the MXFP4 record at ``rec[o:]`` into ``out[c:c + 32]`` (gguf-py's float32 arithmetic)."""
    d = _e8m0_half(np.int64(rec[o]))
    for j in range(32):
        q = (np.int64(rec[o + 1 + (j & 15)]) >> (4 * (j >> 4))) & 0xF
        out[c + j] = canonical_f32(d * KVALUES[q])
