"""The NumPy oracle of GGUF's MXFP4 block, written from ggml's ``quantize_row_mxfp4_ref``.

``floorf(log2f(amax))`` is taken as float64 ``log2`` rounded to float32 then floored
(glibc's ``log2f`` is correctly rounded there), not through the element layer's table
of binade thresholds. Shares no code with :mod:`nbquant.element`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mxfp4_quantize", "mxfp4_dequantize"]

_F = np.float32
_KV = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8).astype(_F)


def _e8m0_half(e: np.ndarray) -> np.ndarray:
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << np.minimum(e, 1), (e - 1) << np.uint32(23))
    return bits.astype(np.uint32).view(_F)


def mxfp4_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """MXFP4 records (rows, n / 32 * 17) of ``x`` (rows, n) float32 (``imatrix`` ignored, as ggml does)."""
    rows, n = x.shape
    blocks = x.reshape(-1, 32)
    a = np.where(np.isnan(blocks), _F(0), np.abs(blocks))
    amax = a.max(axis=1)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        lg = np.floor(np.log2(amax.astype(np.float64)).astype(_F)) - _F(2) + _F(127)
        # C's (uint8_t) of a float on x86-64: the low byte of cvttss2si (out of range: INT_MIN, low byte 0)
        e = np.where(np.isfinite(lg), lg, 0).astype(np.int64) & 0xFF
    e = np.where(amax > 0, e, 0)
    d = _e8m0_half(e)
    with np.errstate(over="ignore", invalid="ignore"):
        err = np.abs(d[:, None, None] * _KV[None, None, :] - blocks[:, :, None])
    err = np.where(np.isnan(err), np.inf, err)  # NaN never beats the first entry: argmin of ties is the first
    idx = np.argmin(err, axis=2)
    idx = np.where(np.isnan(blocks), 0, idx)
    qs = (idx[:, :16] | (idx[:, 16:] << 4)).astype(np.uint8)
    return np.concatenate([e.astype(np.uint8)[:, None], qs], axis=1).reshape(rows, n // 32 * type_size)


def mxfp4_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of MXFP4 records ``data`` (rows, row bytes): gguf-py's formulas."""
    rows = data.shape[0]
    rec = data.reshape(-1, type_size)
    d = _e8m0_half(rec[:, 0])
    qs = rec[:, 1:].astype(np.int64)
    q = _KV[np.concatenate([qs & 0xF, qs >> 4], axis=1)]
    with np.errstate(over="ignore", invalid="ignore"):
        v = d[:, None] * q
    return v.reshape(rows, -1)
