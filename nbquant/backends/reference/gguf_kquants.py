"""The NumPy oracle of the GGUF K-quants Q4_K, Q5_K and Q6_K, written from ggml's formulas.

Vectorized across super-blocks (and sub-blocks), sequential inside one, in float32, as
:mod:`nbquant.backends.reference.gguf` is. Shares no code with :mod:`nbquant.element`.
"""

from __future__ import annotations

import numpy as np

from .gguf import f16_bytes, f16_values, first_largest_magnitude, kx_codes, nearest_int, qx_codes, seq_sum

__all__ = ["kquant_quantize", "kquant_dequantize", "qp_codes", "super_block_quantizer", "super_block_rows"]

_F = np.float32
_EPS = _F(1e-15)


def qp_codes(v: np.ndarray, w: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """``make_qp_quants(n, nmax, v, L, w)`` per row of ``v`` (blocks, n): scales and codes."""
    mx = np.zeros(v.shape[0], _F)
    for i in range(v.shape[1]):
        mx = np.where(mx > v[:, i], mx, v[:, i])
    zero = mx < _EPS
    fmax = _F(nmax)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = fmax / mx
        scale = _F(1) / iscale
        best = seq_sum(w * (d := v - scale[:, None] * nearest_int(iscale[:, None] * v).astype(_F)) * d)
        for step in range(-4, 5):
            if step == 0:
                continue
            iscale_is = (_F(0.1) * _F(step) + fmax) / mx
            scale_is = _F(1) / iscale_is
            q = np.minimum(nmax, nearest_int(iscale_is[:, None] * v)).astype(_F)
            err = seq_sum(w * (d := v - scale_is[:, None] * q) * d)
            better = err < best
            best = np.where(better, err, best)
            iscale = np.where(better, iscale_is, iscale)
        codes = np.minimum(nmax, nearest_int(iscale[:, None] * v)).astype(_F)
        sumlx = seq_sum(w * v * codes)
        suml2 = seq_sum(w * codes * codes)
        for _ in range(5):  # a pass that changes nothing leaves the state as it is, so ggml's early stop is implied
            for i in range(v.shape[1]):
                wi, vi, li = w[:, i], v[:, i], codes[:, i]
                slx = sumlx - wi * vi * li
                sl2 = suml2 - wi * li * li
                new = np.minimum(nmax, nearest_int(vi * sl2 / slx)).astype(_F)
                slx_new = slx + wi * vi * new
                sl2_new = sl2 + wi * new * new
                take = (slx > 0) & (sl2 > 0) & (new != li) & (slx_new * slx_new * suml2 > sumlx * sumlx * sl2_new)
                codes[:, i] = np.where(take, new, li)
                sumlx = np.where(take, slx_new, sumlx)
                suml2 = np.where(take, sl2_new, suml2)
        result = np.where(suml2 > 0, sumlx / suml2, _F(0))
    return np.where(zero, _F(0), result), np.where(zero[:, None], _F(0), codes).astype(np.int64)


def _pack_scales(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """The 12 scale bytes of Q4_K/Q5_K from 6-bit scales and mins (blocks, 8)."""
    out = np.zeros((ls.shape[0], 12), np.int64)
    out[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    out[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    return (out & 0xFF).astype(np.uint8)


def _unpack_scales(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    b = b.astype(np.int64)
    sc = np.concatenate([b[:, 0:4] & 63, (b[:, 8:12] & 0xF) | ((b[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([b[:, 4:8] & 63, (b[:, 8:12] >> 4) | ((b[:, 4:8] >> 6) << 4)], axis=1)
    return sc, m


def _kmin(x: np.ndarray, qw: np.ndarray | None, top: int) -> np.ndarray:
    """Q4_K (``top`` 15) / Q5_K (31) records of the super-blocks ``x`` (blocks, 256)."""
    nsb = x.shape[0]
    sub = x.reshape(-1, 32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if qw is None:
            av_x = np.sqrt(seq_sum(sub * sub) / _F(32))
            w = av_x[:, None] + np.abs(sub)
            params = (-1.0, 0.1, 20) if top == 15 else (-0.5, 0.1, 15)
            scales, lows, search = kx_codes(sub, w, top, *params, flat_below=False)
        else:
            sigma2 = _F(2) * seq_sum(x * x) / _F(256)
            w = (qw * np.sqrt(sigma2[:, None] + x * x)).reshape(-1, 32)
            scales, lows, search = kx_codes(sub, w, top, -0.9, 0.05, 36, flat_below=True)
        scales, mins = scales.reshape(nsb, 8), (-lows).reshape(nsb, 8)
        if qw is None:
            max_scale = np.zeros(nsb, _F)
            max_min = np.zeros(nsb, _F)
            for j in range(8):
                max_scale = np.where(scales[:, j] > max_scale, scales[:, j], max_scale)
                max_min = np.where(mins[:, j] > max_min, mins[:, j], max_min)
            inv_scale = np.where(max_scale > 0, _F(63) / max_scale, _F(0))
            inv_min = np.where(max_min > 0, _F(63) / max_min, _F(0))
            ls = np.minimum(63, nearest_int(inv_scale[:, None] * scales) & 0xFF)
            lm = np.minimum(63, nearest_int(inv_min[:, None] * mins) & 0xFF)
            d, dmin = max_scale / _F(63), max_min / _F(63)
        else:
            sw = seq_sum(w).reshape(nsb, 8)
            d, ls = qp_codes(scales, sw, 63)
            dmin, lm = qp_codes(mins, sw, 63)
        packed = _pack_scales(ls, lm)
        d16, m16 = f16_bytes(d), f16_bytes(dmin)
        sc, m = _unpack_scales(packed)
        d_eff = (f16_values(d16)[:, None] * sc.astype(_F)).reshape(-1)
        dm = (f16_values(m16)[:, None] * m.astype(_F)).reshape(-1)
        codes = np.clip(nearest_int((sub + dm[:, None]) / d_eff[:, None]), 0, top)
    codes = np.where(d_eff[:, None] == 0, search, codes).reshape(nsb, 4, 2, 32)
    low, high = codes[:, :, 0], codes[:, :, 1]
    parts = [d16, m16, packed]
    if top == 31:
        shift = (2 * np.arange(4))[None, :, None]
        bits = ((low >> 4) << shift) | ((high >> 4) << (shift + 1))
        parts.append(bits.sum(axis=1).astype(np.uint8))
    qs = ((low & 0xF) | ((high & 0xF) << 4)).astype(np.uint8).reshape(nsb, 128)
    return np.concatenate(parts + [qs], axis=1)


def _q6k(x: np.ndarray, qw: np.ndarray | None) -> np.ndarray:
    nsb = x.shape[0]
    sub = x.reshape(-1, 16)
    with np.errstate(over="ignore"):
        w = sub * sub if qw is None else qw.reshape(-1, 16)
    scales, search = qx_codes(sub, w, 32)
    scales = scales.reshape(nsb, 16)
    max_abs, max_scale = first_largest_magnitude(scales)
    zero = max_abs < _EPS
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = _F(-128) / max_scale
        d16 = f16_bytes(_F(1) / iscale)
        sc = np.minimum(127, nearest_int(iscale[:, None] * scales))
        sc8 = ((sc & 0xFF) ^ 0x80) - 0x80
        d_eff = (f16_values(d16)[:, None] * sc8.astype(_F)).reshape(-1)
        codes = np.clip(nearest_int(sub / d_eff[:, None]), -32, 31) + 32
    codes = np.where(d_eff[:, None] == 0, search, codes).reshape(nsb, 2, 4, 32)
    ql = np.concatenate([(codes[:, :, 0] & 0xF) | ((codes[:, :, 2] & 0xF) << 4),
                         (codes[:, :, 1] & 0xF) | ((codes[:, :, 3] & 0xF) << 4)], axis=2).reshape(nsb, 128)
    qh = ((codes >> 4) << (2 * np.arange(4))[None, None, :, None]).sum(axis=2).reshape(nsb, 64)
    rec = np.concatenate([ql, qh, sc & 0xFF, np.zeros((nsb, 2), np.int64)], axis=1).astype(np.uint8)
    rec[:, 208:210] = d16
    return np.where(zero[:, None], np.uint8(0), rec)


def kquant_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """Records (rows, n / 256 * type_size) of ``x`` (rows, n) float32 in ggml type ``kind`` (12, 13 or 14)."""
    return super_block_rows(lambda b, qw: _q6k(b, qw) if kind == 14 else _kmin(b, qw, 15 if kind == 12 else 31),
                            x, imatrix, type_size)


def super_block_rows(records, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """``records(blocks, qw)`` over the super-blocks of ``x`` (rows, n), reshaped to rows (rows, n / 256 * type_size).

    ``blocks`` is (super-blocks, 256) and ``qw`` the importance of each of their values, or None.
    """
    rows, n = x.shape
    qw = None if imatrix is None else np.tile(imatrix.reshape(-1, 256), (rows, 1))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # C's inf/NaN arithmetic, kept as is
        out = records(x.reshape(-1, 256), qw)
    return out.reshape(rows, n // 256 * type_size)


def super_block_quantizer(records, name: str):
    """The reference quantize function ``(kind, x, imatrix, type_size)`` of a format whose ``records(blocks, qw)``
    encodes super-blocks (:func:`super_block_rows`); ``name`` is the format's, for the docstring."""

    def quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
        return super_block_rows(records, x, imatrix, type_size)

    quantize.__doc__ = (f"{name} records (rows, n / 256 * type_size) of ``x`` (rows, n) float32; "
                        "``imatrix`` (n,) or None.")
    quantize.__name__ = quantize.__qualname__ = f"{name.lower().replace('_', '')}_quantize"
    return quantize


def kquant_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of the K-quant records ``data`` (rows, row bytes): gguf-py's formulas, canonical NaN."""
    rows = data.shape[0]
    rec = data.reshape(-1, type_size)
    with np.errstate(invalid="ignore", over="ignore"):
        if kind == 14:
            ql = rec[:, 0:128].reshape(-1, 2, 1, 64).astype(np.int64) >> np.array([0, 4]).reshape(1, 1, 2, 1)
            qh = rec[:, 128:192].reshape(-1, 2, 1, 32).astype(np.int64) >> np.array([0, 2, 4, 6]).reshape(1, 1, 4, 1)
            q = ((ql & 0xF).reshape(-1, 2, 4, 32) | ((qh & 3) << 4)).reshape(-1, 16, 16) - 32
            scale = f16_values(rec[:, 208:210])[:, None] * rec[:, 192:208].view(np.int8).astype(_F)
            v = scale[:, :, None] * q.astype(_F)
        else:
            sc, m = _unpack_scales(rec[:, 4:16])
            d = f16_values(rec[:, 0:2])[:, None] * sc.astype(_F)
            dm = f16_values(rec[:, 2:4])[:, None] * m.astype(_F)
            qs = rec[:, -128:].reshape(-1, 4, 1, 32).astype(np.int64) >> np.array([0, 4]).reshape(1, 1, 2, 1)
            q = (qs & 0xF).reshape(-1, 8, 32)
            if kind == 13:
                q = q | (((rec[:, 16:48].astype(np.int64)[:, None, :] >> np.arange(8)[None, :, None]) & 1) << 4)
            v = d[:, :, None] * q.astype(_F) - dm[:, :, None]
    v = np.where(np.isnan(v), _F(np.nan), v)
    return v.reshape(rows, -1)
