"""Floating-point element formats (fp8, fp6, fp4): bit-exact against ml_dtypes and the reference.

The compiled kernels encode from float32 bits (nbquant.element.encode_minifloat);
the reference backend uses ml_dtypes' own cast, so agreement is a real check.
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_same_bits, dequantize_both, quantize_both

import nbquant

FLOAT_FORMATS = ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
SAMPLES = 1 << 11 if SIMULATED else 1 << 20


def _dense_sample(n: int) -> np.ndarray:
    """Random float32 bit patterns, log-uniform magnitudes, every float16 value and the special values."""
    rng = np.random.default_rng(2026)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    logu = (rng.standard_normal(n) * np.exp2(rng.uniform(-20, 20, n))).astype(np.float32)
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    if SIMULATED:
        halves = halves[:: 1 << 6]
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 448, 464, 465, 480, 57344, 61440,
                        7.5, 7.75, 28, 30, 6, 6.5, 7, 2.0 ** -9, 2.0 ** -10, 2.0 ** -16, 2.0 ** -17], np.float32)
    return np.concatenate([bits, logu, halves, special, -special])


@pytest.mark.parametrize("name", FLOAT_FORMATS)
def test_encode_matches_ml_dtypes_cast(backend, name):
    """saturate=False is ml_dtypes' astype bit for bit (NaN payloads and signed zeros included)."""
    x = _dense_sample(SAMPLES)
    fmt = nbquant.get_format(name)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(fmt.dtype)
    got = nbquant.quantize(x, 1.0, name, saturate=False, backend=backend)
    assert_same_bits(got, expected)


@pytest.mark.parametrize("name", FLOAT_FORMATS)
def test_saturating_encode_is_clip_then_cast(backend, name):
    x = _dense_sample(SAMPLES)
    fmt = nbquant.get_format(name)
    top = np.float32(fmt.max_value)
    with np.errstate(invalid="ignore"):
        expected = np.clip(x, -top, top).astype(fmt.dtype)
    assert_same_bits(nbquant.quantize(x, 1.0, name, backend=backend), expected)


@pytest.mark.parametrize("name", FLOAT_FORMATS)
def test_decode_every_code(backend, name):
    fmt = nbquant.get_format(name)
    codes = np.arange(1 << fmt.bits, dtype=np.uint8).view(fmt.dtype)
    got = nbquant.dequantize(codes, 1.0, backend=backend)
    expected = codes.astype(np.float32)
    expected[np.isnan(expected)] = np.nan  # every NaN code decodes to the canonical NaN (docs/semantics.md)
    assert_same_bits(got, expected)


def test_overflow_rules_by_hand(backend):
    x = np.array([448, 464, 465, -500, np.inf, np.nan], np.float32)
    sat = quantize_both(backend, x, 1.0, "float8_e4m3fn")
    raw = quantize_both(backend, x, 1.0, "float8_e4m3fn", saturate=False)
    assert sat.view(np.uint8).tolist() == [0x7E, 0x7E, 0x7E, 0xFE, 0x7E, 0x7F]
    assert raw.view(np.uint8).tolist() == [0x7E, 0x7E, 0x7F, 0xFF, 0x7F, 0x7F]
    e5 = quantize_both(backend, np.array([57344, 61439, 61440, -np.inf], np.float32), 1.0, "float8_e5m2",
                       saturate=False)
    assert e5.view(np.uint8).tolist() == [0x7B, 0x7B, 0x7C, 0xFC]


def test_scaled_fp8_divides_by_the_scale(backend):
    """TensorRT FP8: castToFp8(clip(x / s, -448, 448)); 0.3 / 0.1 rounds to 3 (0x44 is 3.0 in e4m3fn)."""
    q = quantize_both(backend, np.array([0.3, -1000.0], np.float32), np.float32(0.1), "float8_e4m3fn")
    assert q.view(np.uint8).tolist() == [0x44, 0xFE]
    dq = dequantize_both(backend, q, np.float32(0.1))
    assert dq.tolist() == [np.float32(3.0) * np.float32(0.1), np.float32(-448.0) * np.float32(0.1)]


def test_fp4_packs_low_nibble_first(backend):
    x = np.array([[0.5, -6.0, 7.0, 1.0]], np.float32)
    q = quantize_both(backend, x, 1.0, "float4_e2m1fn", packed=True)
    assert q.tolist() == [[0xF1, 0x27]]
    dq = dequantize_both(backend, q, 1.0, dtype="float4_e2m1fn")
    assert dq.tolist() == [[0.5, -6.0, 6.0, 1.0]]


