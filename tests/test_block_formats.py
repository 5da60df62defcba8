"""OCP MX and NVFP4 block formats: hand-computed examples and compiled == reference bit for bit."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nbquant

MX = tuple(nbquant.MX_FORMATS)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _both_mx(backend, x, fmt, **kwargs):
    ref = nbquant.quantize_mx(x, fmt, backend="reference", **kwargs)
    got = nbquant.quantize_mx(x, fmt, backend=backend, **kwargs)
    assert got.data.dtype == ref.data.dtype and got.data.shape == ref.data.shape
    np.testing.assert_array_equal(_bits(got.scales), _bits(ref.scales))
    np.testing.assert_array_equal(_bits(got.data), _bits(ref.data))
    return got


def _sample(shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3, shape) * np.exp2(rng.integers(-10, 10, shape[:-1] + (1,)))
    return x.astype(np.float32)


def test_mxfp8_hand_example(backend):
    """amax 448 = 1.75 * 2**8, emax(e4m3) = 8, so the scale is 2**0 (code 127); 449 rounds to 448."""
    x = np.array([1.0, -2.5, 448.0, 0.0] * 8, np.float32)
    bq = _both_mx(backend, x, "mxfp8_e4m3")
    assert bq.scales.view(np.uint8).tolist() == [127]
    assert bq.data.astype(np.float32).tolist()[:4] == [1.0, -2.5, 448.0, 0.0]
    y = x * np.float32(1024)  # scale 2**10
    bq = _both_mx(backend, y, "mxfp8_e4m3")
    assert bq.scales.view(np.uint8).tolist() == [137]
    np.testing.assert_array_equal(bq.dequantize(backend=backend), y)


def test_mxfp4_hand_example_and_packing(backend):
    """amax 6 -> floor(log2 6) - emax(e2m1)=2 -> 0: scale 1. Codes 1.0=0x2, -3.0=0xD, 0.5=0x1, 6.0=0x7."""
    bq = _both_mx(backend, np.array([1.0, -3.0, 0.5, 6.0], np.float32), "mxfp4", block_size=4)
    assert bq.data.tolist() == [0xD2, 0x71]
    assert bq.scales.view(np.uint8).tolist() == [127]
    np.testing.assert_array_equal(bq.dequantize(backend=backend), [1.0, -3.0, 0.5, 6.0])


def test_scale_rounding_ceil_avoids_clipping(backend):
    """amax 7 with e2m1 (max 6): floor keeps scale 1 and clips 7 to 6; ceil picks scale 2 and encodes 3.5 -> 4."""
    x = np.array([7.0, 1.0, 0.0, 0.0], np.float32)
    floor = _both_mx(backend, x, "mxfp4", block_size=4)
    ceil = _both_mx(backend, x, "mxfp4", block_size=4, scale_rounding="ceil")
    assert floor.scales.view(np.uint8).tolist() == [127] and floor.dequantize(backend=backend)[0] == 6.0
    assert ceil.scales.view(np.uint8).tolist() == [128] and ceil.dequantize(backend=backend)[0] == 8.0


def test_mxint8_elements_have_six_fraction_bits(backend):
    """amax 1.5 -> scale 2**0; elements are rne(v * 64) clamped to +-127."""
    x = np.array([1.5, -0.5, 0.0078125, 0.01171875], np.float32)  # last two: 0.5 and 0.75 LSB
    bq = _both_mx(backend, x, "mxint8", block_size=4)
    assert bq.data.tolist() == [96, -32, 0, 1]
    np.testing.assert_array_equal(bq.dequantize(backend=backend), [1.5, -0.5, 0.0, 0.015625])


def test_special_blocks(backend):
    x = np.zeros((3, 8), np.float32)
    x[1, 2] = np.nan
    x[2, 5] = -np.inf
    bq = _both_mx(backend, x, "mxfp8_e4m3", block_size=8)
    assert bq.scales.view(np.uint8).tolist() == [[0], [255], [255]]
    dq = bq.dequantize(backend=backend)
    assert (dq[0] == 0).all() and np.isnan(dq[1:]).all()


@pytest.mark.parametrize("fmt", MX)
@pytest.mark.parametrize("rounding", ["floor", "ceil"])
def test_mx_matches_reference(backend, fmt, rounding):
    x = _sample((3, 5, 64))
    x[0, 0, :3] = [0.0, -0.0, 1e-40]
    x[2, 4, :32] = 0
    for xx in (x, x.astype(np.float16), x.astype(ml_dtypes.bfloat16)):
        bq = _both_mx(backend, xx, fmt, scale_rounding=rounding)
        for out_dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
            ref = bq.dequantize(out_dtype=out_dtype, backend="reference")
            got = bq.dequantize(out_dtype=out_dtype, backend=backend)
            np.testing.assert_array_equal(_bits(got), _bits(ref))


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp4"])
def test_mx_blocks_along_another_axis(backend, fmt):
    x = _sample((64, 6), seed=3)
    along0 = _both_mx(backend, x, fmt, axis=0)
    along_last = _both_mx(backend, np.ascontiguousarray(x.T), fmt)
    np.testing.assert_array_equal(_bits(along0.scales.T), _bits(along_last.scales))
    np.testing.assert_array_equal(_bits(along0.data.T), _bits(along_last.data))
    np.testing.assert_array_equal(along0.dequantize(backend=backend).T, along_last.dequantize(backend=backend))


def test_mx_sqnr_is_sensible():
    x = _sample((64, 256), seed=5)
    for fmt, floor_db in [("mxfp8_e4m3", 28), ("mxfp6_e2m3", 20), ("mxfp4", 12), ("mxint8", 35)]:
        err = nbquant.quantize_mx(x, fmt).dequantize() - x
        sqnr = 10 * np.log10(np.sum(x.astype(np.float64) ** 2) / np.sum(err.astype(np.float64) ** 2))
        assert sqnr > floor_db, (fmt, sqnr)


def test_nvfp4_hand_example(backend):
    """global = 6 / 2688; block scale = 6 / (6 * global) = 448 -> e4m3 448; elements x / (448 * global) = x."""
    x = np.array([0.5, -1.0, 2.0, 6.0], np.float32)
    ref = nbquant.quantize_nvfp4(x, block_size=4, backend="reference")
    got = nbquant.quantize_nvfp4(x, block_size=4, backend=backend)
    assert got.global_scale == np.float32(np.float32(6) / np.float32(2688))
    assert _bits(got.scales).tolist() == _bits(ref.scales).tolist() == [0x7E]
    assert got.data.tolist() == ref.data.tolist() == [0xA1, 0x74]
    np.testing.assert_array_equal(got.dequantize(backend=backend), x)


@pytest.mark.parametrize("global_scale", [None, 0.01])
def test_nvfp4_matches_reference(backend, global_scale):
    x = _sample((4, 3, 48), seed=9)
    x[0, 0, :16] = 0
    if global_scale is not None:  # without one, NaN is refused (tests/test_cuda_kernel_families.py)
        x[1, 1, 3] = np.nan
    for xx in (x, x.astype(ml_dtypes.bfloat16)):
        ref = nbquant.quantize_nvfp4(xx, global_scale=global_scale, backend="reference")
        got = nbquant.quantize_nvfp4(xx, global_scale=global_scale, backend=backend)
        assert _bits(np.float32(got.global_scale)).tolist() == _bits(np.float32(ref.global_scale)).tolist()
        np.testing.assert_array_equal(_bits(got.scales), _bits(ref.scales))
        np.testing.assert_array_equal(got.data, ref.data)
        for out_dtype in (np.float32, np.float16):
            np.testing.assert_array_equal(_bits(got.dequantize(out_dtype, backend=backend)),
                                          _bits(ref.dequantize(out_dtype, backend="reference")))


def test_nvfp4_all_zero_input_gives_zeros(backend):
    bq = nbquant.quantize_nvfp4(np.zeros((2, 32), np.float32), backend=backend)
    assert bq.global_scale == 1.0
    assert (bq.dequantize(backend=backend) == 0).all()


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: nbquant.quantize_mx(np.ones(30, np.float32)), ValueError, "multiple of block_size=32; pad"),
        (lambda: nbquant.quantize_mx(np.ones(32, np.float32), "mxfp9"), ValueError, "format"),
        (lambda: nbquant.quantize_mx(np.ones(32, np.float32), scale_rounding="up"), ValueError, "scale_rounding"),
        (lambda: nbquant.quantize_mx(np.ones(32, np.float32), "mxfp8_e4m3", packed=True), ValueError, "packed"),
        (lambda: nbquant.quantize_mx(np.ones(32, np.int32)), TypeError, "dtype"),
        (lambda: nbquant.quantize_mx(np.ones((2, 32), np.float32), axis=2), ValueError, "axis"),
        (lambda: nbquant.quantize_nvfp4(np.ones(20, np.float32)), ValueError, "block_size=16"),
        (lambda: nbquant.quantize_nvfp4(np.ones(16, np.float32), global_scale=0.0), ValueError, "global_scale"),
        (lambda: nbquant.dequantize_mx(np.zeros(16, np.uint8), np.zeros(2, np.uint8), "mxfp4"), ValueError,
         "scales has shape"),
        (lambda: nbquant.dequantize_mx(np.zeros(32, np.int8), np.zeros(1, np.uint8), "mxfp4"), TypeError,
         "data has dtype"),
        (lambda: nbquant.dequantize_mx(np.zeros(32, np.int8), np.zeros(1, np.float32), "mxint8"), TypeError,
         "scales has dtype"),
        (lambda: nbquant.dequantize_nvfp4(np.zeros(8, np.uint8), np.zeros(1, np.uint8), 1.0, out_dtype=np.int8),
         TypeError, "out_dtype"),
    ],
)
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_inputs_are_not_modified():
    x = _sample((2, 64))
    before = x.copy()
    bq = nbquant.quantize_mx(x, "mxfp4")
    data, scales = bq.data.copy(), bq.scales.copy()
    bq.dequantize()
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(bq.data, data)
    np.testing.assert_array_equal(_bits(bq.scales), _bits(scales))


# --- NF4 with double quantization -------------------------------------------------------------------

def _both_nf4(backend, x, **kwargs):
    ref = nbquant.quantize_nf4(x, backend="reference", **kwargs)
    got = nbquant.quantize_nf4(x, backend=backend, **kwargs)
    np.testing.assert_array_equal(got.data, ref.data)
    np.testing.assert_array_equal(_bits(got.scales), _bits(ref.scales))
    return got, ref


def test_nf4_hand_example(backend):
    """1.0 -> index 15, -0.5 -> -0.5234375 (2), 0.25 -> 0.24609375 (10), 0.0 -> 7; first element in the high nibble."""
    nq, _ = _both_nf4(backend, np.array([1.0, -0.5, 0.25, 0.0], np.float32), block_size=4)
    assert nq.data.tolist() == [0xF2, 0xA7]
    assert nq.scales.tolist() == [1.0]
    assert nq.dequantize(backend=backend).tolist() == [1.0, -0.5234375, 0.24609375, 0.0]


def test_nf4_ties_take_the_first_entry(backend):
    """Exactly between 0 (index 7) and 0.07958984375 (index 8): argmin keeps the first."""
    x = np.array([0.039794921875, 1.0], np.float32)
    nq, _ = _both_nf4(backend, x, block_size=2)
    assert nq.data.tolist() == [0x7F]


@pytest.mark.parametrize("scale_block_size", [None, 4])
def test_nf4_matches_reference(backend, scale_block_size):
    x = _sample((8, 64), seed=4)
    x[0, :16] = 0  # NaN and inf are refused (tests/test_cuda_kernel_families.py)
    for xx in (x, x.astype(np.float16), x.astype(ml_dtypes.bfloat16)):
        got, ref = _both_nf4(backend, xx, block_size=16, scale_block_size=scale_block_size)
        for out_dtype in (np.float32, ml_dtypes.bfloat16):
            np.testing.assert_array_equal(_bits(got.dequantize(out_dtype, backend=backend)),
                                          _bits(ref.dequantize(out_dtype, backend="reference")))


def test_nf4_double_quantization_by_hand():
    """Scales 1, 2, 3, 6: mean 3, centred -2 -1 0 3, double scale fl(1/3) * 127, q = rne(c * ds)."""
    x = np.array([1.0, 0, 2.0, 0, 3.0, 0, 6.0, 0], np.float32)
    nq = nbquant.quantize_nf4(x, block_size=2, scale_block_size=4)
    ds = np.float32(np.float32(1) / np.float32(3)) * np.float32(127)
    assert nq.scale_mean == np.float32(3.0)
    assert nq.double_scales.tolist() == [ds]
    assert nq.scales.tolist() == np.rint(np.array([-2, -1, 0, 3], np.float32) * ds).astype(int).tolist()
    expected = nq.scales.astype(np.float32) / ds + np.float32(3)
    np.testing.assert_array_equal(nq.block_scales(), expected)
    assert np.abs(nq.dequantize()[::2] - x[::2]).max() < 0.05


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(block_size=3), ValueError, "block_size=3"),
        (dict(block_size=16), ValueError, "multiple of block_size=16"),
        (dict(block_size=4, scale_block_size=4), ValueError, "scale_block_size=4 must be a positive int dividing"),
        (dict(block_size=4, scale_block_size=0), ValueError, "scale_block_size=0"),
        (dict(block_size=4, scale_block_size=2, scale_bits=9), ValueError, "scale_bits=9"),
    ],
)
def test_nf4_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        nbquant.quantize_nf4(np.ones(24, np.float32), **kwargs)
