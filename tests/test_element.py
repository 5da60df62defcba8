"""Scalar element functions called directly (through a small njit loop): E8M0 and the bit helpers."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from numba import njit

from nbquant.element import bits_f32, decode_e8m0, encode_e8m0, f32_bits, rint_f32


@njit(cache=False)
def _encode_e8m0(x, out):
    for i in range(x.size):
        out[i] = encode_e8m0(x[i])


@njit(cache=False)
def _decode_e8m0(codes, out):
    for i in range(codes.size):
        out[i] = decode_e8m0(codes[i])


@njit(cache=False)
def _roundtrip_bits(x, out):
    for i in range(x.size):
        out[i] = bits_f32(f32_bits(x[i]))


@njit(cache=False)
def _rint(x, out):
    for i in range(x.size):
        out[i] = rint_f32(x[i])


def _sample() -> np.ndarray:
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    subnormal_edges = np.array([0x00400000, 0x00400001, 0x005FFFFF, 0x00600000, 0x007FFFFF, 1], np.uint32)
    special = np.array([0, -0.0, 1, 1.5, 3, 0.75, 2.0 ** 127, 3 * 2.0 ** 126, np.inf, -np.inf, np.nan, -1],
                       np.float32)
    return np.concatenate([bits.view(np.float32), subnormal_edges.view(np.float32), special])


def test_e8m0_encode_matches_ml_dtypes():
    x = _sample()
    out = np.empty(x.size, np.uint8)
    _encode_e8m0(x, out)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = x.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    np.testing.assert_array_equal(out, expected)


def test_e8m0_decode_every_code():
    codes = np.arange(256, dtype=np.uint8)
    out = np.empty(256, np.float32)
    _decode_e8m0(codes, out)
    expected = codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    np.testing.assert_array_equal(out, expected)  # NaN == NaN here (assert_array_equal treats them equal)
    assert np.isnan(out[255]) and out[0] == np.float32(2.0 ** -127)


def test_float_bits_round_trip_and_rint_is_half_to_even():
    x = _sample()
    out = np.empty_like(x)
    _roundtrip_bits(x, out)
    np.testing.assert_array_equal(out.view(np.uint32), x.view(np.uint32))
    ties = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 8388609.0, 1e30, np.inf], np.float32)
    _rint(ties, out[: ties.size])
    np.testing.assert_array_equal(out[: ties.size], np.rint(ties))
