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
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .bits import element_function, pick
from .gguf_common import largest_magnitude, mul_f32, nearest_int

__all__ = ["W_SQUARE", "W_SIGMA", "W_DIRECT", "W_AVX", "search_weight", "qx_search", "qx_level", "qx_code",
           "kx_search", "kx_code", "kx_level", "kx_stored_level", "nearest_clamped", "kx_err_term", "kx_step_iscale",
           "kx_solve", "kx_search_lanes", "KX_SCALE", "KX_MIN", "KX_ISCALE", "KX_LOW", "KX_STATE_ROWS", "KX_ACC_ROWS",
           "qx_step_iscale", "qx_better", "qx_search_lanes", "largest_magnitude_lanes", "QX_SCALE", "QX_ISCALE",
           "QX_STATE_ROWS", "qp_search"]

#: Weight modes: ``x**2``; ``qw * sqrt(aux + x**2)``; ``qw``; ``aux + |x|``.
W_SQUARE, W_SIGMA, W_DIRECT, W_AVX = 0, 1, 2, 3
_EPS = np.float32(1e-15)  # ggml's GROUP_MAX_EPS
_I32 = ir.IntType(32)


@intrinsic
def _clamped_low_bits(typingctx, w, lo, hi):
    """``float(clamp((bits(w) & 0x7FFFFF) - 0x400000, lo, hi))`` in 32-bit integers (no 64-bit lane in a loop); a
    NaN ``w`` counts as 0, as in :func:`~nbquant.element.gguf_common.nearest_int`."""
    if w != types.float32:
        return None

    def codegen(context, builder, signature, args):
        low = builder.sub(builder.and_(builder.bitcast(args[0], _I32), ir.Constant(_I32, 0x7FFFFF)),
                          ir.Constant(_I32, 0x400000))
        low = builder.select(builder.fcmp_unordered("uno", args[0], args[0]), ir.Constant(_I32, 0), low)
        bottom, top = builder.trunc(args[1], _I32), builder.trunc(args[2], _I32)
        low = builder.select(builder.icmp_signed(">", low, top), top, low)
        low = builder.select(builder.icmp_signed("<", low, bottom), bottom, low)
        return builder.sitofp(low, ir.FloatType())

    return types.float32(types.float32, types.int64, types.int64), codegen


@element_function
def nearest_clamped(v, lo, hi):
    """``float32(clamp(nearest_int(v), lo, hi))`` (``lo <= hi`` small integers), computed in 32-bit lanes."""
    return _clamped_low_bits(np.float32(np.float32(v) + np.float32(12582912.0)), np.int64(lo), np.int64(hi))


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
        fl = nearest_clamped(mul_f32(iscale, v), -nmax, nmax - 1)
        w = search_weight(x, qw, c, j, aux, wmode)
        sumlx = sumlx + mul_f32(mul_f32(w, v), fl)
        suml2 = suml2 + mul_f32(mul_f32(w, fl), fl)
    return sumlx, suml2


@element_function
def qx_step_iscale(nmax, step, mx):
    """The inverse scale that step ``step`` of ``make_qx_quants`` tries: ``-(nmax + 0.1 * step) / mx``."""
    return -(np.float32(nmax) + mul_f32(np.float32(0.1), np.float32(step))) / mx


@element_function
def qx_better(sumlx, suml2, best):
    """Whether a ``make_qx_quants`` step's sums beat the best so far."""
    return (suml2 > 0) & (mul_f32(sumlx, sumlx) > mul_f32(best, suml2))  # no short circuit: no branch


@element_function
def qx_search(x, qw, c, n, aux, wmode, nmax):
    """``make_qx_quants(n, nmax, x, L, 1, weights)``: ``(scale, iscale of the codes)``, iscale NaN if all zero."""
    amax, mx = largest_magnitude(x, c, n)
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
        iscale = qx_step_iscale(nmax, step, mx)
        sumlx, suml2 = _qx_sums(x, qw, c, n, aux, wmode, nmax, iscale)
        if qx_better(sumlx, suml2, best):
            best_iscale = iscale
            scale = sumlx / suml2
            best = scale * sumlx
    return scale, best_iscale


