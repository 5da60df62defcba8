"""Hand-computed exact values: rounding, clamping, special values, zero points, scale ops, granularities.

Every call runs on the compiled backend under test and on ``"reference"`` (see
:func:`_helpers.quantize_both`), which must agree bit for bit; the result is then
compared with numbers worked out by hand.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _helpers import dequantize_both, ints, quantize_both

F32 = np.float32
INF = np.inf


def f32(*values) -> np.ndarray:
    return np.array(values, dtype=np.float32)


# --- rounding --------------------------------------------------------------------------------------


def test_ties_round_half_to_even(backend):
    x = f32(0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, -3.5, 0.49999997, 0.50000006)
    q = quantize_both(backend, x, 1.0, "int8")
    assert ints(q) == [0, 2, 2, 4, 0, -2, -2, -4, 0, 1]


def test_ties_created_by_the_scale(backend):
    """x / s lands exactly on .5 for a power-of-two scale: still half to even."""
    s = F32(0.25)
    x = f32(0.125, 0.375, 0.625, -0.125, -0.375, 1.125)  # / 0.25 = 0.5 1.5 2.5 -0.5 -1.5 4.5
    assert ints(quantize_both(backend, x, s, "int8")) == [0, 2, 2, 0, -2, 4]


def test_negative_zero_and_tiny_values_give_zero(backend):
    x = f32(-0.0, 0.0, 1e-45, -1e-45, 1e-30)
    assert ints(quantize_both(backend, x, 1.0, "int8")) == [0, 0, 0, 0, 0]


# --- clamping --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "qmin", "qmax"),
    [("int8", -128, 127), ("uint8", 0, 255), ("int16", -32768, 32767), ("uint16", 0, 65535),
     ("int4", -8, 7), ("uint4", 0, 15), ("int2", -2, 1), ("uint2", 0, 3)],
)
def test_clamp_to_format_range(backend, dtype, qmin, qmax):
    x = f32(1e6, -1e6, 3e38, -3e38, qmax + 0.5, qmin - 0.5, qmax, qmin, qmax + 1, qmin - 1)
    q = quantize_both(backend, x, 1.0, dtype)
    assert q.dtype == np.dtype(ml_dtypes.int4 if dtype == "int4" else dtype)
    # qmax + 0.5 rounds to even: qmax is odd for every format, so it goes up to qmax + 1 and clamps.
    assert ints(q) == [qmax, qmin, qmax, qmin, qmax, qmin, qmax, qmin, qmax, qmin]


def test_clamp_to_quant_min_max_override(backend):
    x = f32(-200, -128, -127.5, -127, -1, 0, 1, 126, 127, 300)
    q = quantize_both(backend, x, 1.0, "int8", quant_min=-127, quant_max=126)
    assert ints(q) == [-127, -127, -127, -127, -1, 0, 1, 126, 126, 126]
    q = quantize_both(backend, x, 1.0, "uint8", quant_min=3, quant_max=3)
    assert ints(q) == [3] * 10
    q = quantize_both(backend, f32(-9, -7, 0, 5, 8), 1.0, "int4", quant_min=-7, quant_max=5)
    assert ints(q) == [-7, -7, 0, 5, 5]


def test_clamp_applies_after_adding_the_zero_point(backend):
    x = f32(-130, -1, 0, 100, 124, 125, 200)
    q = quantize_both(backend, x, 1.0, "int8", zero_point=3)
    assert ints(q) == [-127, 2, 3, 103, 127, 127, 127]


# --- NaN and infinities ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int4", "uint2"])
def test_nan_becomes_the_zero_point_and_inf_the_bounds(backend, dtype):
    x = f32(np.nan, INF, -INF, -np.nan)
    q = quantize_both(backend, x, 0.5, dtype)
    assert ints(q) == {"int8": [0, 127, -128, 0], "uint8": [0, 255, 0, 0],
                       "int4": [0, 7, -8, 0], "uint2": [0, 3, 0, 0]}[dtype]


def test_nan_with_zero_point_after_and_before_rounding(backend):
    x = f32(np.nan, INF, -INF)
    assert ints(quantize_both(backend, x, 1.0, "uint8", zero_point=7)) == [7, 255, 0]
    q = quantize_both(backend, x, 1.0, "uint8", zero_point=2.5, zero_point_order="before_rounding")
    assert ints(q) == [2, 255, 0]  # NaN -> rne(0 + 2.5) = 2
    q = quantize_both(backend, x, 1.0, "uint8", zero_point=3.5, zero_point_order="before_rounding")
    assert ints(q) == [4, 255, 0]


def test_nan_zero_point_is_clamped_into_the_quant_range(backend):
    x = f32(np.nan, 0.0)
    assert ints(quantize_both(backend, x, 1.0, "uint8", quant_min=5)) == [5, 5]
    assert ints(quantize_both(backend, x, 1.0, "int8", zero_point=-100, quant_min=-50)) == [-50, -50]
    assert ints(quantize_both(backend, x, 1.0, "int8", zero_point=100, quant_max=50)) == [50, 50]


def test_nan_and_inf_with_multiply_and_reciprocal(backend):
    x = f32(np.nan, INF, -INF, 1.0)
    assert ints(quantize_both(backend, x, 4.0, "int8", scale_op="multiply")) == [0, 127, -128, 4]
    assert ints(quantize_both(backend, x, 0.25, "int8", scale_op="reciprocal")) == [0, 127, -128, 4]


def test_finite_values_that_overflow_after_scaling_clamp(backend):
    x = f32(3e38, -3e38, 1.0)
    assert ints(quantize_both(backend, x, 1e-30, "int8")) == [127, -128, 127]
    assert ints(quantize_both(backend, x, 1e30, "int8", scale_op="multiply")) == [127, -128, 127]


# --- zero point order ------------------------------------------------------------------------------


def test_zero_point_after_vs_before_rounding_differ_on_a_tie(backend):
    s = F32(0.1)
    x = f32(0.5) * s  # x / s == 0.5 exactly? check it, then the two orders must differ
    assert x / s == F32(0.5)
    after = quantize_both(backend, x, s, "uint8", zero_point=3)
    before = quantize_both(backend, x, s, "uint8", zero_point=3.0, zero_point_order="before_rounding")
    assert ints(after) == [3]  # rne(0.5) + 3
    assert ints(before) == [4]  # rne(3.5)


def test_zero_point_orders_on_several_ties(backend):
    x = f32(-1.5, -0.5, 0.5, 1.5, 2.5)
    assert ints(quantize_both(backend, x, 1.0, "int8", zero_point=3)) == [1, 3, 3, 5, 5]
    q = quantize_both(backend, x, 1.0, "int8", zero_point=3, zero_point_order="before_rounding")
    assert ints(q) == [2, 2, 4, 4, 6]  # rne(1.5, 2.5, 3.5, 4.5, 5.5)


def test_fractional_zero_point_before_rounding(backend):
    x = f32(0.0, 0.25, 1.0, -1.0, 0.7)
    q = quantize_both(backend, x, 1.0, "uint8", zero_point=2.25, zero_point_order="before_rounding")
    assert ints(q) == [2, 2, 3, 1, 3]  # rne(2.25, 2.5, 3.25, 1.25, 2.95)
    q = quantize_both(backend, x, 1.0, "int8", zero_point=-0.5, zero_point_order="before_rounding")
    assert ints(q) == [0, 0, 0, -2, 0]  # rne(-0.5, -0.25, 0.5, -1.5, 0.2)


def test_per_channel_zero_points(backend):
    x = f32(0, 1, 2, 3, 4, 5).reshape(2, 3)
    q = quantize_both(backend, x, f32(1, 2, 4), "uint8", axis=1, zero_point=np.array([10, 20, 30]))
    assert ints(q) == [[10, 20, 30], [13, 22, 31]]  # 3/1+10, rne(4/2)+20, rne(5/4=1.25)+30


# --- scale operations ------------------------------------------------------------------------------


def test_reciprocal_differs_from_divide_on_a_known_input(backend):
    """-12.15f / 0.1f = -121.49999 -> -121, but -12.15f * fl(1 / 0.1f) = -12.15f * 10 = -121.5 -> -122."""
    x, s = f32(-12.15), F32(0.1)
    assert F32(1) / s == F32(10.0)
    assert x / s == F32(-121.49999) and x * F32(10) == F32(-121.5)
    assert ints(quantize_both(backend, x, s, "int8")) == [-121]
    assert ints(quantize_both(backend, x, s, "int8", scale_op="divide")) == [-121]
    assert ints(quantize_both(backend, x, s, "int8", scale_op="reciprocal")) == [-122]
    assert ints(quantize_both(backend, x, F32(10), "int8", scale_op="multiply")) == [-122]


def test_reciprocal_differs_from_divide_per_channel(backend):
    """Column 1: -31.65f / 0.3f = -105.49999 -> -105; -31.65f * fl(1 / 0.3f) = -105.5 -> -106."""
    x = f32(-12.15, -31.65).reshape(1, 2)
    s = f32(0.1, 0.3)
    assert ints(quantize_both(backend, x, s, "int8", axis=1)) == [[-121, -105]]
    assert ints(quantize_both(backend, x, s, "int8", axis=1, scale_op="reciprocal")) == [[-122, -106]]


def test_multiply_uses_the_scale_as_a_multiplier(backend):
    x = f32(0.1, -0.2, 1.0, 0.0625, 0.1875)
    assert ints(quantize_both(backend, x, 8.0, "int8", scale_op="multiply")) == [1, -2, 8, 0, 2]


# --- input dtypes ----------------------------------------------------------------------------------


def test_float64_input_is_rounded_to_float32_first(backend):
    """0.5 + 2**-30 is 0.5 in float32, so it rounds to 0; float64 arithmetic would give 1."""
    x = np.array([0.5 + 2.0**-30, 1.5 - 2.0**-30, 1e300, -1e300, 1e-300, 2.5], np.float64)
    assert ints(quantize_both(backend, x, 1.0, "int8")) == [0, 2, 127, -128, 0, 2]


def test_float16_and_bfloat16_inputs(backend):
    vals = [0.5, 1.5, 2.5, -2.5, 100.0, -0.0, np.inf, -np.inf, np.nan]
    for dt in (np.float16, ml_dtypes.bfloat16):
        x = np.array(vals, dt)
        assert ints(quantize_both(backend, x, 1.0, "int8")) == [0, 2, 2, -2, 100, 0, 127, -128, 0]
        assert ints(quantize_both(backend, x, 0.5, "int8")) == [1, 3, 5, -5, 127, 0, 127, -128, 0]


def test_bfloat16_input_keeps_its_exact_value(backend):
    x = np.array([1.0078125, 255.0, 3.0e38], ml_dtypes.bfloat16)  # 1 + 2**-7 is a bfloat16 value
    assert ints(quantize_both(backend, x, 2.0**-7, "int16")) == [129, 32640, 32767]


def test_python_list_input_is_float64(backend):
    assert ints(quantize_both(backend, [0.5, 1.5, 2.5], 1.0, "int8")) == [0, 2, 2]


def test_zero_dimensional_input(backend):
    q = quantize_both(backend, np.float32(2.5), 1.0, "int8")
    assert q.shape == () and int(q) == 2
    q = quantize_both(backend, np.array(-np.inf, ml_dtypes.bfloat16), 1.0, "int4")
    assert q.shape == () and int(q) == -8


def test_zero_dimensional_dequantize(backend):
    d = dequantize_both(backend, np.int8(-3), 0.5)
    assert d.shape == () and float(d) == -1.5


# --- granularity -----------------------------------------------------------------------------------


def test_per_tensor_scale_shapes(backend):
    x = f32(1, 2, 3, 4).reshape(2, 2)
    for scale in (2.0, F32(2), f32(2), np.full((1, 1), 2, np.float32), np.full((1, 1, 1), 2, np.float32)):
        assert ints(quantize_both(backend, x, scale, "int8")) == [[0, 1], [2, 2]]


def test_nvtripy_per_channel_seed(backend):
    """semantics.md §8 seed 000: arange(6).reshape(2, 3), scale [0.99872, 0.96125], dim 0."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s = f32(0.99872, 0.96125)
    q = quantize_both(backend, x, s, "int8", axis=0)
    assert ints(q) == [[0, 1, 2], [3, 4, 5]]
    d = dequantize_both(backend, q, s, axis=0)
    np.testing.assert_array_equal(d, np.array([[0, 1, 2], [3, 4, 5]], np.float32) * s[:, None])