@pytest.mark.parametrize("kwargs", [dict(axis=0), dict(axis=1, block_size=3), dict(block_size=(1, 4))])
@pytest.mark.parametrize("name", FLOAT_FORMATS)
def test_granularities_and_half_inputs(backend, name, kwargs):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((5, 12)) * 40).astype(np.float32)
    grid = nbquant.layout.resolve_layout(x.shape, kwargs.get("axis"), kwargs.get("block_size")).grid
    scale = rng.uniform(0.25, 4, grid).astype(np.float32)
    packed = name == "float4_e2m1fn"
    for xx in (x, x.astype(np.float16), x.astype(ml_dtypes.bfloat16), x.astype(np.float64)):
        q = quantize_both(backend, xx, scale, name, packed=packed, **kwargs)
        for out_dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
            dequantize_both(backend, q, scale, dtype=name, out_dtype=out_dtype, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(zero_point=1), "zero_point"),
        (dict(quant_min=-2), "quant_min"),
        (dict(quant_max=2), "quant_max"),
        (dict(packed=True), "packed"),
        (dict(saturate="yes"), "saturate"),
    ],
)
def test_integer_only_arguments_are_rejected(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        nbquant.quantize(np.ones(4, np.float32), 1.0, "float8_e4m3fn", **kwargs)


def test_dequantize_rejects_a_zero_point_for_float_codes():
    q = np.zeros(4, ml_dtypes.float8_e4m3fn)
    with pytest.raises(ValueError, match="zero_point"):
        nbquant.dequantize(q, 1.0, zero_point=0)


@pytest.mark.full(reason="exhaustive sweep of every float32 bit pattern (minutes)")
@pytest.mark.parametrize("name", FLOAT_FORMATS)
def test_every_float32_bit_pattern(name):
    fmt = nbquant.get_format(name)
    for start in range(0, 1 << 32, 1 << 26):
        x = np.arange(start, start + (1 << 26), dtype=np.uint32).view(np.float32)  # start + 2**26 - 1 < 2**32
        with np.errstate(over="ignore", invalid="ignore"):
            expected = x.astype(fmt.dtype)
        assert_same_bits(nbquant.quantize(x, 1.0, name, saturate=False, backend="cpu"), expected)


def test_fp6_packs_four_codes_in_three_bytes(backend):
    """Little-endian bit stream: codes 0x08 0x10 0x14 0x1f -> bytes 0x08, 0x44, 0x7d."""
    x = np.array([[1.0, 2.0, 3.0, 7.5, -1.0, 0.0, 0.125, 100.0]], np.float32)
    q = quantize_both(backend, x, 1.0, "float6_e2m3fn", packed=True)
    codes = x.astype(ml_dtypes.float6_e2m3fn).view(np.uint8)
    assert codes[0, :4].tolist() == [0x08, 0x10, 0x14, 0x1F]
    assert q[0, :3].tolist() == [0x08, 0x44, 0x7D]
    assert q.shape == (1, 6)
    dq = dequantize_both(backend, q, 1.0, dtype="float6_e2m3fn")
    assert dq.tolist() == [[1.0, 2.0, 3.0, 7.5, -1.0, 0.0, 0.125, 7.5]]


@pytest.mark.parametrize("kwargs", [dict(), dict(axis=0), dict(axis=1, block_size=3), dict(block_size=(1, 2)),
                                    dict(axis=1)])
@pytest.mark.parametrize("name", ["float6_e2m3fn", "float6_e3m2fn"])
def test_fp6_packed_granularities(backend, name, kwargs):
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((3, 12)) * 5).astype(np.float32)
    grid = nbquant.layout.resolve_layout(x.shape, kwargs.get("axis"), kwargs.get("block_size")).grid
    scale = rng.uniform(0.25, 4, grid).astype(np.float32)
    packed = quantize_both(backend, x, scale, name, packed=True, **kwargs)
    unpacked = quantize_both(backend, x, scale, name, **kwargs)
    a = dequantize_both(backend, packed, scale, dtype=name, **kwargs)
    b = dequantize_both(backend, unpacked, scale, **kwargs)
    assert_same_bits(a, b)
