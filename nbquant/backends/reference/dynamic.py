"""The reference dynamic quantization, amax-based (modelopt) quantizers and histogram: NumPy oracles.

Written from the formulas (torchao ``choose_qparams_affine``, modelopt
``tensor_quant``), multi-pass, on the per-dimension block layout with
``ufunc.reduceat`` (no shared indexing code with the compiled kernels). Also the
"NumPy multi-pass equivalent" the benchmarks compare against.
"""

from __future__ import annotations

import numpy as np

from ...layout import BlockLayout
from ...modes import Mapping
from .static import expand, store_floats

#: modelopt's "amax is zero" threshold (the oracle's own copy of the constant).
_AMAX_TINY = np.float32(2.0 ** -24)


def block_reduce(a: np.ndarray, layout: BlockLayout, ufunc) -> np.ndarray:
    """``ufunc.reduce`` over every block: the block-grid array (NaN propagates for minimum/maximum)."""
    r = np.asarray(a).reshape(layout.shape)
    for d, (n, b) in enumerate(zip(layout.shape, layout.block, strict=True)):
        if n == 0:
            continue
        r = ufunc.reduceat(r, np.arange(0, n, b), axis=d)
    return r


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def block_minmax(x, layout: BlockLayout) -> tuple[np.ndarray, np.ndarray]:
    v = _f32(x)
    return block_reduce(v, layout, np.minimum), block_reduce(v, layout, np.maximum)


