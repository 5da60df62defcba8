"""GGUF Q2_K, Q3_K, IQ4_XS (and IQ4_NL) quantize with the searches of several (super-)blocks side by side.

The searches of ``nb`` super-blocks run as the lanes of one search: the values are
transposed so that lane ``l`` holds sub-block ``l`` (``xt[i, l]``, its weights ``wt[i, l]``),
and every loop over lanes has no dependence between iterations, which the compiler turns
into vector instructions. Each lane computes with the step functions of the one-block
search (:func:`~nbquant.element.gguf_q3k.q3_refine`,
:func:`~nbquant.element.gguf_iq4.iq4_accumulate`, ...) in its order, so the records are
the same bits; the records are then written per super-block by the one-block functions
(:func:`~nbquant.element.gguf_q2k.q2k_record`, ...). Scratch, all float32: ``xt``, ``wt``,
``lt`` (32, ``>= lanes``), ``st`` (:data:`LANE_STATE_ROWS`, ``>= lanes``), ``acc``
(:data:`LANE_ACC_ROWS`, ``>= lanes``), ``fs`` (``SCRATCH`` of :mod:`~nbquant.element.gguf_kquants`).
"""

from __future__ import annotations

import numpy as np

from .bits import element_function, pick
from .gguf_common import mul_f32
from .gguf_iq4 import KVALUES, iq4_accumulate, iq4_better, iq4_nl_record, iq4_sigma2, iq4_try_inv, iq4_xs_record
from .gguf_q2k import q2k_record, q2k_search_params, q2k_sigma2
from .gguf_q3k import q3_add, q3_level, q3_refine, q3k_record, q3k_sigma2
from .gguf_search import (
    KX_ACC_ROWS,
    KX_ISCALE,
    KX_LOW,
    KX_MIN,
    KX_SCALE,
    KX_STATE_ROWS,
    QX_ISCALE,
    QX_SCALE,
    QX_STATE_ROWS,
    W_SIGMA,
    W_SQUARE,
    kx_search_lanes,
    largest_magnitude_lanes,
    qx_search_lanes,
    search_weight,
)

__all__ = ["LANE_STATE_ROWS", "LANE_ACC_ROWS", "q3_search_lanes", "iq4_search_lanes", "q2k_blocks", "q3k_blocks",
           "iq4_xs_blocks",
           "iq4_nl_blocks"]

_EPS = np.float32(1e-15)
#: Rows of the lanes' state of :func:`q3_search_lanes` and :func:`iq4_search_lanes` (the result in row 0).
_RESULT, _MX, _AMAX, _STEP, _BEST = range(5)
#: Rows of ``st`` and ``acc`` the block functions need (a search's state, then one row of per-lane sums).
LANE_STATE_ROWS = max(KX_STATE_ROWS, QX_STATE_ROWS, _BEST + 1) + 1
LANE_ACC_ROWS = max(KX_ACC_ROWS, 2)


@element_function
def q3_search_lanes(xt, lt, st, acc, lanes):
    """``make_q3_quants(16, 4, x, L, true)`` of ``lanes`` sub-blocks side by side (values ``xt[:16, l]``).

    Lane ``l``'s scale goes to ``st[0, l]``, its codes (0..7, as floats) to ``lt[:16, l]``.
    A refinement pass that changes no code leaves its lane as it was, so the passes run
    until none changes in any lane (at most five), each lane's result that of the one-block search.
    """
    largest_magnitude_lanes(xt, st, _AMAX, _MX, lanes, 16)
    for lane in range(lanes):
        st[_STEP, lane] = np.float32(-4.0) / st[_MX, lane]
        acc[0, lane] = np.float32(0.0)
        acc[1, lane] = np.float32(0.0)
    for j in range(16):
        for lane in range(lanes):
            v = xt[j, lane]
            fl = q3_level(v, st[_STEP, lane])
            lt[j, lane] = fl
            acc[0, lane], acc[1, lane] = q3_add(acc[0, lane], acc[1, lane], v, fl)
    for _ in range(5):
        changed = np.int32(0)
        for j in range(16):
            for lane in range(lanes):
                fl, sumlx, suml2, take = q3_refine(xt[j, lane], lt[j, lane], acc[0, lane], acc[1, lane])
                lt[j, lane] = fl
                acc[0, lane] = sumlx
                acc[1, lane] = suml2
                changed |= np.int32(take)
        if changed == 0:
            break
    for lane in range(lanes):
        suml2 = acc[1, lane]
        tiny = st[_AMAX, lane] < _EPS
        scale = acc[0, lane] / suml2 if suml2 > 0 else np.float32(0.0)
        st[_RESULT, lane] = np.float32(0.0) if tiny else scale
        st[_STEP, lane] = np.float32(0.0) if tiny else np.float32(4.0)
    for j in range(16):  # an all-but-zero sub-block's codes are 0; the others' move to 0..7
        for lane in range(lanes):
            lt[j, lane] = np.float32(0.0) if st[_STEP, lane] == 0 else lt[j, lane] + st[_STEP, lane]


