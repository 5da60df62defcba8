"""``compute_dtype``: quantization arithmetic in float16 / bfloat16, bit for bit with the reference backend."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _helpers import examples, quantize_both
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nbquant
from nbquant.modes import ScaleOp

HALF = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


@pytest.mark.parametrize(("compute", "scale_op", "code"), [
    ("float32", "divide", 333),      # 333.333...
    ("float16", "divide", 333),      # 333.25: float16 steps of 0.25
    ("bfloat16", "divide", 334),     # 334: bfloat16 steps of 2 above 256
    ("float32", "reciprocal", 333),  # 1000 * fl32(1/3) = 333.33334
    ("bfloat16", "reciprocal", 334),  # 1000 * bf16(1/3) = 1000 * 0.333984375 = 333.98 -> 334
])
def test_each_operation_rounds_to_the_compute_dtype(backend, compute, scale_op, code):
    x = np.array([1000.0, -1000.0], ml_dtypes.bfloat16)
    q = quantize_both(backend, x, 3.0, "int16", scale_op=scale_op, compute_dtype=compute)
    assert q.tolist() == [code, -code]


def test_the_zero_point_sum_rounds_too(backend):
    # bfloat16: 300.0 + 0.75 is 300 (steps of 2), then 300; float32 gives rne(300.75) = 301
    x = np.array([300.0], ml_dtypes.bfloat16)
    kw = {"zero_point": 0.75, "zero_point_order": "before_rounding"}
    assert quantize_both(backend, x, 1.0, "int16", compute_dtype="bfloat16", **kw).tolist() == [300]
    assert quantize_both(backend, x, 1.0, "int16", **kw).tolist() == [301]


def test_float32_input_is_rounded_to_the_compute_dtype_first(backend):
    x = np.array([1.00390625], np.float32)  # 1 + 2**-8: a tie in bfloat16, rounds to 1.0
    assert quantize_both(backend, x, 2.0 ** -7, "int16", compute_dtype="bfloat16").tolist() == [128]
    assert quantize_both(backend, x, 2.0 ** -7, "int16").tolist() == [128]  # 128.5 -> 128 (ties to even) either way
    assert quantize_both(backend, x, 2.0 ** -9, "int16", compute_dtype="bfloat16").tolist() == [512]
    assert quantize_both(backend, x, 2.0 ** -9, "int16").tolist() == [514]


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), compute=st.sampled_from(["float16", "bfloat16"]),
       fmt=st.sampled_from(["int8", "uint8", "int4", "int16", "float8_e4m3fn", "float8_e5m2"]),
       scale_op=st.sampled_from(["divide", "reciprocal", "multiply"]), n=st.integers(1, 40))
def test_compiled_equals_reference(backend, data, compute, fmt, scale_op, n):
    specials = st.sampled_from([np.nan, np.inf, -np.inf, -0.0, 0.5, 1.5, -2.5, 65504.0, 1e-7, 3e38])
    x = np.array(data.draw(st.lists(st.floats(-1e5, 1e5, width=32) | specials, min_size=n, max_size=n)), np.float32)
    with np.errstate(over="ignore"):  # 3e38 and 1e5 are inf in float16
        x = x.astype(data.draw(st.sampled_from([np.float32, HALF[compute]])))
    scale = np.float32(data.draw(st.sampled_from([0.1, 0.3, 1.0, 3.0, 7.0, 0.013])))
    kw = {"scale_op": scale_op, "compute_dtype": compute}
    if fmt == "uint8":
        kw.update(zero_point=data.draw(st.sampled_from([128, 3])))
    quantize_both(backend, x, scale, fmt, **kw)


def test_refusals_name_the_argument():
    x = np.ones(4, np.float32)
    with pytest.raises(TypeError, match=r"^x has dtype float64; compute_dtype='float16' needs float32"):
        nbquant.quantize(x.astype(np.float64), 0.5, "int8", compute_dtype="float16")
    with pytest.raises(ValueError, match=r"^scale must stay finite and > 0 in float16, the compute_dtype; "
                                         r"scale\[1\] is 70000.0, which is inf in float16$"):
        nbquant.quantize(x, np.array([0.5, 7e4, 1, 1], np.float32), "int8", axis=0, compute_dtype="float16")
    with pytest.raises(ValueError, match="compute_dtype"):
        nbquant.quantize(x, 0.5, "int8", compute_dtype="float64")


def test_scale_op_members():
    assert [ScaleOp.of(m, c).name for c in ("float32", "float16", "bfloat16") for m in (False, True)] == [
        "DIVIDE", "MULTIPLY", "DIVIDE_F16", "MULTIPLY_F16", "DIVIDE_BF16", "MULTIPLY_BF16"]
    assert ScaleOp.MULTIPLY_BF16.multiplies and ScaleOp.MULTIPLY_BF16.compute_dtype == "bfloat16"