@element_function
def qx_level(v, nmax, iscale):
    """``make_qx_quants``' code of ``v`` as float32: ``nmax + clamp(nearest_int(iscale * v), -nmax, nmax - 1)``, or
    0 where ``iscale`` is NaN (an all-zero block)."""
    code = nearest_clamped(mul_f32(iscale, np.float32(v)), -nmax, nmax - 1) + np.float32(nmax)
    return np.float32(0.0) if iscale != iscale else code


@element_function
def qx_code(x, c, j, nmax, iscale):
    """:func:`qx_level` of ``x[c + j]`` as an integer."""
    return np.int64(qx_level(x[c + j], nmax, iscale))


@element_function
def kx_level(v, iscale, low, top):
    """``make_qkx*_quants``' code of the value ``v`` as float32: ``clamp(nearest_int(iscale * (v - low)), 0, top)``."""
    return nearest_clamped(mul_f32(iscale, np.float32(v) - np.float32(low)), 0, top)


@element_function
def kx_stored_level(v, top, d, m, iscale, low):
    """A K-quant code (float32) of ``v`` under the stored scale ``d`` and min ``m``: ``clamp(nearest_int((v + m) / d),
    0, top)``; where ``d`` is 0, the search's code (:func:`kx_level` of ``iscale`` and ``low``)."""
    searched = kx_level(v, iscale, low, top)
    stored = nearest_clamped((np.float32(v) + np.float32(m)) / np.float32(d), 0, top)
    return searched if d == 0 else stored


@element_function
def kx_code(x, c, j, top, iscale, low):
    """:func:`kx_level` of ``x[c + j]`` as an integer."""
    return np.int64(kx_level(x[c + j], iscale, low, top))


@element_function
def kx_err_term(v, w, fl, scale, shift, use_mad):
    """One value's error term ``w * (scale * fl + shift - v)**2`` (``w * |...|`` if ``use_mad``)."""
    diff = (mul_f32(scale, fl) + np.float32(shift)) - np.float32(v)
    return mul_f32(w, abs(diff) if use_mad else mul_f32(diff, diff))


@element_function
def kx_step_iscale(rmin, rdelta, step, top, hi, lo):
    """The inverse scale that step ``step`` of the search tries: ``(rmin + rdelta * step + top) / (hi - lo)``."""
    return ((np.float32(rmin) + mul_f32(np.float32(rdelta), np.float32(step))) + np.float32(top)) / (hi - lo)


@element_function
def kx_solve(sum_w, sum_x, sum_l, sum_l2, sum_xl):
    """The least-squares ``(det, scale, min)`` of a step's sums (a positive min refitted as 0)."""
    det = mul_f32(sum_w, sum_l2) - mul_f32(sum_l, sum_l)
    this_scale = (mul_f32(sum_w, sum_xl) - mul_f32(sum_x, sum_l)) / det
    this_min = (mul_f32(sum_l2, sum_x) - mul_f32(sum_l, sum_xl)) / det
    if this_min > 0:
        this_min = np.float32(0.0)
        this_scale = sum_xl / sum_l2
    return det, this_scale, this_min


