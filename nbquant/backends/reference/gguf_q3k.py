"""The NumPy oracle of GGUF's Q3_K, written from ggml's ``quantize_row_q3_K_ref`` and ``quantize_row_q3_K_impl``.

Vectorized across 16-value sub-blocks, sequential inside one, in float32, as
:mod:`nbquant.backends.reference.gguf` is. Shares no code with :mod:`nbquant.element`.
"""

from __future__ import annotations

import numpy as np

from .gguf import f16_bytes, f16_values, first_largest_magnitude, nearest_int, qx_codes, seq_sum
from .gguf_kquants import super_block_quantizer

__all__ = ["q3k_quantize", "q3k_dequantize"]

_F = np.float32


def _q3_quants(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``make_q3_quants(16, 4, x, L, true)`` per row of ``x`` (sub-blocks, 16): scales and codes 0..7."""
    a = np.where(np.isnan(x), _F(0), np.abs(x))
    i = np.argmax(a, axis=1)
    rows = np.arange(x.shape[0])
    amax, mx = a[rows, i], x[rows, i]
    zero = amax < _F(1e-15)
    iscale = _F(-4) / mx
    codes = np.clip(nearest_int(iscale[:, None] * x), -4, 3).astype(_F)
    w = x * x
    sumlx = seq_sum(w * x * codes)
    suml2 = seq_sum(w * codes * codes)
    for _ in range(5):  # a pass that changes nothing leaves the state as it is: ggml's early stop is implied
        for k in range(16):
            v, wk, lk = x[:, k], w[:, k], codes[:, k]
            slx = sumlx - wk * v * lk
            sl2 = suml2 - wk * lk * lk
            new = np.clip(nearest_int(v * sl2 / slx), -4, 3).astype(_F)
            slx_new = slx + wk * v * new
            sl2_new = sl2 + wk * new * new
            take = (slx > 0) & (new != lk) & (sl2_new > 0) & (slx_new * slx_new * suml2 > sumlx * sumlx * sl2_new)
            codes[:, k] = np.where(take, new, lk)
            sumlx = np.where(take, slx_new, sumlx)
            suml2 = np.where(take, sl2_new, suml2)
    scale = np.where(suml2 > 0, sumlx / suml2, _F(0))
    return np.where(zero, _F(0), scale), np.where(zero[:, None], 0, codes.astype(np.int64) + 4)


def _pack_scales(lv: np.ndarray) -> np.ndarray:
    """The 12 scale bytes of the 6-bit codes ``lv`` (blocks, 16)."""
    out = np.zeros((lv.shape[0], 12), np.int64)
    out[:, 0:8] = (lv[:, 0:8] & 0xF) | ((lv[:, 8:16] & 0xF) << 4)
    high = (lv >> 4) & 3
    for j in range(16):
        out[:, 8 + j % 4] |= high[:, j] << (2 * (j // 4))
    return out.astype(np.uint8)


def _unpack_scales(b: np.ndarray) -> np.ndarray:
    b = b.astype(np.int64)
    low = np.concatenate([b[:, 0:8] & 0xF, b[:, 0:8] >> 4], axis=1)
    j = np.arange(16)
    return (low | (((b[:, 8 + j % 4] >> (2 * (j // 4))) & 3) << 4)) - 32


def _blocks(x: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    nsb = x.shape[0]
    sub = x.reshape(-1, 16)
    if qw is None:
        scales, search = _q3_quants(sub)
        scales = scales.reshape(nsb, 16)
        max_scale = first_largest_magnitude(scales)[1]
        iscale = _F(-32) / max_scale
        lv = ((nearest_int(iscale[:, None] * scales) + 128) & 255) - 128
        lv = np.clip(lv, -32, 31) + 32
        nonzero = max_scale != 0
        packed = np.where(nonzero[:, None], _pack_scales(lv), np.uint8(0))
        d16 = f16_bytes(np.where(nonzero, _F(1) / iscale, _F(0)))
    else:
        sigma2 = _F(2) * seq_sum(x * x) / _F(256)
        w = (qw * np.sqrt(sigma2[:, None] + x * x)).reshape(-1, 16)
        scales, search = qx_codes(sub, w, 4)
        d_block, lv = qx_codes(scales.reshape(nsb, 16), seq_sum(w).reshape(nsb, 16), 32)
        packed = _pack_scales(lv)
        d16 = f16_bytes(d_block)
    d = (f16_values(d16)[:, None] * _unpack_scales(packed).astype(_F)).reshape(-1)
    codes = np.clip(nearest_int(sub / d[:, None]), -4, 3) + 4
    codes = np.where(d[:, None] != 0, codes, search).reshape(nsb, 256)
    hmask = ((codes > 3).reshape(nsb, 8, 32) << np.arange(8)[None, :, None]).sum(axis=1).astype(np.uint8)
    low = (codes & 3).reshape(nsb, 2, 4, 32) << (2 * np.arange(4))[None, None, :, None]
    qs = low.sum(axis=2).reshape(nsb, 64).astype(np.uint8)
    return np.concatenate([hmask, qs, packed, d16], axis=1)


q3k_quantize = super_block_quantizer(_blocks, "Q3_K")


def q3k_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of Q3_K records ``data`` (rows, row bytes): gguf-py's formulas, canonical NaN."""
    rows = data.shape[0]
    rec = data.reshape(-1, type_size)
    nsb = rec.shape[0]
    with np.errstate(invalid="ignore", over="ignore"):
        dl = f16_values(rec[:, 108:110])[:, None] * _unpack_scales(rec[:, 96:108]).astype(_F)
    low = (rec[:, 32:96].reshape(nsb, 2, 1, 32).astype(np.int64) >> (2 * np.arange(4))[None, None, :, None]) & 3
    high = (rec[:, 0:32].reshape(nsb, 1, 32).astype(np.int64) >> np.arange(8)[None, :, None]) & 1
    q = (low.reshape(nsb, 256) - 4 * (1 - high.reshape(nsb, 256))).astype(_F)
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.repeat(dl, 16, axis=1) * q
    v = np.where(np.isnan(v), _F(np.nan), v)
    return v.reshape(rows, -1)
