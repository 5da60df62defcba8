"""Inputs are never modified, any strides are accepted, and ``out=`` is filled and returned."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_same_bits, dequantize_both, quantize_both

import nbquant


def _snapshot(*arrays):
    return [(a.copy(), a.__array_interface__["data"][0], a.strides) for a in arrays]


def _unchanged(snapshot, *arrays):
    for (copy, ptr, strides), a in zip(snapshot, arrays, strict=True):
        assert a.__array_interface__["data"][0] == ptr and a.strides == strides
        assert_same_bits(a, copy)


@pytest.mark.parametrize("view", ["contiguous", "every_other_column", "transposed", "reversed", "broadcast"])
@pytest.mark.parametrize("x_dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64])
def test_quantize_leaves_inputs_unchanged_for_any_strides(backend, view, x_dtype):
    base = np.linspace(-3, 3, 5 * 8).reshape(5, 8).astype(x_dtype)
    base[0, 0], base[1, 1] = np.nan, np.inf
    x = {"contiguous": base, "every_other_column": base[:, ::2], "transposed": base.T,
         "reversed": base[::-1, ::-2], "broadcast": np.broadcast_to(base[:1], (5, 8))}[view]
    scale = np.linspace(0.1, 0.5, x.shape[1]).astype(np.float32)
    zp = np.arange(x.shape[1], dtype=np.int32) - 2
    snap = _snapshot(base, scale, zp)
    q = quantize_both(backend, x, scale, "int8", axis=1, zero_point=zp)
    _unchanged(snap, base, scale, zp)
    # the result equals quantizing a contiguous copy
    assert_same_bits(q, quantize_both(backend, np.ascontiguousarray(x), scale, "int8", axis=1, zero_point=zp))
    assert q.flags.c_contiguous and q.shape == x.shape


def test_non_contiguous_scale_and_zero_point(backend):
    x = np.linspace(-2, 2, 6 * 4, dtype=np.float32).reshape(6, 4)
    s_base = np.array([[0.1, 9], [0.2, 9], [0.3, 9], [0.4, 9], [0.5, 9], [0.6, 9]], np.float32)
    z_base = np.array([1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0], np.int64)
    s, z = s_base[:, 0], z_base[::2]
    snap = _snapshot(s_base, z_base)
    q = quantize_both(backend, x, s, "uint8", axis=0, zero_point=z)
    _unchanged(snap, s_base, z_base)
    assert_same_bits(q, quantize_both(backend, x, s.copy(), "uint8", axis=0, zero_point=z.copy()))
    d = dequantize_both(backend, q, s, axis=0, zero_point=z)
    _unchanged(snap, s_base, z_base)
    assert_same_bits(d, dequantize_both(backend, q, s.copy(), axis=0, zero_point=z.copy()))


@pytest.mark.parametrize("packed", [False, True])
def test_dequantize_leaves_inputs_unchanged_for_any_strides(backend, packed):
    codes = np.arange(6 * 8, dtype=np.uint8).reshape(6, 8)
    for q in (codes, codes[:, ::2], codes.T, codes[::-1]):
        scale = np.float32(0.25)
        snap = _snapshot(codes)
        kw = {"dtype": "uint4"} if packed else {}
        d = dequantize_both(backend, q, scale, zero_point=3, **kw)
        _unchanged(snap, codes)
        assert_same_bits(d, dequantize_both(backend, np.ascontiguousarray(q), scale, zero_point=3, **kw))


def test_read_only_inputs_are_accepted(backend):
    x = np.linspace(-1, 1, 12, dtype=np.float32)
    s = np.array([0.01], np.float32)
    x.flags.writeable = s.flags.writeable = False
    q = quantize_both(backend, x, s, "int8")
    q.flags.writeable = False
    dequantize_both(backend, q, s)


@pytest.mark.parametrize(("dtype", "packed"), [("int8", False), ("uint16", False), ("int4", False), ("uint2", True)])
def test_quantize_out_is_filled_and_returned(backend, dtype, packed):
    x = np.linspace(-5, 5, 3 * 8, dtype=np.float32).reshape(3, 8)
    expected = quantize_both(backend, x, 0.5, dtype, packed=packed)
    out = np.empty_like(expected)
    out.view(np.uint8)[...] = 0x55
    res = nbquant.quantize(x, 0.5, dtype, packed=packed, out=out, backend=backend)
    assert res is out
    assert_same_bits(out, expected)


@pytest.mark.parametrize("out_dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_dequantize_out_is_filled_and_returned(backend, out_dtype):
    q = np.arange(-6, 6, dtype=np.int8).reshape(3, 4)
    expected = dequantize_both(backend, q, np.array([0.5, 0.25, 0.125], np.float32), axis=0, out_dtype=out_dtype)
    out = np.full((3, 4), np.nan, out_dtype)
    res = nbquant.dequantize(q, np.array([0.5, 0.25, 0.125], np.float32), axis=0, out_dtype=out_dtype, out=out,
                             backend=backend)
    assert res is out
    assert_same_bits(out, expected)


def test_out_may_be_a_contiguous_view_of_a_larger_array(backend):
    x = np.array([0.5, 1.5, 2.5, 3.5], np.float32)
    big = np.full((3, 4), 99, np.int8)
    res = nbquant.quantize(x, 1.0, "int8", out=big[1], backend=backend)
    assert res.base is big
    assert big.tolist() == [[99] * 4, [0, 2, 2, 4], [99] * 4]


def test_empty_inputs(backend):
    for shape in [(0,), (3, 0), (0, 4)]:
        x = np.zeros(shape, np.float32)
        q = quantize_both(backend, x, 1.0, "int8")
        assert q.shape == shape
        assert dequantize_both(backend, q, 1.0).shape == shape
    q = quantize_both(backend, np.zeros((0, 4), np.float32), 1.0, "int4", packed=True)
    assert q.shape == (0, 2) and q.dtype == np.uint8
    assert dequantize_both(backend, q, 1.0, dtype="int4").shape == (0, 4)
    q = quantize_both(backend, np.zeros((0, 3), np.float32), np.ones(3, np.float32), "int8", axis=1)
    assert q.shape == (0, 3)
    q = quantize_both(backend, np.zeros((3, 0), np.float32), np.ones(3, np.float32), "int8", axis=0)
    assert q.shape == (3, 0)
    assert dequantize_both(backend, q, np.ones(3, np.float32), axis=0).shape == (3, 0)
    q = quantize_both(backend, np.zeros((0, 6), np.float32), np.ones((0, 3), np.float32), "int8", axis=1,
                      block_size=2)
    assert q.shape == (0, 6)