@element_function
def _kx_error(x, qw, c, n, aux, wmode, top, iscale, low, scale, shift, use_mad):
    """``sum w * (scale * L + shift - x)**2`` (``|...|`` if ``use_mad``) over the codes of ``iscale`` and ``low``."""
    err = np.float32(0.0)
    for j in range(n):
        v = np.float32(x[c + j])
        fl = kx_level(v, iscale, low, top)
        err = err + kx_err_term(v, search_weight(x, qw, c, j, aux, wmode), fl, scale, shift, use_mad)
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
        iscale = kx_step_iscale(rmin, rdelta, step, ftop, hi, lo)
        sum_l = np.float32(0.0)
        sum_l2 = np.float32(0.0)
        sum_xl = np.float32(0.0)
        for j in range(n):
            v = np.float32(x[c + j])
            fl = kx_level(v, iscale, low, top)
            wl = mul_f32(search_weight(x, qw, c, j, aux, wmode), fl)
            sum_l = sum_l + wl
            sum_l2 = sum_l2 + mul_f32(wl, fl)
            sum_xl = sum_xl + mul_f32(wl, v)
        det, this_scale, this_min = kx_solve(sum_w, sum_x, sum_l, sum_l2, sum_xl)
        if det > 0:
            err = _kx_error(x, qw, c, n, aux, wmode, top, iscale, low, this_scale, this_min, use_mad)
            if err < best:
                best = err
                best_iscale, best_low = iscale, low
                scale = this_scale
                lo = this_min
    return scale, lo, best_iscale, best_low


#: Rows of :func:`kx_search_lanes`' state array: its results (scale, min, codes' iscale and low), then its work.
KX_SCALE, KX_MIN, KX_ISCALE, KX_LOW = 0, 1, 2, 3
_HI, _SUM_W, _SUM_X, _BEST, _STEP_ISCALE, _STEP_LOW, _THIS_SCALE, _THIS_MIN, _DET, _FLAT_LO, _FLAT = range(4, 15)
#: Rows of the state (``st``) and accumulator (``acc``) arrays of :func:`kx_search_lanes`.
KX_STATE_ROWS, KX_ACC_ROWS = 15, 4


@element_function
def _kx_error_lanes(xt, wt, lt, st, acc, lanes, n, use_mad):
    """:func:`_kx_error` of each lane over the codes ``lt[:n, lane]`` into ``acc[3]``."""
    for lane in range(lanes):
        acc[3, lane] = np.float32(0.0)
    for j in range(n):
        for lane in range(lanes):
            acc[3, lane] = acc[3, lane] + kx_err_term(xt[j, lane], wt[j, lane], lt[j, lane], st[_THIS_SCALE, lane],
                                                      st[_THIS_MIN, lane], use_mad)