def test_per_channel_axis_is_the_kept_dimension(backend):
    x = f32(1, 1, 1, 1, 1, 1).reshape(2, 3)
    q0 = quantize_both(backend, x, f32(0.5, 0.25), "int8", axis=0)
    assert ints(q0) == [[2, 2, 2], [4, 4, 4]]
    q1 = quantize_both(backend, x, f32(0.5, 0.25, 0.125), "int8", axis=1)
    assert ints(q1) == [[2, 4, 8], [2, 4, 8]]
    assert ints(quantize_both(backend, x, f32(0.5, 0.25, 0.125), "int8", axis=-1)) == ints(q1)
    assert ints(quantize_both(backend, x, f32(0.5, 0.25).reshape(2, 1), "int8", axis=0)) == ints(q0)
    assert ints(quantize_both(backend, x, f32(0.5, 0.25, 0.125).reshape(1, 3), "int8", axis=1)) == ints(q1)


def test_per_channel_middle_axis_of_3d(backend):
    x = np.ones((2, 3, 2), np.float32)
    q = quantize_both(backend, x, f32(1, 0.5, 0.25), "int8", axis=1)
    assert ints(q) == [[[1, 1], [2, 2], [4, 4]]] * 2


def test_onnx_blocked_with_partial_last_block(backend):
    """(2, 5) blocked along axis 1 by 2: blocks [0:2], [2:4], [4:5]; scale (2, 3)."""
    x = np.ones((2, 5), np.float32)
    s = f32(1, 0.5, 0.25, 2, 0.125, 4).reshape(2, 3)
    q = quantize_both(backend, x, s, "int8", axis=1, block_size=2)
    assert ints(q) == [[1, 1, 2, 2, 4], [0, 0, 8, 8, 0]]  # 1/2 = 0.5 -> 0, 1/4 -> 0
    d = dequantize_both(backend, q, s, axis=1, block_size=2)
    assert d.tolist() == [[1, 1, 1, 1, 1], [0, 0, 1, 1, 0]]


