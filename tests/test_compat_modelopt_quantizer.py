"""nbquant.compat.modelopt_quantizer.TensorQuantizer without torch: the state machine and refused arguments.

Bit-for-bit parity with modelopt's TensorQuantizer is in tests/test_parity_modelopt_quantizer.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import nbquant
from nbquant.compat import modelopt_qtensor as mq
from nbquant.compat.modelopt import QuantDescriptor, fake_tensor_quant
from nbquant.compat.modelopt_quantizer import TensorQuantizer

X = np.array([[0.3, -1.0, 2.5, 0.01], [1.0, -0.2, 0.7, 3.0]], np.float32)


def test_dynamic_amax_per_kept_axis_is_fake_tensor_quant():
    np.testing.assert_array_equal(TensorQuantizer({"num_bits": 4, "axis": 0})(X),
                                  fake_tensor_quant(X, np.abs(X).max(axis=1, keepdims=True), 4, False, False))


def test_a_descriptor_builds_the_quantizer_with_its_amax():
    tq = TensorQuantizer(QuantDescriptor(num_bits=8, amax=2.0))
    assert tq.amax.tolist() == 2.0 and tq.maxbound == 127
    np.testing.assert_array_equal(tq(X), fake_tensor_quant(X, np.float32(2.0), 8, False, False))


def test_calibrate_load_amax_then_quantize():
    tq = TensorQuantizer({"num_bits": 8, "axis": 0})
    tq.enable_calib()
    tq.disable_quant()
    assert tq(X) is not None and tq.amax is None
    tq(2 * X)
    tq.load_calib_amax()
    assert tq.amax.ravel().tolist() == [5.0, 6.0]
    tq.disable_calib()
    tq.enable_quant()
    np.testing.assert_array_equal(tq(X), fake_tensor_quant(X, tq.amax, 8, False, False))
    tq.reset_amax()
    assert tq.amax is None
    with pytest.raises(RuntimeError, match="seen no tensor"):
        tq.load_calib_amax()


def test_dynamic_integer_blocks_are_nbquants_dynamic_block_quant():
    cfg = {"num_bits": 4, "block_sizes": {-1: 2, "type": "dynamic"}}
    np.testing.assert_array_equal(TensorQuantizer(cfg)(X), nbquant.dynamic_block_quant(X, cfg["block_sizes"], 4,
                                                                                      False, False))


def test_real_quantization_keeps_the_scales_and_dequantizes():
    tq = TensorQuantizer({"num_bits": 4, "block_sizes": {-1: 4}, "fake_quant": False})
    qt = tq(X)
    assert isinstance(qt, mq.INT4QTensor) and set(tq._buffers) == {"scale"}
    np.testing.assert_array_equal(tq(qt), qt.dequantize(scale=tq._buffers["scale"], block_sizes={-1: 4}))
    with pytest.raises(ValueError, match="holds no scales"):
        TensorQuantizer({"fake_quant": False})(qt)


def test_disable_enable_and_empty():
    tq = TensorQuantizer({"num_bits": 4, "enable": False})
    assert not tq.is_enabled and tq(X) is X
    tq.enable()
    assert tq.is_enabled and not np.array_equal(tq(X), X)
    assert tq(np.zeros((0, 3), np.float32)).shape == (0, 3)


@pytest.mark.parametrize(("cfg", "error", "match"), [
    ("int8", TypeError, "quant_attribute_cfg='int8'"),
    ({"rotate": True}, ValueError, r"\['rotate'\] are not supported"),
    ({"type": "weird"}, ValueError, "type='weird'"),
    ({"calibrator": "mse"}, ValueError, "calibrator='mse'"),
    ({"num_bits": 0}, ValueError, "num_bits must be > 0"),
    ({"num_bits": (5, 2)}, TypeError, "num_bits=\\(5, 2\\)"),
    ({"block_sizes": {-1: 4, 0: 2}}, NotImplementedError, "last dim only"),
])
def test_bad_configs_are_named(cfg, error, match):
    with pytest.raises(error, match=match):
        TensorQuantizer(cfg)(X)


def test_amax_shape_cannot_change():
    tq = TensorQuantizer(amax=[1.0, 2.0])
    with pytest.raises(ValueError, match="changing the shape"):
        tq.amax = 1.0
    with pytest.raises(ValueError, match="cannot be set to None"):
        tq.amax = None
