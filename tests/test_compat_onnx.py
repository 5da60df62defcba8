"""nbquant.compat.onnx against the ONNX reference evaluator (opset 25) and onnxruntime, bit for bit."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_same_bits, canonical_nan, examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nbquant.compat import onnx as connx

pytestmark = pytest.mark.parity
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

OPSET = 25


def _run(op: str, inputs: list, out_type: int, **attrs):
    names = ["x", "s", "z"][: len(inputs)]
    vin = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in zip(names, inputs, strict=True)]
    outs = ["y"] if op != "DynamicQuantizeLinear" else ["y", "ys", "yz"]
    node = helper.make_node(op, names, outs, **attrs)
    vout = [helper.make_tensor_value_info(o, 0, None) for o in outs]
    graph = helper.make_graph([node], "g", vin, vout)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    res = ReferenceEvaluator(model).run(None, dict(zip(names, inputs, strict=True)))
    return res if len(res) > 1 else res[0]


INT_TYPES = [(TensorProto.UINT8, np.uint8), (TensorProto.INT8, np.int8), (TensorProto.INT16, np.int16),
             (TensorProto.UINT16, np.uint16), (TensorProto.INT4, ml_dtypes.int4), (TensorProto.UINT4, ml_dtypes.uint4),
             (TensorProto.INT2, ml_dtypes.int2), (TensorProto.UINT2, ml_dtypes.uint2)]
FLOAT_TYPES = [(TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn), (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2),
               (TensorProto.FLOAT4E2M1, ml_dtypes.float4_e2m1fn)]


def _x(rng, shape, spread):
    x = (rng.standard_normal(shape) * spread).astype(np.float32)
    x.reshape(-1)[::5] = np.round(x.reshape(-1)[::5]) + 0.5  # ties
    return x


@pytest.mark.parametrize(("ttype", "dt"), INT_TYPES)
@pytest.mark.parametrize("mode", ["tensor", "axis0", "axis1", "axis-1", "block"])
def test_quantize_dequantize_linear_int_types(ttype, dt, mode):
    rng = np.random.default_rng(ttype * 7 + len(mode))
    x = _x(rng, (4, 6, 5), 40.0)
    info = np.iinfo(np.int8 if dt in (np.int8, ml_dtypes.int4, ml_dtypes.int2) else np.uint8)
    attrs = {}
    if mode == "tensor":
        s = np.float32(0.7)
    elif mode.startswith("axis"):
        a = int(mode[4:])
        attrs["axis"] = a
        s = rng.uniform(0.2, 3, x.shape[a]).astype(np.float32)
    else:
        attrs.update(axis=2, block_size=2)
        s = rng.uniform(0.2, 3, (4, 6, 3)).astype(np.float32)
    lo, hi = (int(ml_dtypes.iinfo(dt).min), int(ml_dtypes.iinfo(dt).max))
    z = rng.integers(max(lo, info.min), min(hi, info.max) + 1, np.shape(s)).astype(dt)
    y_ref = _run("QuantizeLinear", [x, np.asarray(s), np.asarray(z)], ttype, **attrs)
    y = connx.quantize_linear(x, np.asarray(s), np.asarray(z), **attrs)
    assert_same_bits(y, y_ref)
    # output_dtype instead of a zero point
    y2_ref = _run("QuantizeLinear", [x, np.asarray(s)], ttype, output_dtype=ttype, **attrs)
    assert_same_bits(connx.quantize_linear(x, np.asarray(s), output_dtype=ttype, **attrs), y2_ref)
    for out in (0, TensorProto.FLOAT16, TensorProto.BFLOAT16):
        extra = {"output_dtype": out} if out else {}
        d_ref = _run("DequantizeLinear", [y_ref, np.asarray(s), np.asarray(z)], 0, **attrs, **extra)
        assert_same_bits(connx.dequantize_linear(y, np.asarray(s), np.asarray(z), **attrs, **extra), d_ref)


@pytest.mark.parametrize(("ttype", "dt"), FLOAT_TYPES)
@pytest.mark.parametrize("saturate", [1, 0])
def test_quantize_linear_float_types(ttype, dt, saturate):
    rng = np.random.default_rng(ttype)
    x = _x(rng, (3, 64), 300.0)
    x[0, :4] = [np.inf, -np.inf, 1e6, -1e6]
    s = rng.uniform(0.05, 2, 64).astype(np.float32)
    y_ref = _run("QuantizeLinear", [x, s], ttype, output_dtype=ttype, saturate=saturate)
    y = connx.quantize_linear(x, s, output_dtype=ttype, saturate=saturate)
    assert_same_bits(y, y_ref)
    d_ref = _run("DequantizeLinear", [y_ref, s], 0)  # keeps the sign of a NaN code (nbquant: one canonical NaN)
    assert_same_bits(connx.dequantize_linear(y, s), canonical_nan(d_ref))


def test_blocked_partial_last_block():
    rng = np.random.default_rng(1)
    x = _x(rng, (3, 7), 10.0)
    s = rng.uniform(0.1, 1, (3, 3)).astype(np.float32)
    y_ref = _run("QuantizeLinear", [x, s], TensorProto.INT8, axis=1, block_size=3, output_dtype=TensorProto.INT8)
    assert_same_bits(connx.quantize_linear(x, s, axis=1, block_size=3, output_dtype="INT8"), y_ref)


@pytest.mark.parametrize("seed", range(6))
def test_dynamic_quantize_linear(seed):
    rng = np.random.default_rng(seed)
    x = _x(rng, (5, 9), [1.0, 10.0, 0.01, 100.0, 3.0, 0.5][seed])
    if seed == 4:
        x = np.abs(x)  # min(0, min) = 0
    if seed == 5:
        x = np.zeros((2, 3), np.float32)  # max == min
    y_ref, s_ref, z_ref = _run("DynamicQuantizeLinear", [x], 0)
    y, s, z = connx.dynamic_quantize_linear(x)
    assert_same_bits(y, y_ref)
    assert_same_bits(s, np.asarray(s_ref))
    assert_same_bits(z, np.asarray(z_ref))


def test_against_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(0)
    x = _x(rng, (8, 16), 20.0)
    s = rng.uniform(0.05, 1, 16).astype(np.float32)
    z = rng.integers(-10, 10, 16).astype(np.int8)
    vin = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
           helper.make_tensor_value_info("s", TensorProto.FLOAT, s.shape),
           helper.make_tensor_value_info("z", TensorProto.INT8, z.shape)]
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)
    graph = helper.make_graph([node], "g", vin, [helper.make_tensor_value_info("y", TensorProto.INT8, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y_ort,) = sess.run(None, {"x": x, "s": s, "z": z})
    assert_same_bits(connx.quantize_linear(x, s, z, axis=1), y_ort)


def test_argument_errors():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="does not match"):
        connx.quantize_linear(x, np.float32(1), np.int8(0), output_dtype=TensorProto.UINT8)
    with pytest.raises(ValueError, match="FLOAT8E4M3FNUZ"):
        connx.quantize_linear(x, np.float32(1), output_dtype=18)
    with pytest.raises(ValueError, match="per-axis"):
        connx.quantize_linear(x, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="blocked"):
        connx.quantize_linear(x, np.ones((2, 1), np.float32), axis=1, block_size=2)
    with pytest.raises(NotImplementedError, match="int32"):
        connx.quantize_linear(x.astype(np.float16), np.float16(1), np.int16(3))
    with pytest.raises(NotImplementedError, match="float64"):
        connx.dequantize_linear(np.zeros(3, np.int32), np.float32(1), np.int32(5))
    with pytest.raises(ValueError, match="INT32 output"):
        connx.quantize_linear(x, np.float32(1), output_dtype=6)
    with pytest.raises(TypeError, match="no common type"):
        connx.quantize_linear(x.astype(np.float16), np.array(1, ml_dtypes.bfloat16))
    # precision=FLOAT makes a float16 scale exact
    assert connx.quantize_linear(x.astype(np.float16), np.float16(0.5), precision=1).tolist() == [[2] * 3] * 2
    with pytest.raises(ValueError, match="must be zero"):
        connx.quantize_linear(x, np.float32(1), np.array(1, ml_dtypes.float8_e4m3fn))
    with pytest.raises(TypeError, match="x's dtype"):
        connx.dequantize_linear(np.zeros(3, np.int8), np.float32(1), np.uint8(0))
    with pytest.raises(TypeError, match="float32"):
        connx.dynamic_quantize_linear(np.ones(3))


# --- scale / zero-point shape pairings, int32, half-precision division ------------------------------

PAIRINGS = [  # scale shape, zero-point shape, attributes: every pairing the opset-25 evaluator accepts
    ((), (1,), {}), ((1,), (), {}), ((1,), (1,), {}), ((1, 1, 1), (), {}), ((), (1, 1), {}),
    ((6,), (), {"axis": 1}), ((6,), (1,), {"axis": 1}), ((), (6,), {"axis": 1}), ((1,), (6,), {"axis": -2}),
    ((4, 3, 5), (), {"axis": 1, "block_size": 2}), ((1,), (4, 3, 5), {"axis": 1, "block_size": 2}),
    ((4, 6, 5), (4, 6, 5), {"axis": 1, "block_size": 1}), ((), (), {"axis": 1, "block_size": 4}),
]


@pytest.mark.parametrize(("sshape", "zshape", "attrs"), PAIRINGS, ids=[f"s{p[0]}-z{p[1]}-{p[2]}" for p in PAIRINGS])
@pytest.mark.parametrize(("ttype", "dt"), [(TensorProto.INT8, np.int8), (TensorProto.UINT4, ml_dtypes.uint4)])
def test_scale_and_zero_point_shape_pairings(sshape, zshape, attrs, ttype, dt):
    rng = np.random.default_rng(len(sshape) * 10 + len(zshape))
    x = _x(rng, (4, 6, 5), 6.0)
    s = rng.uniform(0.2, 2, sshape).astype(np.float32)
    lo, hi = int(ml_dtypes.iinfo(dt).min), int(ml_dtypes.iinfo(dt).max)
    z = rng.integers(lo, hi + 1, zshape).astype(dt)
    y_ref = _run("QuantizeLinear", [x, s, z], ttype, **attrs)
    assert_same_bits(connx.quantize_linear(x, s, z, **attrs), y_ref)
    d_ref = _run("DequantizeLinear", [y_ref, s, z], 0, **attrs)
    assert_same_bits(connx.dequantize_linear(y_ref, s, z, **attrs), d_ref)


REFUSED = [  # shapes the evaluator refuses, refused by nbquant too
    ((2, 6), (), {"axis": 1}), ((5,), (), {"axis": 1}), ((6,), (5,), {"axis": 1}), ((4, 2, 5), (), {"axis": 1,
                                                                                                   "block_size": 2}),
    ((6,), (), {"axis": 3}),
]


@pytest.mark.parametrize(("sshape", "zshape", "attrs"), REFUSED, ids=[f"s{p[0]}-z{p[1]}-{p[2]}" for p in REFUSED])
def test_shapes_the_evaluator_refuses_are_refused(sshape, zshape, attrs):
    x = np.ones((4, 6, 5), np.float32)
    s, z = np.ones(sshape, np.float32), np.zeros(zshape, np.int8)
    with pytest.raises(Exception):  # noqa: B017 (the evaluator raises AssertionError, IndexError or ValueError)
        _run("QuantizeLinear", [x, s, z], TensorProto.INT8, **attrs)
    with pytest.raises((ValueError, IndexError)):
        connx.quantize_linear(x, s, z, **attrs)


def _ort_dequantize(q, s, z=None, **attrs):
    ort = pytest.importorskip("onnxruntime")
    names = ["x", "s", "z"][: 2 + (z is not None)]
    arrays = [q, s] + ([z] if z is not None else [])
    vin = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in zip(names, arrays, strict=True)]
    node = helper.make_node("DequantizeLinear", names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", vin, [helper.make_tensor_value_info("y", TensorProto.FLOAT, q.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, arrays, strict=True)))[0]


@pytest.mark.parametrize("attrs", [{}, {"axis": 0}, {"axis": 1, "block_size": 3}])
def test_int32_dequantize_linear(attrs):
    """int32 codes (biases) of every magnitude, float32 rounding beyond 2**24 included."""
    rng = np.random.default_rng(3)
    q = rng.integers(-2 ** 31, 2 ** 31, (5, 7), dtype=np.int64).astype(np.int32)
    q.reshape(-1)[:6] = [0, 1, -1, 2 ** 24 + 1, 2 ** 31 - 1, -2 ** 31]
    s = {0: np.array(3e-5, np.float32), 1: rng.uniform(1e-6, 1e-3, 5).astype(np.float32),
         2: rng.uniform(1e-6, 1e-3, (5, 3)).astype(np.float32)}[len(attrs)]
    got = connx.dequantize_linear(q, s, **attrs)
    assert_same_bits(got, _run("DequantizeLinear", [q, s], 0, **attrs))
    assert_same_bits(got, _ort_dequantize(q, s, **attrs))
    z = np.zeros(np.shape(s), np.int32)  # a zero point of zeros, as ONNX bias zero points are
    assert_same_bits(connx.dequantize_linear(q, s, z, **attrs), _run("DequantizeLinear", [q, s, z], 0, **attrs))


@pytest.mark.parametrize("precision", [0, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT])
@pytest.mark.parametrize(("xdt", "sdt"), [(np.float16, np.float16), (ml_dtypes.bfloat16, ml_dtypes.bfloat16),
                                          (np.float32, np.float32), (np.float16, np.float32)])
@pytest.mark.parametrize(("ttype", "dt"), [(TensorProto.INT8, np.int8), (TensorProto.UINT8, np.uint8),
                                           (TensorProto.INT16, np.int16), (TensorProto.FLOAT8E4M3FN,
                                                                           ml_dtypes.float8_e4m3fn)])
def test_half_precision_division(precision, xdt, sdt, ttype, dt):
    """``precision`` and a division in the inputs' common half type: x, scale and quotient rounded to it."""
    rng = np.random.default_rng(ttype + precision)
    x = _x(rng, (4, 33), 40.0).astype(xdt)
    s = rng.uniform(0.05, 3, 33).astype(sdt)
    attrs = {"axis": 1} | ({"precision": precision} if precision else {})
    if dt in (np.int8, np.uint8, np.int16):
        z = rng.integers(0 if dt == np.uint8 else -20, 20, 33).astype(dt)
        half = precision in (TensorProto.FLOAT16, TensorProto.BFLOAT16) or (not precision and xdt != np.float32
                                                                           and xdt == sdt)
        if dt == np.int16 and half:
            with pytest.raises(NotImplementedError, match="int32"):
                connx.quantize_linear(x, s, z, **attrs)
            z = np.zeros(33, np.int16)
        y_ref = _run("QuantizeLinear", [x, s, z], ttype, **attrs)
        assert_same_bits(connx.quantize_linear(x, s, z, **attrs), y_ref)
    else:
        y_ref = _run("QuantizeLinear", [x, s], ttype, output_dtype=ttype, **attrs)
        assert_same_bits(connx.quantize_linear(x, s, output_dtype=ttype, **attrs), y_ref)


