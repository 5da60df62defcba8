"""Calibrators: max and histogram (cpu histogram kernel bit-exact against the NumPy oracle)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbquant


def _batches(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((17, 31)).astype(np.float32) * s for s in (1.0, 3.0, 0.5)]


def test_max_calibrator(backend):
    cal = nbquant.modelopt.MaxCalibrator(backend=backend)
    assert cal.compute_amax() is None
    for b in _batches():
        cal.collect(b)
    assert cal.compute_amax() == max(np.abs(b).max() for b in _batches())
    per = nbquant.modelopt.MaxCalibrator(axis=0, backend=backend)
    for b in _batches():
        per.collect(b)
    np.testing.assert_array_equal(per.compute_amax(), np.max([np.abs(b).max(axis=1) for b in _batches()], axis=0))
    per.reset()
    assert per.compute_amax() is None


@pytest.mark.parametrize("skip_zeros", [False, True])
def test_histogram_matches_reference(backend, skip_zeros):
    cals = [nbquant.modelopt.HistogramCalibrator(num_bins=64, skip_zeros=skip_zeros, backend=b)
            for b in (backend, "reference")]
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
    cal = nbquant.modelopt.HistogramCalibrator(num_bins=8)
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
    cal = nbquant.modelopt.HistogramCalibrator()
    cal.collect(x)
    assert 2.0 < float(cal.compute_amax("entropy")) < 20.0  # KL clips the outliers
    # MSE weighs the 5 outliers' clipping error ((40 - a)**2 each) against the bulk's rounding error
    assert 20.0 < float(cal.compute_amax("mse")) < 40.0
    assert float(cal.compute_amax("percentile", percentile=99.99)) < 10.0


def test_all_zero_batch():
    cal = nbquant.modelopt.HistogramCalibrator(num_bins=4)
    cal.collect(np.zeros(5, np.float32))
    assert cal.histogram.tolist() == [5, 0, 0, 0] and cal.compute_amax("percentile") == 0.0


@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda: nbquant.modelopt.HistogramCalibrator(num_bins=1), ValueError, "num_bins=1"),
    (lambda: nbquant.modelopt.HistogramCalibrator(skip_zeros=1), TypeError, "skip_zeros=1"),
    (lambda: nbquant.modelopt.MaxCalibrator(axis=1.5), TypeError, "axis=1.5"),
    (lambda: nbquant.modelopt.MaxCalibrator().collect(np.array([np.nan], np.float32)), ValueError, "NaN or inf"),
    (lambda: nbquant.modelopt.HistogramCalibrator().collect(np.array([np.inf], np.float32)), ValueError, "NaN or inf"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax("kl"), ValueError, "method='kl'"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax(num_bits=0), ValueError, "num_bits=0"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax(stride=0), ValueError, "stride=0"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax(start_bin=-1), ValueError, "start_bin=-1"),
    (lambda: nbquant.modelopt.HistogramCalibrator(num_bins=2.5), TypeError, "num_bins=2.5"),
    (lambda: nbquant.modelopt.HistogramCalibrator(num_bins=True), TypeError, "num_bins=True"),
    (lambda: nbquant.modelopt.HistogramCalibrator(num_bins=(1 << 20) + 1), ValueError, "num_bins=1048577"),
    (lambda: nbquant.modelopt.HistogramCalibrator(backend="gpu"), ValueError, "backend='gpu'"),
    (lambda: nbquant.modelopt.MaxCalibrator(backend=3), ValueError, "backend=3"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax("percentile", percentile="99"), TypeError,
     "percentile='99'"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax(percentile=float("nan")), ValueError,
     "percentile=nan"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax(percentile=-1), ValueError, "percentile=-1"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax(None), ValueError, "method=None"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax(num_bits=8.0), TypeError, "num_bits=8.0"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax(num_bits=17), ValueError, "num_bits=17"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax(unsigned=1), TypeError, "unsigned=1"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax(stride=1.5), TypeError, "stride=1.5"),
    (lambda: nbquant.modelopt.HistogramCalibrator().compute_amax(start_bin="1"), TypeError, "start_bin='1'"),
])
def test_bad_arguments(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_bad_percentile_and_start_bin():
    cal = nbquant.modelopt.HistogramCalibrator(num_bins=8)
    cal.collect(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="percentile=101"):
        cal.compute_amax("percentile", percentile=101)
    with pytest.raises(ValueError, match="start_bin=8"):
        cal.compute_amax("entropy", start_bin=8)
    with pytest.raises(ValueError, match="shape"):
        m = nbquant.modelopt.MaxCalibrator(axis=0)
        m.collect(np.ones((2, 3), np.float32))
        m.collect(np.ones((3, 3), np.float32))


# --- any finite data (issue 14) ---------------------------------------------------------------------------------

F32 = np.finfo(np.float32)
METHODS = ("entropy", "mse", "percentile")


def _check_state(cal, n_counted):
    """Every value counted, edges strictly increasing and finite, bins within the bound."""
    assert cal.histogram.dtype == np.int64 and cal.bin_edges.dtype == np.float32
    assert cal.histogram.sum() == n_counted and (cal.histogram >= 0).all()
    assert cal.bin_edges.size == cal.histogram.size + 1 and cal.bin_edges[0] == 0
    assert (np.diff(cal.bin_edges) > 0).all() and np.isfinite(cal.bin_edges).all()
    assert cal.num_bins <= cal.histogram.size <= cal.max_bins == 4 * cal.num_bins


def _amaxes(cal, **kw):
    """compute_amax by every method: finite, in [0, top edge]."""
    out = {m: cal.compute_amax(m, **kw) for m in METHODS}
    for m, a in out.items():
        assert isinstance(a, np.float32) and np.isfinite(a) and 0 <= a <= cal.bin_edges[-1], (m, a)
    return out


def _data(kind, rng):
    return {
        "uniform [0.5, 1]": lambda: rng.uniform(0.5, 1, 5000),
        "constant + noise": lambda: -3 + 1e-3 * rng.standard_normal(5000),
        "constant": lambda: np.full(300, -0.75),
        "subnormal": lambda: rng.uniform(-1, 1, 1000) * 1e-40,
        "smallest subnormal": lambda: np.array([F32.smallest_subnormal, 0, -F32.smallest_subnormal]),
        "near float32 max": lambda: rng.uniform(-1, 1, 1000) * F32.max,
        "float32 max": lambda: np.array([F32.max, -F32.max, 1.0, 0.0]),
        "all zero": lambda: np.zeros(40),
    }[kind]().astype(np.float32)


@pytest.mark.parametrize("kind", ["uniform [0.5, 1]", "constant + noise", "constant", "subnormal", "smallest subnormal",
                                  "near float32 max", "float32 max", "all zero"])
def test_every_method_on_unusual_data(backend, kind):
    """Data away from zero used to break entropy (NumPy casting error); none of these may raise or lose a value."""
    x = _data(kind, np.random.default_rng(4))
    cals = [nbquant.modelopt.HistogramCalibrator(backend=b) for b in (backend, "reference")]
    for c in cals:
        c.collect(x)
        _check_state(c, x.size)
    got, ref = cals
    np.testing.assert_array_equal(got.histogram, ref.histogram)
    amax = _amaxes(got)
    assert amax == _amaxes(ref)
    top = np.abs(x).max()
    if top / 2048 >= F32.smallest_normal:
        assert got.bin_edges[-1] == top  # the first range is [0, max |x|] (modelopt)
    else:  # ... unless its step would be subnormal: a whole number of subnormals, at least one
        step = float(got.bin_edges[1])
        assert step == F32.smallest_subnormal * max(1, np.ceil(top / 2048 / F32.smallest_subnormal))
        assert 0 <= got.bin_edges[-1] - top <= 2048 * F32.smallest_subnormal
    assert amax["percentile"] <= top
    if kind == "constant":  # every count in the last bin: entropy keeps it all, percentile its left edge
        assert got.histogram[-1] == x.size
        assert amax["entropy"] == np.float32(0.75) and amax["percentile"] == got.bin_edges[-2]
    if kind == "all zero":
        assert got.histogram[0] == x.size and amax["percentile"] == 0
    if kind == "uniform [0.5, 1]":  # entropy's KL is 0 at the first edge above the data's lowest bin (as modelopt's)
        assert 0.5 <= amax["entropy"] < 0.51 and amax["mse"] > 0.99 and amax["percentile"] > 0.999
    m = nbquant.modelopt.MaxCalibrator(backend=backend)
    m.collect(x)
    assert m.compute_amax() == top


def test_subnormal_maximum_gets_distinct_edges():
    """A max too small for num_bins distinct float32 edges: the step is a whole number of subnormals."""
    cal = nbquant.modelopt.HistogramCalibrator(num_bins=16)
    x = np.array([3, 0, 2, 17], np.float32) * F32.smallest_subnormal  # 17 units over 16 bins: step 2 units
    cal.collect(x)
    assert (cal.bin_edges / F32.smallest_subnormal).tolist() == [2.0 * i for i in range(17)]
    assert cal.histogram.tolist() == [1, 2] + [0] * 6 + [1] + [0] * 7
    _check_state(cal, 4)


@pytest.mark.parametrize("skip_zeros", [False, True])
def test_all_zero_batches_then_data(backend, skip_zeros):
    """An all-zero first batch used to make every later collect raise OverflowError (zero bin width)."""
    rng = np.random.default_rng(5)
    normal = [rng.standard_normal(1000).astype(np.float32) * s for s in (1, 2)]
    cal = nbquant.modelopt.HistogramCalibrator(num_bins=64, skip_zeros=skip_zeros, backend=backend)
    cal.collect(np.zeros((3, 5), np.float32))
    cal.collect(-np.zeros(7, np.float32))
    zeros = 0 if skip_zeros else 22
    _check_state(cal, zeros)
    assert cal.histogram[0] == zeros
    assert cal.compute_amax("percentile") == 0 and all(np.isfinite(a) for a in _amaxes(cal, start_bin=8).values())
    for b in normal:
        cal.collect(b)
    # the first batch with a non-zero value starts the range as a first batch would; the zeros stay in bin 0
    alone = nbquant.modelopt.HistogramCalibrator(num_bins=64, skip_zeros=skip_zeros, backend=backend)
    for b in normal:
        alone.collect(b)
    np.testing.assert_array_equal(cal.bin_edges, alone.bin_edges)
    np.testing.assert_array_equal(cal.histogram - alone.histogram, [zeros] + [0] * (cal.histogram.size - 1))
    _check_state(cal, zeros + 2000)
    _amaxes(cal, start_bin=8)


def test_values_near_float32_max_are_counted(backend):
    """|x| * num_bins overflowing float32 (|x| > ~1.7e35 for 2048 bins) used to drop the value."""
    x = np.array([F32.max, -1e38, 2e35, 1.7e35, -1e30, 1.0, 0.0], np.float32)
    cal = nbquant.modelopt.HistogramCalibrator(backend=backend)
    cal.collect(x)
    _check_state(cal, x.size)
    bins = np.floor(np.abs(x.astype(np.float64)) / float(F32.max) * 2048).astype(int).clip(max=2047)
    np.testing.assert_array_equal(np.flatnonzero(cal.histogram), np.unique(bins))
    _amaxes(cal)


def test_histogram_kernel_near_float32_max(backend):
    """The kernel bins values whose |x| * nbins overflows by |x| / top * nbins, the same on every backend."""
    from nbquant.backends import resolve_backend

    top = F32.max
    x = np.concatenate([np.linspace(0, F32.max, 4099, dtype=np.float32), -np.geomspace(1e30, 3e38, 500)
                        .astype(np.float32)])
    for nbins in (2, 2048, 1 << 20):
        got = resolve_backend(backend, (x,)).abs_histogram(x, nbins, top)
        ref = resolve_backend("reference", (x,)).abs_histogram(x, nbins, top)
        np.testing.assert_array_equal(got, ref)
        assert got.sum() == x.size
        want = np.minimum((np.abs(x.astype(np.float64)) / float(top) * nbins).astype(np.int64), nbins - 1)
        assert np.abs(np.repeat(np.arange(nbins), got) - np.sort(want)).max() <= 1  # off by one bin at most


@pytest.mark.parametrize("factor", [3.0, 1e4, 1e6, 1e30, float(F32.max)])
def test_range_growth_is_bounded(backend, factor):
    """A later max 10^4 times larger used to grow the histogram to 20M bins with non-increasing edges."""
    rng = np.random.default_rng(6)
    first = rng.standard_normal(3000).astype(np.float32)
    first[0] = 4.0  # width 4 / num_bins
    second = (rng.uniform(-1, 1, 2000) * factor).astype(np.float32)
    second[0] = np.float32(min(4 * factor, float(F32.max)))
    cal = nbquant.modelopt.HistogramCalibrator(num_bins=256, backend=backend)
    cal.collect(first)
    before, old_edges = cal.histogram.copy(), cal.bin_edges.copy()
    cal.collect(second)
    _check_state(cal, first.size + second.size)
    width, old_width = float(cal.bin_edges[1]), float(old_edges[1])
    group = round(width / old_width)
    assert width == group * old_width and group & (group - 1) == 0  # a power-of-two multiple of the old width
    n = cal.histogram.size
    if factor == 3.0:  # within the bound: modelopt's rule, the same width
        assert group == 1 and n == 768
    else:
        assert cal.max_bins // 2 < n <= cal.max_bins
    assert cal.bin_edges[-1] >= np.abs(second).max()
    # the old counts were added in groups of `group` bins, the new batch binned over the new range
    merged = np.add.reduceat(before, np.arange(0, before.size, min(group, before.size)))
    new = nbquant.modelopt.HistogramCalibrator(num_bins=256, backend="reference")
    new.bin_edges, new.histogram = cal.bin_edges, np.zeros(n, np.int64)
    new.collect(second)
    np.testing.assert_array_equal(cal.histogram[:merged.size] - merged, new.histogram[:merged.size])
    np.testing.assert_array_equal(cal.histogram[merged.size:], new.histogram[merged.size:])
    # the new edges over the old range are edges of the old histogram, and amax is finite by every method
    common = old_edges[::group][:merged.size]
    np.testing.assert_array_equal(cal.bin_edges[:common.size], common)
    _amaxes(cal)


def test_growth_to_float32_max_keeps_a_partial_last_bin(backend):
    """bins * width past float32's max: the last edge is the max and the kernel's leftovers go to the last bin."""
    cal = nbquant.modelopt.HistogramCalibrator(num_bins=8, backend=backend)
    cal.collect(np.array([3.0, 1.0], np.float32))
    cal.collect(np.array([F32.max, -F32.max, 3e38, 1e38], np.float32))
    _check_state(cal, 6)
    assert cal.bin_edges[-1] == F32.max and float(cal.bin_edges[1]) * (cal.bin_edges.size - 1) > float(F32.max)
    assert cal.histogram[-1] >= 2 and cal.histogram[0] == 2
    cal.collect(np.array([F32.max, 0.5], np.float32))  # no growth: the partial bin counts again
    _check_state(cal, 8)
    _amaxes(cal, start_bin=8)


def _scaled(batch, scale):
    with np.errstate(over="ignore"):
        x = batch * np.float32(scale)
    return x if np.isfinite(x).all() else batch


#: Finite float32 batches: any finite values (zeros, and a band around 1, made likelier), scaled into the
#: subnormal or huge range now and then.
FINITE_BATCHES = st.lists(
    st.builds(_scaled, hnp.arrays(np.float32, st.integers(1, 40),
                                  elements=st.floats(width=32, allow_nan=False, allow_infinity=False)
                                  | st.just(0.0) | st.floats(-4, 4, width=32)),
              st.sampled_from([1.0, 1.0, 1e-40, 1e-30, 1e4, 1e30])),
    min_size=1, max_size=5)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batches=FINITE_BATCHES, num_bins=st.sampled_from([2, 3, 8, 16]), skip_zeros=st.booleans(),
       on_reference=st.booleans())
def test_any_finite_batches(backend, batches, num_bins, skip_zeros, on_reference):
    """Any finite float32 batches: every value counted, strict edges within the bound, a finite amax by every method."""
    cal = nbquant.modelopt.HistogramCalibrator(num_bins=num_bins, skip_zeros=skip_zeros,
                                      backend="reference" if on_reference else backend)
    counted = 0
    for b in batches:
        cal.collect(b)
        counted += b.size - (np.count_nonzero(b == 0) if skip_zeros else 0)
        _check_state(cal, counted)
        assert cal.bin_edges[-1] >= np.abs(b).max()
    for kw in ({"start_bin": 1}, {"start_bin": 1, "stride": 2, "num_bits": 2, "unsigned": True}):
        _amaxes(cal, **kw)


def test_entropy_needs_start_bin_above_zero():
    cal = nbquant.modelopt.HistogramCalibrator(num_bins=8)
    cal.collect(np.ones(4, np.float32))
    centres = (cal.bin_edges[1:] + cal.bin_edges[:-1]) / 2
    assert cal.compute_amax("mse", start_bin=0) == centres[7]  # every count in the last bin
    assert cal.compute_amax("mse", start_bin=0, stride=3) == centres[6]  # candidates 0, 3, 6 (modelopt's stride)
    with pytest.raises(ValueError, match="start_bin=0"):
        cal.compute_amax("entropy", start_bin=0)
