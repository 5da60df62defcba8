"""Scalar element functions called directly (through a small njit loop): E8M0 and the bit helpers."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from numba import njit

from nbquant.element import NF4_THRESHOLDS, NF4_VALUES, bits_f32, decode_e8m0, encode_e8m0, f32_bits, nf4_code, rint_f32


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


@njit
def _nf4_codes(xs):
    out = np.empty(xs.size, np.int64)
    for i in range(xs.size):
        out[i] = nf4_code(xs[i])
    return out


def test_nf4_code_is_argmin_of_float32_distances_on_the_unit_interval():
    """The threshold count equals argmin(fl(|x - table|)) (first on a tie) wherever the kernels call it.

    Checked on every float32 within 256 ulps of each threshold and table entry (where the
    answer changes, and where float32 rounding could make two distances tie), ±0, ±1, NaN,
    and a million uniform draws from [-1, 1].
    """
    near = np.concatenate([NF4_THRESHOLDS, NF4_VALUES])
    steps = np.arange(-256, 257, dtype=np.int32)
    bits = (near.view(np.int32)[:, None] + np.where(near[:, None] < 0, -steps, steps)).ravel()
    xs = np.concatenate([bits.view(np.float32), np.float32([0.0, -0.0, 1.0, -1.0]),
                         np.random.default_rng(0).uniform(-1, 1, 1 << 20).astype(np.float32)])
    xs = xs[np.abs(xs) <= 1]
    expected = np.argmin(np.abs(xs[:, None] - NF4_VALUES[None, :]), axis=1)
    assert np.array_equal(_nf4_codes(xs), expected)
    assert _nf4_codes(np.float32([np.nan]))[0] == 0
