"""nbquant.compat.torchao against torchao 0.18 itself, bit for bit (the parity tier: `pytest --parity`)."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_same_bits, canonical_nan, examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nbquant.compat import torchao as ta

pytestmark = pytest.mark.parity
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch = pytest.importorskip("torch")
    qp = pytest.importorskip("torchao.quantization.quant_primitives")

_TORCH = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


def _t(a: np.ndarray):
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a).copy())


def _n(t) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _tdtype(name: str):
    return getattr(torch, name)


CASES = [  # shape, block_size
    ((6, 8), (6, 8)), ((6, 8), (1, 8)), ((6, 8), (6, 1)), ((6, 8), (1, 2)), ((6, 8), (3, 4)),
    ((3, 3, 10, 10), (3, 3, 10, 2)), ((3, 3, 10, 10), (1, 3, 10, 10)), ((2, 4, 6), (1, 2, 3)),
]
TARGETS = [("uint8", None, None), ("int8", None, None), ("int8", -8, 7), ("uint4", None, None),
           ("uint2", None, None), ("uint7", None, None), ("int16", None, None), ("int8", -127, 127)]


def _x(rng, shape, dtype="float32", spread=4.0):
    x = (rng.standard_normal(shape) * spread).astype(np.float32)
    # plant exact ties of the reciprocal-multiplied value
    x.reshape(-1)[::7] = np.float32(0.5) * np.round(x.reshape(-1)[::7] * 4)
    return x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


@pytest.mark.parametrize("mapping", ["SYMMETRIC", "ASYMMETRIC", "SYMMETRIC_NO_CLIPPING_ERR"])
@pytest.mark.parametrize(("shape", "block"), CASES)
@pytest.mark.parametrize(("target", "qmin", "qmax"), TARGETS)
def test_round_trip_bit_exact_against_torchao(mapping, shape, block, target, qmin, qmax):
    rng = np.random.default_rng(abs(hash((mapping, shape, block, target, qmin))) % 2**32)
    x = _x(rng, shape)
    if mapping == "SYMMETRIC_NO_CLIPPING_ERR" and (target.startswith("u") or qmin == 0):
        # torchao divides min_neg by quant_min = 0 (inf/NaN scales); nbquant refuses the mapping
        with pytest.raises(ValueError, match="quant_min < 0 < quant_max"):
            ta.choose_qparams_affine(x, mapping, block, target, qmin, qmax)
        return
    tdt = _tdtype(target)
    ts, tz = qp.choose_qparams_affine(_t(x), getattr(qp.MappingType, mapping), block, tdt, qmin, qmax)
    s, z = ta.choose_qparams_affine(x, mapping, block, target, qmin, qmax)
    assert_same_bits(s, _n(ts))
    assert_same_bits(z, _n(tz))
    tq = qp.quantize_affine(_t(x), block, ts, tz, tdt, qmin, qmax)
    q = ta.quantize_affine(x, block, s, z, target, qmin, qmax)
    assert_same_bits(q, _n(tq))
    for out in ("float32", "float16", "bfloat16"):
        if target == "int16" and out != "float32":
            with pytest.raises(NotImplementedError, match="int16"):
                ta.dequantize_affine(q, block, s, z, target, qmin, qmax, output_dtype=out)
            continue
        tdq = qp.dequantize_affine(tq, block, ts, tz, tdt, qmin, qmax, output_dtype=_tdtype(out))
        dq = ta.dequantize_affine(q, block, s, z, target, qmin, qmax, output_dtype=out)
        assert_same_bits(dq, _n(tdq))


@pytest.mark.parametrize("xdtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("sdtype", ["float32", "float16", "bfloat16"])
def test_half_inputs_and_scales(xdtype, sdtype):
    rng = np.random.default_rng(7)
    x = _x(rng, (8, 16), xdtype)
    s = (rng.uniform(0.01, 0.3, (8, 2))).astype(ml_dtypes.bfloat16 if sdtype == "bfloat16" else sdtype)
    z = rng.integers(-20, 20, (8, 2)).astype(np.int32)
    for target, tdt in (("int8", torch.int8), ("uint8", torch.uint8), ("int16", torch.int16)):
        zt = z + 128 if target == "uint8" else z
        tq = qp.quantize_affine(_t(x), (1, 8), _t(s), _t(zt), tdt)  # a shared half type computes in it
        assert_same_bits(ta.quantize_affine(x, (1, 8), s, zt, target), _n(tq))
    tq = qp._quantize_affine_no_zero_point(_t(x), (1, 8), _t(s), None, torch.int8)
    assert_same_bits(ta._quantize_affine_no_zero_point(x, (1, 8), s, None, "int8"), _n(tq))


_HALF_TYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data(), dtype=st.sampled_from(["float16", "bfloat16"]),
       target=st.sampled_from(["int8", "uint8"]), rows=st.integers(1, 5), groups=st.integers(1, 3),
       group=st.integers(1, 9))
def test_half_arithmetic_matches_torchao(data, dtype, target, rows, groups, group):
    """Input and scale of one half type (torchao computes in it): planted ties, tiny scales and ±inf.

    No NaN: torch casts the NaN it computes to an integer (0 on x86), nbquant gives the zero
    point. No int16: torch clamps in the half type, where 32767 is 32768, and the cast to
    int16 overflows; nbquant saturates (docs/compat/torchao.md, "Deviations").
    """
    t = _HALF_TYPES[dtype]
    shape, block = (rows, groups * group), (1, group)
    finite = st.floats(-3e4, 3e4, width=16 if dtype == "float16" else 32, allow_subnormal=True)
    x = np.array(data.draw(st.lists(st.one_of(finite, st.sampled_from([0.5, 1.5, -2.5, np.inf, -np.inf])),
                                    min_size=shape[0] * shape[1], max_size=shape[0] * shape[1])),
                 np.float32).astype(t).reshape(shape)
    s = np.array(data.draw(st.lists(st.sampled_from([0.5, 1.0, 0.1, 0.3, 3.0, 1e-3, 7.0]) | st.floats(1e-3, 50),
                                    min_size=rows * groups, max_size=rows * groups)), np.float32).astype(t)
    s = s.reshape(rows, groups)
    lo, hi = {"int8": (-128, 127), "uint8": (0, 255)}[target]
    z = np.array(data.draw(st.lists(st.integers(max(lo, -200), min(hi, 200)), min_size=rows * groups,
                                    max_size=rows * groups)), np.int32).reshape(rows, groups)
    tq = qp.quantize_affine(_t(x), block, _t(s), _t(z), getattr(torch, target))
    assert_same_bits(ta.quantize_affine(x, block, s, z, target), _n(tq))


@pytest.mark.parametrize(("shape", "block"), CASES[:6])
def test_tinygemm_bit_exact(shape, block):
    rng = np.random.default_rng(11)
    x = _x(rng, shape)
    ts, tz = qp._choose_qparams_affine_tinygemm(_t(x), qp.MappingType.ASYMMETRIC, block, torch.uint4, 0, 15)
    s, z = _n(ts), _n(tz)
    tq = qp._quantize_affine_tinygemm(_t(x), block, ts, tz, torch.uint4, 0, 15)
    q = ta._quantize_affine_tinygemm(x, block, s, z, "uint4", 0, 15)
    assert_same_bits(q, _n(tq))
    for out in ("float32", "float16", "bfloat16"):
        tdq = qp._dequantize_affine_tinygemm(tq, block, ts, tz, torch.uint4, 0, 15, output_dtype=_tdtype(out))
        assert_same_bits(ta._dequantize_affine_tinygemm(q, block, s, z, "uint4", 0, 15, output_dtype=out), _n(tdq))


def test_no_zero_point_domain_bit_exact():
    rng = np.random.default_rng(5)
    x = _x(rng, (4, 12))
    s = rng.uniform(0.01, 0.2, (4, 3)).astype(np.float32)
    tq = qp._quantize_affine_no_zero_point(_t(x), (1, 4), _t(s), None, torch.int8)
    q = ta._quantize_affine_no_zero_point(x, (1, 4), s, None, "int8")
    assert_same_bits(q, _n(tq))
    tdq = qp._dequantize_affine_no_zero_point(tq, (1, 4), _t(s), None, torch.int8)
    assert_same_bits(ta._dequantize_affine_no_zero_point(q, (1, 4), s, None, "int8"), _n(tdq))


def test_zero_point_added_after_rounding():
    # a tie 0.5 * s with zp 3 -> rne(0.5) + 3 = 3 (torch.quantize_per_tensor would give 4)
    x = np.array([0.5, 1.5, 2.5], np.float32)
    q = ta.quantize_affine(x, (3,), np.float32(1.0), np.int32(3), "uint8")
    assert q.tolist() == [3, 5, 5]
    tq = qp.quantize_affine(_t(x), (3,), torch.tensor([1.0]), torch.tensor([3]), torch.uint8)
    assert _n(tq).tolist() == [3, 5, 5]


def test_torch_dtype_objects_accepted():
    x = np.array([[0.5, 1.5, -3.0, 100.0]], np.float32)
    q = ta.quantize_affine(x, (1, 4), np.float32(0.5), np.int32(0), torch.uint4)
    assert q.dtype == np.uint8 and q.tolist() == [[1, 3, 0, 15]]


def test_errors_mirror_torchao():
    x = np.ones((2, 4), np.float32)
    with pytest.raises(TypeError, match="zero_point=None"):
        ta.quantize_affine(x, (1, 4), np.ones(2, np.float32), None, "int8")
    with pytest.raises(NotImplementedError, match="quant_min=-8, quant_max=7"):
        ta.quantize_affine(x, (1, 4), np.ones(2, np.float32), np.zeros(2, np.int32), "int4")
    with pytest.raises(ValueError, match="quant_min=-200"):
        ta.quantize_affine(x, (1, 4), np.ones(2, np.float32), np.zeros(2, np.int32), "int8", quant_min=-200)
    with pytest.raises(ValueError, match="divisible"):
        ta.quantize_affine(x, (1, 3), np.ones(2, np.float32), np.zeros(2, np.int32), "int8")
    with pytest.raises(ValueError, match="block grid"):
        ta.quantize_affine(x, (1, 2), np.ones(2, np.float32), np.zeros(2, np.int32), "int8")
    with pytest.raises(TypeError, match="float64"):
        ta.quantize_affine(x, (1, 4), np.ones(2), np.zeros(2, np.int32), "int8")
    with pytest.raises(NotImplementedError, match="int32"):
        ta.dequantize_affine(np.zeros((2, 4), np.int32), (1, 4), np.ones(2, np.float32), np.ones(2, np.int32),
                             "int32")
    with pytest.raises(ValueError, match="mapping_type"):
        ta.choose_qparams_affine(x, "AFFINE", (1, 4), "int8")
    with pytest.raises(TypeError, match="Expected: int8"):
        ta.dequantize_affine(np.zeros((2, 4), np.uint8), (1, 4), np.ones(2, np.float32), None, "int8")
    for dt in (torch.int8, torch.uint4):
        with pytest.raises((AssertionError, TypeError)):
            qp.quantize_affine(_t(x), (1, 4), torch.ones(2), None, dt)


@pytest.mark.parametrize("block", [(1, 8), (4, 8), (4, 1)])
def test_int32_bias_quantization(block):
    """int32 codes (torchao's own tests quantize biases so): values within the range, zero points, float32 rounding."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((4, 8)) * np.exp2(rng.integers(-4, 30, (4, 8)))).astype(np.float32)
    x[0, :4] = [0.5, 1.5, -2.5, 16777217.0]
    grid = tuple(n // b for n, b in zip(x.shape, block, strict=True))
    s = rng.uniform(0.5, 4, grid).astype(np.float32)
    z = rng.integers(-1000, 1000, grid).astype(np.int32)
    tq = qp.quantize_affine(_t(x), block, _t(s), _t(z), torch.int32)
    q = ta.quantize_affine(x, block, s, z, "int32")
    assert_same_bits(q, _n(tq))
    zero = np.zeros(grid, np.int32)
    tq0 = qp.quantize_affine(_t(x), block, _t(s), _t(zero), torch.int32)
    tdq = qp.dequantize_affine(tq0, block, _t(s), _t(zero), torch.int32)
    assert_same_bits(ta.dequantize_affine(_n(tq0), block, s, zero, "int32"), _n(tdq))
    with pytest.raises(NotImplementedError, match="output_dtype='float32'"):  # torchao rounds codes to half first
        ta.dequantize_affine(_n(tq0), block, s, zero, "int32", output_dtype="bfloat16")


@st.composite
def _affine_problems(draw):
    """A float32 input with ties and zeros, a block size dividing each dimension, a mapping and a target."""
    shape = tuple(draw(st.lists(st.integers(1, 8), min_size=1, max_size=3)))
    block = tuple(draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0])) for n in shape)
    count = int(np.prod(shape))
    special = st.sampled_from([0.0, -0.0, 0.5, 1.5, -2.5, 1e-30, 3e4])
    x = np.array(draw(st.lists(st.floats(-1e3, 1e3, width=32) | special, min_size=count, max_size=count)),
                 np.float32).reshape(shape)
    mapping = draw(st.sampled_from(["SYMMETRIC", "ASYMMETRIC", "SYMMETRIC_NO_CLIPPING_ERR"]))
    target = draw(st.sampled_from(["int8", "uint8", "int16"] if mapping != "SYMMETRIC_NO_CLIPPING_ERR"
                                  else ["int8", "int16"]))
    return x, block, mapping, target


