"""ggml's scale searches, shared by the GGUF formats: ``make_qx_quants``, ``make_qkx2/3_quants``, ``make_qp_quants``.

Each search runs over the ``n`` values ``x[c:c + n]`` in ggml's order and float32
arithmetic (products through :func:`~nbquant.element.gguf_common.mul_f32`). The weights
are one of ggml's four choices (:func:`search_weight`). The searches keep no arrays of
codes: they return the parameters of the winning step, and the codes are recomputed
from them (:func:`qx_code`, :func:`kx_code`) with the same float32 operations.
"""

from __future__ import annotations

import math

import numpy as np

from .bits import element_function
from .gguf_common import mul_f32, nearest_int

__all__ = ["W_SQUARE", "W_SIGMA", "W_DIRECT", "W_AVX", "search_weight", "qx_search", "qx_code", "kx_search",
           "kx_code", "qp_search"]

#: Weight modes: ``x**2``; ``qw * sqrt(aux + x**2)``; ``qw``; ``aux + |x|``.
W_SQUARE, W_SIGMA, W_DIRECT, W_AVX = 0, 1, 2, 3
_EPS = np.float32(1e-15)  # ggml's GROUP_MAX_EPS


@element_function
def search_weight(x, qw, c, j, aux, wmode):
    """The weight of ``x[c + j]`` in mode ``wmode`` (``qw`` read at ``c + j``; ``aux`` a sigma2 or an average)."""
    v = np.float32(x[c + j])
    if wmode == W_SQUARE:
        return mul_f32(v, v)
    if wmode == W_SIGMA:
        return mul_f32(np.float32(qw[c + j]), np.float32(math.sqrt(np.float32(aux) + mul_f32(v, v))))
    if wmode == W_DIRECT:
        return np.float32(qw[c + j])
    return np.float32(aux) + abs(v)


@element_function
def _qx_sums(x, qw, c, n, aux, wmode, nmax, iscale):
    sumlx = np.float32(0.0)
    suml2 = np.float32(0.0)
    for j in range(n):
        v = np.float32(x[c + j])
        fl = np.float32(max(-nmax, min(nmax - 1, nearest_int(mul_f32(iscale, v)))))
        w = search_weight(x, qw, c, j, aux, wmode)
        sumlx = sumlx + mul_f32(mul_f32(w, v), fl)
        suml2 = suml2 + mul_f32(mul_f32(w, fl), fl)
    return sumlx, suml2


@element_function
def qx_search(x, qw, c, n, aux, wmode, nmax):
    """``make_qx_quants(n, nmax, x, L, 1, weights)``: ``(scale, iscale of the codes)``, iscale NaN if all zero."""
    mx = np.float32(0.0)
    amax = np.float32(0.0)
    for j in range(n):
        v = np.float32(x[c + j])
        if abs(v) > amax:
            amax = abs(v)
            mx = v
    if amax < _EPS:
        return np.float32(0.0), np.float32(np.nan)
    iscale = np.float32(-nmax) / mx
    best_iscale = iscale
    sumlx, suml2 = _qx_sums(x, qw, c, n, aux, wmode, nmax, iscale)
    scale = sumlx / suml2 if suml2 != 0 else np.float32(0.0)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(np.float32(nmax) + mul_f32(np.float32(0.1), np.float32(step))) / mx
        sumlx, suml2 = _qx_sums(x, qw, c, n, aux, wmode, nmax, iscale)
        if suml2 > 0 and mul_f32(sumlx, sumlx) > mul_f32(best, suml2):
            best_iscale = iscale
            scale = sumlx / suml2
            best = scale * sumlx
    return scale, best_iscale


@element_function
def qx_code(x, c, j, nmax, iscale):
    """``make_qx_quants``' code of ``x[c + j]``: ``nmax + clamp(nearest_int(iscale * x), -nmax, nmax - 1)``, or 0."""
    if iscale != iscale:
        return np.int64(0)
    return nmax + max(-nmax, min(nmax - 1, nearest_int(mul_f32(iscale, np.float32(x[c + j])))))


@element_function
def kx_code(x, c, j, top, iscale, low):
    """``make_qkx*_quants``' code of ``x[c + j]``: ``clamp(nearest_int(iscale * (x - low)), 0, top)``."""
    v = np.float32(x[c + j]) - np.float32(low)
    return max(np.int64(0), min(np.int64(top), nearest_int(mul_f32(iscale, v))))


@element_function
def _kx_error(x, qw, c, n, aux, wmode, top, iscale, low, scale, shift, use_mad):
    """``sum w * (scale * L + shift - x)**2`` (``|...|`` if ``use_mad``) over the codes of ``iscale`` and ``low``."""
    err = np.float32(0.0)
    for j in range(n):
        diff = (mul_f32(scale, np.float32(kx_code(x, c, j, top, iscale, low))) + shift) - np.float32(x[c + j])
        err = err + mul_f32(search_weight(x, qw, c, j, aux, wmode), abs(diff) if use_mad else mul_f32(diff, diff))
    return err


