"""nbquant.compat.torchao's float8 primitives against torchao 0.18 itself, bit for bit (the parity tier)."""

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

_NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
_F8 = {"float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


def _t(a: np.ndarray):
    a = np.ascontiguousarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    if a.dtype in (np.dtype(t) for t in _F8.values()):
        return torch.from_numpy(a.view(np.uint8).copy()).view(getattr(torch, str(a.dtype)))
    return torch.from_numpy(a.copy())


def _n(t, like=None) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return t.view(torch.uint8).numpy().view(_F8[str(t.dtype).removeprefix("torch.")])
    return t.numpy()


@st.composite
def _problems(draw):
    """A tensor (ties, zeros, an all-zero block, ±inf-free), a block size, dtypes."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    granularity = draw(st.sampled_from(["tensor", "row", "block"]))
    if granularity == "tensor":
        block = shape
    elif granularity == "row":
        block = (1,) * (len(shape) - 1) + (shape[-1],)
    else:
        block = tuple(draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0])) for n in shape)
    if all(b == 1 for b in block) and int(np.prod(shape)) > 1:
        block = shape
    count = int(np.prod(shape))
    special = st.sampled_from([0.0, -0.0, 0.5, 1.5, -2.5, 448.0, 1e-30, 3e4, -57344.0])
    x = np.array(draw(st.lists(st.floats(-1e4, 1e4, width=32) | special, min_size=count, max_size=count)),
                 np.float32).reshape(shape)
    if draw(st.booleans()):  # an all-zero first block: a zero scale
        x[tuple(slice(0, b) for b in block)] = 0.0
    dtype = draw(st.sampled_from(list(_NP)))
    with np.errstate(over="ignore"):
        x = x.astype(_NP[dtype])
    return x, block, draw(st.sampled_from(list(_F8))), dtype


@settings(max_examples=examples(200), deadline=None)
@given(problem=_problems(), out=st.sampled_from(["float32", "float16", "bfloat16"]))
def test_choose_quantize_dequantize_match_torchao(problem, out):
    x, block, f8, _ = problem
    if not np.isfinite(x.astype(np.float32)).all():
        x = np.where(np.isfinite(x.astype(np.float32)), x, x.dtype.type(1.0))
    tf8 = getattr(torch, f8)
    ts = qp._choose_scale_float8(_t(x), list(block), tf8)
    s = ta._choose_scale_float8(x, block, f8)
    assert_same_bits(s, _n(ts))
    tq = qp._quantize_affine_float8(_t(x), ts, tf8)
    q = ta._quantize_affine_float8(x, s, f8)
    # e5m2 has six NaN codes: torch writes 0x7f/0xff, ml_dtypes and nbquant 0x7e/0xfe (e4m3fn: one per sign)
    assert_same_bits(canonical_nan(q), canonical_nan(_n(tq)))
    assert (np.signbit(q.astype(np.float32)) == np.signbit(_n(tq).astype(np.float32))).all()
    tdq = qp._dequantize_affine_float8(tq, ts, getattr(torch, out))
    assert_same_bits(ta._dequantize_affine_float8(q, s, out), canonical_nan(_n(tdq)))


@pytest.mark.parametrize("dtype", list(_NP))
def test_bounds_clamp_the_amax(dtype):
    x = np.array([[0.0, 0.0], [1e-6, -2.0], [900.0, 3.0]], np.float32).astype(_NP[dtype])
    for lb, ub in ((1e-4, None), (None, 100.0), (1e-3, 500.0)):
        ts = qp._choose_scale_float8(_t(x), [1, 2], torch.float8_e4m3fn, hp_value_lb=lb, hp_value_ub=ub)
        assert_same_bits(ta._choose_scale_float8(x, (1, 2), hp_value_lb=lb, hp_value_ub=ub), _n(ts))


def test_nan_blocks_and_refusals_match_torchao():
    x = np.array([[np.nan, 1.0], [2.0, -3.0]], np.float32)
    ts = qp._choose_scale_float8(_t(x), [1, 2])
    s = ta._choose_scale_float8(x, (1, 2))
    assert_same_bits(s, _n(ts))
    assert_same_bits(ta._quantize_affine_float8(x, s), _n(qp._quantize_affine_float8(_t(x), ts)))
    with pytest.raises(RuntimeError, match="invalid for input of size"):
        qp._choose_scale_float8(_t(x), [1, 1])
    with pytest.raises(ValueError, match="reduces over no dimension"):
        ta._choose_scale_float8(x, (1, 1))


@settings(max_examples=examples(200), deadline=None)
@given(problem=_problems(), f8=st.sampled_from(sorted(_F8)), nan=st.booleans())
def test_no_zero_point_quantize_to_float8_matches_torchao(problem, f8, nan):
    """``_quantize_affine_no_zero_point`` with a float8 output: round to an integer, clamp to ±max, cast."""
    x, block, _, dtype = problem
    x = np.clip(x.astype(np.float32) * np.float32(40), -3e4, 3e4)  # products beyond 448 and between float8 integers
    if nan:
        x.reshape(-1)[0] = np.nan
    x = x.astype(_NP[dtype])
    finite = np.nan_to_num(x.astype(np.float32)).astype(x.dtype)
    scale = np.asarray(ta._choose_scale_float8(finite, block, "float8_e4m3fn"), np.float32) * np.float32(3)
    scale[scale == 0] = 1
    want = qp._quantize_affine_no_zero_point(_t(x), list(block), _t(scale), None, getattr(torch, f8))
    got = ta._quantize_affine_no_zero_point(x, block, scale, None, f8)
    assert_same_bits(canonical_nan(got.astype(np.float32)), canonical_nan(_n(want).astype(np.float32)))
    assert got.dtype == _F8[f8]


@settings(max_examples=examples(200), deadline=None)
@given(problem=_problems(), target=st.sampled_from([("uint4", 0, 15), ("uint8", None, None), ("int8", None, None)]),
       variant=st.sampled_from(["tinygemm", "dont_preserve_zero"]))
def test_choose_qparams_variants_match_torchao(problem, target, variant):
    x, block, _, dtype = problem
    name, qmin, qmax = target
    theirs = getattr(qp, f"_choose_qparams_affine_{variant}")(_t(x), qp.MappingType.ASYMMETRIC, list(block),
                                                               getattr(torch, name), qmin, qmax)
    ours = getattr(ta, f"_choose_qparams_affine_{variant}")(x, "ASYMMETRIC", block, name, qmin, qmax)
    for mine, want in zip(ours, theirs, strict=True):
        mine, want = np.asarray(mine), _n(want)
        assert mine.shape == want.shape
        if mine.dtype.kind == "i":
            assert_same_bits(mine, want)
        else:
            assert_same_bits(canonical_nan(mine), canonical_nan(want))


@settings(max_examples=examples(200), deadline=None)
@given(problem=_problems(), bits=st.sampled_from([(3, 2), (2, 3), (2, 1)]))
def test_floatx_helpers_match_torchao(problem, bits):
    x = problem[0]
    x = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(1, -1)
    x = np.nan_to_num(x.astype(np.float32), posinf=3e4, neginf=-3e4).astype(x.dtype)
    scale = qp._choose_qparams_affine_floatx(_t(x), *bits)
    assert_same_bits(ta._choose_qparams_affine_floatx(x, *bits), _n(scale))
    if (_n(scale).astype(np.float32) == 0).any():  # a half scale underflowed: torchao encodes 0/0's NaN bits
        with pytest.raises(ValueError, match="scale must be finite and > 0"):
            ta._quantize_affine_floatx(x, _n(scale), *bits)
        return
    codes = qp._quantize_affine_floatx(_t(x), scale, *bits)
    mine = ta._quantize_affine_floatx(x, _n(scale), *bits)
    assert_same_bits(mine, codes.numpy())
    assert_same_bits(ta._dequantize_affine_floatx(mine, _n(scale), *bits),
                     qp._dequantize_affine_floatx(codes, scale, *bits).numpy())
