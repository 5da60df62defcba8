"""modelopt ops (tensor_quant, fake quant, E4M3, FakeAffine, STE, dynamic block quant) against the NumPy oracle."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import nbquant
from tests._helpers import assert_same_bits


def _data(shape=(7, 33), seed=1) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    return x


AMAX_CASES = (
    {"amax": 2.0},
    {"amax": np.float32(2.0 ** -25)},
    {"amax": None},
    {"amax": None, "axis": 0},
    {"amax": np.arange(1, 8, dtype=np.float32).reshape(7, 1)},
    {"amax": None, "axis": 1, "block_size": 8},
)


@pytest.mark.parametrize("num_bits", [8, 4, 2, (4, 3), (5, 2), (2, 1)], ids=str)
@pytest.mark.parametrize("case", AMAX_CASES, ids=lambda c: str({k: getattr(v, "shape", v) for k, v in c.items()}))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64])
def test_fake_tensor_quant_matches_reference(backend, num_bits, case, dtype):
    x = _data().astype(dtype)
    x_copy = x.copy()
    for narrow in (True, False):
        got = nbquant.modelopt.fake_tensor_quant(x, num_bits=num_bits, narrow_range=narrow, backend=backend, **case)
        ref = nbquant.modelopt.fake_tensor_quant(x, num_bits=num_bits, narrow_range=narrow, backend="reference", **case)
        assert_same_bits(got, ref)
        assert got.dtype == (np.float32 if dtype == np.float64 else dtype)
        if not isinstance(num_bits, tuple):
            args = {"num_bits": num_bits, "narrow_range": narrow, **case}
            for a, b in zip(nbquant.modelopt.tensor_quant(x, backend=backend, **args),
                            nbquant.modelopt.tensor_quant(x, backend="reference", **args), strict=True):
                assert_same_bits(a, b)
    assert_same_bits(x, x_copy)


def test_integer_hand_examples():
    x = np.array([0.3, -1.0, 2.5, np.nan, np.inf, -np.inf], np.float32)
    q, s = nbquant.modelopt.tensor_quant(x, 2.0, num_bits=4)  # S = 3.5, narrow [-7, 7]
    assert float(s) == 3.5
    assert q[:3].tolist() == [1.0, -4.0, 7.0] and np.isnan(q[3]) and q[4:].tolist() == [7.0, -7.0]
    y = nbquant.modelopt.fake_tensor_quant(x, 2.0, num_bits=4, narrow_range=False)
    assert y[1] == np.float32(-4.0) / np.float32(3.5) and y[5] == np.float32(-8) / np.float32(3.5)
    assert np.isnan(y[3])
    z = nbquant.modelopt.fake_tensor_quant(x, 2.0 ** -24, num_bits=8)  # amax <= 2**-24: finite → 0, ±inf/NaN → NaN
    assert z[:3].tolist() == [0.0, 0.0, 0.0] and np.isnan(z[3:]).all()
    u = nbquant.modelopt.fake_tensor_quant(np.array([0.5, 1.0], np.float32), 1.0, num_bits=8, unsigned=True)
    assert u.tolist() == [np.float32(128) / np.float32(255), 1.0]


def test_tensor_quant_of_an_amax_below_maxbound_over_flt_max_warns_nothing(backend):
    """``maxbound / amax`` overflows float32 for an amax under ~3.7e-37, where the scale is 1.0 anyway (amax is at
    most 2**-24): no RuntimeWarning, which the test suite makes an error (found by the full tier's hypothesis run)."""
    x = np.array([[1.3e-37, -2.3e-37, 4.0e-39, 0.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q, s = nbquant.modelopt.tensor_quant(x, None, 8, backend=backend)
    assert float(s) == 1.0 and q.view(np.uint32).tolist() == [[0, 0x80000000, 0, 0]]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_unsigned_check_of_a_half_input_with_a_nan_warns_nothing(backend, dtype):
    """modelopt's unsigned check ``x.min() < 0`` is False for an input holding a NaN; on float16 and bfloat16 NumPy
    warned ``invalid value`` while computing it (seen in the default tier's warnings summary)."""
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float16)
    x = np.array([[0.5, np.nan, 1.5, 3.0]], np.float32).astype(dt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = nbquant.modelopt.fake_tensor_quant(x, 3.0, 8, unsigned=True, backend=backend)
    want = nbquant.modelopt.fake_tensor_quant(x, 3.0, 8, unsigned=True, backend="reference")
    assert y.dtype == dt and np.isnan(y.astype(np.float32)[0, 1])
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))


def test_e4m3_hand_examples():
    y = nbquant.modelopt.scaled_e4m3(np.array([1.0, 0.3, -2.0, 5.0, np.nan], np.float32), 2.0)
    assert y[:4].tolist() == [1.0, np.float32(64 / np.float32(224)), -2.0, 2.0] and np.isnan(y[4])
    amax = np.float32(3.0)  # S = fl(fl(1/3) * 448), not fl(448/3)
    s = (np.float32(1) / amax) * np.float32(448)
    x = np.array([1.0], np.float32)
    v = np.float32(x[0] * s).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * (np.float32(1) / s)
    assert nbquant.modelopt.scaled_e4m3(x, amax)[0] == v
    assert nbquant.modelopt.scaled_e4m3(np.array([1e-9], np.float32), 0.0)[0] == np.float32(
        np.float32(1e-9 * 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) / 448)  # amax 0 read as 1


def test_ste_backward(backend):
    x = np.array([-2.0, -1.0, 0.5, 1.0, 1.5, np.nan], np.float32)
    g = np.arange(1, 7, dtype=np.float32)
    got = nbquant.modelopt.fake_tensor_quant_backward(g, x, 1.0, backend=backend)
    assert got.tolist() == [0.0, 2.0, 3.0, 4.0, 0.0, 0.0]
    x2 = _data()
    g2 = np.ones_like(x2)
    for kw in ({"axis": 0}, {"axis": 1, "block_size": 8}):
        amax = nbquant.reduce_amax(x2, **kw) / 2
        assert_same_bits(nbquant.modelopt.fake_tensor_quant_backward(g2, x2, amax, backend=backend, **kw),
                         nbquant.modelopt.fake_tensor_quant_backward(g2, x2, amax, backend="reference", **kw))
    aff = nbquant.modelopt.fake_affine_tensor_quant_backward(g, x, -1.0, 1.0, backend=backend)
    assert aff.tolist() == [0.0, 2.0, 3.0, 4.0, 0.0, 0.0]


def test_fake_affine(backend):
    x = _data()
    assert_same_bits(nbquant.modelopt.fake_affine_tensor_quant(x, -1.5, 2.0, backend=backend),
                     nbquant.modelopt.fake_affine_tensor_quant(x, -1.5, 2.0, backend="reference"))
    y = nbquant.modelopt.fake_affine_tensor_quant(np.array([-1.0, 0.1, 0.5, 3.0], np.float32), -1.0, 2.0, num_bits=2)
    assert y.tolist() == [-1.0, 0.0, 0.0, 2.0]  # step 1, qz = 1: 0.5 → rne 0 → -1 → (−1 + 1) * 1


def test_dynamic_block_quant(backend):
    x = _data((5, 40))
    for bs in ({-1: 8, "type": "dynamic"}, {-1: 16}, {-1: None}, {-2: 5, -1: 8}):
        assert_same_bits(nbquant.modelopt.dynamic_block_quant(x, bs, 4, backend=backend),
                         nbquant.modelopt.dynamic_block_quant(x, bs, 4, backend="reference"))
    y = nbquant.modelopt.dynamic_block_quant(np.array([[0.1, -0.2, 4.0, 1.0]], np.float32), {-1: 2}, 4)
    assert y[0, 1] == np.float32(-0.2) and y[0, 2] == 4.0


def test_reduce_amax(backend):
    x = _data()
    got = nbquant.reduce_amax(x, axis=0, backend=backend)
    assert np.isnan(got[0, 0]) and np.isinf(got[1, 0])
    ref = np.max(np.abs(x[3:]), axis=1)
    assert_same_bits(got[3:, 0], ref)


def test_unsigned_check_is_modelopts_min(backend):
    """unsigned raises when ``x.min() < 0``; a NaN makes the min NaN, so modelopt (and nbquant) do not raise."""
    x = np.array([0.5, -0.25, np.nan, 2.0], np.float32)
    got = nbquant.modelopt.fake_tensor_quant(x, 1.0, num_bits=8, unsigned=True, backend=backend)
    ref = nbquant.modelopt.fake_tensor_quant(x, 1.0, num_bits=8, unsigned=True, backend="reference")
    assert_same_bits(got, ref)
    assert got[1] == 0 and np.isnan(got[2])  # clamped at 0, NaN propagates
    with pytest.raises(TypeError, match="negative"):
        nbquant.modelopt.fake_tensor_quant(np.array([-0.0, -1e-30], np.float32), 1.0, unsigned=True, backend=backend)
    # -0.0 is not < 0
    nbquant.modelopt.fake_tensor_quant(np.array([-0.0, 0.5], np.float32), 1.0, unsigned=True, backend=backend)


@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda x: nbquant.modelopt.fake_tensor_quant(x, -1.0), ValueError, "amax must be >= 0"),
    (lambda x: nbquant.modelopt.fake_tensor_quant(x, 1.0, num_bits=1), ValueError, "num_bits=1"),
    (lambda x: nbquant.modelopt.fake_tensor_quant(x, 1.0, num_bits=8.5), TypeError, "num_bits=8.5"),
    (lambda x: nbquant.modelopt.fake_tensor_quant(x, 1.0, num_bits=(3, 3)), ValueError, r"num_bits=\(3, 3\)"),
    (lambda x: nbquant.modelopt.fake_tensor_quant(x, 1.0, unsigned=True), TypeError, "negative"),
    (lambda x: nbquant.modelopt.fake_tensor_quant(x, 1.0, narrow_range="yes"), TypeError, "narrow_range='yes'"),
    (lambda x: nbquant.modelopt.fake_tensor_quant(x, np.ones((3, 3), np.float32)), ValueError, "amax has shape"),
    (lambda x: nbquant.modelopt.fake_tensor_quant(x, np.array(["a"])), TypeError, "amax has dtype"),
    (lambda x: nbquant.modelopt.tensor_quant(x, 1.0, num_bits=(4, 3)), ValueError, "num_bits=\\(E, M\\)"),
    (lambda x: nbquant.modelopt.scaled_e4m3(x, 1.0, E=5, M=2), ValueError, "E=5, M=2"),
    (lambda x: nbquant.modelopt.fake_affine_tensor_quant(x, 2.0, 1.0), ValueError, "min_range=2.0"),
    (lambda x: nbquant.modelopt.fake_affine_tensor_quant(x, [0, 1], 2.0), TypeError, "min_range"),
    (lambda x: nbquant.modelopt.fake_affine_tensor_quant(x, -1.0, np.inf), ValueError, "max_range=inf"),
    (lambda x: nbquant.modelopt.fake_tensor_quant_backward(x[:, :2], x, 1.0), ValueError, "grad_output has shape"),
    (lambda x: nbquant.modelopt.dynamic_block_quant(x, [32]), TypeError, "block_sizes"),
    (lambda x: nbquant.modelopt.dynamic_block_quant(x, {"type": "dynamic"}), ValueError, "names no axis"),
    (lambda x: nbquant.modelopt.dynamic_block_quant(x, {5: 4}), ValueError, "key 5"),
    (lambda x: nbquant.modelopt.dynamic_block_quant(x, {-1: 4, "scale_bits": 8}), ValueError, "scale_bits"),
    (lambda x: nbquant.modelopt.fake_tensor_quant(x.astype(np.int32), 1.0), TypeError, "dtype int32"),
])
def test_bad_arguments(call, exc, match):
    with pytest.raises(exc, match=match):
        call(np.array([[-1.0, 0.5, 2.0, 3.0]], np.float32))


