"""nbquant.compat.torchao's float8 primitives: exact values by hand (torch-free; parity: test_parity_torchao_float8)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nbquant.compat import torchao as ta


def test_per_row_scales_codes_and_values():
    x = np.array([[0.0, 0.0, 0.0, 0.0], [1.0, -2.0, 3.0, 448.0], [0.5, 900.0, -1.0, 0.0]], np.float32)
    s = ta._choose_scale_float8(x, (1, 4))
    assert s.shape == (3, 1) and s.ravel().tolist() == [0.0, 1.0, np.float32(900 / 448)]
    q = ta._quantize_affine_float8(x, s)
    assert q.dtype == ml_dtypes.float8_e4m3fn
    assert q[0].view(np.uint8).tolist() == [0xFF] * 4  # 0 / 0: x86's negative NaN, as torch
    assert q[1].astype(np.float32).tolist() == [1.0, -2.0, 3.0, 448.0]
    y = ta._dequantize_affine_float8(q, s, "float32")
    assert np.isnan(y[0]).all() and y[1].tolist() == [1.0, -2.0, 3.0, 448.0]


def test_a_half_input_rounds_its_scale_to_its_dtype():
    x = np.array([[3.0, -1.0]], ml_dtypes.bfloat16)  # 3 / 448 in bfloat16, then float32
    assert ta._choose_scale_float8(x, (1, 2)).tolist() == [[np.float32(ml_dtypes.bfloat16(3 / 448))]]
    assert ta._choose_scale_float8(x.astype(np.float32), (1, 2)).tolist() == [[np.float32(3) / np.float32(448)]]


def test_blocks_bounds_and_e5m2():
    x = np.arange(16, dtype=np.float32).reshape(4, 4) - 8
    s = ta._choose_scale_float8(x, (2, 2), "float8_e5m2", hp_value_lb=4.0, hp_value_ub=7.0)
    amax = np.array([[8.0, 6.0], [5.0, 7.0]], np.float32)  # block maxima of |x|, 8 clamped to 7
    assert s.tolist() == (np.minimum(amax, 7) / np.float32(57344)).tolist()
    q = ta._quantize_affine_float8(x, s, "float8_e5m2")  # the scale repeats over each 2 x 2 block
    assert q.dtype == ml_dtypes.float8_e5m2 and q[0, 0].astype(np.float32) == -57344  # -8 / s saturates
    assert ta._dequantize_affine_float8(q, s, "bfloat16").dtype == ml_dtypes.bfloat16


def test_refusals():
    x = np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match="reduces over no dimension"):
        ta._choose_scale_float8(x, (1, 1))
    with pytest.raises(NotImplementedError, match="scale_dtype='float32'"):
        ta._choose_scale_float8(x, (1, 4), scale_dtype="float8_e8m0fnu")
    with pytest.raises(ValueError, match="one per block"):
        ta._quantize_affine_float8(x, np.ones(3, np.float32))
    with pytest.raises(TypeError, match="float8_e4m3fn or float8_e5m2"):
        ta._dequantize_affine_float8(np.zeros(4, np.int8), np.float32(1))


def test_the_qparams_variants_and_floatx_helpers_refuse_bad_arguments():
    x = np.array([[1.0, -2.0, 3.0, 4.0]], np.float32)
    with pytest.raises(ValueError, match="'SYMMETRIC'"):
        ta._choose_qparams_affine_tinygemm(x, "SYMMETRIC", (1, 4), "uint4")
    with pytest.raises(ValueError, match="ebits=4, mbits=3"):
        ta._choose_qparams_affine_floatx(x, 4, 3)
    with pytest.raises(ValueError, match="2-d tensor"):
        ta._choose_qparams_affine_floatx(x[0], 3, 2)
    with pytest.raises(ValueError, match="NaN or inf"):
        ta._quantize_affine_floatx(np.array([[np.nan]], np.float32), np.float32([1.0]), 3, 2)
    with pytest.raises(ValueError, match="codes above 63"):
        ta._dequantize_affine_floatx(np.array([[64]], np.uint8), np.float32([1.0]), 3, 2)
    with pytest.raises(ValueError, match="must lie in"):
        ta._quantize_affine_no_zero_point(x, (1, 4), np.float32([1.0]), None, "float8_e4m3fn", quant_max=500)


def test_the_qparams_variants_exact_values():
    x = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    s, z = ta._choose_qparams_affine_dont_preserve_zero(x, "ASYMMETRIC", (1, 4), "uint8")
    assert s.tolist() == [np.float32(3) / np.float32(255)] and z.tolist() == [0]  # 0 - rne(85) clamped to 0
    s, z = ta._choose_qparams_affine_tinygemm(x, "ASYMMETRIC", (1, 4), "uint4", 0, 15)
    assert s.tolist() == [np.float32(0.2)] and z.dtype == np.float32
    q = ta._quantize_affine_no_zero_point(np.array([[17.0, -0.0, 1e6, 0.2]], np.float32), (1, 4),
                                          np.float32([1.0]), None, "float8_e4m3fn")
    assert q.view(np.uint8).tolist() == [[0x58, 0x80, 0x7E, 0x00]]  # 17 -> 16, -0.0 kept, 448, rne(0.2) = 0
