"""Hypothesis properties: every compiled backend equals the reference bit for bit, and round trips are exact.

Shapes are small (1..4 dims, sides 1..13, at most ~600 elements) so the same tests can
run under the CUDA simulator, where one element costs microseconds.
"""

from __future__ import annotations

import math
import os

import numpy as np
from _helpers import INPUT_DTYPES, INT_FORMATS, OUTPUT_DTYPES, dequantize_both, examples, quantize_both
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from nbquant.backends.reference import _expand
from nbquant.formats import FORMATS
from nbquant.layout import param_grid, resolve_layout

MAX_ELEMENTS = 600
#: 120 examples per property in the full tier, a quarter in the default tier (tests/conftest.py);
#: ``NBQUANT_HYPOTHESIS_EXAMPLES=5000`` turns the properties into a longer bug hunt.
EXAMPLES = int(os.environ.get("NBQUANT_HYPOTHESIS_EXAMPLES", "0")) or examples(120)
PROPERTY = settings(max_examples=EXAMPLES, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

#: Scales that make ties (powers of two), classic decimal scales whose reciprocal is inexact,
#: and extremes that push everything far out of range or onto zero.
SPECIAL_SCALES = [2.0**e for e in range(-6, 7)] + [0.1, 0.3, 0.7, 1 / 3, 0.0123, 1 / 127, 1e-30, 1e30, 3e-8, 65504.0]
SPECIAL_VALUES = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, np.nan, -np.nan, np.inf, -np.inf, 3e38, -3e38, 1e-40,
                  65504.0, 70000.0, -1e9]


# --- strategies ------------------------------------------------------------------------------------


