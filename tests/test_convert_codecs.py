"""``nbquant.convert.codecs``: the registry, one source for the planned and the written tensors, NVFP4's fused step.

The bytes each codec writes are checked against llm-compressor by the parity tier (test_parity_convert.py) and
against a NumPy decoder by test_convert.py; here the structure that keeps them one source.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from nbquant.convert import ConvertError, dequantize_weight, get_scheme, quantize_weight
from nbquant.convert.codecs import Codec, Context, WeightError, codec_for, global_scale
from nbquant.convert.schemes import SCHEMES

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_every_scheme_has_the_codec_of_its_format():
    assert Codec.registered() == sorted({s.format for s in SCHEMES.values()})
    for scheme in SCHEMES.values():
        codec = codec_for(scheme)
        assert codec.format == scheme.format and codec.scheme is scheme


def test_an_unknown_format_names_the_known_ones():
    with pytest.raises(ConvertError, match="format 'marlin-24' has no codec; known formats: float-quantized, "):
        Codec.get("marlin-24")


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16), np.dtype(np.float32)], ids=str)
@pytest.mark.parametrize("name", list(SCHEMES))
def test_the_tensors_written_are_the_entries_planned(name, dtype):
    codec = codec_for(get_scheme(name))
    x = np.random.default_rng(1).standard_normal((5, 256)).astype(dtype)
    out = codec.quantize(x, Context("m.weight"))
    assert [(k, v.dtype, v.shape) for k, v in out.items()] == [
        (k, v.dtype, v.shape) for k, v in quantize_weight(x, codec).items()]  # the door checks them against entries
    y = dequantize_weight(out, codec, dtype, slice(1, None, 2))
    assert y.dtype == dtype and y.shape == (2, 256)


def test_a_codec_whose_entries_drift_from_its_tensors_is_an_error():
    class Family(Codec):
        _registry: dict = {}

    @Family.register("drifting")
    class Drifting(Family):
        def entries(self, shape, dtype):
            return [("weight", "I8", tuple(shape))]

        def quantize(self, x, ctx):
            return {"weight": np.zeros(x.shape, np.int16)}

    assert Family.get("drifting") is Drifting and "drifting" not in Codec.registered()  # a family of its own
    with pytest.raises(ValueError, match="format 'drifting' has a codec already: Drifting"):
        Family.register("drifting")(Drifting)
    with pytest.raises(RuntimeError, match=r"Drifting made \[\('weight', 'I16', \(2, 16\)\)\] for w, its entries say"):
        quantize_weight(np.ones((2, 16), np.float32), Drifting(get_scheme("W8A8")), "w")


def test_nvfp4_prepares_one_global_scale_per_fused_set():
    codec = codec_for(get_scheme("NVFP4A16"))
    assert codec.fused and not codec_for(get_scheme("W4A16")).fused
    rng = np.random.default_rng(2)
    q, k = ((rng.standard_normal((4, 32)) * s).astype(BF16) for s in (1.0, 5.0))
    prepared = codec.prepare({"q.weight": q, "k.weight": k})
    gs = global_scale(float(np.abs(k.astype(np.float32)).max()), BF16)
    assert prepared["q.weight"][0] == prepared["k.weight"][0] == gs
    shared = codec.quantize(q, Context("q.weight", prepared=prepared["q.weight"]))
    alone = codec.quantize(q, Context("q.weight"))
    assert shared["weight_global_scale"][0] == gs != alone["weight_global_scale"][0]


def test_a_bad_member_of_a_fused_set_is_named():
    bad = np.ones((2, 16), BF16)
    bad[1, 3] = np.inf
    with pytest.raises(WeightError, match="tensor v.weight holds NaN or inf") as e:
        codec_for(get_scheme("NVFP4A16")).prepare({"q.weight": np.ones((2, 16), BF16), "v.weight": bad})
    assert e.value.tensor == "v.weight" and isinstance(e.value, ConvertError)


def test_int_quantized_is_written_symmetric_only():
    from dataclasses import replace

    with pytest.raises(ConvertError, match="scheme W8A8: int-quantized weights are written symmetric only"):
        codec_for(replace(get_scheme("W8A8"), symmetric=False))
