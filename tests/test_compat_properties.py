"""Property tests: each front-end's conventions against the core API (axis meanings, ties, zero-point order,
divide vs reciprocal vs multiply), plus the argument rules each front-end mirrors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_same_bits, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbquant
from nbquant.compat import modelopt, onnx, pypto, tensorrt, torchao, tripy

SETTINGS = settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
finite = st.floats(-300, 300, width=32, allow_subnormal=False)
scales = st.floats(0.015625, 4.0, width=32)


def _arr(shape):
    return hnp.arrays(np.float32, shape, elements=finite)


@st.composite
def matrix_and_scale(draw, rank=(2, 4)):
    ndim = draw(st.integers(*rank))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    x = draw(_arr(shape))
    return x, draw(scales)


# --- tripy / TensorRT: divide, ties to even, channel axis kept --------------------------------------

@SETTINGS
@given(matrix_and_scale())
def test_tensorrt_per_channel_axis_is_kept_dim(data):
    x, s = data
    axis = x.ndim - 1
    sc = (np.arange(x.shape[axis], dtype=np.float32) + 1) * np.float32(s)
    q = tensorrt.quantize(x, sc, axis=axis)
    assert_same_bits(q, nbquant.quantize(x, sc, "int8", axis=axis, scale_op="divide"))
    expected = np.clip(np.rint(x / sc), -128, 127).astype(np.int8)  # x / s per element of the kept axis
    assert_same_bits(q, expected)
    assert_same_bits(tripy.quantize(x, sc, "int8", dim=axis), q)


@SETTINGS
@given(st.integers(-20, 20), scales)
def test_tensorrt_ties_round_to_even(k, s):
    x = np.array([(k + 0.5) * s], np.float32)
    v = x / np.float32(s)
    q = tensorrt.quantize(x, np.float32(s))
    assert int(q[0]) == int(np.clip(np.rint(v), -128, 127)[0])


@SETTINGS
@given(hnp.arrays(np.float32, (4, 6), elements=finite), st.sampled_from([(-2, 2), (-2, 4), (-1, 2), (-1, 3)]))
def test_tensorrt_block_repeat(x, which_b):
    which, b = which_b
    d = x.ndim + which
    shape = list(x.shape)
    shape[d] //= b
    sc = np.random.default_rng(0).uniform(0.1, 2, shape).astype(np.float32)
    q = tensorrt.quantize(x, sc, to_type="int4")
    full = np.repeat(sc, b, axis=d)  # element i uses scale[i // B]
    assert np.array_equal(q.astype(np.int64), np.clip(np.rint(x / full), -8, 7).astype(np.int64))


# --- pypto: multiply, zero point before rounding, axis is the reduced dim ---------------------------

@SETTINGS
@given(matrix_and_scale(), st.sampled_from([-1, -2]), st.floats(-20, 20, width=32))
def test_pypto_reduced_axis_multiply_and_zp_before_rounding(data, axis, zp0):
    x, s = data
    a = axis % x.ndim
    pshape = x.shape[:a] + x.shape[a + 1:]
    sc = np.full(pshape, s, np.float32) * (1 + np.arange(int(np.prod(pshape)), dtype=np.float32).reshape(pshape))
    zp = np.full(pshape, zp0 + 128, np.float32)
    q = pypto.quantize(x, sc, "uint8", axis, zp)
    e_s, e_z = np.expand_dims(sc, a), np.expand_dims(zp, a)
    expected = np.clip(np.rint(x * e_s + e_z), 0, 255).astype(np.uint8)  # zp added before rounding
    assert_same_bits(q, expected)
    q8 = pypto.quantize(x, sc, "int8", axis)
    assert_same_bits(q8, np.clip(np.rint(x * e_s), -128, 127).astype(np.int8))
    dq = pypto.dequantize(q8, sc, "DT_FP32", axis, zp)
    assert_same_bits(dq, ((q8.astype(np.float32) - e_z) * e_s).astype(np.float32))


def test_pypto_zero_point_order_differs_from_after_rounding():
    x = np.array([[0.5, 1.5, 2.5]], np.float32)
    q = pypto.quantize(x, np.ones(1, np.float32), "uint8", -1, np.full(1, 1.0, np.float32))
    assert q.tolist() == [[2, 2, 4]]  # rne(x + 1): 1.5 -> 2, 2.5 -> 2, 3.5 -> 4
    after = nbquant.quantize(x, 1.0, "uint8", zero_point=1)
    assert after.tolist() == [[1, 3, 3]]  # rne(x) + 1


# --- torchao: reciprocal multiply, zero point after rounding -----------------------------------------

@SETTINGS
@given(hnp.arrays(np.float32, (3, 8), elements=finite), st.floats(0.0009765625, 2.0, width=32), st.integers(-5, 5))
def test_torchao_is_reciprocal_multiply(x, s, zp):
    q = torchao.quantize_affine(x, (1, 8), np.full(3, s, np.float32), np.full(3, zp, np.int32), "int8")
    r = np.float32(1) / np.float32(s)
    expected = np.clip(np.rint(x * r) + zp, -128, 127).astype(np.int8)
    assert_same_bits(q, expected)
    assert_same_bits(q, nbquant.quantize(x, np.full((3, 1), s, np.float32), "int8", block_size=(1, 8),
                                         zero_point=np.full((3, 1), zp), scale_op="reciprocal"))


def test_torchao_reciprocal_differs_from_onnx_divide_somewhere():
    s = np.float32(0.1)
    k = np.arange(-120, 120)
    x = ((k + 0.5) * s).astype(np.float32)  # values at or next to ties of x / s
    x = np.concatenate([x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))])
    ta = torchao.quantize_affine(x, (x.size,), s, np.int32(0), "int8")
    ox = onnx.quantize_linear(x, s, np.int8(0))
    differ = ta != ox  # x * fl(1/s) and x / s round differently next to some ties
    assert differ.any()
    assert np.float32(-11.15) in x[differ]


# --- ONNX: divide, zero point after rounding ----------------------------------------------------------

@SETTINGS
@given(hnp.arrays(np.float32, (2, 5), elements=finite), scales, st.integers(0, 255))
def test_onnx_divide_after_rounding(x, s, zp):
    q = onnx.quantize_linear(x, np.float32(s), np.uint8(zp))
    assert_same_bits(q, np.clip(np.rint(x / np.float32(s)) + zp, 0, 255).astype(np.uint8))


# --- modelopt: multiply by maxbound/amax, divide to dequantize ---------------------------------------

@SETTINGS
@given(hnp.arrays(np.float32, (2, 6), elements=finite), st.floats(0.5, 400, width=32))
def test_modelopt_fake_quant_formula(x, amax):
    out = modelopt.fake_tensor_quant(x, np.float32(amax))
    S = np.float32(np.float32(1) / np.float32(amax)) * np.float32(127)
    S2 = np.float32(127) / np.float32(amax)
    exp = [(np.clip(np.rint(x * S_), -127, 127) / S_).astype(np.float32) for S_ in (S, S2)]
    assert np.array_equal(out, exp[0]) or np.array_equal(out, exp[1])
    q, scale = modelopt.tensor_quant(x, np.float32(amax))
    assert np.array_equal(q / scale, out)


@SETTINGS
@given(st.builds(dict, num_bits=st.sampled_from([2, 4, 8, (4, 3)]), name=st.none() | st.text(max_size=5),
                 fake_quant=st.booleans(), axis=st.none() | st.integers(-3, 2) | st.just((0, 1)),
                 amax=st.none() | st.floats(0.1, 10) | st.lists(st.floats(0.1, 10), min_size=1, max_size=3),
                 scale_amax=st.none() | st.floats(0.5, 2), calib_method=st.sampled_from(["max", "histogram"]),
                 unsigned=st.booleans(), narrow_range=st.booleans(), dynamic=st.booleans()))
def test_modelopt_descriptor_dict_round_trip(kwargs):
    d = modelopt.QuantDescriptor(**kwargs)
    assert modelopt.QuantDescriptor(**d.dict()) == d
    for k, v in d.dict().items():
        if k not in ("num_bits", "name"):
            assert v != {"fake_quant": True, "axis": None, "learn_amax": False, "unsigned": False,
                         "narrow_range": False, "dynamic": False}.get(k, object())


def test_modelopt_descriptor_block_sizes_round_trip_and_errors():
    d = modelopt.QuantDescriptor(num_bits=4, block_sizes={-1: 32, "type": "dynamic"})
    assert d.dynamic and d.dict()["block_sizes"] == {-1: 32, "type": "dynamic"}
    assert modelopt.QuantDescriptor(**d.dict()) == d
    assert d.get_block_quant_axes_and_sizes(d.block_sizes) == {-1: 32}
    with pytest.raises(ValueError, match="axis"):
        modelopt.QuantDescriptor(axis=0, block_sizes={-1: 16})
    with pytest.raises(ValueError, match="positive"):
        modelopt.QuantDescriptor(block_sizes={-1: 0})
    with pytest.raises(TypeError, match="num_bits"):
        modelopt.QuantDescriptor(num_bits=(5, 2))
    with pytest.raises(ValueError, match="num_bits"):
        modelopt.QuantDescriptor(num_bits=-1)
    with pytest.raises(TypeError, match="learn_amax"):
        modelopt.QuantDescriptor(axis=0, learn_amax=True)
    with pytest.raises(TypeError, match="amax"):
        modelopt.QuantDescriptor(amax="1.0")
    with pytest.raises(ValueError, match="calib_method"):
        modelopt.QuantDescriptor(calib_method="entropy")
    assert modelopt.QuantDescriptor(amax=2.0).amax.dtype == np.float32


def test_modelopt_functions_errors_and_e4m3():
    x = np.array([-1.0, 0.5], np.float32)
    with pytest.raises(TypeError, match="unsigned"):
        modelopt.fake_tensor_quant(x, np.float32(1), 8, True)
    with pytest.raises(ValueError, match="amax"):
        modelopt.fake_tensor_quant(x, np.float32(-1))
    with pytest.raises(TypeError, match="amax=None"):
        modelopt.tensor_quant(x, None)
    with pytest.raises(NotImplementedError, match="E4M3"):
        modelopt.scaled_e4m3(x, np.float32(1), 5, 2)
    assert modelopt.fake_tensor_quant(x, np.float32(0)).tolist() == [0.0, 0.0]  # amax = 0 -> all zero
    assert modelopt.scaled_e4m3(np.array([np.inf, -1e9, np.nan], np.float32)).tolist()[:2] == [448.0, -448.0]


# --- argument rules -----------------------------------------------------------------------------------

def test_tripy_rules():
    x = np.ones((4, 6), np.float32)
    with pytest.raises(ValueError, match="int4"):
        tripy.quantize(x, [[1.0] * 6] * 2, "int8")
    with pytest.raises(ValueError, match=r"input.shape\[1\] = 6"):
        tripy.quantize(x, [1.0] * 4, "int8", dim=1)
    with pytest.raises(ValueError, match="1-D"):
        tripy.quantize(x, 1.0, "int8", dim=0)
    with pytest.raises(TypeError, match="scale dtype"):
        tripy.quantize(x, np.float16(1.0), "int8")
    with pytest.raises(ValueError, match="dtype"):
        tripy.quantize(x, 1.0, "uint8")
    with pytest.raises(ValueError, match="block-wise"):
        tripy.quantize(x, [[1.0] * 6] * 3, "int4")
    q = tripy.quantize(x.astype(np.float16), 0.5, "float8")
    assert q.dtype == ml_dtypes.float8_e4m3fn
    assert tripy.dequantize(q, 0.5, "float16").dtype == np.float16
    assert tripy.quantize(x, [[0.5] * 6] * 2, "int4").astype(int).tolist() == [[2] * 6] * 4


def test_tensorrt_rules():
    x = np.ones((2, 4, 6), np.float32)
    with pytest.raises(ValueError, match="zero-valued"):
        tensorrt.quantize(x, np.float32(1), np.int8(1))
    with pytest.raises(ValueError, match="scale's shape"):
        tensorrt.quantize(x, np.float32(1), np.zeros(2, np.int8))
    with pytest.raises(ValueError, match="last or the second-last"):
        tensorrt.quantize(x, np.ones((1, 4, 6), np.float32), to_type="int4")
    with pytest.raises(ValueError, match="exactly one"):
        tensorrt.quantize(x, np.ones((2, 2, 3), np.float32), to_type="int4")
    with pytest.raises(ValueError, match="int4 and fp8"):
        tensorrt.quantize(x, np.ones((2, 2, 6), np.float32), to_type="int8")
    with pytest.raises(ValueError, match="0 <= axis"):
        tensorrt.quantize(x, np.ones(6, np.float32))
    with pytest.raises(ValueError, match="to_type"):
        tensorrt.quantize(x, np.float32(1), to_type="uint8")
    q = tensorrt.quantize(x * 3, np.ones(6, np.float32), np.zeros(6, np.int8), axis=2, to_type="fp8")
    assert q.dtype == ml_dtypes.float8_e4m3fn
    assert tensorrt.dequantize(q, np.ones(6, np.float32), axis=2, to_type="bfloat16").dtype == ml_dtypes.bfloat16


def test_pypto_rules():
    x = np.ones((3, 4), np.float32)
    s = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="DT_INT8"):
        pypto.quantize(x, s, "uint8", -1)
    with pytest.raises(ValueError, match="DT_UINT8"):
        pypto.quantize(x, s, "int8", -1, s)
    with pytest.raises(ValueError, match="shape"):
        pypto.quantize(x, np.ones(4, np.float32), "int8", -1)
    assert pypto.quantize(x, np.ones(4, np.float32), "int8", -2).shape == (3, 4)
    with pytest.raises(ValueError, match="axis=0"):
        pypto.quantize(np.ones((2, 3, 4), np.float32), np.ones((3, 4), np.float32), "int8", 0)
    with pytest.raises(TypeError, match="DT_FP32"):
        pypto.quantize(x.astype(np.float16), s, "int8", -1)
    with pytest.raises(ValueError, match="2-4"):
        pypto.quantize(np.ones(4, np.float32), np.ones((), np.float32), "int8", -1)
    q = pypto.dequantize(np.array([1, 2, 3], np.int16), np.full(1, 2.0, np.float32), "DT_FP32", -1)
    assert q.tolist() == [2.0, 4.0, 6.0]
