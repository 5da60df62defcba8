"""nbquant.compat.modelopt_quantizer.TensorQuantizer against modelopt 0.47's TensorQuantizer (parity tier).

Both quantizers get the same ``QuantizerAttributeConfig`` fields and the same arrays; the
outputs (fake quantization), the real-quantized tensors with the scales each keeps, the
dequantized results and the calibrated amax must be equal bit for bit (NaN payloads aside).
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from _helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_parity_modelopt_qtensor import _arrays, _n, _same, _t

from nbquant.compat.modelopt_quantizer import TensorQuantizer

pytestmark = pytest.mark.parity
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch = pytest.importorskip("torch")
    from modelopt.torch.quantization.config import QuantizerAttributeConfig
    from modelopt.torch.quantization.nn import TensorQuantizer as TheirQuantizer


def _pair(cfg: dict, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = TheirQuantizer(QuantizerAttributeConfig(**cfg), **kw)
    return theirs, TensorQuantizer(dict(cfg), **kw)


def _run(quantizer, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantizer(x)


_FAKE = st.sampled_from([
    {"num_bits": 8}, {"num_bits": 8, "axis": 0}, {"num_bits": 8, "axis": -1, "narrow_range": True},
    {"num_bits": 4, "axis": 0}, {"num_bits": 4, "unsigned": True}, {"num_bits": 6, "axis": (0, 1)},
    {"num_bits": (4, 3)}, {"num_bits": (4, 3), "axis": 0},
    {"num_bits": 8, "block_sizes": {-1: 4}}, {"num_bits": 4, "block_sizes": {-1: 3}},
])  # dynamic blocks ("type": "dynamic") fake-quantize on CUDA only in modelopt 0.47


@settings(max_examples=examples(300), deadline=None)
@given(x=_arrays(specials=False), cfg=_FAKE)
def test_fake_quantization_matches_modelopt(x, cfg):
    if cfg.get("unsigned"):
        x = np.abs(x)
    theirs, ours = _pair(cfg)
    _same(_run(ours, x), _run(theirs, _t(x)))


@settings(max_examples=examples(150), deadline=None)
@given(batches=st.lists(_arrays(rows=(3, 3), units=(4, 4), specials=False), min_size=1, max_size=3),
       cfg=st.sampled_from([{"num_bits": 8}, {"num_bits": 8, "axis": 0}, {"num_bits": 4, "axis": -1},
                            {"num_bits": 8, "block_sizes": {-1: 4}}, {"num_bits": (4, 3)}]))
def test_calibrate_then_quantize_matches_modelopt(batches, cfg):
    batches = [b.astype(batches[0].dtype) for b in batches]
    theirs, ours = _pair(cfg)
    for q in (theirs, ours):
        q.enable_calib()
        q.disable_quant()
    for b in batches:
        _same(_run(ours, b), _run(theirs, _t(b)))  # pass-through while only calibrating
    for q in (theirs, ours):
        q.load_calib_amax()
        q.disable_calib()
        q.enable_quant()
    _same(ours.amax, theirs.amax.float())
    _same(_run(ours, batches[0]), _run(theirs, _t(batches[0])))


_REAL = st.sampled_from([
    ({"num_bits": 8, "fake_quant": False}, 2), ({"num_bits": 8, "axis": 0, "fake_quant": False}, 2),
    ({"num_bits": (4, 3), "fake_quant": False}, 2),
    ({"num_bits": (4, 3), "block_sizes": {-1: 4}, "fake_quant": False}, 4),
    ({"num_bits": 4, "block_sizes": {-1: 8}, "fake_quant": False}, 8),
    ({"num_bits": 4, "block_sizes": {-1: 16, "scale_bits": 8, "scale_block_sizes": {-1: 0}},
      "fake_quant": False}, 16),
    ({"num_bits": (2, 1), "block_sizes": {-1: 16, "type": "dynamic", "scale_bits": (4, 3)},
      "fake_quant": False}, 16),
    ({"num_bits": (2, 1), "block_sizes": {-1: 32, "type": "dynamic", "scale_bits": (8, 0)},
      "fake_quant": False}, 32),
])


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data(), case=_REAL)
def test_real_quantization_matches_modelopt(data, case):
    cfg, unit = case
    x = data.draw(_arrays(unit=unit, units=(1, 2), specials=False))
    if cfg.get("block_sizes", {}).get("scale_block_sizes"):
        cfg = {**cfg, "block_sizes": {**cfg["block_sizes"], "scale_block_sizes": {-1: x.size // 16}}}
    theirs, ours = _pair(cfg)
    a, b = _run(theirs, _t(x)), _run(ours, x)
    _same(b.quantized_data, a._quantized_data)
    _same(ours._buffers["scale"], theirs._scale)
    if "scale_zeros" in ours._buffers and float(ours._buffers["scale_zeros"]) != float(theirs._scale_zeros):
        return  # NF4's mean: torch's float32 summation order (test_parity_modelopt_qtensor bounds the difference)
    _same(_run(ours, b), _run(theirs, a))


def test_disabled_and_empty_inputs_pass_through():
    x = np.array([[0.3, -1.0]], ml_dtypes.bfloat16)
    theirs, ours = _pair({"num_bits": 4, "enable": False})
    _same(_run(ours, x), _run(theirs, _t(x)))
    assert _n(_run(theirs, _t(np.zeros((0, 2), np.float32)))).shape == _run(ours, np.zeros((0, 2), np.float32)).shape