def test_onnx_blocked_along_axis_0(backend):
    x = np.arange(1, 7, dtype=np.float32).reshape(3, 2)  # [[1,2],[3,4],[5,6]]
    s = f32(1, 2, 0.5, 0.25).reshape(2, 2)  # rows 0-1 use s[0], row 2 uses s[1]
    q = quantize_both(backend, x, s, "int8", axis=0, block_size=2)
    assert ints(q) == [[1, 1], [3, 2], [10, 24]]  # 2/2, 4/2, 5/0.5, 6/0.25


def test_tensorrt_int4_block_example_repeat_semantics(backend):
    """(4, 8) int4 with a (2, 8) scale: element (i, j) uses scale[i // 2, j] (repeat, not tile)."""
    w = np.array([[1, -2, 3, -4, 5, -6, 7, -8]] * 4, np.float32) * np.array([[1], [1], [2], [2]], np.float32)
    s = np.array([[1] * 8, [2] * 8], np.float32)
    q = quantize_both(backend, w, s, "int4", axis=0, block_size=2)
    assert ints(q) == [[1, -2, 3, -4, 5, -6, 7, -8]] * 4
    assert ints(quantize_both(backend, w, s, "int4", block_size=(2, 1))) == ints(q)
    d = dequantize_both(backend, q, s, axis=0, block_size=2)
    np.testing.assert_array_equal(d, w)
    d = dequantize_both(backend, q, s, axis=0, block_size=2, out_dtype=np.float16)
    np.testing.assert_array_equal(d, w.astype(np.float16))


