"""nbquant.compat.modelopt against nvidia-modelopt 0.47 itself, bit for bit (the parity tier)."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_same_bits, examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nbquant.compat import modelopt as cmo

pytestmark = pytest.mark.parity
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch = pytest.importorskip("torch")
    mtq = pytest.importorskip("modelopt.torch.quantization")
    from modelopt.torch.quantization import tensor_quant as mtensor_quant
    from modelopt.torch.quantization.calib import HistogramCalibrator, MaxCalibrator


def _t(a: np.ndarray):
    a = np.ascontiguousarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def _n(t) -> np.ndarray:
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


@st.composite
def _batches(draw):
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    count = int(np.prod(shape))
    n = draw(st.integers(1, 3))
    values = st.floats(-1e3, 1e3, width=32) | st.sampled_from([0.0, -0.0, 0.5, -2.5, 1e-30])
    batches = [np.array(draw(st.lists(values, min_size=count, max_size=count)), np.float32).reshape(shape)
               for _ in range(n)]
    axis = draw(st.sampled_from([None, *range(len(shape)), *(range(-len(shape), 0)), tuple(range(len(shape)))[:2]]))
    return batches, axis


@settings(max_examples=examples(150), deadline=None)
@given(problem=_batches(), dtype=st.sampled_from(["float32", "bfloat16", "float16"]))
def test_max_calibrator_matches_modelopt(problem, dtype):
    batches, axis = problem
    t = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}[dtype]
    track = dtype != "bfloat16"  # modelopt's track_amax calls .numpy() on the amax, which fails for bfloat16
    theirs, ours = MaxCalibrator(8, axis, False, track_amax=track), cmo.MaxCalibrator(8, axis, False, track_amax=track)
    for b in batches:
        theirs.collect(_t(b.astype(t)))
        ours.collect(b.astype(t))
    assert_same_bits(ours.compute_amax(), np.asarray(_n(theirs.compute_amax())))
    if track:
        assert len(ours.amaxs) == len(theirs.amaxs)
        for a, b in zip(ours.amaxs, theirs.amaxs, strict=True):
            assert_same_bits(a, np.asarray(b))


@settings(max_examples=examples(30), deadline=None)
@given(data=st.data(), num_bins=st.sampled_from([16, 64, 2048]), skip_zeros=st.booleans(),
       unsigned=st.booleans(), num_bits=st.sampled_from([4, 8]))
def test_histogram_calibrator_matches_modelopt(data, num_bins, skip_zeros, unsigned, num_bits):
    """Histogram counts over batches whose range grows at most 4x (beyond, nbquant bounds the bin count), and the
    entropy and percentile amax of the first batch's histogram.

    Not compared: the edges after the range grows (modelopt's torch.arange computes half of them from the far
    end, 1 ulp off ``m * width``); the counts after growth when that arange makes one edge more than the bin
    count (then modelopt's histc spreads its bins over the longer range, each wider than the first width); and
    the MSE method (modelopt 0.47 passes ``num_bits`` into the ``bias`` slot of ``fake_tensor_quant`` there);
    docs/compat/modelopt.md, "Deviations".
    """
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    scale = data.draw(st.sampled_from([0.01, 1.0, 300.0]))
    batches = [(rng.standard_t(4, (64, 33)) * scale).astype(np.float32) for _ in range(data.draw(st.integers(1, 3)))]
    batches[0].reshape(-1)[:40] = 0.0
    top = np.abs(batches[0]).max()
    batches = [np.clip(b, -3.5 * top, 3.5 * top) for b in batches]
    theirs = HistogramCalibrator(num_bits, None, unsigned, num_bins=num_bins, skip_zeros=skip_zeros)
    ours = cmo.HistogramCalibrator(num_bits, None, unsigned, num_bins=num_bins, skip_zeros=skip_zeros)
    theirs.collect(_t(batches[0]))
    ours.collect(batches[0])
    for method, kw in (("entropy", {"start_bin": min(128, num_bins // 2)}), ("percentile", {"percentile": 99.9})):
        want = theirs.compute_amax(method, **kw)
        assert_same_bits(ours.compute_amax(method, **kw), np.asarray(_n(torch.as_tensor(want)), np.float32))
    for b in batches[1:]:
        theirs.collect(_t(b))
        ours.collect(b)
    if len(theirs._calib_bin_edges) == theirs._num_bins + 1:
        assert np.array_equal(ours._native.histogram, theirs._calib_hist.numpy().astype(np.int64))
    else:  # modelopt's arange made more edges than bins: its histc then spreads the bins over the longer range
        assert len(theirs._calib_bin_edges) == theirs._num_bins + 2 and len(batches) > 1
        assert ours._native.histogram.sum() == int(theirs._calib_hist.sum())


_TAILS = {
    "student-t 1": lambda rng, n: rng.standard_t(1, n),
    "student-t 3": lambda rng, n: rng.standard_t(3, n),
    "lognormal": lambda rng, n: rng.lognormal(0.0, 2.0, n),
    "pareto": lambda rng, n: rng.pareto(1.5, n),
    "normal": lambda rng, n: rng.standard_normal(n),
}


@settings(max_examples=examples(300), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), tail=st.sampled_from(sorted(_TAILS)),
       scale=st.sampled_from([1e-3, 0.37, 1.0, 7.3, 300.0, 1e5]), size=st.integers(1, 5000),
       num_bins=st.sampled_from([2, 3, 16, 100, 255, 2048, 3001, 8192]), skip_zeros=st.booleans(),
       percentiles=st.lists(st.floats(0, 100) | st.sampled_from([50.0, 99.0, 99.9, 99.99, 99.999, 100.0]),
                            min_size=1, max_size=4))
def test_histogram_percentile_matches_modelopt(seed, tail, scale, size, num_bins, skip_zeros, percentiles):
    """The first batch's bin edges (torch.linspace in float32: the upper half from the far end, one rounding)
    and the percentile amax read off them, over long-tailed data, many bin counts and percentiles."""
    rng = np.random.default_rng(seed)
    x = (_TAILS[tail](rng, size) * scale).astype(np.float32)
    x[: size // 10] = 0.0
    if not np.abs(x).max() > 0 or (skip_zeros and not x.any()):
        return
    theirs = HistogramCalibrator(8, None, False, num_bins=num_bins, skip_zeros=skip_zeros)
    ours = cmo.HistogramCalibrator(8, None, False, num_bins=num_bins, skip_zeros=skip_zeros)
    theirs.collect(_t(x))
    ours.collect(x)
    assert_same_bits(ours._native.bin_edges, theirs._calib_bin_edges.numpy())
    for p in percentiles:
        want = theirs.compute_amax("percentile", percentile=p)
        assert_same_bits(ours.compute_amax("percentile", percentile=p), np.asarray(_n(want), np.float32))


def test_tensor_quant_functions_match_modelopt():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((6, 33)) * 4).astype(np.float32)
    x[0, :4] = [0.5, 1.5, -2.5, 0.0]
    amax = np.abs(x).max(axis=1, keepdims=True)
    for num_bits, unsigned, narrow in ((8, False, True), (4, False, False), (8, True, False)):
        xs = np.abs(x) if unsigned else x
        want = mtensor_quant.fake_tensor_quant(_t(xs), _t(amax), None, num_bits, unsigned, narrow)
        assert_same_bits(cmo.fake_tensor_quant(xs, amax, num_bits, unsigned, narrow), _n(want))
    want = mtensor_quant.scaled_e4m3(_t(x), _t(amax), None, 4, 3)
    assert_same_bits(cmo.scaled_e4m3(x, amax), _n(want))