@element_function
def kx_search_lanes(xt, wt, lt, st, acc, lanes, n, top, rmin, rdelta, nstep, flat_below, use_mad):
    """:func:`kx_search` of ``lanes`` blocks side by side: block ``l``'s values ``xt[:n, l]``, weights ``wt[:n, l]``.

    Each lane accumulates in :func:`kx_search`'s order, so its results are the same bits;
    the loops over lanes have no dependence between iterations, which the compiler turns
    into vector instructions. A lane's results are ``st[KX_SCALE, l]``, ``st[KX_MIN, l]``,
    ``st[KX_ISCALE, l]`` and ``st[KX_LOW, l]``; ``lt`` (``n``, ``>= lanes``, a step's codes),
    ``st`` (``KX_STATE_ROWS``, ``>= lanes``) and ``acc`` (``KX_ACC_ROWS``, ``>= lanes``) are float32 scratch.
    """
    for lane in range(lanes):
        v = xt[0, lane]
        w = wt[0, lane]
        st[KX_MIN, lane] = v
        st[_HI, lane] = v
        st[_SUM_W, lane] = w
        st[_SUM_X, lane] = mul_f32(w, v)
    for j in range(1, n):
        for lane in range(lanes):
            v = xt[j, lane]
            w = wt[j, lane]
            st[KX_MIN, lane] = pick(v < st[KX_MIN, lane], v, st[KX_MIN, lane])
            st[_HI, lane] = pick(v > st[_HI, lane], v, st[_HI, lane])
            st[_SUM_W, lane] = st[_SUM_W, lane] + w
            st[_SUM_X, lane] = st[_SUM_X, lane] + mul_f32(w, v)
    ftop = np.float32(top)
    for lane in range(lanes):
        lo = st[KX_MIN, lane]
        lo = np.float32(0.0) if lo > 0 else lo
        hi = st[_HI, lane]
        st[KX_MIN, lane] = lo
        st[_FLAT_LO, lane] = lo
        st[_FLAT, lane] = np.float32(1.0 if ((hi <= lo) if flat_below else (hi == lo)) else 0.0)
        iscale = ftop / (hi - lo)
        st[_STEP_ISCALE, lane] = iscale
        st[_STEP_LOW, lane] = lo
        st[_THIS_SCALE, lane] = np.float32(1.0) / iscale
        st[_THIS_MIN, lane] = lo
        st[KX_SCALE, lane] = np.float32(1.0) / iscale
        st[KX_ISCALE, lane] = iscale
        st[KX_LOW, lane] = lo
    for j in range(n):
        for lane in range(lanes):
            lt[j, lane] = kx_level(xt[j, lane], st[_STEP_ISCALE, lane], st[_STEP_LOW, lane], top)
    _kx_error_lanes(xt, wt, lt, st, acc, lanes, n, use_mad)
    for lane in range(lanes):
        st[_BEST, lane] = acc[3, lane]
    for step in range(nstep + 1):
        for lane in range(lanes):
            st[_STEP_ISCALE, lane] = kx_step_iscale(rmin, rdelta, step, ftop, st[_HI, lane], st[KX_MIN, lane])
            st[_STEP_LOW, lane] = st[KX_MIN, lane]
            acc[0, lane] = np.float32(0.0)
            acc[1, lane] = np.float32(0.0)
            acc[2, lane] = np.float32(0.0)
        for j in range(n):
            for lane in range(lanes):
                v = xt[j, lane]
                fl = kx_level(v, st[_STEP_ISCALE, lane], st[_STEP_LOW, lane], top)
                lt[j, lane] = fl
                wl = mul_f32(wt[j, lane], fl)
                acc[0, lane] = acc[0, lane] + wl
                acc[1, lane] = acc[1, lane] + mul_f32(wl, fl)
                acc[2, lane] = acc[2, lane] + mul_f32(wl, v)
        for lane in range(lanes):
            det, this_scale, this_min = kx_solve(st[_SUM_W, lane], st[_SUM_X, lane], acc[0, lane], acc[1, lane],
                                                 acc[2, lane])
            st[_DET, lane] = det
            st[_THIS_SCALE, lane] = this_scale
            st[_THIS_MIN, lane] = this_min
        _kx_error_lanes(xt, wt, lt, st, acc, lanes, n, use_mad)
        for lane in range(lanes):  # kx_search's update where det > 0 and the error is lower, as selects
            better = (st[_DET, lane] > 0) & (acc[3, lane] < st[_BEST, lane])
            st[_BEST, lane] = pick(better, acc[3, lane], st[_BEST, lane])
            st[KX_ISCALE, lane] = pick(better, st[_STEP_ISCALE, lane], st[KX_ISCALE, lane])
            st[KX_LOW, lane] = pick(better, st[_STEP_LOW, lane], st[KX_LOW, lane])
            st[KX_SCALE, lane] = pick(better, st[_THIS_SCALE, lane], st[KX_SCALE, lane])
            st[KX_MIN, lane] = pick(better, st[_THIS_MIN, lane], st[KX_MIN, lane])
    for lane in range(lanes):  # a flat block: kx_search's early return
        flat = st[_FLAT, lane] != 0
        lo = st[_FLAT_LO, lane]
        st[KX_SCALE, lane] = pick(flat, np.float32(0.0), st[KX_SCALE, lane])
        st[KX_MIN, lane] = pick(flat, lo, st[KX_MIN, lane])
        st[KX_ISCALE, lane] = pick(flat, np.float32(0.0), st[KX_ISCALE, lane])
        st[KX_LOW, lane] = pick(flat, lo, st[KX_LOW, lane])


#: Rows of :func:`qx_search_lanes`' state array: its results (scale, codes' iscale), then its work.
QX_SCALE, QX_ISCALE = 0, 1
_QX_MX, _QX_AMAX, _QX_STEP, _QX_BEST = 2, 3, 4, 5
QX_STATE_ROWS = 6


