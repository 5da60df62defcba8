"""Calibrators with modelopt's streaming API: ``collect(x)`` batches, then ``compute_amax()``.

* :class:`MaxCalibrator`: running maximum of ``max |x|`` per tensor or per kept ``axis``.
* :class:`HistogramCalibrator`: a histogram of ``|x|`` (a Numba kernel on the cpu
  backend) over ``[0, max]``, extended with the same bin width when a later batch
  has a larger maximum (up to ``4 * num_bins`` bins; past that the bins get wider);
  ``compute_amax`` by ``"entropy"`` (KL divergence, as modelopt/TensorRT), ``"mse"``
  or ``"percentile"``.

Differences from modelopt 0.47 (semantics.md §6.7), all deliberate:

* ``"mse"`` implements the *intended* algorithm — fake-quantize the bin centres with
  ``amax = centre`` (``num_bits``, ``unsigned``, narrow range) and take the
  count-weighted mean squared error — whereas modelopt 0.47 passes ``num_bits``
  into ``fake_tensor_quant``'s ``bias`` slot and returns garbage. The mean is
  accumulated in float64 (torch: float32), which can only matter for exact ties.
* ``"entropy"`` does not overwrite bin 0 of the stored histogram (modelopt's
  ``bins = calib_hist[:]`` is a view, so its ``bins[0] = bins[1]`` does). A candidate
  whose clipped histogram is all zero (data away from zero) has KL = inf; modelopt's
  scipy ``entropy`` gives NaN there, ``np.argmin`` picks the NaN, and it returns an edge
  below every value. ``start_bin=0`` raises ValueError (modelopt: IndexError).
* The histogram holds at most ``4 * num_bins`` bins: a later maximum that needs more
  doubles the bin width (merging bins) instead of adding bins, where modelopt's grow
  without bound (a 10^4 times larger maximum: 20M bins, float32 edges that stop
  increasing). ``ceil(max / width)`` is computed exactly (modelopt's float32 quotient can
  round down and leave the maximum above the last edge, not counted).
* All-zero batches (before any non-zero value) count in bin 0 of ``num_bins`` bins of one
  float32 subnormal each; the first batch with a non-zero value then sets the range as a
  first batch would (modelopt's zero width makes every later batch fail; torch.histc
  would widen the range to ``[-1, 1]``). A maximum below ``num_bins`` times the smallest
  normal takes a step of whole subnormals, so the edges stay distinct.
* Values near float32's max are counted: the bin is ``int(|x| * (nbins / top))`` where
  ``|x| * nbins`` overflows, and a range whose last edge would pass float32's max ends
  there (a partial last bin).
* NaN or ±inf in a batch raises ValueError (modelopt asserts).
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np
import numpy.typing as npt

from .._docstrings import fill_doc
from ..backends import check_backend_name, resolve_backend
from ..layout import resolve_layout
from ..placement import Host, placement
from ..reductions import reduce_amax
from ..validation import check_choice

__all__ = ["MaxCalibrator", "HistogramCalibrator", "MAX_NUM_BINS"]

#: The largest ``num_bins`` of a :class:`HistogramCalibrator` (it then holds at most ``4 * 2**20`` bins).
MAX_NUM_BINS = 1 << 20
_F32_MAX = float(np.finfo(np.float32).max)
_F32_TINY = float(np.finfo(np.float32).smallest_subnormal)
_F32_NORMAL = float(np.finfo(np.float32).smallest_normal)
#: The options of ``compute_amax``, here and in :mod:`nbquant.compat.modelopt` (docstring text).
COMPUTE_AMAX_OPTIONS = """
    stride, start_bin : int
        The candidate bins of ``"entropy"`` and ``"mse"``: every ``stride``-th from ``start_bin``.
    percentile : float
        The percentile of ``"percentile"``, in [0, 100].
    """


def _batch_amax(x, p: Host, axis: int | None, backend: str | None) -> np.ndarray:
    """:func:`~nbquant.reduce_amax` of a batch on the host; a dask batch reduced chunk by chunk, then computed."""
    if not p.lazy:
        return p.to_host(reduce_amax(x, axis=axis, backend=backend))
    layout = resolve_layout(tuple(x.shape), axis)
    amax = p.map(functools.partial(reduce_amax, backend=backend), x, layout,
                 [p.engine.Output("grid", np.dtype(np.float32))], token="nbquant-calibrate-amax")[0]
    return amax.max(axis=p.engine.split_dims(amax, layout), keepdims=True).compute()


def _finite_amax(amax: np.ndarray) -> np.ndarray:
    if not np.isfinite(amax).all():
        raise ValueError("x holds NaN or inf (its amax is "
                         f"{amax.reshape(-1)[~np.isfinite(amax.reshape(-1))][0]!r}); calibration needs finite data")
    return amax


class MaxCalibrator:
    """Running ``max |x|``, per tensor (``axis=None``) or per index of the kept ``axis``.

    Parameters
    ----------
    axis : int, optional
        The kept axis: one amax per index of it. None: one amax for the whole tensor.
    backend : str, optional
        ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``; default: the selected backend.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> cal = nbquant.modelopt.MaxCalibrator(axis=0)
    >>> cal.collect(np.array([[1.0, -3.0], [0.5, 0.25]], np.float32))
    >>> cal.collect(np.array([[2.0, 0.0], [-0.1, 0.2]], np.float32))
    >>> cal.compute_amax()
    array([3. , 0.5], dtype=float32)
    """

    def __init__(self, axis: int | None = None, *, backend: str | None = None) -> None:
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, (int, np.integer))):
            raise TypeError(f"axis={axis!r} must be an int or None")
        self.axis = axis
        self.backend = backend if backend is None else check_backend_name(backend, "backend")
        self._amax: np.ndarray | None = None

    def collect(self, x: npt.ArrayLike) -> None:
        """Fold one batch into the running maximum.

        Parameters
        ----------
        x : array_like
            Finite float data; the size of ``axis`` stays the same from batch to batch. A dask
            ``x`` is reduced chunk by chunk and its amax computed (only the amax comes back).
        """
        p = placement(x)
        x = p.float_input(x)
        amax = _finite_amax(_batch_amax(x, p, self.axis, self.backend))
        amax = amax.reshape(()) if self.axis is None else amax.reshape(-1)
        if self._amax is not None and self._amax.shape != amax.shape:
            raise ValueError(f"x gives amax of shape {amax.shape}, but earlier batches gave {self._amax.shape}; "
                             f"keep the size of axis={self.axis} fixed")
        self._amax = amax if self._amax is None else np.maximum(self._amax, amax)

    def compute_amax(self) -> np.ndarray | None:
        """Return the amax so far.

        Returns
        -------
        numpy.ndarray or None
            float32: 0-d, or one per index of ``axis``; None before any batch.
        """
        return None if self._amax is None else self._amax.copy()

    def reset(self) -> None:
        """Forget every batch collected so far."""
        self._amax = None


class HistogramCalibrator:
    """Histogram of ``|x|`` with modelopt's streaming bin extension, bounded to ``max_bins`` bins.

    The first batch's range is ``[0, max |x|]`` in ``num_bins`` bins. A later batch with
    a larger maximum extends the range with the same bin width (``ceil(max / width)``
    bins, modelopt's rule) while that needs at most ``max_bins = 4 * num_bins`` bins;
    beyond that the width doubles as often as needed (each doubling adds pairs of
    adjacent bins into one, so the counts stay exact and the new edges fall on old
    ones) and the histogram ends up with more than ``2 * num_bins`` and at most
    ``4 * num_bins`` bins. Every value of every batch is counted, and the edges increase
    strictly (docs/dynamic.md, "Calibration").

    Parameters
    ----------
    num_bins : int
        Bins of the first batch (2048), at most ``2**20``.
    skip_zeros : bool
        Leave exact zeros out of the histogram.
    backend : str, optional
        ``"cpu"`` (Numba histogram kernel), ``"cuda"`` or ``"reference"``.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> cal = nbquant.modelopt.HistogramCalibrator(num_bins=8)
    >>> cal.collect(np.array([0.0, 1.0, 2.0, 4.0, -8.0], np.float32))
    >>> cal.histogram.tolist(), cal.bin_edges.tolist()
    ([1, 1, 1, 0, 1, 0, 0, 1], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    >>> float(cal.compute_amax("percentile", percentile=50))
    2.0
    >>> cal.collect(np.array([100.0], np.float32))  # 100 bins of width 1 > 4 * 8: width 4, 25 bins
    >>> cal.histogram.tolist()[:3], cal.bin_edges[:3].tolist(), cal.histogram.size
    ([3, 2, 0], [0.0, 4.0, 8.0], 25)
    """

    def __init__(self, num_bins: int = 2048, *, skip_zeros: bool = False, backend: str | None = None) -> None:
        if isinstance(num_bins, (bool, np.bool_)) or not isinstance(num_bins, (int, np.integer)):
            raise TypeError(f"num_bins={num_bins!r} must be an int")
        if not 2 <= num_bins <= MAX_NUM_BINS:
            raise ValueError(f"num_bins={num_bins!r} must be in [2, {MAX_NUM_BINS}]")
        if not isinstance(skip_zeros, (bool, np.bool_)):
            raise TypeError(f"skip_zeros={skip_zeros!r} must be True or False")
        self.num_bins = int(num_bins)
        self.skip_zeros = bool(skip_zeros)
        self.backend = backend if backend is None else check_backend_name(backend, "backend")
        self.histogram: np.ndarray | None = None
        self.bin_edges: np.ndarray | None = None

    @property
    def max_bins(self) -> int:
        """The most bins the histogram holds: ``4 * num_bins``."""
        return 4 * self.num_bins

    def reset(self) -> None:
        self.histogram = None
        self.bin_edges = None

    def _counts(self, x, p: Host) -> np.ndarray:
        """The batch's counts in the current bins (:func:`_counts`); a dask batch's summed over its chunks."""
        if not p.lazy:
            return _counts(x, self.bin_edges, self.skip_zeros, self.backend)
        return p.engine.chunk_sum(_counts, x, self.bin_edges.size - 1, np.dtype(np.int64), edges=self.bin_edges,
                                skip_zeros=self.skip_zeros, backend=self.backend, token="nbquant-histogram").compute()

    def _grow(self, x_max: np.float32) -> np.ndarray:
        """Edges up to ``x_max`` or beyond; returns the counts so far in the new bins.

        modelopt: the same width, ``ceil(x_max / width)`` bins (the quotient exact here: modelopt's
        float32 quotient can round down and leave ``x_max`` above the last edge, uncounted). Past
        ``max_bins`` the width doubles until the bins fit, and each group of old bins is added.
        """
        width = float(self.bin_edges[1])
        group = 1
        while (n := math.ceil(float(x_max) / (width * group))) > self.max_bins:
            group *= 2
        self.bin_edges = _uniform_edges(n, width * group)
        old = self.histogram
        return old if group == 1 else np.add.reduceat(old, np.arange(0, old.size, min(group, old.size)))

    def collect(self, x: npt.ArrayLike) -> None:
        """Add one batch: ``bin = int(|x| * nbins / top)`` (float32), the right edge in the last bin.

        Parameters
        ----------
        x : array_like
            Finite float data, of any shape (a dask array is reduced chunk by chunk).
        """
        p = placement(x)
        x = p.float_input(x)
        if x.size == 0:
            return
        x_max = np.float32(_finite_amax(_batch_amax(x, p, None, self.backend)).reshape(()))
        if self.histogram is None or (x_max > self.bin_edges[-1] and not self.histogram[1:].any()):
            # The first batch, or the first with a non-zero value: the range starts anew from this batch
            # (the zeros so far stay in bin 0, inside every range).
            zeros = 0 if self.histogram is None else self.histogram[0]
            self.bin_edges = _first_edges(x_max, self.num_bins)
            self.histogram = self._counts(x, p)
            self.histogram[0] += zeros
            return
        old = self._grow(x_max) if x_max > self.bin_edges[-1] else self.histogram
        hist = self._counts(x, p)
        hist[:old.size] += old
        self.histogram = hist

    @fill_doc(candidates=COMPUTE_AMAX_OPTIONS)
    def compute_amax(self, method: Literal["entropy", "mse", "percentile"] = "entropy", *, num_bits: int = 8,
                     unsigned: bool = False, stride: int = 1, start_bin: int = 128,
                     percentile: float = 99.99) -> np.float32 | None:
        """Return the calibrated amax.

        Parameters
        ----------
        method : {"entropy", "mse", "percentile"}
            ``"entropy"``: the edge ``i`` (from ``start_bin``, every ``stride``-th) minimising
            KL(P ‖ Q), P the histogram clipped at ``i`` (outliers folded into the last bin), Q it
            merged into ``2**(num_bits - 1 + unsigned)`` levels; the last minimum wins.
            ``"mse"``: the bin centre (from ``start_bin``, every ``stride``-th) minimising the
            count-weighted error of fake quantizing the centres with that amax. ``"percentile"``:
            the left edge of the first bin whose CDF reaches ``percentile`` %.
        num_bits : int
            Bits of the quantization the amax is for (2 to 16).
        unsigned : bool
            Whether that quantization is unsigned.
        {candidates}

        Returns
        -------
        numpy.float32 or None
            The amax (finite), or None before any batch.
        """
        check_choice("method", method, ("entropy", "mse", "percentile"))
        _check_int("num_bits", num_bits, 2, 16)
        if not isinstance(unsigned, (bool, np.bool_)):
            raise TypeError(f"unsigned={unsigned!r} must be True or False")
        _check_int("stride", stride, 1)
        _check_int("start_bin", start_bin, 0)
        if isinstance(percentile, (bool, np.bool_)) or not isinstance(percentile, (int, float, np.integer,
                                                                                   np.floating)):
            raise TypeError(f"percentile={percentile!r} must be a real number")
        if not 0 <= percentile <= 100:
            raise ValueError(f"percentile={percentile!r} must be within [0, 100]")
        if self.histogram is None:
            return None
        hist, edges = self.histogram, self.bin_edges
        if method == "percentile":
            total = hist.sum()
            if total == 0:
                return np.float32(0)
            cdf = np.cumsum(hist / total)
            return np.float32(edges[min(int(np.searchsorted(cdf, percentile / 100)), len(edges) - 1)])
        if start_bin >= len(hist):
            raise ValueError(f"start_bin={start_bin} must be below the number of bins {len(hist)}")
        if method == "entropy" and start_bin == 0:  # modelopt: an IndexError
            raise ValueError("start_bin=0 is not allowed with method='entropy' (the candidate amax edge 0 clips "
                             "everything); use start_bin >= 1")
        if method == "entropy":
            return _amax_entropy(hist, edges, num_bits, unsigned, stride, start_bin)
        return _amax_mse(hist, edges, num_bits, unsigned, stride, start_bin)


def _counts(x, edges: np.ndarray, skip_zeros: bool, backend: str | None) -> np.ndarray:
    """The counts of ``|x|`` in the bins of ``edges`` (less the zeros with ``skip_zeros``).

    When ``bins * width`` passes float32's max the last edge is that max and the last bin
    is partial: the kernel counts the other bins, and the last one gets what it left out
    (the data is finite, so everything above the second-to-last edge).
    """
    p = placement(x)
    x = p.float_input(x)
    impl = resolve_backend(backend, p)
    n = edges.size - 1
    if n * float(edges[1]) <= _F32_MAX:
        counts = impl.abs_histogram(x, n, edges[-1])
    else:
        counts = impl.abs_histogram(x, n - 1, edges[-2])
        counts = np.append(counts, x.size - counts.sum())
    if skip_zeros:
        counts[0] -= _zeros(impl, x, p)
    return counts


def _zeros(impl, x, p: Host) -> int:
    """How many elements of ``x`` are ±0 (on the device for a device placement ``p``)."""
    if not p.device:
        return int(np.count_nonzero(x == 0))
    # Two bins over [0, smallest subnormal]: |x| = 0 lands in bin 0, the smallest subnormal in bin 1,
    # everything larger (and NaN) is skipped.
    return int(impl.abs_histogram(x, 2, np.float32(_F32_TINY))[0])


def _check_int(name: str, value, low: int, high: int | None = None) -> None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}={value!r} must be an int")
    if value < low or (high is not None and value > high):
        raise ValueError(f"{name}={value!r} must be an int " + (f">= {low}" if high is None else f"in [{low}, {high}]"))


def _uniform_edges(n: int, width: float) -> np.ndarray:
    """``m * width`` for ``m`` in ``0..n``, rounded to float32 once (exact for ``n < 2**24``).

    An edge past float32's max becomes the max (a partial last bin).
    """
    return np.minimum(np.arange(n + 1) * width, _F32_MAX).astype(np.float32)


def _first_edges(x_max: np.float32, n: int) -> np.ndarray:
    """The first batch's edges: float32 ``torch.linspace(0, x_max, n + 1)``, as torch computes them.

    torch rounds ``step = x_max / n`` to float32, computes the lower half of the edges
    (``i < (n + 1) // 2``) as ``fl(step * i)`` and the upper half from the far end as
    ``fl(x_max - step * (n - i))`` with one rounding (a fused multiply-add: torch's CPU kernel
    on AVX2/AVX-512; the product is exact in float64 here, so the one rounding is the cast).
    NumPy's float32 ``linspace`` rounds ``i * (x_max / n)`` from float64 instead, an ulp away
    at some edges. That needs a normal step (the edges increase strictly then: each is off
    by at most ``n * 2**-24`` steps, and ``n <= 2**20``). A zero or tiny ``x_max`` takes the
    step rounded up to a whole number of subnormals (at least one) instead, and a top edge
    ``n * step >= x_max``.
    """
    if float(x_max) / n >= _F32_NORMAL:
        step = np.float32(x_max) / np.float32(n)
        half = (n + 1) // 2
        lower = step * np.arange(half, dtype=np.float32)
        upper = np.float64(x_max) - np.float64(step) * np.arange(n - half, -1, -1, dtype=np.float64)
        return np.concatenate([lower, upper.astype(np.float32)])
    return _uniform_edges(n, _F32_TINY * max(1, math.ceil(float(x_max) / (n * _F32_TINY))))


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    """scipy.stats.entropy(p, q): both normalised; 0 where p == 0, inf where p > 0 == q."""
    ps, qs = p.sum(), q.sum()
    if ps == 0 or qs == 0:
        return math.inf
    p = p / ps
    q = q / qs
    pos = p > 0
    if (q[pos] == 0).any():
        return math.inf
    return float(np.sum(p[pos] * np.log(p[pos] / q[pos])))


def _amax_entropy(hist, edges, num_bits, unsigned, stride, start_bin) -> np.float32:
    bins = hist.astype(np.float64)
    bins[0] = bins[1]
    nq = 1 << (num_bits - 1 + int(unsigned))
    tail = np.concatenate([np.cumsum(bins[::-1])[::-1], [0.0]])  # tail[i] = sum(bins[i:])
    divergences = []
    for i in range(start_bin, len(bins) + 1, stride):
        space = np.linspace(0, i, num=nq + 1)
        dig = np.digitize(np.arange(i), space) - 1
        ref = bins[:i]
        valid = ref != 0
        sums = np.bincount(dig[valid], weights=ref[valid], minlength=nq)  # int64 zeros when nothing is valid
        cnt = np.bincount(dig[valid], minlength=nq)
        dens = np.divide(sums, cnt, out=np.zeros(nq), where=cnt > 0)
        new = np.where(valid, dens[np.clip(dig, 0, nq - 1)], 0.0)
        reference = ref.copy()
        reference[-1] += tail[i]
        # Data away from zero leaves bins[:i] all zero for small i, so Q = 0: KL = inf, never the minimum
        # unless every candidate is. (modelopt: scipy's entropy gives NaN, and np.argmin picks the NaN, so
        # it returns the last such edge, below every value.)
        divergences.append(_kl(reference, new))
    d = np.array(divergences)
    last_argmin = len(d) - 1 - int(np.argmin(d[::-1]))
    return np.float32(edges[last_argmin * stride + start_bin])


def _amax_mse(hist, edges, num_bits, unsigned, stride, start_bin) -> np.float32:
    # float32 (a + b) / 2, computed without overflowing next to float32's max
    centers = ((edges[1:].astype(np.float64) + edges[:-1]) / 2).astype(np.float32)
    counts = hist.astype(np.float64)
    maxbound = np.float32((1 << (num_bits - 1 + int(unsigned))) - 1)
    minbound = np.float32(0) if unsigned else -maxbound
    best, best_i = math.inf, start_bin
    for i in range(start_bin, len(centers), stride):
        amax = centers[i]
        if amax <= np.float32(2.0 ** -24):
            q = np.zeros_like(centers)
        else:
            s = maxbound / amax
            with np.errstate(over="ignore"):  # centres far above amax: inf, clipped to maxbound
                q = np.clip(np.rint(centers * s), minbound, maxbound) / s
        mse = float(np.mean((q.astype(np.float64) - centers) ** 2 * counts))
        if mse < best:
            best, best_i = mse, i
    return np.float32(centers[best_i])
