"""Calibrators: max and histogram (cpu histogram kernel bit-exact against the NumPy oracle)."""

from __future__ import annotations

import numpy as np
import pytest

import nbquant


def _batches(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((17, 31)).astype(np.float32) * s for s in (1.0, 3.0, 0.5)]


def test_max_calibrator(backend):
    cal = nbquant.MaxCalibrator(backend=backend)
    assert cal.compute_amax() is None
    for b in _batches():
        cal.collect(b)
    assert cal.compute_amax() == max(np.abs(b).max() for b in _batches())
    per = nbquant.MaxCalibrator(axis=0, backend=backend)
    for b in _batches():
        per.collect(b)
    np.testing.assert_array_equal(per.compute_amax(), np.max([np.abs(b).max(axis=1) for b in _batches()], axis=0))
    per.reset()
    assert per.compute_amax() is None


@pytest.mark.parametrize("skip_zeros", [False, True])
def test_histogram_matches_reference(backend, skip_zeros):
    cals = [nbquant.HistogramCalibrator(num_bins=64, skip_zeros=skip_zeros, backend=b) for b in (backend, "reference")]
    for b in _batches():
        b[0, :3] = 0.0
        for c in cals:
            c.collect(b)
    got, ref = cals
    np.testing.assert_array_equal(got.histogram, ref.histogram)
    np.testing.assert_array_equal(got.bin_edges, ref.bin_edges)
    assert got.histogram.sum() == 3 * 17 * 31 - (9 if skip_zeros else 0)
    assert len(got.bin_edges) == len(got.histogram) + 1 > 65  # the 3.0 batch extended the bins
    for method in ("entropy", "mse", "percentile"):
        assert got.compute_amax(method, start_bin=8) == ref.compute_amax(method, start_bin=8)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_histogram_kernel_special_values(backend, dtype):
    """The kernel over several work units and chunks (odd size): bin edges, runs of zeros, NaN, ±inf, above top."""
    from nbquant.backends import resolve_backend

    nbins, top = 64, np.float32(8.0)
    n = 5 * 2048 + 7 if backend != "cuda" else 2 * 64 + 7  # the simulator runs threads in Python
    x = np.random.default_rng(1).uniform(-9, 9, n).astype(np.float32)
    edges = np.arange(nbins + 1, dtype=np.float32) * (top / nbins)
    x[:nbins + 1] = edges  # exactly on every edge, the right edge of the last bin included
    x[70:90] = 0.0  # a run of equal bins
    x[90:94] = [np.nan, np.inf, -np.inf, -0.0]
    x[94:97] = [np.nextafter(top, np.float32(9)), -top, np.nextafter(np.float32(0.125), np.float32(0))]
    x = x.astype(dtype)
    got = resolve_backend(backend, (x,)).abs_histogram(x, nbins, top)
    ref = resolve_backend("reference", (x,)).abs_histogram(x, nbins, top)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, ref)
    v = np.abs(x.astype(np.float32))
    assert got.sum() == np.count_nonzero(v <= top)  # NaN and values above top are left out
    assert got[-1] == np.count_nonzero((v >= edges[-2]) & (v <= top))  # the right edge counts in the last bin


def test_histogram_hand_example():
    cal = nbquant.HistogramCalibrator(num_bins=8)
    cal.collect(np.array([0.0, 1.0, 2.0, 4.0, -8.0], np.float32))
    assert cal.histogram.tolist() == [1, 1, 1, 0, 1, 0, 0, 1]
    assert cal.compute_amax("percentile", percentile=50) == 2.0
    assert cal.compute_amax("percentile", percentile=100) == 7.0
    cal.collect(np.array([10.0], np.float32))  # width 1: extend to 10 bins
    assert cal.bin_edges.tolist() == [float(i) for i in range(11)] and cal.histogram.sum() == 6


def test_entropy_and_mse_are_sensible():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(200_000).astype(np.float32)
    x[:5] = 40.0  # outliers
    cal = nbquant.HistogramCalibrator()
    cal.collect(x)
    assert 2.0 < float(cal.compute_amax("entropy")) < 20.0  # KL clips the outliers
    # MSE weighs the 5 outliers' clipping error ((40 - a)**2 each) against the bulk's rounding error
    assert 20.0 < float(cal.compute_amax("mse")) < 40.0
    assert float(cal.compute_amax("percentile", percentile=99.99)) < 10.0


def test_all_zero_batch():
    cal = nbquant.HistogramCalibrator(num_bins=4)
    cal.collect(np.zeros(5, np.float32))
    assert cal.histogram.tolist() == [5, 0, 0, 0] and cal.compute_amax("percentile") == 0.0


@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda: nbquant.HistogramCalibrator(num_bins=1), ValueError, "num_bins=1"),
    (lambda: nbquant.HistogramCalibrator(skip_zeros=1), TypeError, "skip_zeros=1"),
    (lambda: nbquant.MaxCalibrator(axis=1.5), TypeError, "axis=1.5"),
    (lambda: nbquant.MaxCalibrator().collect(np.array([np.nan], np.float32)), ValueError, "NaN or inf"),
    (lambda: nbquant.HistogramCalibrator().collect(np.array([np.inf], np.float32)), ValueError, "NaN or inf"),
    (lambda: nbquant.HistogramCalibrator().compute_amax("kl"), ValueError, "method='kl'"),
    (lambda: nbquant.HistogramCalibrator().compute_amax(num_bits=0), ValueError, "num_bits=0"),
    (lambda: nbquant.HistogramCalibrator().compute_amax(stride=0), ValueError, "stride=0"),
    (lambda: nbquant.HistogramCalibrator().compute_amax(start_bin=-1), ValueError, "start_bin=-1"),
])
def test_bad_arguments(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_bad_percentile_and_start_bin():
    cal = nbquant.HistogramCalibrator(num_bins=8)
    cal.collect(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="percentile=101"):
        cal.compute_amax("percentile", percentile=101)
    with pytest.raises(ValueError, match="start_bin=8"):
        cal.compute_amax("entropy", start_bin=8)
    with pytest.raises(ValueError, match="shape"):
        m = nbquant.MaxCalibrator(axis=0)
        m.collect(np.ones((2, 3), np.float32))
        m.collect(np.ones((3, 3), np.float32))
