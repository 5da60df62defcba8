"""The NumPy oracle of GGUF's IQ4_NL and IQ4_XS, written from ggml's ``quantize_row_iq4_nl_impl``.

Vectorized across blocks, sequential inside one, in float32, as
:mod:`nbquant.backends.reference.gguf` is. The nearest-entry search is written as
ggml's comparisons against the midpoints' neighbours, over the whole table at once
(not the element layer's bisection). Shares no code with :mod:`nbquant.element`.
"""

from __future__ import annotations

import numpy as np

from .gguf import f16_bytes, f16_values, first_largest_magnitude, nearest_int, seq_sum

__all__ = ["iq4_quantize", "iq4_dequantize", "KVALUES"]

_F = np.float32
#: ggml's ``kvalues_iq4nl``.
KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
_KV = KVALUES.astype(_F)


def _best_index(v: np.ndarray) -> np.ndarray:
    """``best_index_int8(16, kvalues, v)`` elementwise: the bracketing pair ``(k - 1, k)`` with ``kv[k-1] <= v <
    kv[k]``, then the lower one when strictly nearer; below the table 0, above it (and NaN) 15."""
    k = np.searchsorted(_KV, np.where(np.isnan(v), _F(np.inf), v), side="right").clip(1, 15)
    lower = (v - _KV[k - 1]) < (_KV[k] - v)
    idx = np.where(lower, k - 1, k)
    idx = np.where(v <= _KV[0], 0, idx)
    return np.where((v >= _KV[15]) | np.isnan(v), 15, idx).astype(np.int64)


def _search(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The scale of each 32-value block of ``x`` (blocks, 32), weights ``w``: ggml's ``ntry = 7`` search."""
    a = np.where(np.isnan(x), _F(0), np.abs(x))
    i = np.argmax(a, axis=1)
    amax = a[np.arange(x.shape[0]), i]
    mx = x[np.arange(x.shape[0]), i]

    def sums(inv):
        q = _KV[_best_index(inv[:, None] * x)]
        wq = w * q
        return seq_sum(wq * x), seq_sum(wq * q)

    sumqx, sumq2 = sums(_F(1) / (-mx / _F(-127)))
    d = np.where(sumq2 > 0, sumqx / sumq2, _F(0))
    best = d * sumqx
    for itry in range(-7, 8):
        sumqx, sumq2 = sums(_F(itry - 127) / mx)
        better = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
        d = np.where(better, sumqx / sumq2, d)
        best = np.where(better, d * sumqx, best)
    return np.where(amax < _F(1e-15), _F(0), d)


def _weights(x: np.ndarray, qw: np.ndarray | None, size: int) -> np.ndarray:
    """Per-element weights of ``x`` (units, size): ``x**2``, or ``qw * sqrt(sigma2 + x**2)``."""
    if qw is None:
        return x * x
    sigma2 = seq_sum(x * x) * (_F(2) / _F(size))
    return qw * np.sqrt(sigma2[:, None] + x * x)


def _pack(x: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """``qs`` (blocks, 16) of the 32-value blocks ``x`` with codes ``best_index(inv * x)``."""
    codes = _best_index(inv[:, None] * x)
    return (codes[:, :16] | (codes[:, 16:] << 4)).astype(np.uint8)


def iq4_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """Records (rows, row bytes) of ``x`` (rows, n) float32 in IQ4_NL (``kind`` 20) or IQ4_XS (23)."""
    rows, n = x.shape
    size = 32 if kind == 20 else 256
    units = x.reshape(-1, size)
    qw = None if imatrix is None else np.tile(imatrix.reshape(-1, size), (rows, 1))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # C's inf/NaN arithmetic, kept as is
        w = _weights(units, qw, size).reshape(-1, 32)
        blocks = units.reshape(-1, 32)
        scales = _search(blocks, w)
        if kind == 20:
            inv = np.where(scales != 0, _F(1) / scales, _F(0))
            out = np.concatenate([f16_bytes(scales), _pack(blocks, inv)], axis=1)
        else:
            out = _xs(blocks, scales.reshape(-1, 8))
    return out.reshape(rows, n // size * type_size)


def _xs(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    nsb = scales.shape[0]
    max_scale = first_largest_magnitude(scales)[1]
    d = -max_scale / _F(32)
    inv = np.where(d != 0, _F(1) / d, _F(0))
    sc = np.clip(nearest_int(inv[:, None] * scales), -32, 31)
    dl = (d[:, None] * sc.astype(_F)).reshape(-1)
    qs = _pack(blocks, np.where(dl != 0, _F(1) / dl, _F(0))).reshape(nsb, 128)
    sc = sc + 32
    scales_l = ((sc[:, 0::2] & 0xF) | ((sc[:, 1::2] & 0xF) << 4)).astype(np.uint8)
    scales_h = ((sc >> 4) << (2 * np.arange(8))).sum(axis=1).astype("<u2").view(np.uint8).reshape(nsb, 2)
    return np.concatenate([f16_bytes(d), scales_h, scales_l, qs], axis=1)


def iq4_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of IQ4_NL/IQ4_XS records ``data`` (rows, row bytes): gguf-py's formulas, canonical NaN."""
    rows = data.shape[0]
    rec = data.reshape(-1, type_size)
    d = f16_values(rec[:, 0:2])
    qs = rec[:, 2:] if kind == 20 else rec[:, 8:]
    qs = qs.reshape(-1, 16).astype(np.int64)
    q = _KV[np.concatenate([qs & 0xF, qs >> 4], axis=1)]
    with np.errstate(invalid="ignore", over="ignore"):
        if kind == 20:
            v = d[:, None] * q
        else:
            low = rec[:, 4:8].astype(np.int64)
            high = rec[:, 2:4].copy().view("<u2")[:, 0].astype(np.int64)
            sc = np.stack([low & 0xF, low >> 4], axis=2).reshape(-1, 8) | (((high[:, None] >> (2 * np.arange(8))) & 3)
                                                                           << 4)
            dl = (d[:, None] * (sc - 32).astype(_F)).reshape(-1)
            v = dl[:, None] * q
    v = np.where(np.isnan(v), _F(np.nan), v)
    return v.reshape(rows, -1)