def _min_max_keys(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer keys in float order for a block's min and max: any NaN is the lowest key of the one, the highest of the
    other (so a block holding NaN has NaN as both, as numpy.min and numpy.max)."""
    bits = np.ascontiguousarray(v, np.float32).view(np.uint32).astype(np.int64)
    magnitude = bits & 0x7FFFFFFF
    keys = magnitude ^ -(bits >> 31)
    nan = np.isnan(v)
    return np.where(nan, -magnitude - 1, keys), np.where(nan, magnitude, keys)


@np.errstate(divide="ignore", invalid="ignore", over="ignore")
def qparams_from_minmax(mn: np.ndarray, mx: np.ndarray, spec) -> tuple[np.ndarray, np.ndarray]:
    """torchao's (or modelopt's) scale and zero point from block min and max, in float32."""
    mn = _f32(mn)
    mx = _f32(mx)
    zero = np.float32(0)
    nan = np.isnan(mn) | np.isnan(mx)
    if spec.mapping == Mapping.MODELOPT:  # modelopt: S = maxbound / amax; 1 where amax <= 2**-24
        amax = np.maximum(np.abs(mn), np.abs(mx))
        s = np.float32(spec.maxbound) / amax
        s = np.where(amax <= _AMAX_TINY, np.float32(1), s)
        s = np.where(np.isnan(s), np.float32(np.nan), s).astype(np.float32)  # the canonical NaN of every output
        return s, np.zeros(s.shape, np.float32)
    min_neg = np.minimum(mn, zero)
    max_pos = np.maximum(mx, zero)
    lo, hi = np.float32(spec.qmin), np.float32(spec.qmax)
    if spec.mapping == Mapping.SYMMETRIC:
        s = np.maximum(-min_neg, max_pos) / np.float32(spec.half_range)
    elif spec.mapping == Mapping.SYMMETRIC_NO_CLIPPING_ERR:
        smin, smax = min_neg / lo, max_pos / hi
        s = np.where(smin > smax, smin, smax)
    else:
        s = (max_pos - min_neg) / (hi - lo)
        # a finite range wider than FLT_MAX: each end divided first (torch's float32 range would be inf)
        s = np.where(np.isinf(s), max_pos / (hi - lo) - min_neg / (hi - lo), s)
    s = np.maximum(s, np.float32(spec.eps)).astype(np.float32)
    if spec.mapping == Mapping.ASYMMETRIC:
        r = np.rint(min_neg / s)
        z = np.clip(lo - np.where(np.isnan(r), zero, r), lo, hi)
        z = np.where(nan, lo, z)
    else:
        z = np.full(s.shape, np.float32(spec.zp_sym))
    return np.where(nan, np.float32(np.nan), s).astype(np.float32), z.astype(np.float32)


def _expand(grid: np.ndarray, layout: BlockLayout) -> np.ndarray:
    return expand(grid.reshape(layout.grid), layout)


class DynamicOps:
    """Dynamic quantization, modelopt operations and the histogram (:class:`~nbquant.backends.interface.Backend`)."""

    def reduce_keys(self, x, spec) -> tuple[np.ndarray, np.ndarray]:
        """Flat ``(lo, hi)`` keys as the compiled reduction makes them (order keys, or absmax bits in ``hi``)."""
        v = _f32(x).reshape(spec.layout.shape)
        if spec.use_minmax:
            low, high = _min_max_keys(v)
            return (block_reduce(low, spec.layout, np.minimum).reshape(-1),
                    block_reduce(high, spec.layout, np.maximum).reshape(-1))
        a = np.abs(v).view(np.uint32).astype(np.int64)
        hi = block_reduce(a, spec.layout, np.maximum).reshape(-1)
        return np.zeros_like(hi), hi

    def choose_qparams(self, x, spec, scale, zp) -> None:
        """Block min and max, then torchao's (or modelopt's) qparams, into the flat block grids."""
        mn, mx = block_minmax(x, spec.layout)
        s, z = qparams_from_minmax(mn, mx, spec)
        scale.reshape(-1)[...] = s.reshape(-1)
        zp.reshape(-1)[...] = z.reshape(-1).astype(np.int32)

    def quantize_dynamic(self, x, spec, out, scale, zp) -> bool:
        """The oracle has no fused pass: the front door chooses the qparams, then quantizes (two passes)."""
        return False

    @np.errstate(divide="ignore", invalid="ignore", over="ignore")
    def fake_quant_amax(self, x, amax_grid, mspec, out, codes=None) -> None:
        """modelopt fake quant: integer ``clamp(rne(x*S))/S`` or fp8 ``e4m3(clamp(x*S)) * fl(1/S)``."""
        v = _f32(x)
        a = _expand(_f32(amax_grid), mspec.layout)
        if mspec.is_float:
            amax = np.where(a <= _AMAX_TINY, np.float32(1), a)
            s = (np.float32(1) / amax) * np.float32(mspec.maxbound)
            m = np.float32(mspec.maxbound)
            y = v * s
            y = np.where(np.isnan(y), y, np.clip(y, -m, m))
            dq = y.astype(mspec.format.dtype).astype(np.float32) * (np.float32(1) / s)
        else:
            s = np.float32(mspec.maxbound) / a
            tiny = a <= _AMAX_TINY
            q = np.rint(v * np.where(tiny, np.float32(0), s))
            q = np.where(np.isnan(q), q, np.clip(q, np.float32(mspec.qmin), np.float32(mspec.qmax)))
            if codes is not None:
                store_floats(codes, q.astype(np.float32))
            dq = q / np.where(tiny, np.float32(1), s)
        store_floats(out, dq.astype(np.float32))

    @np.errstate(divide="ignore", invalid="ignore", over="ignore")
    def fake_affine(self, x, step, qz, minb, maxb, out) -> None:
        step = np.float32(step)
        q = np.rint(_f32(x) / step) - np.float32(qz)
        q = np.where(np.isnan(q), q, np.clip(q, np.float32(minb), np.float32(maxb)))
        store_floats(out, ((q + np.float32(qz)) * step).astype(np.float32))

    def ste_backward(self, grad, x, lo_grid, hi_grid, layout, out) -> None:
        v = _f32(x)
        keep = (v >= _expand(_f32(lo_grid), layout)) & (v <= _expand(_f32(hi_grid), layout))
        store_floats(out, np.where(keep, _f32(grad), np.float32(0)))

    def abs_histogram(self, x, nbins: int, top) -> np.ndarray:
        """Counts of ``|x|`` in ``nbins`` bins over ``[0, top]``: ``bin = int(|x| * nbins / top)`` in float32.

        Where ``|x| * nbins`` overflows, ``int(|x| * (nbins / top))`` (``nbquant.element.histogram_bin``).
        """
        v = np.abs(_f32(x)).reshape(-1)
        t, fn = np.float32(top), np.float32(nbins)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            v = v[v <= t]
            p = v * fn
            b = np.where(p <= np.finfo(np.float32).max, p / t, v * (fn / t)).astype(np.int64)
        return np.bincount(np.minimum(b, nbins - 1), minlength=nbins).astype(np.int64)