def test_nvtripy_block_seed(backend):
    """Seed 000 block-wise: [[0, 1], [2, 3]] int4 with scale [[1, 1]] dequantizes to itself."""
    q = np.array([[0, 1], [2, 3]], ml_dtypes.int4)
    d = dequantize_both(backend, q, f32(1, 1).reshape(1, 2), axis=0, block_size=2)
    assert d.tolist() == [[0, 1], [2, 3]]


def test_torchao_tuple_block_size_and_squeezed_scales(backend):
    x = np.ones((4, 6), np.float32)
    s = f32(1, 0.5, 0.25, 0.125).reshape(2, 2)  # blocks of (2, 3)
    expect = [[1] * 3 + [2] * 3] * 2 + [[4] * 3 + [8] * 3] * 2
    assert ints(quantize_both(backend, x, s, "int8", block_size=(2, 3))) == expect
    # per-row groups: block (1, 6): grid (4, 1), squeezed (4,)
    rows = f32(1, 0.5, 0.25, 0.125)
    expect_rows = [[1] * 6, [2] * 6, [4] * 6, [8] * 6]
    assert ints(quantize_both(backend, x, rows, "int8", block_size=(1, 6))) == expect_rows
    assert ints(quantize_both(backend, x, rows.reshape(4, 1), "int8", block_size=(1, 6))) == expect_rows
    # per-column groups of 2 columns: block (4, 2): grid (1, 3), squeezed (3,)
    cols = f32(1, 0.5, 0.25)
    assert ints(quantize_both(backend, x, cols, "int8", block_size=(4, 2))) == [[1, 1, 2, 2, 4, 4]] * 4
    # whole tensor: block (4, 6): grid (1, 1), squeezed ()
    assert ints(quantize_both(backend, x, F32(0.5), "int8", block_size=(4, 6))) == [[2] * 6] * 4
    # all ones: every element its own block
    s1 = np.arange(1, 25, dtype=np.float32).reshape(4, 6)
    q = quantize_both(backend, s1 * 3, s1, "int8", block_size=(1, 1))
    assert ints(q) == [[3] * 6] * 4


