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
    np.testing.assert_array_equal(TensorQuantizer(cfg)(X),
                                  nbquant.modelopt.dynamic_block_quant(X, cfg["block_sizes"], 4, False, False))


def test_static_tiles_are_nbquants_tiles_of_the_zero_padded_input():
    x = np.random.default_rng(4).standard_normal((5, 7)).astype(np.float32)
    tq = TensorQuantizer({"num_bits": 4, "block_sizes": {-2: 2, -1: 4}})
    xp = np.pad(x, [(0, 1), (0, 1)])  # modelopt's zero padding to whole 2 x 4 tiles
    want = nbquant.modelopt.fake_tensor_quant(xp, None, 4, False, False, block_size=(2, 4))[:5, :7]
    np.testing.assert_array_equal(tq(x), want)
    assert tq.axis == (0, 2)  # modelopt's kept dims of its view (3, 2, 2, 4)
    with pytest.raises(ValueError, match="Input shape has changed from"):
        tq(x[:4])


def test_static_tiles_calibrate_in_modelopts_amax_shape():
    x = np.arange(30, dtype=np.float32).reshape(5, 6) - 14
    tq = TensorQuantizer({"num_bits": 8, "block_sizes": {0: 4, 1: 4}})
    tq.enable_calib()
    tq(x)
    tq.load_calib_amax()
    tiles = np.abs(np.pad(x, [(0, 3), (0, 2)])).reshape(2, 4, 2, 4).max(axis=(1, 3), keepdims=True)
    np.testing.assert_array_equal(tq.amax, tiles)
    tq.disable_calib()
    padded = np.pad(x, [(0, 3), (0, 2)])
    expected = nbquant.modelopt.fake_tensor_quant(padded, tiles.reshape(2, 2), 8, False, False, block_size=(4, 4))
    np.testing.assert_array_equal(tq(x), expected[:5, :6])
    tq.reset_amax()
    tq.amax = 3.0  # one amax broadcasts to every tile, as in modelopt
    np.testing.assert_array_equal(tq(x), fake_tensor_quant(x, np.float32(3.0), 8, False, False))
    tq.reset_amax()
    tq.amax = np.ones(3, np.float32)
    with pytest.raises(ValueError, match=r"needs an amax of shape \(2, 1, 2, 1\)"):
        tq(x)


def test_dynamic_block_quant_tiles_are_the_static_tiles_without_amax():
    x = np.random.default_rng(5).standard_normal((3, 5, 7)).astype(np.float32)
    block_sizes = {0: 2, -1: 3}  # padded to (4, 5, 9)
    dynamic = {**block_sizes, "type": "dynamic"}
    np.testing.assert_array_equal(nbquant.modelopt.dynamic_block_quant(x, dynamic, 4, False, True),
                                  TensorQuantizer({"num_bits": 4, "block_sizes": block_sizes, "narrow_range": True})(x))


def test_block_sizes_all_none_are_per_channel():
    tq = TensorQuantizer({"num_bits": 4, "block_sizes": {-1: None}})
    np.testing.assert_array_equal(tq(X), TensorQuantizer({"num_bits": 4, "axis": 0})(X))
    assert tq.axis == (0,) and tq.block_sizes is None


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
    ({"block_sizes": {-3: 4}}, ValueError, "key -3 is out of range"),
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