@st.composite
def shapes(draw, last_multiple: int = 1):
    """1..4 dims, sides 1..13, about MAX_ELEMENTS elements at most; the last side a multiple of ``last_multiple``."""
    ndim = draw(st.integers(1, 4))
    shape, budget = [], MAX_ELEMENTS
    for d in range(ndim):
        if d == ndim - 1 and last_multiple > 1:
            n = last_multiple * draw(st.integers(1, max(1, min(13, budget) // last_multiple)))
        else:
            n = draw(st.integers(1, max(1, min(13, budget))))
        shape.append(n)
        budget = max(1, budget // n)
    return tuple(shape)


@st.composite
def granularities(draw, shape):
    """Keyword arguments for one granularity of ``shape``."""
    ndim = len(shape)
    kind = draw(st.sampled_from(["per-tensor", "per-channel", "blocked", "tuple"]))
    if kind == "per-tensor":
        return {}
    axis = draw(st.integers(-ndim, ndim - 1))
    if kind == "per-channel":
        return {"axis": axis}
    if kind == "blocked":  # ONNX: any 1 <= B <= n, the last block may be partial
        return {"axis": axis, "block_size": draw(st.integers(1, shape[axis]))}
    return {"block_size": tuple(draw(st.sampled_from([b for b in range(1, n + 1) if n % b == 0])) for n in shape)}


def scale_values():
    return st.one_of(st.sampled_from(SPECIAL_SCALES),
                     st.floats(2.0**-10, 2.0**10, width=32))


def _param_shape(draw, layout):
    """The block grid, or the grid with its size-1 dims dropped (both accepted)."""
    squeezed = tuple(g for g in layout.grid if g != 1)
    return squeezed if draw(st.booleans()) else layout.grid


@st.composite
def quantize_cases(draw, packed=None):
    """(x, scale, dtype, kwargs) covering formats, granularities, zero points, scale ops and input dtypes."""
    packed = draw(st.booleans()) if packed is None else packed
    dtype = draw(st.sampled_from(("int4", "uint4", "int2", "uint2") if packed else INT_FORMATS))
    fmt = FORMATS[dtype]
    shape = draw(shapes(fmt.codes_per_byte if packed else 1))
    kw = draw(granularities(shape))
    layout = resolve_layout(shape, kw.get("axis"), kw.get("block_size"))
    pshape = _param_shape(draw, layout)
    scale = draw(hnp.arrays(np.float32, pshape, elements=scale_values()))
    scale_op = draw(st.sampled_from(["divide", "reciprocal", "multiply"]))
    kw.update(packed=packed, scale_op=scale_op)

    zp_kind = draw(st.sampled_from(["none", "after", "before"]))
    zp = None
    if zp_kind == "after":
        zp = draw(hnp.arrays(draw(st.sampled_from([np.int32, np.int64, np.float32])), pshape,
                             elements=st.integers(fmt.qmin, fmt.qmax)))
        kw["zero_point"] = zp
    elif zp_kind == "before":
        halves = st.integers(2 * fmt.qmin - 6, 2 * fmt.qmax + 6).map(lambda h: h / 2)
        zp = draw(hnp.arrays(np.float32, pshape, elements=st.one_of(
            halves, st.floats(fmt.qmin - 3, fmt.qmax + 3, width=32))))
        kw.update(zero_point=zp, zero_point_order="before_rounding")
    if draw(st.booleans()):
        lo = draw(st.integers(fmt.qmin, fmt.qmax))
        hi = draw(st.integers(lo, fmt.qmax))
        kw.update(quant_min=draw(st.sampled_from([lo, None])), quant_max=hi)

    # x: a mix of arbitrary floats, special values, and values that sit exactly on (or next to) a
    # code boundary, i.e. (k + 0.5) * s or k * s for the element's own scale.
    s_full = _expand(param_grid("scale", scale, layout), layout).reshape(shape)
    if scale_op == "multiply":
        s_full = np.float32(1) / s_full
    free = draw(hnp.arrays(np.float32, shape, elements=st.one_of(
        st.floats(-1e4, 1e4, width=32), st.sampled_from(SPECIAL_VALUES))))
    k = draw(hnp.arrays(np.int32, shape, elements=st.integers(fmt.qmin - 3, fmt.qmax + 3))).astype(np.float32)
    which = draw(hnp.arrays(np.int8, shape, elements=st.integers(0, 3)))
    with np.errstate(over="ignore", invalid="ignore"):
        tie = (k + np.float32(0.5)) * s_full
        on_code = k * s_full
        nudged = np.nextafter(tie, np.float32(np.inf) * np.sign(k + np.float32(0.5)))
    x = np.select([which == 0, which == 1, which == 2], [free, tie, on_code], nudged).astype(np.float32)
    x_dtype = draw(st.sampled_from(INPUT_DTYPES))
    with np.errstate(over="ignore"):
        x = x.astype(x_dtype)
    return x, scale, dtype, kw


# --- properties ------------------------------------------------------------------------------------


@PROPERTY
@given(case=quantize_cases(), out_dtype=st.sampled_from(OUTPUT_DTYPES))
def test_quantize_and_dequantize_match_reference(backend, case, out_dtype):
    x, scale, dtype, kw = case
    q = quantize_both(backend, x, scale, dtype, **kw)
    # dequantize what came out, with the same layout (zero point as given, scale as given)
    dkw = {k: kw[k] for k in ("axis", "block_size", "zero_point") if k in kw}
    if kw["packed"]:
        dkw["dtype"] = dtype
    dequantize_both(backend, q, scale, out_dtype=out_dtype, **dkw)


@PROPERTY
@given(case=quantize_cases(packed=True))
def test_packed_equals_unpacked_codes(backend, case):
    x, scale, dtype, kw = case
    packed = quantize_both(backend, x, scale, dtype, **kw)
    codes = quantize_both(backend, x, scale, dtype, **{**kw, "packed": False})
    bits, k = FORMATS[dtype].bits, FORMATS[dtype].codes_per_byte
    storage = codes.view(np.uint8).astype(np.uint16)
    grouped = storage.reshape(storage.shape[:-1] + (storage.shape[-1] // k, k))
    expected = sum(grouped[..., t] << (t * bits) for t in range(k)).astype(np.uint8)
    np.testing.assert_array_equal(packed, expected)


@st.composite
def code_cases(draw):
    """Arbitrary codes (every value of the format, packed or not) with random scales and float zero points."""
    dtype = draw(st.sampled_from(INT_FORMATS))
    fmt = FORMATS[dtype]
    packed = fmt.packable and draw(st.booleans())
    shape = draw(shapes(fmt.codes_per_byte if packed else 1))
    kw = draw(granularities(shape))
    layout = resolve_layout(shape, kw.get("axis"), kw.get("block_size"))
    pshape = _param_shape(draw, layout)
    scale = draw(hnp.arrays(np.float32, pshape, elements=scale_values()))
    if draw(st.booleans()):
        kw["zero_point"] = draw(hnp.arrays(np.float32, pshape, elements=st.one_of(
            st.integers(fmt.qmin, fmt.qmax).map(float), st.floats(-1e5, 1e5, width=32))))
    codes = draw(hnp.arrays(np.int64, shape, elements=st.integers(fmt.qmin, fmt.qmax)))
    q = codes.astype(fmt.dtype)
    if packed:
        kw["dtype"] = dtype
        k = fmt.codes_per_byte
        bits = (q.view(np.uint8).astype(np.uint16)).reshape(shape[:-1] + (shape[-1] // k, k))
        q = sum(bits[..., t] << (t * fmt.bits) for t in range(k)).astype(np.uint8)
    return q, scale, kw


@PROPERTY
@given(case=code_cases(), out_dtype=st.sampled_from(OUTPUT_DTYPES))
def test_dequantize_matches_reference(backend, case, out_dtype):
    q, scale, kw = case
    dequantize_both(backend, q, scale, out_dtype=out_dtype, **kw)


# --- round trips -----------------------------------------------------------------------------------


@st.composite
def in_range_cases(draw, power_of_two: bool):
    """float32 x whose scaled value lies within the (zero-point shifted) code range, so nothing clamps."""
    dtype = draw(st.sampled_from(INT_FORMATS))
    fmt = FORMATS[dtype]
    shape = draw(shapes())
    kw = draw(granularities(shape))
    layout = resolve_layout(shape, kw.get("axis"), kw.get("block_size"))
    pshape = _param_shape(draw, layout)
    if power_of_two:
        elements = st.integers(-20, 20).map(lambda e: 2.0**e)
    else:
        elements = st.one_of(st.sampled_from([0.1, 0.3, 0.7, 1 / 3, 0.0123, 1 / 127, 3e-8, 1e4]),
                             st.floats(2.0**-13, 2.0**13, width=32))
    scale = draw(hnp.arrays(np.float32, pshape, elements=elements))
    zp = draw(hnp.arrays(np.int32, pshape, elements=st.integers(fmt.qmin, fmt.qmax)))
    grid = lambda p: _expand(param_grid("p", p, layout), layout).reshape(shape)  # noqa: E731
    s_full, z_full = grid(scale), grid(zp.astype(np.float32))
    codes = draw(hnp.arrays(np.int64, shape, elements=st.integers(fmt.qmin, fmt.qmax))).astype(np.float32)
    frac = draw(hnp.arrays(np.float32, shape, elements=st.floats(-0.5, 0.5, width=32)))
    x = ((codes - z_full + frac) * s_full).astype(np.float32)
    # keep only elements whose scaled value really is within half a step of the code range
    v = x / s_full
    keep = (v >= fmt.qmin - z_full - 0.5) & (v <= fmt.qmax - z_full + 0.5)
    x = np.where(keep, x, np.float32(0) * s_full).astype(np.float32)
    return x, scale, dtype, {**kw, "zero_point": zp}, s_full


@PROPERTY
@given(case=in_range_cases(power_of_two=True), scale_op=st.sampled_from(["divide", "reciprocal"]))
def test_round_trip_error_is_at_most_half_a_step(backend, case, scale_op):
    """With power-of-two scales x / s and q * s are exact: |dequantize(quantize(x)) - x| <= s / 2 exactly."""
    x, scale, dtype, kw, s_full = case
    q = quantize_both(backend, x, scale, dtype, scale_op=scale_op, **kw)
    d = dequantize_both(backend, q, scale, **kw)
    err = np.abs(d.astype(np.float64) - x.astype(np.float64))
    assert (err <= s_full.astype(np.float64) / 2).all(), np.max(err / s_full)


@PROPERTY
@given(case=in_range_cases(power_of_two=False), scale_op=st.sampled_from(["divide", "reciprocal"]))
def test_round_trip_error_bound_for_any_scale(backend, case, scale_op):
    """For any scale the float32 rounding of x / s (or x * fl(1 / s)) and of q * s adds at most a few ulps.

    q - zp = rne(v) with v = x / s * (1 + d1), |d1| <= 2**-24 (two roundings, 2**-23, for the reciprocal);
    dequantize returns (q - zp) * s * (1 + d2). So |dq - x| <= s / 2 + 2**-23 * |x| + 2**-23 * |dq|.
    """
    x, scale, dtype, kw, s_full = case
    q = quantize_both(backend, x, scale, dtype, scale_op=scale_op, **kw)
    d = dequantize_both(backend, q, scale, **kw)
    x64, d64, s64 = x.astype(np.float64), d.astype(np.float64), s_full.astype(np.float64)
    bound = s64 / 2 + 2.0**-22 * np.abs(x64) + 2.0**-23 * np.abs(d64) + 2.0**-149
    assert (np.abs(d64 - x64) <= bound).all()


@PROPERTY
@given(case=code_cases(), scale_op=st.sampled_from(["divide", "reciprocal"]))
def test_quantize_recovers_the_codes_it_dequantized(backend, case, scale_op):
    """quantize(dequantize(q)) == q for float32 output and integer zero points, for any scale."""
    q, scale, kw = case
    dtype = kw.pop("dtype", None)
    fmt = FORMATS[dtype] if dtype else next(f for f in FORMATS.values() if f.dtype == q.dtype)
    if "zero_point" in kw:
        kw["zero_point"] = np.clip(np.rint(kw["zero_point"]), fmt.qmin, fmt.qmax).astype(np.int32)
    d = dequantize_both(backend, q, scale, dtype=dtype, **kw)
    back = quantize_both(backend, d, scale, fmt.name, packed=dtype is not None, scale_op=scale_op, **kw)
    np.testing.assert_array_equal(back.view(np.uint8), q.view(np.uint8))


def test_shapes_strategy_respects_the_element_budget():
    @settings(max_examples=examples(200), deadline=None)
    @given(shapes(), shapes(2), shapes(4))
    def check(a, b, c):
        for s, k in zip((a, b, c), (1, 2, 4), strict=True):
            assert 1 <= len(s) <= 4 and all(1 <= n <= 13 for n in s) and s[-1] % k == 0
            assert math.prod(s) <= MAX_ELEMENTS * k

    check()