@element_function
def _iq4_sums_lanes(xt, wt, st, acc, lanes):
    """Each lane's sums (``acc[0]`` sumqx, ``acc[1]`` sumq2) at the inverse scale ``st[_STEP]``."""
    for lane in range(lanes):
        acc[0, lane] = np.float32(0.0)
        acc[1, lane] = np.float32(0.0)
    for j in range(32):
        for lane in range(lanes):
            acc[0, lane], acc[1, lane] = iq4_accumulate(acc[0, lane], acc[1, lane], wt[j, lane], xt[j, lane],
                                                        st[_STEP, lane])


@element_function
def iq4_search_lanes(xt, wt, st, acc, lanes):
    """:func:`~nbquant.element.gguf_iq4.iq4_search` of ``lanes`` 32-value sub-blocks side by side (values
    ``xt[:32, l]``, weights ``wt[:32, l]``): lane ``l``'s scale into ``st[0, l]``."""
    largest_magnitude_lanes(xt, st, _AMAX, _MX, lanes, 32)
    for lane in range(lanes):
        st[_STEP, lane] = np.float32(1.0) / (-st[_MX, lane] / KVALUES[0])
    _iq4_sums_lanes(xt, wt, st, acc, lanes)
    for lane in range(lanes):
        sumqx, sumq2 = acc[0, lane], acc[1, lane]
        d = sumqx / sumq2 if sumq2 > 0 else np.float32(0.0)
        st[_RESULT, lane] = d
        st[_BEST, lane] = mul_f32(d, sumqx)
    for itry in range(-7, 8):
        for lane in range(lanes):
            st[_STEP, lane] = iq4_try_inv(itry, st[_MX, lane])
        _iq4_sums_lanes(xt, wt, st, acc, lanes)
        for lane in range(lanes):  # iq4_search's update, as selects
            sumqx, sumq2 = acc[0, lane], acc[1, lane]
            better = iq4_better(sumqx, sumq2, st[_BEST, lane])
            d = sumqx / sumq2
            st[_RESULT, lane] = pick(better, d, st[_RESULT, lane])
            st[_BEST, lane] = pick(better, mul_f32(d, sumqx), st[_BEST, lane])
    for lane in range(lanes):  # an all-but-zero sub-block: iq4_search's early return
        st[_RESULT, lane] = pick(st[_AMAX, lane] < _EPS, np.float32(0.0), st[_RESULT, lane])


@element_function
def _sub_block_lanes(x, c, nb, size, count, qw, aux_of, wmode, xt, wt, st, sums):
    """Transpose the ``count`` sub-blocks of ``size`` values of each of the ``nb`` (super-)blocks at ``x[c:]`` into
    lanes: values ``xt``, weights ``wt`` (mode ``wmode``, ``aux`` of super-block ``b`` ``aux_of[b]``), and, if
    ``sums``, each sub-block's summed weights (in order) into ``st[LANE_STATE_ROWS - 1]``."""
    for b in range(nb):
        for j in range(count):
            cj = c + size * (count * b + j)
            lane = count * b + j
            sw = np.float32(0.0)
            for i in range(size):
                xt[i, lane] = np.float32(x[cj + i])
                w = search_weight(x, qw, cj, i, aux_of[b], wmode)
                wt[i, lane] = w
                sw = sw + w
            if sums:
                st[LANE_STATE_ROWS - 1, lane] = sw


