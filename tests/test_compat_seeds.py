"""Every literal example on the five seed pages (semantics.md §8), through nbquant.compat.

Where a page's printed output contradicts its own formula, the test asserts what the
implementation does and says why (docs/compat/*.md explain it for users).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _helpers import ints

from nbquant.compat import modelopt, pypto, tensorrt, torchao, tripy

# --- seed 000: nvtripy.quantize -------------------------------------------------------------------


def test_tripy_per_tensor_example():
    # input = arange(6).reshape(2, 3), scale 0.99872, int8. The page prints no output (the call is
    # commented out); RNE(x / 0.99872) gives the integers themselves (5 / 0.99872 = 5.0064).
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    q = tripy.quantize(x, 0.99872, "int8")
    assert q.dtype == np.int8
    assert ints(q) == [[0, 1, 2], [3, 4, 5]]


def test_tripy_per_channel_example():
    x = np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], np.float32)
    q = tripy.quantize(x, [0.99872, 0.96125], "int8", dim=0)
    assert q.dtype == np.int8
    assert ints(q) == [[0, 1, 2], [3, 4, 5]]


def test_tripy_block_wise_example():
    x = np.array([[0.0, 1.0], [2.0, 3.0]], np.float32)
    scale = [[1.0, 1.0]]
    q = tripy.quantize(x, scale, "int4")
    assert q.dtype == ml_dtypes.int4
    out = tripy.dequantize(q, scale, "float32")
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [[0, 1], [2, 3]])


# --- seed 001: TensorRT Quantize ------------------------------------------------------------------


def test_tensorrt_quantize_example():
    # Declared input (1, 1, 3, 3); the page writes the data 3-D and a 1-element scale with axis=3.
    # A one-element scale is per-tensor. The printed "expected" is rounded for display: the exact
    # dequantized values are q / 127, and -3.6 / (1/127) = -457.2 clamps to -128, so the last
    # entry is -128/127 = -1.00787, not -1.0 (semantics.md §8).
    x = np.array([[[[0.56, 0.89, 1.4], [-0.56, 0.39, 6.0], [0.67, 0.11, -3.6]]]], np.float32)
    scale = np.array([1 / 127], np.float32)
    q = tensorrt.quantize(x, scale, axis=3)
    assert ints(q) == [[[[71, 113, 127], [-71, 50, 127], [85, 14, -128]]]]
    out = tensorrt.dequantize(q, scale, axis=3)
    printed = np.array([[[[0.56, 0.89, 1], [-0.56, 0.39, 1.0], [0.67, 0.11, -1.0]]]], np.float32)
    np.testing.assert_allclose(out[..., :, :2], printed[..., :, :2], atol=0.5 / 127)
    np.testing.assert_array_equal(out.reshape(-1)[[2, 5]], [1.0, 1.0])
    assert out.reshape(-1)[8] == np.float32(-128) * np.float32(1 / 127)
    assert out.reshape(-1)[8] != -1.0  # the page's printed -1.0 is not what the formula gives


def test_tensorrt_block_quantization_example():
    w = np.array([[1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0],
                  [1.1, 1.2, 2.1, 2.2, 3.1, 3.2, 4.1, 4.2],
                  [4.0, 4.0, 5.0, 5.0, 6.0, 6.0, 7.0, 7.0],
                  [4.1, 4.2, 5.1, 5.2, 6.1, 6.2, 7.1, 7.2]], np.float32)
    scale = np.array([[1, 1, 2, 2, 3, 3, 4, 4], [4, 4, 5, 5, 6, 6, 7, 7]], np.float32)
    q = tensorrt.quantize(w, scale, to_type="int4")
    assert q.dtype == ml_dtypes.int4
    assert ints(q) == [[1] * 8, [1] * 8, [1] * 8, [1] * 8]
    out = tensorrt.dequantize(q, scale, to_type="float32")
    # Printed with an extra bracket ([[[...]]]); in1 is unused by the network.
    expected = [[1, 1, 2, 2, 3, 3, 4, 4], [1, 1, 2, 2, 3, 3, 4, 4],
                [4, 4, 5, 5, 6, 6, 7, 7], [4, 4, 5, 5, 6, 6, 7, 7]]
    np.testing.assert_array_equal(out, expected)


# --- seed 002: pypto.quantize ---------------------------------------------------------------------

_PX = np.array([[1.1, -2.2, 3.3, -4.4]] * 3, np.float32)
_PS = np.ones(3, np.float32)
_PZ = np.full(3, -5.0, np.float32)


def test_pypto_symmetric_example():
    y1 = pypto.quantize(_PX, _PS, "DT_INT8", -1, None)
    assert y1.dtype == np.int8
    assert ints(y1) == [[1, -2, 3, -4]] * 3


def test_pypto_asymmetric_example_follows_formula_not_printed_output():
    # The page prints [6, 3, 8, 1] = rne(x * s - zp), but its formula (and the upstream golden) is
    # rne(x * s + zp) = rne([-3.9, -7.2, -1.7, -9.4]) -> clamp to uint8 -> all 0 (semantics.md §4.4).
    y2 = pypto.quantize(_PX, _PS, "DT_UINT8", -1, _PZ)
    assert y2.dtype == np.uint8
    assert ints(y2) == [[0, 0, 0, 0]] * 3
    # The printed numbers come back with the zero point's sign flipped.
    assert ints(pypto.quantize(_PX, _PS, "DT_UINT8", -1, -_PZ)) == [[6, 3, 8, 1]] * 3


def test_pypto_dequantize_page_example_sign():
    # pypto-dequantize.md: x=[1,2,3,4], scale 1, zp -2, printed y2 = [-1, 0, 1, 2] ("+ zp"); the
    # upstream golden subtracts: (x - zp) * s = [3, 4, 5, 6] (semantics.md §4.3).
    x = np.array([[1, 2, 3, 4]] * 3, np.int8)
    s = np.ones(3, np.float32)
    np.testing.assert_array_equal(pypto.dequantize(x, s, "DT_FP32", -1, None), x.astype(np.float32))
    y2 = pypto.dequantize(x, s, "DT_FP32", -1, np.full(3, -2.0, np.float32))
    np.testing.assert_array_equal(y2, [[3, 4, 5, 6]] * 3)


# --- seed 003: torchao block_size table -----------------------------------------------------------


@pytest.mark.parametrize(("block_size", "scale_shape"), [
    ((3, 3, 10, 10), ()),            # per_tensor
    ((1, 3, 10, 10), (3,)),          # per_axis axis=0
    ((3, 1, 10, 10), (3,)),          # per_axis axis=1
    ((3, 3, 10, 2), (5,)),           # per_group 2 on the last axis
    ((3, 3, 2, 10), (5,)),           # per_group 2 on axis 2
])
def test_torchao_block_size_table(block_size, scale_shape):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 3, 10, 10)).astype(np.float32)
    scale, zp = torchao.choose_qparams_affine(x, "ASYMMETRIC", block_size, "uint8")
    assert scale.shape == scale_shape and zp.shape == scale_shape
    q = torchao.quantize_affine(x, block_size, scale, zp, "uint8")
    assert q.shape == x.shape and q.dtype == np.uint8
    dq = torchao.dequantize_affine(q, block_size, scale, zp, "uint8")
    assert np.max(np.abs(dq - x)) <= np.max(scale) * 0.5 + 1e-6


# --- seed 004: modelopt QuantDescriptor (no numeric example on the page) ---------------------------


def test_modelopt_descriptor_documented_defaults():
    d = modelopt.QuantDescriptor()
    assert (d.num_bits, d.name, d.fake_quant, d.axis, d.block_sizes, d.amax, d.learn_amax, d.scale_amax,
            d.calib_method, d.unsigned, d.narrow_range, d.dynamic) == (
        8, None, True, None, None, None, False, None, "max", False, False, False)
    assert modelopt.QuantDescriptor is modelopt.ScaledQuantDescriptor
