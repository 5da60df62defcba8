"""The NumPy oracle of GGUF's Q2_K, written from ggml's ``quantize_row_q2_K_ref`` and ``quantize_row_q2_K_impl``.

Vectorized across 16-value sub-blocks, sequential inside one, in float32, as
:mod:`nbquant.backends.reference.gguf` is. Shares no code with :mod:`nbquant.element`.
"""

from __future__ import annotations

import numpy as np

from .gguf import f16_bytes, f16_values, kx_codes, nearest_int, seq_sum
from .gguf_kquants import qp_codes, super_block_quantizer

__all__ = ["q2k_quantize", "q2k_dequantize"]

_F = np.float32


def _largest(v: np.ndarray) -> np.ndarray:
    """Per row of ``v`` (blocks, 16): the largest value above 0, else 0 (ggml's ``if (v > max) max = v`` from 0)."""
    top = np.zeros(v.shape[0], _F)
    for j in range(v.shape[1]):
        top = np.where(v[:, j] > top, v[:, j], top)
    return top


def _blocks(x: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    nsb = x.shape[0]
    sub = x.reshape(-1, 16)
    if qw is None:
        scales, lows, search = kx_codes(sub, np.abs(sub), 3, -0.5, 0.1, 15, flat_below=False, use_mad=True)
        scales, mins = scales.reshape(nsb, 16), (-lows).reshape(nsb, 16)
        max_scale, max_min = _largest(scales), _largest(mins)
        ls = np.where(max_scale[:, None] > 0, nearest_int((_F(15) / max_scale)[:, None] * scales) & 0xFF, 0)
        lm = nearest_int((_F(15) / max_min)[:, None] * mins)
        packed = np.where(max_min[:, None] > 0, (ls | (lm << 4)) & 0xFF, ls)
        d = np.where(max_scale > 0, max_scale / _F(15), _F(0))
        dmin = np.where(max_min > 0, max_min / _F(15), _F(0))
    else:
        sigma2 = seq_sum(x * x) / _F(256)
        w = (qw * np.sqrt(sigma2[:, None] + x * x)).reshape(-1, 16)
        scales, lows, search = kx_codes(sub, w, 3, -0.9, 0.05, 36, flat_below=True)
        sw = seq_sum(w).reshape(nsb, 16)
        d, ls = qp_codes(scales.reshape(nsb, 16), sw, 15)
        dmin, lm = qp_codes((-lows).reshape(nsb, 16), sw, 15)
        packed = ((ls & 0xFF) | ((lm & 0xFF) << 4)) & 0xFF
    d16, m16 = f16_bytes(d.astype(_F)), f16_bytes(dmin.astype(_F))
    d_eff = (f16_values(d16)[:, None] * (packed & 0xF).astype(_F)).reshape(-1)
    m_eff = (f16_values(m16)[:, None] * (packed >> 4).astype(_F)).reshape(-1)
    codes = np.clip(nearest_int((sub + m_eff[:, None]) / d_eff[:, None]), 0, 3)
    codes = np.where(d_eff[:, None] == 0, search, codes).reshape(nsb, 2, 4, 32)
    qs = (codes << (2 * np.arange(4))[None, None, :, None]).sum(axis=2).reshape(nsb, 64)
    return np.concatenate([packed.astype(np.uint8), qs.astype(np.uint8), d16, m16], axis=1)


q2k_quantize = super_block_quantizer(_blocks, "Q2_K")


def q2k_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of Q2_K records ``data`` (rows, row bytes): gguf-py's formulas, canonical NaN."""
    rows = data.shape[0]
    rec = data.reshape(-1, type_size)
    nsb = rec.shape[0]
    scales = rec[:, 0:16]
    with np.errstate(invalid="ignore", over="ignore"):
        dl = f16_values(rec[:, 80:82])[:, None] * (scales & 0xF).astype(_F)
        ml = f16_values(rec[:, 82:84])[:, None] * (scales >> 4).astype(_F)
        q = (rec[:, 16:80].reshape(nsb, 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]) & 3
        v = dl[:, :, None] * q.reshape(nsb, 16, 16).astype(_F) - ml[:, :, None]
    v = np.where(np.isnan(v), _F(np.nan), v)
    return v.reshape(rows, -1)
