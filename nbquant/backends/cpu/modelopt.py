"""The cpu backend's modelopt operations and the calibrator's histogram.

Fake quantization from a block-grid amax, the legacy FakeAffine and the
straight-through gradient run the kernels of :mod:`.elementwise`;
:func:`histogram_kernel` counts ``|x|`` for :class:`~nbquant.calibration.HistogramCalibrator`.
"""

from __future__ import annotations

import numpy as np

from ...element import (
    histogram_bin,
)
from ...layout import canonical_views
from ...threads import get_num_threads
from .._views import kernel_float_view, output_float_like
from ._kernel import cpu_kernel, part_range, row_tile
from .dynamic import UNITS_PER_THREAD
from .elementwise import fake_affine_kernel, fake_amax_kernel, ste_kernel

#: Elements whose bins :func:`histogram_kernel` computes in one vectorized loop before counting them.
_HIST_CHUNK = 2048
#: Count rows per work unit of :func:`histogram_kernel`; element ``i`` of a chunk increments row ``i % 4``.
HIST_LANES = 4


@cpu_kernel
def histogram_kernel(part, parts, x, nbins, top, counts):
    """Histogram of ``|x|`` (flat) over ``[0, top]`` in ``nbins`` bins (:func:`histogram_bin`).

    ``counts`` is (units * HIST_LANES, nbins + 1), zeroed: unit ``u`` counts its
    contiguous share of ``x`` into its own HIST_LANES rows, a chunk at a time: the
    chunk's bins in one vectorized loop (NaN and values above ``top`` to the spare
    last column), then the increments, spread over the rows so that a run of equal
    bins (zeros of a ReLU output) is not one serial chain of increments. The caller
    sums the rows and drops the spare column.
    """
    n = x.size
    units = counts.shape[0] // HIST_LANES
    fn = np.float32(nbins)
    t = np.float32(top)
    first, last = part_range(units, part, parts)
    for u in range(first, last):
        c0, c1, c2, c3 = (counts[HIST_LANES * u], counts[HIST_LANES * u + 1], counts[HIST_LANES * u + 2],
                          counts[HIST_LANES * u + 3])
        bins = np.empty(_HIST_CHUNK, np.int32)
        end = (u + 1) * n // units
        for c in range(u * n // units, end, _HIST_CHUNK):
            xs = x[c:min(c + _HIST_CHUNK, end)]
            m = xs.size
            for i in range(m):
                b = histogram_bin(xs[i], fn, t, nbins)
                bins[i] = b if b >= 0 else nbins
            whole = m - m % HIST_LANES
            for i in range(0, whole, HIST_LANES):
                c0[bins[i]] += 1
                c1[bins[i + 1]] += 1
                c2[bins[i + 2]] += 1
                c3[bins[i + 3]] += 1
            for i in range(whole, m):
                c0[bins[i]] += 1


class ModeloptOps:
    """modelopt operations and the calibrator's histogram (:class:`~nbquant.backends.interface.Backend`)."""

    def fake_quant_amax(self, x, amax_grid, mspec, out, codes=None) -> None:
        """modelopt fake quant (integer or minifloat) with ``amax_grid`` over ``mspec.layout``."""
        xk = kernel_float_view(x)
        ok = kernel_float_view(out)
        like = output_float_like(out.dtype)
        data = [xk, ok] + ([codes] if codes is not None else [])
        for views, (a3,), (bp, br, bc) in canonical_views(mspec.layout, data, [amax_grid], [1] * len(data)):
            x3, o3 = views[0], views[1]
            c3 = views[2] if codes is not None else np.zeros((1, 1, 1), np.float32)
            tile = row_tile(x3.shape[2])
            fake_amax_kernel(x3, a3, mspec.is_float, np.float32(mspec.maxbound), np.float32(mspec.qmin),
                             np.float32(mspec.qmax), mspec.fp, bp, br, bc, tile, like, o3, codes is not None, c3)

    def fake_affine(self, x, step, qz, minb, maxb, out) -> None:
        xk = kernel_float_view(x).reshape(-1, x.shape[-1] if x.ndim else 1)
        ok = kernel_float_view(out).reshape(xk.shape)
        tile = row_tile(xk.shape[1])
        fake_affine_kernel(xk, np.float32(step), np.float32(qz), np.float32(minb), np.float32(maxb), tile,
                           output_float_like(out.dtype), ok)

    def ste_backward(self, grad, x, lo_grid, hi_grid, layout, out) -> None:
        data = [kernel_float_view(grad), kernel_float_view(x), kernel_float_view(out)]
        like = output_float_like(out.dtype)
        for (g3, x3, o3), (l3, h3), (bp, br, bc) in canonical_views(layout, data, [lo_grid, hi_grid], [1, 1, 1]):
            tile = row_tile(x3.shape[2])
            ste_kernel(g3, x3, l3, h3, bp, br, bc, tile, like, o3)

    def abs_histogram(self, x, nbins: int, top) -> np.ndarray:
        """int64 counts of ``|x|`` in ``nbins`` bins over ``[0, top]``."""
        flat = kernel_float_view(x).reshape(-1)
        units = max(1, min(UNITS_PER_THREAD * get_num_threads(), -(-flat.size // _HIST_CHUNK)))
        counts = np.zeros((units * HIST_LANES, nbins + 1), np.int64)
        histogram_kernel(flat, nbins, np.float32(top), counts)
        return counts[:, :nbins].sum(axis=0)