@settings(max_examples=examples(150), deadline=None)
@given(problem=_affine_problems())
def test_affine_round_trip_matches_torchao_on_random_problems(problem):
    x, block, mapping, target = problem
    tdt = _tdtype(target)
    ts, tz = qp.choose_qparams_affine(_t(x), getattr(qp.MappingType, mapping), block, tdt)
    s, z = ta.choose_qparams_affine(x, mapping, block, target)
    assert_same_bits(s, _n(ts))
    assert_same_bits(z, _n(tz))
    if all(b == 1 for b in block) and x.size > 1:  # one scale for the tensor, which quantize_affine cannot view
        with pytest.raises(RuntimeError, match="is invalid for input of size 1"):
            qp.quantize_affine(_t(x), block, ts, tz, tdt)
        with pytest.raises(ValueError, match="block grid"):
            ta.quantize_affine(x, block, s, z, target)
        return
    tq = qp.quantize_affine(_t(x), block, ts, tz, tdt)
    q = ta.quantize_affine(x, block, s, z, target)
    assert_same_bits(q, _n(tq))
    assert_same_bits(ta.dequantize_affine(q, block, s, z, target), _n(qp.dequantize_affine(tq, block, ts, tz, tdt)))


@settings(max_examples=examples(150), deadline=None)
@given(problem=_affine_problems(), domain=st.sampled_from(["INT", "NONE", "FLOAT"]),
       dtype=st.sampled_from(["float32", "bfloat16", "float16"]), nan=st.booleans())
