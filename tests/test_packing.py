"""Sub-byte formats: unpacked ml_dtypes results, packed byte order, and packed round trips."""

from __future__ import annotations

import pickle

import ml_dtypes
import numpy as np
import pytest
from _helpers import SUB_BYTE_FORMATS, dequantize_both, ints, quantize_both

import nbquant

BITS = {"int4": 4, "uint4": 4, "int2": 2, "uint2": 2}


def codes_to_floats(codes) -> np.ndarray:
    """Inputs that quantize (scale 1) to exactly ``codes``."""
    return np.asarray(codes, np.float32)


def pack_by_hand(codes: np.ndarray, bits: int) -> np.ndarray:
    """byte j = sum(code[k*j + t] & mask) << (t * bits), written with Python ints."""
    k, mask = 8 // bits, (1 << bits) - 1
    flat = codes.reshape(-1, codes.shape[-1]).astype(np.int64)
    rows = [[sum((int(row[k * j + t]) & mask) << (t * bits) for t in range(k)) for j in range(len(row) // k)]
            for row in flat]
    return np.array(rows, np.uint8).reshape(codes.shape[:-1] + (codes.shape[-1] // k,))


# --- exact bytes -----------------------------------------------------------------------------------


def test_int4_low_nibble_first(backend):
    x = codes_to_floats([-8, 7, 0, -1, 3, -4, 2, -2])
    p = quantize_both(backend, x, 1.0, "int4", packed=True)
    # byte = q[2j] & 15 | (q[2j+1] & 15) << 4
    assert p.dtype == np.uint8 and p.tolist() == [0x78, 0xF0, 0xC3, 0xE2]


def test_docstring_example_bytes(backend):
    p = quantize_both(backend, np.array([[1.0, -1.0]], np.float32), 0.5, "int4", packed=True)
    assert p.tolist() == [[226]]


def test_uint4_low_nibble_first(backend):
    p = quantize_both(backend, codes_to_floats([1, 15, 0, 9, 15, 15]), 1.0, "uint4", packed=True)
    assert p.tolist() == [0xF1, 0x90, 0xFF]


def test_int2_four_per_byte_lowest_bits_first(backend):
    x = codes_to_floats([-2, -1, 0, 1, 1, 0, 0, 0, 0, 0, 0, -2])
    p = quantize_both(backend, x, 1.0, "int2", packed=True)
    assert p.tolist() == [0b01_00_11_10, 0b00_00_00_01, 0b10_00_00_00]


def test_uint2_four_per_byte_lowest_bits_first(backend):
    p = quantize_both(backend, codes_to_floats([3, 2, 1, 0, 0, 1, 2, 3]), 1.0, "uint2", packed=True)
    assert p.tolist() == [0b00_01_10_11, 0b11_10_01_00]


def test_packing_runs_along_the_last_axis_of_each_row(backend):
    x = codes_to_floats([[1, 2, 3, 4], [-1, -2, -3, -4], [7, -8, 0, 0]])
    p = quantize_both(backend, x, 1.0, "int4", packed=True)
    assert p.shape == (3, 2)
    assert p.tolist() == [[0x21, 0x43], [0xEF, 0xCD], [0x87, 0x00]]


def test_packed_with_per_column_scales(backend):
    """Per-channel along the packed (last) axis: neighbours in one byte use different scales."""
    x = np.ones((2, 4), np.float32)
    s = np.array([1, 0.5, 0.25, 1 / 3], np.float32)
    p = quantize_both(backend, x, s, "uint4", axis=1, packed=True)
    assert p.tolist() == [[0x21, 0x34]] * 2


def test_packed_with_blocks_that_straddle_bytes(backend):
    """Blocks of 3 along a last axis of 8 packed 4 per byte (int2): blocks [0:3] [3:6] [6:8]."""
    x = np.ones((1, 8), np.float32)
    s = np.array([[1, 0.5, 1 / 3]], np.float32)  # codes 1 1 1 | 2 2 2 | 3 3 -> clamp int2 qmax 1; uint2 fits
    p = quantize_both(backend, x, s, "uint2", axis=1, block_size=3, packed=True)
    assert ints(quantize_both(backend, x, s, "uint2", axis=1, block_size=3)) == [[1, 1, 1, 2, 2, 2, 3, 3]]
    assert p.tolist() == [[0b10_01_01_01, 0b11_11_10_10]]


@pytest.mark.parametrize("dtype", SUB_BYTE_FORMATS)
def test_packed_matches_packing_the_unpacked_codes_by_hand(backend, dtype):
    rng = np.random.default_rng(7)
    x = rng.uniform(-12, 20, size=(3, 2, 8)).astype(np.float32)
    s = np.float32(0.75)
    q = quantize_both(backend, x, s, dtype)
    p = quantize_both(backend, x, s, dtype, packed=True)
    assert p.shape == (3, 2, 8 * BITS[dtype] // 8)
    np.testing.assert_array_equal(p, pack_by_hand(np.asarray(ints(q)), BITS[dtype]))


# --- unpacked sub-byte results ---------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "codes"), [("int4", [-8, -1, 0, 7]), ("uint4", [0, 1, 8, 15]),
                                              ("int2", [-2, -1, 0, 1]), ("uint2", [0, 1, 2, 3])])
def test_unpacked_results_are_ml_dtypes_arrays(backend, dtype, codes):
    q = quantize_both(backend, codes_to_floats(codes), 1.0, dtype)
    assert q.dtype == np.dtype(getattr(ml_dtypes, dtype))
    assert q.tolist() == [getattr(ml_dtypes, dtype)(c) for c in codes]
    assert ints(q) == codes
    # the same storage bytes as ml_dtypes' own array: two's complement in the low bits, high bits 0
    np.testing.assert_array_equal(q.view(np.uint8), np.array(codes, getattr(ml_dtypes, dtype)).view(np.uint8))
    assert (q.view(np.uint8) >> BITS[dtype]).tolist() == [0] * len(codes)


# --- dequantize packed -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", SUB_BYTE_FORMATS)
def test_dequantize_packed_equals_dequantize_unpacked(backend, dtype):
    rng = np.random.default_rng(11)
    x = rng.uniform(-3, 3, size=(2, 3, 4)).astype(np.float32)
    s = rng.uniform(0.2, 1.0, size=(2, 3, 2)).astype(np.float32)
    z = rng.integers(0, 2, size=(2, 3, 2))
    kw = {"block_size": (1, 1, 2), "zero_point": z}
    q = quantize_both(backend, x, s, dtype, **kw)
    p = quantize_both(backend, x, s, dtype, packed=True, **kw)
    for out_dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
        d_unpacked = dequantize_both(backend, q, s, out_dtype=out_dtype, **kw)
        d_packed = dequantize_both(backend, p, s, dtype=dtype, out_dtype=out_dtype, **kw)
        d_by_type = dequantize_both(backend, p, s, dtype=getattr(ml_dtypes, dtype), out_dtype=out_dtype, **kw)
        assert d_packed.shape == x.shape
        np.testing.assert_array_equal(d_packed.view(np.uint8), d_unpacked.view(np.uint8))
        np.testing.assert_array_equal(d_by_type.view(np.uint8), d_unpacked.view(np.uint8))


def test_dequantize_packed_bytes_by_hand(backend):
    p = np.array([0x78, 0xF0, 0xC3, 0xE2], np.uint8)
    assert dequantize_both(backend, p, 1.0, dtype="int4").tolist() == [-8, 7, 0, -1, 3, -4, 2, -2]
    assert dequantize_both(backend, p, 1.0, dtype="uint4").tolist() == [8, 7, 0, 15, 3, 12, 2, 14]
    assert dequantize_both(backend, p[:1], 1.0, dtype="int2").tolist() == [0, -2, -1, 1]  # 0x78 = 01 11 10 00
    assert dequantize_both(backend, p[:1], 1.0, dtype="uint2").tolist() == [0, 2, 3, 1]


def test_every_byte_round_trips_through_dequantize_and_quantize(backend):
    """All 256 bytes: dequantize (scale 1) then quantize packed gives the same bytes back."""
    p = np.arange(256, dtype=np.uint8).reshape(16, 16)
    for dtype in SUB_BYTE_FORMATS:
        d = dequantize_both(backend, p, 1.0, dtype=dtype)
        back = quantize_both(backend, d, 1.0, dtype, packed=True)
        np.testing.assert_array_equal(back, p)


def test_packed_out_argument(backend):
    x = codes_to_floats([[1, 2, 3, 4]])
    out = np.full((1, 2), 0xAA, np.uint8)
    res = nbquant.quantize(x, 1.0, "int4", packed=True, out=out, backend=backend)
    assert res is out and out.tolist() == [[0x21, 0x43]]
    dout = np.empty((1, 4), np.float32)
    res = nbquant.dequantize(out, 1.0, dtype="int4", out=dout, backend=backend)
    assert res is dout and dout.tolist() == [[1, 2, 3, 4]]


# --- PackedCodes: packed results remember their format ---------------------------------------------


@pytest.mark.parametrize("fmt", ["int4", "uint4", "int2", "uint2", "float4_e2m1fn", "float6_e2m3fn"])
def test_packed_result_dequantizes_without_dtype(backend, fmt):
    """The trap: packed int4 bytes read as uint8 codes. A packed result carries its format instead."""
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 12)
    q = nbquant.quantize(x, 0.25, fmt, packed=True, backend=backend)
    assert type(q) is nbquant.PackedCodes and q.format == fmt and q.dtype == np.uint8
    expected = nbquant.dequantize(q.view(np.ndarray), 0.25, dtype=fmt, backend="reference")
    for got in (nbquant.dequantize(q, 0.25, backend=backend), nbquant.dequantize(q, 0.25, dtype=fmt, backend=backend)):
        assert type(got) is np.ndarray
        assert got.tobytes() == expected.tobytes()


def test_packed_codes_refuse_another_dtype():
    q = nbquant.quantize(np.ones((1, 4), np.float32), 0.5, "int4", packed=True)
    with pytest.raises(ValueError, match=r"^q holds packed int4 codes \(q.format\), but dtype='uint4'; leave dtype "
                                         r"out, or pass q.view\(numpy.ndarray\)"):
        nbquant.dequantize(q, 0.5, dtype="uint4")
    # the plain-array path reads the same bytes as any format the caller names
    assert nbquant.dequantize(q.view(np.ndarray), 0.5, dtype="uint4").tolist() == [[1.0, 1.0, 1.0, 1.0]]
    assert nbquant.dequantize(q.view(np.ndarray), 0.5).tolist() == [[17.0, 17.0]]  # uint8 codes: 0x22 * 0.5


def test_packed_codes_behave_as_uint8_arrays():
    q = nbquant.quantize(np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8), 0.25, "int4", packed=True)
    assert repr(q).startswith("PackedCodes([[") and repr(q).endswith("dtype=uint8, format='int4')")
    assert type(q[1]) is nbquant.PackedCodes and q[1].format == "int4"  # slices stay tagged
    assert type(q + 1) is np.ndarray and type(np.asarray(q)) is np.ndarray  # arithmetic and asarray do not
    again = pickle.loads(pickle.dumps(q))
    assert type(again) is nbquant.PackedCodes and again.format == "int4" and (again == q).all()
    with pytest.raises(TypeError, match=r"^PackedCodes holds uint8 bytes; got dtype int8"):
        nbquant.PackedCodes(np.zeros(2, np.int8), "int4")


def test_packed_quantize_into_out_returns_out():
    out = np.empty((1, 2), np.uint8)
    assert nbquant.quantize(np.ones((1, 4), np.float32), 0.5, "int4", packed=True, out=out) is out
