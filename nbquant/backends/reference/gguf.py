"""The NumPy oracle of the GGUF 32-element block formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), written from ggml's formulas.

Vectorized across blocks, sequential inside one: every sum runs over the 32 elements
in order, in float32, one operation at a time (NumPy never fuses a multiply and an
add), as ggml's C does. It shares no code with :mod:`nbquant.element`, so the
compiled backends agreeing with it bit for bit is evidence.
"""

from __future__ import annotations

import numpy as np

__all__ = ["legacy_quantize", "legacy_dequantize", "f16_bytes", "f16_values", "nearest_int", "first_largest_magnitude",
           "qx_codes", "kx_codes", "seq_sum"]

_F = np.float32
_FLT_MAX = _F(np.finfo(np.float32).max)


def f16_bytes(v: np.ndarray) -> np.ndarray:
    """ggml's float16 store: RNE; a NaN is 0xfe00, x86's default NaN (its sign is not portable, so not read).
    Returns (..., 2) bytes."""
    with np.errstate(over="ignore", invalid="ignore"):
        h = v.astype(np.float16).view(np.uint16)
    h = np.where(np.isnan(v), np.uint16(0xFE00), h).astype("<u2")
    return h.view(np.uint8).reshape(*v.shape, 2)


def f16_values(b: np.ndarray) -> np.ndarray:
    """float32 of the little-endian float16 fields ``b`` (..., 2) uint8."""
    return np.ascontiguousarray(b).view("<f2")[..., 0].astype(_F)


def seq_sum(v: np.ndarray) -> np.ndarray:
    """Sum along the last axis, in order, in float32."""
    total = np.zeros(v.shape[:-1], _F)
    for j in range(v.shape[-1]):
        total = total + v[..., j]
    return total


def nearest_int(v: np.ndarray) -> np.ndarray:
    """ggml's ``nearest_int``; a NaN gives 0 (the low bits of x86's default NaN, whatever NaN came)."""
    f = v.astype(_F) + _F(12582912.0)
    w = f.view(np.int32)
    return np.where(np.isnan(f), 0, (w & 0x7FFFFF) - 0x400000).astype(np.int64)


def _to_int(v: np.ndarray) -> np.ndarray:
    """C's float to int conversion (toward zero); NaN and overflow give INT_MIN's low bits, 0."""
    with np.errstate(invalid="ignore"):
        t = np.trunc(v)
        return np.where(np.isfinite(t) & (np.abs(t) < 2.0**31), t, 0).astype(np.int64)


def _wrap_int8(t: np.ndarray) -> np.ndarray:
    return ((t + 128) & 255) - 128