def test_fake_quantize_affine_matches_torchao(problem, domain, dtype, nan):
    x, block, mapping, target = problem
    if all(b == 1 for b in block) and x.size > 1:
        block = x.shape
    target = "uint4" if domain == "FLOAT" else "int8" if target == "int16" else target
    dtype = "float32" if domain == "FLOAT" else dtype  # nbquant's tinygemm shift is float32 only (refused else)
    tdt = _tdtype(target)
    lo, hi = {"uint4": (0, 15), "int8": (-128, 127), "uint8": (0, 255)}[target]
    if domain == "FLOAT":
        ts, tz = qp._choose_qparams_affine_tinygemm(_t(x), qp.MappingType.ASYMMETRIC, block, tdt)
    else:
        ts, tz = qp.choose_qparams_affine(_t(x), getattr(qp.MappingType, mapping), block, tdt)
    if nan:
        x.reshape(-1)[0] = np.nan
    xin = x.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    if dtype != "float32" and (ts.to(getattr(torch, dtype)) > 0).all():  # a half scale: torchao computes in it
        ts = ts.to(getattr(torch, dtype))
    tzp = None if domain == "NONE" else tz
    tdom = getattr(qp.ZeroPointDomain, domain)
    want = qp._fake_quantize_affine(_t(xin), block, ts, tzp, tdt, zero_point_domain=tdom)
    got = ta._fake_quantize_affine(xin, block, _n(ts), None if tzp is None else _n(tzp), target,
                                   zero_point_domain=domain)
    assert_same_bits(got, canonical_nan(_n(want)))
    _, mask = ta._fake_quantize_affine_cachemask(xin, block, _n(ts), None if tzp is None else _n(tzp), target, lo,
                                                 hi, zero_point_domain=domain)
    # torchao compares the codes with the quant_min/quant_max passed (None by default raises TypeError there)
    tmask = qp._fake_quantize_affine_cachemask(_t(xin), block, ts, tzp, tdt, lo, hi, zero_point_domain=tdom)[1]
    assert np.array_equal(mask, tmask.numpy())


@settings(max_examples=examples(100), deadline=None)
@given(lo=st.lists(st.floats(-1e4, 0, width=32), min_size=1, max_size=6), data=st.data(),
       mapping=st.sampled_from(["SYMMETRIC", "ASYMMETRIC"]), target=st.sampled_from(["int8", "uint8", "int16"]))
def test_choose_qparams_with_min_max_matches_torchao(lo, data, mapping, target):
    lo = np.array(lo, np.float32)
    hi = lo + np.array(data.draw(st.lists(st.floats(0, 1e4, width=32), min_size=lo.size, max_size=lo.size)),
                       np.float32)
    ts, tz = qp.choose_qparams_affine_with_min_max(_t(lo), _t(hi), getattr(qp.MappingType, mapping), (1, 8),
                                                   _tdtype(target))
    s, z = ta.choose_qparams_affine_with_min_max(lo, hi, mapping, (1, 8), target)
    assert_same_bits(s, _n(ts))
    assert_same_bits(z, _n(tz))