@element_function
def q2k_blocks(x, c, nb, rec, o, type_size, qw, use_qw, xt, wt, lt, st, acc, fs):
    """Q2_K records of the ``nb`` super-blocks at ``x[c:]`` into ``rec[o:]`` (the same bytes as
    :func:`~nbquant.element.gguf_q2k.q2k_quantize_block`), their ``16 * nb`` searches as the lanes of one
    :func:`~nbquant.element.gguf_search.kx_search_lanes`."""
    wmode, rmin, rdelta, nstep, flat_below, use_mad = q2k_search_params(use_qw)
    for b in range(nb):
        fs[b] = q2k_sigma2(x, c + 256 * b, use_qw)
    _sub_block_lanes(x, c, nb, 16, 16, qw, fs, wmode, xt, wt, st, True)
    kx_search_lanes(xt, wt, lt, st, acc, 16 * nb, 16, np.int64(3), rmin, rdelta, nstep, flat_below, use_mad)
    for b in range(nb):
        for j in range(16):
            lane = 16 * b + j
            fs[j] = st[KX_SCALE, lane]
            fs[16 + j] = -st[KX_MIN, lane]
            fs[32 + j] = st[KX_ISCALE, lane]
            fs[48 + j] = st[KX_LOW, lane]
            fs[64 + j] = st[LANE_STATE_ROWS - 1, lane]
        q2k_record(x, c + 256 * b, rec, o + type_size * b, use_qw, fs)


@element_function
def q3k_blocks(x, c, nb, rec, o, type_size, qw, use_qw, xt, wt, lt, st, acc, fs):
    """Q3_K records of the ``nb`` super-blocks at ``x[c:]`` into ``rec[o:]`` (the same bytes as
    :func:`~nbquant.element.gguf_q3k.q3k_quantize_block`), their ``16 * nb`` sub-block searches side by side
    (:func:`q3_search_lanes`; with an importance matrix
    :func:`~nbquant.element.gguf_search.qx_search_lanes`)."""
    for b in range(nb):
        fs[b] = q3k_sigma2(x, c + 256 * b) if use_qw else np.float32(0.0)
    _sub_block_lanes(x, c, nb, 16, 16, qw, fs, W_SIGMA if use_qw else W_SQUARE, xt, wt, st, use_qw)
    if use_qw:
        qx_search_lanes(xt, wt, st, acc, 16 * nb, 16, np.int64(4))
    else:
        q3_search_lanes(xt, lt, st, acc, 16 * nb)
    for b in range(nb):
        for j in range(16):
            lane = 16 * b + j
            if use_qw:
                fs[j] = st[QX_SCALE, lane]
                fs[16 + j] = st[LANE_STATE_ROWS - 1, lane]
                fs[32 + j] = st[QX_ISCALE, lane]
            else:
                fs[j] = st[_RESULT, lane]
                for i in range(16):
                    fs[48 + 16 * j + i] = lt[i, lane]
        q3k_record(x, c + 256 * b, rec, o + type_size * b, use_qw, fs)


@element_function
def iq4_xs_blocks(x, c, nb, rec, o, type_size, qw, use_qw, xt, wt, lt, st, acc, fs):
    """IQ4_XS records of the ``nb`` super-blocks at ``x[c:]`` into ``rec[o:]`` (the same bytes as
    :func:`~nbquant.element.gguf_iq4.iq4_xs_block`), their ``8 * nb`` searches as the lanes of one
    :func:`iq4_search_lanes` (``lt`` unused)."""
    for b in range(nb):
        fs[b] = iq4_sigma2(x, c + 256 * b, 256) if use_qw else np.float32(0.0)
    _sub_block_lanes(x, c, nb, 32, 8, qw, fs, W_SIGMA if use_qw else W_SQUARE, xt, wt, st, False)
    iq4_search_lanes(xt, wt, st, acc, 8 * nb)
    for b in range(nb):
        for j in range(8):
            fs[j] = st[_RESULT, 8 * b + j]
        iq4_xs_record(x, c + 256 * b, rec, o + type_size * b, fs)


@element_function
def iq4_nl_blocks(x, c, nb, rec, o, type_size, qw, use_qw, xt, wt, lt, st, acc, fs):
    """IQ4_NL records of the ``nb`` 32-value blocks at ``x[c:]`` into ``rec[o:]`` (the same bytes as
    :func:`~nbquant.element.gguf_iq4.iq4_nl_block`), their searches as the lanes of one :func:`iq4_search_lanes`
    (``lt`` unused; ``fs`` at least ``nb``)."""
    for b in range(nb):
        fs[b] = iq4_sigma2(x, c + 32 * b, 32) if use_qw else np.float32(0.0)
    _sub_block_lanes(x, c, nb, 32, 1, qw, fs, W_SIGMA if use_qw else W_SQUARE, xt, wt, st, False)
    iq4_search_lanes(xt, wt, st, acc, nb)
    for b in range(nb):
        iq4_nl_record(x, c + 32 * b, rec, o + type_size * b, st[_RESULT, b])