MODELOPT_ROOT_NAMES = ["HistogramCalibrator", "MaxCalibrator", "dynamic_block_quant", "fake_affine_tensor_quant",
                       "fake_affine_tensor_quant_backward", "fake_tensor_quant", "fake_tensor_quant_backward",
                       "scaled_e4m3", "tensor_quant"]


@pytest.mark.nosim
@pytest.mark.parametrize("name", MODELOPT_ROOT_NAMES)
def test_root_modelopt_names_are_deprecated_aliases_of_nbquant_modelopt(name):
    with pytest.warns(DeprecationWarning, match=rf"^nbquant\.{name} is deprecated: .* use nbquant\.modelopt\.{name}$"):
        alias = getattr(nbquant, name)
    assert alias is getattr(nbquant.modelopt, name)
    assert name not in nbquant.__all__ and name in nbquant.modelopt.__all__


@pytest.mark.nosim
def test_unknown_root_names_raise_attribute_error():
    with pytest.raises(AttributeError, match="module 'nbquant' has no attribute 'fake_quant'"):
        nbquant.fake_quant  # noqa: B018


@pytest.mark.nosim
def test_the_former_module_paths_still_import():
    from nbquant.calibration import HistogramCalibrator
    from nbquant.modelopt_grad import fake_tensor_quant_backward
    from nbquant.modelopt_ops import fake_tensor_quant, reduce_amax, reduce_min_max

    assert fake_tensor_quant is nbquant.modelopt.fake_tensor_quant
    assert fake_tensor_quant_backward is nbquant.modelopt.fake_tensor_quant_backward
    assert HistogramCalibrator is nbquant.modelopt.HistogramCalibrator
    assert (reduce_amax, reduce_min_max) == (nbquant.reduce_amax, nbquant.reduce_min_max)