@element_function
def _qx_sums_lanes(xt, wt, st, acc, lanes, n, nmax):
    """:func:`_qx_sums` of each lane at the inverse scale ``st[_QX_STEP]``: sumlx into ``acc[0]``, suml2 ``acc[1]``."""
    for lane in range(lanes):
        acc[0, lane] = np.float32(0.0)
        acc[1, lane] = np.float32(0.0)
    for j in range(n):
        for lane in range(lanes):
            v = xt[j, lane]
            w = wt[j, lane]
            fl = nearest_clamped(mul_f32(st[_QX_STEP, lane], v), -nmax, nmax - 1)
            acc[0, lane] = acc[0, lane] + mul_f32(mul_f32(w, v), fl)
            acc[1, lane] = acc[1, lane] + mul_f32(mul_f32(w, fl), fl)


@element_function
def largest_magnitude_lanes(xt, st, amax_row, mx_row, lanes, n):
    """:func:`~nbquant.element.gguf_common.largest_magnitude` of ``lanes`` blocks side by side (block ``l`` is
    ``xt[:n, l]``): the magnitudes to ``st[amax_row]``, the values holding them to ``st[mx_row]``."""
    for lane in range(lanes):
        st[mx_row, lane] = np.float32(0.0)
        st[amax_row, lane] = np.float32(0.0)
    for j in range(n):
        for lane in range(lanes):
            v = xt[j, lane]
            amax = st[amax_row, lane]  # both loaded before the selects: a load in a branch vectorizes masked
            mx = st[mx_row, lane]
            bigger = abs(v) > amax
            st[amax_row, lane] = pick(bigger, abs(v), amax)
            st[mx_row, lane] = pick(bigger, v, mx)


@element_function
def qx_search_lanes(xt, wt, st, acc, lanes, n, nmax):
    """:func:`qx_search` of ``lanes`` blocks side by side: block ``l``'s values ``xt[:n, l]``, weights ``wt[:n, l]``.

    Each lane keeps :func:`qx_search`'s float32 order (the same bits); its results are
    ``st[QX_SCALE, l]`` and ``st[QX_ISCALE, l]``. ``st`` (``QX_STATE_ROWS``, ``>= lanes``)
    and ``acc`` (2, ``>= lanes``) are float32 scratch.
    """
    largest_magnitude_lanes(xt, st, _QX_AMAX, _QX_MX, lanes, n)
    for lane in range(lanes):
        st[_QX_STEP, lane] = np.float32(-nmax) / st[_QX_MX, lane]
    _qx_sums_lanes(xt, wt, st, acc, lanes, n, nmax)
    for lane in range(lanes):
        sumlx, suml2 = acc[0, lane], acc[1, lane]
        scale = sumlx / suml2 if suml2 != 0 else np.float32(0.0)
        st[QX_SCALE, lane] = scale
        st[QX_ISCALE, lane] = st[_QX_STEP, lane]
        st[_QX_BEST, lane] = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        for lane in range(lanes):
            st[_QX_STEP, lane] = qx_step_iscale(nmax, step, st[_QX_MX, lane])
        _qx_sums_lanes(xt, wt, st, acc, lanes, n, nmax)
        for lane in range(lanes):  # qx_search's update, as selects
            sumlx, suml2 = acc[0, lane], acc[1, lane]
            better = qx_better(sumlx, suml2, st[_QX_BEST, lane])
            scale = sumlx / suml2
            st[QX_ISCALE, lane] = pick(better, st[_QX_STEP, lane], st[QX_ISCALE, lane])
            st[QX_SCALE, lane] = pick(better, scale, st[QX_SCALE, lane])
            st[_QX_BEST, lane] = pick(better, scale * sumlx, st[_QX_BEST, lane])
    for lane in range(lanes):  # an all-zero block: qx_search's early return
        tiny = st[_QX_AMAX, lane] < _EPS
        st[QX_SCALE, lane] = pick(tiny, np.float32(0.0), st[QX_SCALE, lane])
        st[QX_ISCALE, lane] = pick(tiny, np.float32(np.nan), st[QX_ISCALE, lane])


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
