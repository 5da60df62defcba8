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

import nbquant
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


@st.composite
def _tiled(draw):
    """An input of 2 or 3 dims (1 to 10 each) and static ``block_sizes`` over at least two of them.

    The blocks (1 to 8) rarely divide their dims, so modelopt pads; keys are drawn as positive or
    negative dims, and an unblocked dim may be named with None (modelopt keeps it). One tile is
    all zero, and -0.0 is planted.
    """
    ndim = draw(st.integers(2, 3))
    shape = tuple(draw(st.integers(1, 10)) for _ in range(ndim))
    dims = draw(st.lists(st.integers(0, ndim - 1), min_size=2, max_size=ndim, unique=True))
    key = {d: d - ndim * draw(st.booleans()) for d in range(ndim)}
    block_sizes = {key[d]: draw(st.integers(1, 8)) for d in dims}
    if len(dims) < ndim and draw(st.booleans()):
        block_sizes[key[min(set(range(ndim)) - set(dims))]] = None
    dtype = draw(st.sampled_from([np.float32, np.float16, ml_dtypes.bfloat16]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = (rng.standard_normal(shape) * 10.0 ** draw(st.integers(-3, 3))).astype(np.float32)
    x[tuple(slice(0, 1) for _ in shape)] = 0.0
    x.flat[rng.integers(x.size)] = -0.0
    return x.astype(dtype), block_sizes


_TILE_BITS = st.sampled_from([{"num_bits": 8}, {"num_bits": 4}, {"num_bits": 6, "narrow_range": True},
                              {"num_bits": 8, "unsigned": True}, {"num_bits": (4, 3)}])


@settings(max_examples=examples(300), deadline=None)
@given(problem=_tiled(), bits=_TILE_BITS, batches=st.integers(0, 2))
def test_static_tiles_match_modelopt(problem, bits, batches):
    """Static blocks along several dims, padded: the dynamic-amax output, then (``batches`` > 0) the calibrated
    amax (modelopt's shape over its view) and the output with it; ``axis`` becomes modelopt's kept dims."""
    x, block_sizes = problem
    if bits.get("unsigned"):
        x = np.abs(x)
    theirs, ours = _pair({**bits, "block_sizes": block_sizes})
    _same(_run(ours, x), _run(theirs, _t(x)))
    assert ours.axis == theirs.axis
    if not batches:
        return
    for q in (theirs, ours):
        q.enable_calib()
    for scale in range(1, batches + 1):
        xs = (x.astype(np.float32) * scale).astype(x.dtype)
        _same(_run(ours, xs), _run(theirs, _t(xs)))
    for q in (theirs, ours):
        q.load_calib_amax()
        q.disable_calib()
    assert ours.amax.shape == tuple(theirs.amax.shape)
    _same(ours.amax, theirs.amax.float())
    _same(_run(ours, x), _run(theirs, _t(x)))


@settings(max_examples=examples(200), deadline=None)
@given(problem=_tiled(), num_bits=st.sampled_from([8, (4, 3)]))
def test_static_tiles_real_quantization_matches_modelopt(problem, num_bits):
    """INT8 and FP8 real quantization with blocks along several dims (the padded codes, scales per tile, the
    dequantized output); modelopt's qtensors take int keys with sizes only, so the None entry is left out."""
    x, block_sizes = problem
    block_sizes = {k: v for k, v in block_sizes.items() if v is not None}
    theirs, ours = _pair({"num_bits": num_bits, "block_sizes": block_sizes, "fake_quant": False})
    a, b = _run(theirs, _t(x)), _run(ours, x)
    _same(b.quantized_data, a._quantized_data)
    _same(ours._buffers["scale"], theirs._scale)
    _same(_run(ours, b), _run(theirs, a))


@settings(max_examples=examples(200), deadline=None)
@given(problem=_tiled(), bits=_TILE_BITS)
def test_dynamic_block_quant_tiles_match_modelopts_static_tiles(problem, bits):
    """``nbquant.modelopt.dynamic_block_quant`` over tiles (padded) against modelopt's static blocks with no amax,
    the amax then computed per tile on the fly (modelopt 0.47's dynamic type runs MX/NVFP4 on CUDA only and
    takes one blocked dim); None entries are left out (nbquant reads None as the whole dim there)."""
    x, block_sizes = problem
    block_sizes = {k: v for k, v in block_sizes.items() if v is not None}
    if bits.get("unsigned"):
        x = np.abs(x)
    theirs, _ = _pair({**bits, "block_sizes": block_sizes})
    mine = nbquant.modelopt.dynamic_block_quant(x, {**block_sizes, "type": "dynamic"}, bits["num_bits"],
                                       bits.get("unsigned", False), bits.get("narrow_range", False))
    _same(mine, _run(theirs, _t(x)))


def test_disabled_and_empty_inputs_pass_through():
    x = np.array([[0.3, -1.0]], ml_dtypes.bfloat16)
    theirs, ours = _pair({"num_bits": 4, "enable": False})
    _same(_run(ours, x), _run(theirs, _t(x)))
    assert _n(_run(theirs, _t(np.zeros((0, 2), np.float32)))).shape == _run(ours, np.zeros((0, 2), np.float32)).shape
