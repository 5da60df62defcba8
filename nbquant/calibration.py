"""Calibrators with modelopt's streaming API: ``collect(x)`` batches, then ``compute_amax()``.

* :class:`MaxCalibrator`: running maximum of ``max |x|`` per tensor or per kept ``axis``.
* :class:`HistogramCalibrator`: a histogram of ``|x|`` (a Numba kernel on the cpu
  backend) over ``[0, max]``, extended with the same bin width when a later batch
  has a larger maximum; ``compute_amax`` by ``"entropy"`` (KL divergence, as
  modelopt/TensorRT), ``"mse"`` or ``"percentile"``.

Differences from modelopt 0.47 (semantics.md §6.7), all deliberate:

* ``"mse"`` implements the *intended* algorithm — fake-quantize the bin centres with
  ``amax = centre`` (``num_bits``, ``unsigned``, narrow range) and take the
  count-weighted mean squared error — whereas modelopt 0.47 passes ``num_bits``
  into ``fake_tensor_quant``'s ``bias`` slot and returns garbage. The mean is
  accumulated in float64 (torch: float32), which can only matter for exact ties.
* ``"entropy"`` does not overwrite bin 0 of the stored histogram (modelopt's
  ``bins = calib_hist[:]`` is a view, so its ``bins[0] = bins[1]`` does).
* An all-zero first batch gives edges ``[0, 0, ...]`` and every count in bin 0
  (torch.histc would widen the range to ``[-1, 1]``).
* NaN or ±inf in a batch raises ValueError (modelopt asserts).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt

from .backends import device_float_input, host_array, is_device_array, resolve_backend
from .layout import resolve_layout
from .modelopt_ops import reduce_amax

__all__ = ["MaxCalibrator", "HistogramCalibrator"]


def _finite_amax(amax: np.ndarray) -> np.ndarray:
    if not np.isfinite(amax).all():
        raise ValueError("x holds NaN or inf (its amax is "
                         f"{amax.reshape(-1)[~np.isfinite(amax.reshape(-1))][0]!r}); calibration needs finite data")
    return amax


class MaxCalibrator:
    """Running ``max |x|``, per tensor (``axis=None``) or per index of the kept ``axis``.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> cal = nbquant.MaxCalibrator(axis=0)
    >>> cal.collect(np.array([[1.0, -3.0], [0.5, 0.25]], np.float32))
    >>> cal.collect(np.array([[2.0, 0.0], [-0.1, 0.2]], np.float32))
    >>> cal.compute_amax()
    array([3. , 0.5], dtype=float32)
    """

    def __init__(self, axis: int | None = None, *, backend: str | None = None) -> None:
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, (int, np.integer))):
            raise TypeError(f"axis={axis!r} must be an int or None")
        self.axis = axis
        self.backend = backend
        self._amax: np.ndarray | None = None

    def collect(self, x: npt.ArrayLike) -> None:
        """Fold one batch into the running maximum."""
        x = device_float_input(x)
        amax = _finite_amax(host_array(reduce_amax(x, axis=self.axis, backend=self.backend)))
        amax = amax.reshape(()) if self.axis is None else amax.reshape(-1)
        if self._amax is not None and self._amax.shape != amax.shape:
            raise ValueError(f"x gives amax of shape {amax.shape}, but earlier batches gave {self._amax.shape}; "
                             f"keep the size of axis={self.axis} fixed")
        self._amax = amax if self._amax is None else np.maximum(self._amax, amax)

    def compute_amax(self) -> np.ndarray | None:
        """The amax so far (float32: 0-d, or one per index of ``axis``), None before any batch."""
        return None if self._amax is None else self._amax.copy()

    def reset(self) -> None:
        self._amax = None


class HistogramCalibrator:
    """Histogram of ``|x|`` with modelopt's streaming bin extension.

    Parameters
    ----------
    num_bins : int
        Bins of the first batch (2048). Later batches with a larger max add bins.
    skip_zeros : bool
        Leave exact zeros out of the histogram.
    backend : str, optional
        ``"cpu"`` (Numba histogram kernel) or ``"reference"``.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> cal = nbquant.HistogramCalibrator(num_bins=8)
    >>> cal.collect(np.array([0.0, 1.0, 2.0, 4.0, -8.0], np.float32))
    >>> cal.histogram.tolist(), cal.bin_edges.tolist()
    ([1, 1, 1, 0, 1, 0, 0, 1], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    >>> float(cal.compute_amax("percentile", percentile=50))
    2.0
    """

    def __init__(self, num_bins: int = 2048, *, skip_zeros: bool = False, backend: str | None = None) -> None:
        if isinstance(num_bins, bool) or not isinstance(num_bins, (int, np.integer)) or num_bins < 2:
            raise ValueError(f"num_bins={num_bins!r} must be an int >= 2")
        if not isinstance(skip_zeros, (bool, np.bool_)):
            raise TypeError(f"skip_zeros={skip_zeros!r} must be True or False")
        self.num_bins = int(num_bins)
        self.skip_zeros = bool(skip_zeros)
        self.backend = backend
        self.histogram: np.ndarray | None = None
        self.bin_edges: np.ndarray | None = None

    def reset(self) -> None:
        self.histogram = None
        self.bin_edges = None

    def _counts(self, x: np.ndarray, nbins: int, top: np.float32) -> np.ndarray:
        if top == 0:
            counts = np.zeros(nbins, np.int64)
            counts[0] = x.size
        else:
            counts = resolve_backend(self.backend, (x,)).abs_histogram(x, nbins, top)
        if self.skip_zeros:
            counts[0] -= self._zeros(x)
        return counts

    def _zeros(self, x) -> int:
        """How many elements of ``x`` are ±0 (on the device for a device ``x``)."""
        if not is_device_array(x):
            return int(np.count_nonzero(x == 0))
        # Two bins over [0, smallest subnormal]: |x| = 0 lands in bin 0, the smallest subnormal in bin 1,
        # everything larger (and NaN) is skipped.
        tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
        return int(resolve_backend(self.backend, (x,)).abs_histogram(x, 2, tiny)[0])

    def collect(self, x: npt.ArrayLike) -> None:
        """Add one batch: ``bin = int(|x| * nbins / top)`` (float32), the right edge in the last bin."""
        x = device_float_input(x)
        if x.size == 0:
            return
        x_max = np.float32(_finite_amax(host_array(reduce_amax(x, layout=resolve_layout(tuple(x.shape)),
                                                               backend=self.backend))).reshape(()))
        if self.histogram is None:
            self.bin_edges = np.linspace(0, x_max, self.num_bins + 1, dtype=np.float32)
            self.histogram = self._counts(x, self.num_bins, x_max)
            return
        top = self.bin_edges[-1]
        if x_max > top:
            width = self.bin_edges[1] - self.bin_edges[0]
            nbins = int(math.ceil(float(x_max / width)))
            self.bin_edges = (np.arange(nbins + 1, dtype=np.float32) * width).astype(np.float32)
            top = self.bin_edges[-1]
        hist = self._counts(x, len(self.bin_edges) - 1, top)
        hist[:self.histogram.size] += self.histogram
        self.histogram = hist

    def compute_amax(self, method: Literal["entropy", "mse", "percentile"] = "entropy", *, num_bits: int = 8,
                     unsigned: bool = False, stride: int = 1, start_bin: int = 128,
                     percentile: float = 99.99) -> np.float32 | None:
        """The calibrated amax (float32), or None before any batch.

        ``"entropy"``: the edge ``i`` (from ``start_bin``) minimising KL(P ‖ Q), P the
        histogram clipped at ``i`` (outliers folded into the last bin), Q it merged
        into ``2**(num_bits - 1 + unsigned)`` levels; the last minimum wins.
        ``"mse"``: the bin centre minimising the count-weighted error of fake
        quantizing the centres with that amax. ``"percentile"``: the left edge of
        the first bin whose CDF reaches ``percentile`` %.
        """
        if method not in ("entropy", "mse", "percentile"):
            raise ValueError(f"method={method!r} is not allowed; use one of ['entropy', 'mse', 'percentile']")
        if isinstance(num_bits, bool) or not isinstance(num_bits, (int, np.integer)) or not 2 <= num_bits <= 16:
            raise ValueError(f"num_bits={num_bits!r} must be an int in [2, 16]")
        if isinstance(start_bin, bool) or not isinstance(start_bin, (int, np.integer)) or start_bin < 0:
            raise ValueError(f"start_bin={start_bin!r} must be an int >= 0")
        if isinstance(stride, bool) or not isinstance(stride, (int, np.integer)) or stride < 1:
            raise ValueError(f"stride={stride!r} must be an int >= 1")
        if self.histogram is None:
            return None
        hist, edges = self.histogram, self.bin_edges
        if method == "percentile":
            if not 0 <= percentile <= 100:
                raise ValueError(f"percentile={percentile!r} must be within [0, 100]")
            total = hist.sum()
            if total == 0:
                return np.float32(0)
            cdf = np.cumsum(hist / total)
            return np.float32(edges[min(int(np.searchsorted(cdf, percentile / 100)), len(edges) - 1)])
        if start_bin >= len(hist):
            raise ValueError(f"start_bin={start_bin} must be below the number of bins {len(hist)}")
        if method == "entropy":
            return _amax_entropy(hist, edges, num_bits, unsigned, stride, start_bin)
        return _amax_mse(hist, edges, num_bits, unsigned, start_bin)


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
        sums = np.bincount(dig[valid], weights=ref[valid], minlength=nq)
        cnt = np.bincount(dig[valid], minlength=nq)
        dens = np.divide(sums, cnt, out=np.zeros_like(sums), where=cnt > 0)
        new = np.where(valid, dens[np.clip(dig, 0, nq - 1)], 0.0)
        reference = ref.copy()
        reference[-1] += tail[i]
        divergences.append(_kl(reference, new))
    d = np.array(divergences)
    last_argmin = len(d) - 1 - int(np.argmin(d[::-1]))
    return np.float32(edges[last_argmin * stride + start_bin])


def _amax_mse(hist, edges, num_bits, unsigned, start_bin) -> np.float32:
    centers = ((edges[1:] + edges[:-1]) / np.float32(2)).astype(np.float32)
    counts = hist.astype(np.float64)
    maxbound = np.float32((1 << (num_bits - 1 + int(unsigned))) - 1)
    minbound = np.float32(0) if unsigned else -maxbound
    best, best_i = math.inf, start_bin
    for i in range(start_bin, len(centers)):
        amax = centers[i]
        if amax <= np.float32(2.0 ** -24):
            q = np.zeros_like(centers)
        else:
            s = maxbound / amax
            q = np.clip(np.rint(centers * s), minbound, maxbound) / s
        mse = float(np.mean((q.astype(np.float64) - centers) ** 2 * counts))
        if mse < best:
            best, best_i = mse, i
    return np.float32(centers[best_i])