# --- hypothesis: random shapes, granularities, types, ties, NaN and ±inf against the live peers -----

_ORT_TYPES = {TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8, TensorProto.INT16: np.int16,
              TensorProto.UINT16: np.uint16}


def _ort_quantize(x, s, z, ttype, **attrs):
    ort = pytest.importorskip("onnxruntime")
    arrays = {"x": x, "s": s, "z": z}
    vin = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in arrays.items()]
    node = helper.make_node("QuantizeLinear", list(arrays), ["y"], **attrs)
    graph = helper.make_graph([node], "g", vin, [helper.make_tensor_value_info("y", ttype, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, arrays)[0]


@st.composite
def _problems(draw):
    """x (with ties, NaN, ±inf, values far beyond the range), a scale and zero point of a random granularity."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    mode = draw(st.sampled_from(["tensor", "axis", "block"]))
    n = shape[axis]
    block = draw(st.integers(1, n)) if mode == "block" else 0
    if mode == "tensor":
        pshape = draw(st.sampled_from([(), (1,)]))
    elif mode == "axis":
        pshape = (n,)
    else:
        pshape = tuple(-(-d // block) if i == axis % len(shape) else d for i, d in enumerate(shape))
    size = int(np.prod(pshape))
    s = np.array(draw(st.lists(st.sampled_from([0.5, 1.0, 0.25, 3.0]) | st.floats(1e-3, 1e3),
                               min_size=size, max_size=size)), np.float32).reshape(pshape)
    count = int(np.prod(shape))
    special = st.sampled_from([0.5, 1.5, -2.5, 126.5, -127.5, np.nan, np.inf, -np.inf, 1e30, -0.0])
    x = np.array(draw(st.lists(st.floats(-3e4, 3e4, width=32) | special, min_size=count, max_size=count)),
                 np.float32).reshape(shape)
    ttype = draw(st.sampled_from(sorted(_ORT_TYPES)))
    info = np.iinfo(_ORT_TYPES[ttype])
    z = np.array(draw(st.lists(st.integers(max(info.min, -300), min(info.max, 300)), min_size=size,
                               max_size=size)), _ORT_TYPES[ttype]).reshape(pshape)
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    return x, s, z, ttype, attrs


@settings(max_examples=examples(200), deadline=None)
@given(problem=_problems())
def test_quantize_linear_matches_onnxruntime_on_random_problems(problem):
    x, s, z, ttype, attrs = problem
    if s.size == 1:  # onnxruntime wants a one-element scale 0-d and no block_size (the evaluator reads any)
        attrs.pop("block_size", None)
        s, z = s.reshape(()), z.reshape(())
    assert_same_bits(connx.quantize_linear(x, s, z, **attrs), _ort_quantize(x, s, z, ttype, **attrs))


@settings(max_examples=examples(200), deadline=None)
@given(problem=_problems())
def test_quantize_and_dequantize_match_the_evaluator_on_random_finite_problems(problem):
    """The evaluator casts rint(x / s) to int32 unchecked (inf and 1e30 become -2**31): finite, in-range x only."""
    x, s, z, ttype, attrs = problem
    x = np.where(np.isfinite(x) & (np.abs(x) < 1e6), x, np.float32(7.5))
    y_ref = _run("QuantizeLinear", [x, s, z], ttype, **attrs)
    assert_same_bits(connx.quantize_linear(x, s, z, **attrs), y_ref)
    assert_same_bits(connx.dequantize_linear(y_ref, s, z, **attrs), _run("DequantizeLinear", [y_ref, s, z], 0,
                                                                          **attrs))