def _first_absmax(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per block: the largest |x| and the first element holding it (NaN ignored; +0.0 when all zero)."""
    a = np.abs(x)
    a = np.where(np.isnan(a), _F(0), a)
    i = np.argmax(a, axis=1)
    amax = a[np.arange(x.shape[0]), i]
    return amax, np.where(amax > 0, x[np.arange(x.shape[0]), i], _F(0))


def first_largest_magnitude(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``v``: the largest ``|v|`` above 0 (else 0) and the signed value holding it, the first on a tie.

    ggml's ``if (fabsf(v) > amax) { amax = fabsf(v); max = v; }`` from 0, in order (NaN never wins).
    """
    amax = np.zeros(v.shape[0], _F)
    top = np.zeros(v.shape[0], _F)
    for j in range(v.shape[1]):
        bigger = np.abs(v[:, j]) > amax
        amax = np.where(bigger, np.abs(v[:, j]), amax)
        top = np.where(bigger, v[:, j], top)
    return amax, top


def _weights(x: np.ndarray, qw: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    return qw * np.sqrt(sigma2[:, None] + x * x)


def qx_codes(x: np.ndarray, w: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """``make_qx_quants(n, nmax, x, L, 1, w)`` per row of ``x`` (blocks, n): scales and codes (0 if all zero)."""
    amax, mx = _first_absmax(x)
    zero = amax < _F(1e-15)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _qx_search(x, w, nmax, mx, zero)


def _qx_search(x: np.ndarray, w: np.ndarray, nmax: int, mx: np.ndarray, zero: np.ndarray):
    def sums(iscale):
        lv = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1).astype(_F)
        sumlx = np.zeros(x.shape[0], _F)
        suml2 = np.zeros(x.shape[0], _F)
        for j in range(x.shape[1]):
            sumlx = sumlx + w[:, j] * x[:, j] * lv[:, j]
            suml2 = suml2 + w[:, j] * lv[:, j] * lv[:, j]
        return sumlx, suml2

    best_iscale = _F(-nmax) / mx
    sumlx, suml2 = sums(best_iscale)
    scale = np.where(suml2 != 0, sumlx / suml2, _F(0))
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(_F(nmax) + _F(0.1) * _F(step)) / mx
        sumlx, suml2 = sums(iscale)
        better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        best_iscale = np.where(better, iscale, best_iscale)
        scale = np.where(better, sumlx / suml2, scale)
        best = np.where(better, scale * sumlx, best)
    codes = nmax + np.clip(nearest_int(best_iscale[:, None] * x), -nmax, nmax - 1)
    return np.where(zero, _F(0), scale), np.where(zero[:, None], 0, codes)


def kx_codes(x: np.ndarray, w: np.ndarray, top: int, rmin: float = -0.9, rdelta: float = 0.05, nstep: int = 36,
             flat_below: bool = True, use_mad: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``make_qkx3_quants(n, top, x, w, L, &min, Laux, rmin, rdelta, nstep, use_mad)`` per row of ``x`` (blocks, n)
    (``make_qkx2_quants`` when ``flat_below`` is false: a block is flat when its max equals its min): scales, minima,
    codes."""
    n = x.shape[1]
    lo, hi = x[:, 0].copy(), x[:, 0].copy()
    sum_w = w[:, 0].copy()
    sum_x = sum_w * x[:, 0]
    for j in range(1, n):
        lo = np.where(x[:, j] < lo, x[:, j], lo)
        hi = np.where(x[:, j] > hi, x[:, j], hi)
        sum_w = sum_w + w[:, j]
        sum_x = sum_x + w[:, j] * x[:, j]
    lo = np.where(lo > 0, _F(0), lo)
    flat = (hi <= lo) if flat_below else (hi == lo)

    def codes(iscale, low):
        return np.clip(nearest_int(iscale[:, None] * (x - low[:, None])), 0, top)

    def mad(lv, scale, shift):
        total = np.zeros(x.shape[0], _F)
        for j in range(n):
            diff = scale * lv[:, j] + shift - x[:, j]
            total = total + w[:, j] * (np.abs(diff) if use_mad else diff * diff)
        return total

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = _F(top) / (hi - lo)
        scale = _F(1) / iscale
        best_iscale, best_low = iscale, lo.copy()
        best_mad = mad(codes(iscale, lo).astype(_F), scale, lo)
        for step in range(nstep + 1):
            low = lo.copy()
            iscale = ((_F(rmin) + _F(rdelta) * _F(step)) + _F(top)) / (hi - lo)
            lv = codes(iscale, low).astype(_F)
            sum_l = np.zeros(x.shape[0], _F)
            sum_l2 = np.zeros(x.shape[0], _F)
            sum_xl = np.zeros(x.shape[0], _F)
            for j in range(n):
                wl = w[:, j] * lv[:, j]
                sum_l = sum_l + wl
                sum_l2 = sum_l2 + wl * lv[:, j]
                sum_xl = sum_xl + wl * x[:, j]
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            positive = this_min > 0
            this_min = np.where(positive, _F(0), this_min)
            this_scale = np.where(positive, sum_xl / sum_l2, this_scale)
            better = (det > 0) & (mad(lv, this_scale, this_min) < best_mad)
            best_mad = np.where(better, mad(lv, this_scale, this_min), best_mad)
            best_iscale = np.where(better, iscale, best_iscale)
            best_low = np.where(better, low, best_low)
            scale = np.where(better, this_scale, scale)
            lo = np.where(better, this_min, lo)
        out = codes(best_iscale, best_low)
    return np.where(flat, _F(0), scale), lo, np.where(flat[:, None], 0, out)


def _pack(codes: np.ndarray, five: bool) -> np.ndarray:
    a, b = codes[:, :16], codes[:, 16:]
    if not five:
        return ((a | (b << 4)) & 0xFF).astype(np.uint8)
    qs = ((a & 0x0F) | ((b & 0x0F) << 4)).astype(np.uint8)
    qh = (((codes >> 4) & 1) << np.arange(32)).sum(axis=1).astype("<u4")
    return np.concatenate([qh.view(np.uint8).reshape(-1, 4), qs], axis=1)


def _blocks(kind: int, x: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """The records of the blocks ``x`` (blocks, 32), with per-element weights ``w`` or None."""
    if kind == 8:
        amax = np.zeros(x.shape[0], _F)
        for j in range(32):
            a = np.abs(x[:, j])
            amax = np.where(amax > a, amax, a)
        d = amax / _F(127)
        with np.errstate(divide="ignore"):
            inv = np.where(d != 0, _F(1) / d, _F(0))
        v = x * inv[:, None]
        t = _to_int(v)
        with np.errstate(invalid="ignore"):
            r = np.where(np.abs(v) < 2.0**31, v - t, 0)
        q = t + (r >= 0.5) - (r <= -0.5)
        return np.concatenate([f16_bytes(d), (q & 0xFF).astype(np.uint8)], axis=1)
    five = kind in (6, 7)
    if kind in (2, 6):
        nmax = 16 if five else 8
        if w is not None:
            d, codes = qx_codes(x, w, nmax)
        else:
            d = _first_absmax(x)[1] / _F(-nmax)
            with np.errstate(divide="ignore"):
                inv = np.where(d != 0, _F(1) / d, _F(0))
            t = _wrap_int8(_to_int(x * inv[:, None] + _F(nmax + 0.5)))
            codes = np.minimum(2 * nmax - 1, t) & 0xFF
        return np.concatenate([f16_bytes(d), _pack(codes, five)], axis=1)
    top = 31 if five else 15
    if w is not None:
        d, m, codes = kx_codes(x, w, top)
    else:
        rows = np.arange(x.shape[0])
        m = x[rows, np.argmin(np.where(np.isnan(x), _FLT_MAX, x), axis=1)]
        m = np.where(np.isnan(m), _FLT_MAX, m)
        hi = x[rows, np.argmax(np.where(np.isnan(x), -_FLT_MAX, x), axis=1)]
        hi = np.where(np.isnan(hi), -_FLT_MAX, hi)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            d = (hi - m) / _F(top)
            inv = np.where(d != 0, _F(1) / d, _F(0))
            t = _to_int((x - m[:, None]) * inv[:, None] + _F(0.5))
        codes = (np.minimum(15, _wrap_int8(t)) if top == 15 else t) & 0xFF
    return np.concatenate([f16_bytes(d), f16_bytes(m), _pack(codes, five)], axis=1)


def legacy_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """Records (rows, n / 32 * type_size) uint8 of ``x`` (rows, n) float32 in ggml type ``kind``; ``imatrix`` (n,)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # C's inf/NaN arithmetic, kept as is
        return _rows(kind, x, imatrix, type_size)


def _rows(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    rows, n = x.shape
    blocks = x.reshape(-1, 32)
    w = None
    if imatrix is not None and kind != 8:
        sigma2 = np.zeros(rows, _F)
        for j in range(n):
            sigma2 = sigma2 + x[:, j] * x[:, j]
        sigma2 = np.repeat(sigma2 / _F(n), n // 32)
        w = _weights(blocks, np.tile(imatrix.reshape(-1, 32), (rows, 1)), sigma2)
    return _blocks(kind, blocks, w).reshape(rows, x.shape[1] // 32 * type_size)


def legacy_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of the ``kind`` records ``data`` (rows, row bytes): gguf-py's formulas, canonical NaN."""
    rows = data.shape[0]
    rec = data.reshape(-1, type_size)
    d = rec[:, 0:2].copy().view(np.float16).astype(_F)
    with np.errstate(invalid="ignore"):
        v = _values(kind, rec, d)
    v = np.where(np.isnan(v), _F(np.nan), v)
    return v.reshape(rows, -1)


def _values(kind: int, rec: np.ndarray, d: np.ndarray) -> np.ndarray:
    if kind == 8:
        v = rec[:, 2:].view(np.int8).astype(_F) * d
    else:
        asym = kind in (3, 7)
        five = kind in (6, 7)
        start = 4 if asym else 2
        qh = rec[:, start:start + 4].copy().view("<u4")[:, 0] if five else np.zeros(rec.shape[0], np.uint32)
        qs = rec[:, start + (4 if five else 0):]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int64)
        q |= ((qh[:, None].astype(np.int64) >> np.arange(32)) & 1) << 4
        if asym:
            m = rec[:, 2:4].copy().view(np.float16).astype(_F)
            v = d * q.astype(_F) + m
        else:
            v = d * (q - (16 if five else 8)).astype(_F)
    return v