def test_torchao_3d_groups(backend):
    """(2, 3, 4) with block (1, 1, 2): groups of 2 along the last dim, scale (2, 3, 2)."""
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    s = np.arange(1, 13, dtype=np.float32).reshape(2, 3, 2)
    q = quantize_both(backend, x, s, "int16", block_size=(1, 1, 2))
    expect = np.rint(x / np.repeat(s, 2, axis=2)).astype(np.int64).tolist()
    assert ints(q) == expect


# --- dequantize ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "codes"),
    [("int8", [-128, -1, 0, 1, 127]), ("uint8", [0, 1, 128, 255]), ("int16", [-32768, -1, 0, 32767]),
     ("uint16", [0, 1, 65535]), ("int4", [-8, -1, 0, 7]), ("uint4", [0, 1, 15]), ("int2", [-2, -1, 0, 1]),
     ("uint2", [0, 1, 2, 3])],
)
def test_dequantize_every_code(backend, dtype, codes):
    dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    q = np.array(codes, dt)
    d = dequantize_both(backend, q, 0.5)
    assert d.dtype == np.float32 and d.tolist() == [c * 0.5 for c in codes]
    d = dequantize_both(backend, q, 0.5, zero_point=1)
    assert d.tolist() == [(c - 1) * 0.5 for c in codes]
    d = dequantize_both(backend, q, 2.0, zero_point=0.25)
    assert d.tolist() == [(c - 0.25) * 2.0 for c in codes]


def test_dequantize_subtracts_then_multiplies_in_float32(backend):
    q = np.array([3, 100], np.int8)
    s, z = F32(0.1), F32(1)
    d = dequantize_both(backend, q, s, zero_point=1)
    np.testing.assert_array_equal(d, (q.astype(np.float32) - z) * s)
    assert d.tolist() == [float(F32(2) * s), float(F32(99) * s)]


def test_dequantize_rounds_to_float16_and_bfloat16_half_to_even(backend):
    one = np.array([1], np.int8)
    # float16 has 10 fraction bits: 1 + 2**-11 is a tie -> 1.0; 1 + 3 * 2**-11 is a tie -> 1 + 2**-9
    h = [float(dequantize_both(backend, one, 1 + k * 2.0**-11, out_dtype=np.float16)[0]) for k in (1, 3)]
    assert h == [1.0, 1 + 2.0**-9]
    # bfloat16 has 7 fraction bits: 1 + 2**-8 -> 1.0; 1 + 3 * 2**-8 -> 1 + 2**-6
    b = [float(dequantize_both(backend, one, 1 + k * 2.0**-8, out_dtype=ml_dtypes.bfloat16)[0]) for k in (1, 3)]
    assert b == [1.0, 1 + 2.0**-6]


def test_dequantize_float16_overflow_is_inf(backend):
    q = np.array([32767, -32768, 1], np.int16)
    d = dequantize_both(backend, q, 4.0, out_dtype=np.float16)
    assert d.dtype == np.float16 and d.tolist() == [np.inf, -np.inf, 4.0]
    d = dequantize_both(backend, q, 4.0, out_dtype=ml_dtypes.bfloat16)
    assert d.astype(np.float32).tolist() == [131072.0, -131072.0, 4.0]


def test_dequantize_scale_is_float32(backend):
    """A float64 scale is rounded to float32 before use."""
    d = dequantize_both(backend, np.array([1], np.int8), 0.1)
    assert d[0] == F32(0.1)
    d = dequantize_both(backend, np.array([3], np.int8), 1 + 2.0**-30)
    assert d[0] == F32(3)


def test_per_channel_dequantize(backend):
    q = np.array([[1, 2], [3, 4]], np.uint8)
    d = dequantize_both(backend, q, f32(1, 0.5), zero_point=np.array([1, 2], np.int32), axis=1)
    assert d.tolist() == [[0, 0], [2, 1]]
