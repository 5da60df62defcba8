"""nbquant.compat.modelopt_qtensor without torch: exact values, layouts, and every refused argument.

Bit-for-bit parity with modelopt itself is in tests/test_parity_modelopt_qtensor.py (parity tier).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nbquant.compat import modelopt_qtensor as mq


def test_int8_per_block_pads_keeps_the_padding_and_crops_on_dequantize():
    x = np.array([[1.0, -2.0, 0.5]], np.float32)
    qt, s = mq.INT8QTensor.quantize(x, block_sizes={-1: 2})
    assert qt.quantized_data.tolist() == [[64, -127, 127, 0]]  # the zero padding is kept, as in modelopt
    assert s.tolist() == [[np.float32(2) / np.float32(127), np.float32(0.5) / np.float32(127)]]
    y = qt.dequantize(scale=s, block_sizes={-1: 2})
    assert y.shape == (1, 3) and y.dtype == np.float32


def test_int8_scales_and_quotient_are_in_the_inputs_half_type():
    x = np.array([1000.0, 3.0], ml_dtypes.bfloat16)
    qt, s = mq.INT8QTensor.quantize(x)
    assert s.dtype == ml_dtypes.bfloat16 and float(s) == 7.875  # 1000 / 127 = 7.874 rounded to bfloat16
    assert qt.quantized_data.dtype == np.int8


def test_int4_packs_the_first_element_high_and_offsets_by_8():
    qt, s = mq.INT4QTensor.quantize(np.array([[0.5, -1.0, 2.0, 0.25]], np.float32), 4)
    assert s.tolist() == [[3.5]]
    assert qt.quantized_data.tolist() == [[(10 << 4) | 4, (15 << 4) | 9]]


def test_an_all_zero_block_gives_what_torch_gives_on_x86():
    qt, s = mq.INT4QTensor.quantize(np.zeros((1, 4), np.float32), 4)
    assert np.isinf(s).all() and qt.quantized_data.tolist() == [[0, 0]]  # 0 * inf is NaN, cast to 0
    qt8, s8 = mq.INT8QTensor.quantize(np.zeros(3, np.float32))
    assert float(s8) == 0 and qt8.quantized_data.tolist() == [0, 0, 0]


def test_fp8_saturates_like_torch_2_13():
    qt, _ = mq.FP8QTensor.quantize(np.array([1.0, 1.0], np.float32), scales=np.float32(1 / 512))
    assert qt.quantized_data.astype(np.float32).tolist() == [448.0, 448.0]


def test_mxfp4_rounds_ties_toward_zero_and_encodes_zero_as_minus_zero():
    qt, e = mq.MXFP4QTensor.quantize(np.array([0.0, 0.75, 1.25, -1.75, 2.5, 3.5, 5.0, 6.0], np.float32), 8)
    codes = np.stack([qt.quantized_data & 15, qt.quantized_data >> 4], -1).reshape(-1)
    assert e.tolist() == [[127]] and codes.tolist() == [8, 1, 2, 8 + 3, 4, 5, 6, 7]


def test_nvfp4_minus_zero_is_code_zero():
    qt, _, _ = mq.NVFP4QTensor.quantize(np.array([[-0.0, 1.0] + [0.0] * 14], np.float32), 16)
    assert qt.quantized_data[0, 0] & 15 == 0


def test_inputs_are_not_modified():
    x = np.array([[np.nan, -0.0, 3.0, 1e-3] * 8], np.float32)
    before = x.copy()
    for call in (lambda: mq.INT8QTensor.quantize(x, axis=0), lambda: mq.FP8QTensor.quantize(x, block_sizes={-1: 4}),
                 lambda: mq.INT4QTensor.quantize(x, 8), lambda: mq.NVFP4QTensor.quantize(x, 16),
                 lambda: mq.MXFP4QTensor.quantize(x, 32), lambda: mq.NF4QTensor.quantize(x, 16)):
        call()
        np.testing.assert_array_equal(x.view(np.uint32), before.view(np.uint32))


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: mq.INT8QTensor.quantize(np.zeros(4, np.int32)), TypeError, "input has dtype int32"),
    (lambda: mq.INT8QTensor.quantize(np.zeros(4, np.float32), block_sizes=[2]), TypeError, "block_sizes=.*dict"),
    (lambda: mq.INT8QTensor.quantize(np.zeros(4, np.float32), block_sizes={1: 2}), ValueError, "key 1"),
    (lambda: mq.INT8QTensor.quantize(np.zeros(4, np.float32), block_sizes={0: 0}), ValueError, "block_sizes"),
    (lambda: mq.INT8QTensor.quantize(np.zeros((2, 4), np.float32), axis=2), ValueError, "axis=2"),
    (lambda: mq.INT8QTensor.quantize(np.zeros((2, 4), np.float32), scales=np.ones(3, np.float32)), ValueError,
     "does not broadcast"),
    (lambda: mq.INT8QTensor.quantize(np.zeros(4, np.float32), scales=np.ones(3, np.float32), block_sizes={0: 2}),
     ValueError, "need"),
    (lambda: mq.INT4QTensor.quantize(np.zeros((2, 3), np.float32), 2), ValueError, "even last dimension"),
    (lambda: mq.INT4QTensor.quantize(np.zeros((3, 10), np.float32), 16), ValueError, "do not reshape"),
    (lambda: mq.MXFP4QTensor.quantize(np.zeros((1, 20), np.float32), 32), ValueError, "multiple of block_size"),
    (lambda: mq.NF4QTensor.double_quantization(np.ones(6, np.float32), 4, 8), ValueError, "groups of"),
    (lambda: mq.NF4QTensor.double_quantization(np.ones(4, np.float32), 4, 9), ValueError, "num_scale_bits"),
    (lambda: mq.INT8QTensor.quantize(np.ones(2, np.float32))[0].dequantize(), TypeError, "needs scale="),
    (lambda: mq.INT8QTensor.quantize(np.ones(2, np.float32))[0].dequantize("int8", scale=1.0), ValueError,
     "dtype='int8'"),
])
def test_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_nf4_dequantize_takes_one_scale_group_as_modelopt_does():
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    qt, s = mq.NF4QTensor.quantize(x, 16, 4)
    q, d, m = mq.NF4QTensor.double_quantization(s, 4, 8)
    y = qt.dequantize(scale=q, double_scale=d, scale_zeros=m, block_sizes={-1: 16})
    assert y.shape == (64,) and float(np.abs(y - x).max()) < 0.15  # half the widest NF4 step (0.72 to 1.0)
    q2, d2, m2 = mq.NF4QTensor.double_quantization(s, 2, 8)
    with pytest.raises(ValueError, match="one scale group"):
        qt.dequantize(scale=q2, double_scale=d2, scale_zeros=m2, block_sizes={-1: 16})
