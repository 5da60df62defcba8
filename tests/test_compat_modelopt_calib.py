"""nbquant.compat.modelopt's calibrators (modelopt's signatures): exact values and refusals, torch-free."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nbquant
from nbquant.compat import modelopt as cmo


def test_max_calibrator_keeps_the_rank_and_dtype():
    x = np.array([[1.0, -3.0, 0.5], [0.25, 2.0, -4.0]], ml_dtypes.bfloat16)
    cal = cmo.MaxCalibrator(8, axis=-1, track_amax=True)
    cal.collect(x)
    cal.collect(x * 2)
    amax = cal.compute_amax()
    assert amax.dtype == ml_dtypes.bfloat16 and amax.shape == (1, 3)
    assert amax.astype(np.float32).tolist() == [[2.0, 6.0, 8.0]]
    assert [a.shape for a in cal.amaxs] == [(1, 3), (1, 3)]
    per_tensor = cmo.MaxCalibrator()
    per_tensor.collect(x)
    assert per_tensor.compute_amax().shape == () and float(per_tensor.compute_amax()) == 4.0
    every = cmo.MaxCalibrator(axis=(0, 1))  # every dim kept: modelopt reduces over all of them
    every.collect(x)
    assert every.compute_amax().shape == ()


def test_max_calibrator_refusals():
    cal = cmo.MaxCalibrator(axis=0)
    cal.collect(np.ones((2, 3), np.float32))
    with pytest.raises(RuntimeError, match="amax shape changed"):
        cal.collect(np.ones((3, 3), np.float32))
    with pytest.raises(ValueError, match="NaN or inf"):
        cal.collect(np.array([[np.nan, 1, 1], [1, 1, 1]], np.float32))
    with pytest.raises(AttributeError, match="track_amax=True"):
        cal.amaxs  # noqa: B018
    with pytest.raises(TypeError, match="axis"):
        cmo.MaxCalibrator(axis=1.5)
    with pytest.raises(ValueError, match="out of range"):
        cmo.MaxCalibrator(axis=2).collect(np.ones((2, 3), np.float32))
    cal.reset()
    assert cal.compute_amax() is None


def test_histogram_calibrator_is_the_native_one_with_modelopts_arguments():
    x = np.array([0.0, 1.0, 2.0, 4.0, -8.0] * 40, np.float32)
    ours, native = cmo.HistogramCalibrator(4, unsigned=True, num_bins=64), nbquant.modelopt.HistogramCalibrator(64)
    ours.collect(x)
    native.collect(x)
    for method in ("entropy", "mse", "percentile"):
        want = native.compute_amax(method, num_bits=4, unsigned=True, start_bin=8)
        assert ours.compute_amax(method, start_bin=8) == np.array(want, np.float32)
    with pytest.raises(NotImplementedError, match="per tensor"):
        cmo.HistogramCalibrator(axis=0)
    with pytest.raises(TypeError, match="torch_hist"):
        cmo.HistogramCalibrator(torch_hist="yes")
    assert cmo.HistogramCalibrator().compute_amax("entropy") is None


def test_histogram_percentile_reads_torchs_float32_linspace_edges():
    """modelopt's first edges are torch.linspace in float32: the upper half from the far end, rounded once.

    The bit patterns are torch 2.13's; NumPy's float32 linspace is one ulp below at each of these edges.
    """
    cal = cmo.HistogramCalibrator(num_bins=3000)
    cal.collect(np.float32([0.0, 0.0, 5970.0, -11923.436]))  # 5970 lands in bin 1502 of 3000
    assert cal._native.bin_edges[[1502, 1509, 1513]].view(np.uint32).tolist() == [1169853782, 1169910760,
                                                                                   1169943319]
    assert cal.compute_amax("percentile", percentile=60).view(np.uint32) == 1169853782  # 5969.667