@element_function
def kx_search(x, qw, c, n, aux, wmode, top, rmin, rdelta, nstep, flat_below, use_mad):
    """``make_qkx2_quants`` (``flat_below`` false) / ``make_qkx3_quants`` (true) over ``n`` values.

    The error of a step is the weighted sum of squared differences, or of absolute ones
    if ``use_mad`` (ggml's ``use_mad``, which Q2_K's ``_ref`` rows set).

    Returns ``(scale, min, iscale, low)``: the scale and the (non-positive) minimum, and the
    ``iscale``/``low`` whose :func:`kx_code` are the codes.
    """
    lo = np.float32(x[c])
    hi = lo
    sum_w = search_weight(x, qw, c, 0, aux, wmode)
    sum_x = mul_f32(sum_w, lo)
    for j in range(1, n):
        v = np.float32(x[c + j])
        if v < lo:
            lo = v
        if v > hi:
            hi = v
        w = search_weight(x, qw, c, j, aux, wmode)
        sum_w = sum_w + w
        sum_x = sum_x + mul_f32(w, v)
    if lo > 0:
        lo = np.float32(0.0)
    if (hi <= lo) if flat_below else (hi == lo):
        return np.float32(0.0), lo, np.float32(0.0), lo
    ftop = np.float32(top)
    iscale = ftop / (hi - lo)
    scale = np.float32(1.0) / iscale
    best_iscale, best_low = iscale, lo
    best = _kx_error(x, qw, c, n, aux, wmode, top, iscale, lo, scale, lo, use_mad)
    for step in range(nstep + 1):
        low = lo
        iscale = ((np.float32(rmin) + mul_f32(np.float32(rdelta), np.float32(step))) + ftop) / (hi - lo)
        sum_l = np.float32(0.0)
        sum_l2 = np.float32(0.0)
        sum_xl = np.float32(0.0)
        for j in range(n):
            fl = np.float32(kx_code(x, c, j, top, iscale, low))
            wl = mul_f32(search_weight(x, qw, c, j, aux, wmode), fl)
            sum_l = sum_l + wl
            sum_l2 = sum_l2 + mul_f32(wl, fl)
            sum_xl = sum_xl + mul_f32(wl, np.float32(x[c + j]))
        det = mul_f32(sum_w, sum_l2) - mul_f32(sum_l, sum_l)
        if det > 0:
            this_scale = (mul_f32(sum_w, sum_xl) - mul_f32(sum_x, sum_l)) / det
            this_min = (mul_f32(sum_l2, sum_x) - mul_f32(sum_l, sum_xl)) / det
            if this_min > 0:
                this_min = np.float32(0.0)
                this_scale = sum_xl / sum_l2
            err = _kx_error(x, qw, c, n, aux, wmode, top, iscale, low, this_scale, this_min, use_mad)
            if err < best:
                best = err
                best_iscale, best_low = iscale, low
                scale = this_scale
                lo = this_min
    return scale, lo, best_iscale, best_low


@element_function
def qp_search(v, vo, n, nmax, w, wo, codes, co):
    """``make_qp_quants(n, nmax, v[vo:], L, w[wo:])``: the scale; the codes (as floats) into ``codes[co:co + n]``."""
    mx = np.float32(0.0)
    for i in range(n):
        t = np.float32(v[vo + i])
        mx = mx if mx > t else t
    if mx < _EPS:
        for i in range(n):
            codes[co + i] = np.float32(0.0)
        return np.float32(0.0)
    fmax = np.float32(nmax)
    iscale = fmax / mx
    scale = np.float32(1.0) / iscale
    best = np.float32(0.0)
    for i in range(n):
        t = np.float32(v[vo + i])
        diff = t - mul_f32(scale, np.float32(nearest_int(mul_f32(iscale, t))))
        best = best + mul_f32(mul_f32(np.float32(w[wo + i]), diff), diff)
    for step in range(-4, 5):
        if step == 0:
            continue
        iscale_is = (mul_f32(np.float32(0.1), np.float32(step)) + fmax) / mx
        scale_is = np.float32(1.0) / iscale_is
        err = np.float32(0.0)
        for i in range(n):
            t = np.float32(v[vo + i])
            q = min(np.int64(nmax), nearest_int(mul_f32(iscale_is, t)))
            diff = t - mul_f32(scale_is, np.float32(q))
            err = err + mul_f32(mul_f32(np.float32(w[wo + i]), diff), diff)
        if err < best:
            best = err
            iscale = iscale_is
    sumlx = np.float32(0.0)
    suml2 = np.float32(0.0)
    for i in range(n):
        t = np.float32(v[vo + i])
        fl = np.float32(min(np.int64(nmax), nearest_int(mul_f32(iscale, t))))
        codes[co + i] = fl
        wi = np.float32(w[wo + i])
        sumlx = sumlx + mul_f32(mul_f32(wi, t), fl)
        suml2 = suml2 + mul_f32(mul_f32(wi, fl), fl)
    for _ in range(5):
        changed = 0
        for i in range(n):
            t = np.float32(v[vo + i])
            wi = np.float32(w[wo + i])
            fl = np.float32(codes[co + i])
            slx = sumlx - mul_f32(mul_f32(wi, t), fl)
            sl2 = suml2 - mul_f32(mul_f32(wi, fl), fl)
            if slx > 0 and sl2 > 0:
                new = np.float32(min(np.int64(nmax), nearest_int(mul_f32(t, sl2) / slx)))
                if new != fl:
                    slx = slx + mul_f32(mul_f32(wi, t), new)
                    sl2 = sl2 + mul_f32(mul_f32(wi, new), new)
                    if mul_f32(mul_f32(slx, slx), suml2) > mul_f32(mul_f32(sumlx, sumlx), sl2):
                        codes[co + i] = new
                        sumlx = slx
                        suml2 = sl2
                        changed += 1
        if changed == 0:
            break
    return sumlx / suml2 if suml2 > 0 else np.float32(0.0)
