"""``nbquant convert SRC DST --scheme BF16`` of quantized checkpoints against their own decoders (parity tier).

* compressed-tensors: every format nbquant writes (and a per-tensor FP8 checkpoint), the BF16
  output byte for byte against compressed-tensors 0.19's ``decompress`` of each module, with the
  scheme parsed from the source's own ``quantization_config``; and, for W4A16 (MoE too),
  against the weights transformers loads with ``run_compressed=False``.
* modelopt exports: NVFP4 and FP8 against ``NVFP4QTensor.dequantize`` / ``FP8QTensor.dequantize``.
* gpt-oss (``quant_method: "mxfp4"``): each expert tensor against transformers'
  ``convert_moe_packed_tensors`` (every scale 0-255, every code), and the BF16 output loaded by
  transformers 5 as a plain ``GptOssForCausalLM``: the logits of the mxfp4 source loaded with
  ``Mxfp4Config(dequantize=True)``.
* DeepSeek-V3 style FP8 blocks (``weight_scale_inv``, ragged edge blocks): against a torch
  reimplementation of DeepSeek's ``weight_dequant`` (each code times its block's scale in float32,
  stored as bfloat16).
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
from test_convert_sources import (
    BF16,
    _fp8_codes,
    _write,
    _write_shard,
    deepseek,
    gptoss,
    modelopt_nvfp4,
    per_tensor_fp8,
    tensors_of,
)

from nbquant.convert import convert, write_synthetic_checkpoint

pytestmark = pytest.mark.parity
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch = pytest.importorskip("torch")
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig

SCHEMES = ["W4A16", "W4A16_ASYM", "W8A16", "W2A16", "W8A8", "W4A8", "W3A8", "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16",
           "MXFP4A16", "MXFP8A16"]


def _torch(a: np.ndarray):
    a = np.ascontiguousarray(a)
    if a.dtype.itemsize == 2 and a.dtype.kind == "V" or a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    if a.dtype.name == "float8_e4m3fn":
        return torch.from_numpy(a.view(np.uint8).copy()).view(torch.float8_e4m3fn)
    return torch.from_numpy(a.copy())


def _bits(t) -> bytes:
    return t.contiguous().view(torch.int16).numpy().tobytes()


def _decompressed(src) -> dict[str, object]:
    """Each quantized module's ``weight`` as compressed-tensors decompresses it, by the source's own config."""
    qc = json.loads(open(os.path.join(src, "config.json")).read())["quantization_config"]
    config = QuantizationConfig.model_validate({k: v for k, v in qc.items() if k != "version"})
    (_, group), = config.config_groups.items()
    compressor = BaseCompressor.get_value_from_registry(group.format or config.format)
    tensors = tensors_of(src)
    modules = {n.rpartition(".")[0] for n in tensors if n.endswith((".weight_packed", ".weight_scale"))}
    out = {}
    for m in modules:
        mine = {k[len(m) + 1:]: _torch(v) for k, v in tensors.items() if k.startswith(m + ".")}
        mine.pop("input_scale", None)
        out[m + ".weight"] = compressor.decompress(mine, group)["weight"]
    return out


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> str:
    d = str(tmp_path_factory.mktemp("plain") / "src")
    write_synthetic_checkpoint(d, hidden=256, intermediate=384, layers=1, vocab=64, shard_bytes=300_000)
    return d


@pytest.mark.parametrize("scheme", SCHEMES)
def test_bf16_equals_compressed_tensors_decompress(plain, tmp_path, scheme):
    convert(plain, tmp_path / "q", scheme, progress=False)
    r = convert(tmp_path / "q", tmp_path / "bf16", "BF16", progress=False)
    theirs, ours = _decompressed(tmp_path / "q"), tensors_of(tmp_path / "bf16")
    assert sorted(theirs) == sorted(t.name for t in r.quantized)
    for name, t in theirs.items():
        assert t.dtype == torch.bfloat16, name
        assert _bits(t) == ours[name].view(np.int16).tobytes(), name


def test_per_tensor_fp8_equals_compressed_tensors_decompress(tmp_path):
    src, _ = per_tensor_fp8(tmp_path / "pt")
    convert(src, tmp_path / "bf16", "BF16", progress=False)
    theirs, ours = _decompressed(src), tensors_of(tmp_path / "bf16")
    for name, t in theirs.items():
        assert _bits(t.to(torch.bfloat16)) == ours[name].view(np.int16).tobytes(), name


def torch_weight_dequant(x, s, block_size: int = 128):
    """DeepSeek-V3's ``weight_dequant`` (inference/kernel.py) without triton: per block, ``x.float() * s`` stored
    into a bfloat16 tensor."""
    m, n = x.shape
    y = torch.empty((m, n), dtype=torch.bfloat16)
    for i in range(0, m, block_size):
        for j in range(0, n, block_size):
            y[i:i + block_size, j:j + block_size] = \
                x[i:i + block_size, j:j + block_size].to(torch.float32) * s[i // block_size, j // block_size]
    return y


def test_deepseek_fp8_blocks_equal_weight_dequant(tmp_path):
    src, t = deepseek(tmp_path / "ds", shapes=((200, 300), (256, 128), (129, 385)))
    convert(src, tmp_path / "bf16", "BF16", progress=False)
    ours = tensors_of(tmp_path / "bf16")
    for name in [n for n in t if n.endswith(".weight_scale_inv")]:
        w = name.replace("_scale_inv", "")
        theirs = torch_weight_dequant(_torch(t[w]), _torch(t[name]))
        assert _bits(theirs) == ours[w].view(np.int16).tobytes(), w


@pytest.mark.parametrize("moe", [None, "qwen3_moe"])
def test_bf16_equals_transformers_run_compressed_false(tmp_path, moe):
    from transformers import AutoModelForCausalLM
    from transformers.utils.quantization_config import CompressedTensorsConfig

    write_synthetic_checkpoint(tmp_path / "src", hidden=128, intermediate=256, layers=1, vocab=64, moe=moe, experts=2)
    convert(tmp_path / "src", tmp_path / "q", "W4A16", progress=False)
    r = convert(tmp_path / "q", tmp_path / "bf16", "BF16", progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(tmp_path / "q", dtype=torch.bfloat16,
                                                     quantization_config=CompressedTensorsConfig(run_compressed=False))
    theirs = {k: v for k, v in model.state_dict().items()}
    ours = tensors_of(tmp_path / "bf16")
    checked = 0
    for t in r.quantized:
        if t.name in theirs:
            assert _bits(theirs[t.name]) == ours[t.name].view(np.int16).tobytes(), t.name
            checked += 1
    assert checked == len([n for n in ours if n in theirs and "experts" not in n and n.endswith("proj.weight")]) > 0


def test_modelopt_nvfp4_equals_nvfp4qtensor_dequantize(tmp_path):
    from modelopt.torch.quantization.qtensor import NVFP4QTensor

    src, t = modelopt_nvfp4(tmp_path / "mo", shape=(96, 160))
    convert(src, tmp_path / "bf16", "BF16", progress=False)
    m = "model.layers.0.mlp.up_proj"
    q = NVFP4QTensor(torch.Size([96, 160]), torch.bfloat16, _torch(t[m + ".weight"]))
    theirs = q.dequantize(dtype=torch.bfloat16, scale=_torch(t[m + ".weight_scale"]),
                          double_scale=_torch(t[m + ".weight_scale_2"]), block_sizes={-1: 16})
    assert _bits(theirs) == tensors_of(tmp_path / "bf16")[m + ".weight"].view(np.int16).tobytes()


def test_modelopt_fp8_equals_fp8qtensor_dequantize(tmp_path):
    from modelopt.torch.quantization.qtensor import FP8QTensor

    rng = np.random.default_rng(2)
    m = "model.layers.0.mlp.up_proj"
    t = {m + ".weight": _fp8_codes(rng, (64, 128)), m + ".weight_scale": np.array(0.0123456, np.float32).reshape(())}
    src = _write(tmp_path / "fp8", t, {"quant_method": "modelopt", "quant_algo": "FP8"})
    convert(src, tmp_path / "bf16", "BF16", progress=False)
    q = FP8QTensor(torch.Size([64, 128]), torch.bfloat16, _torch(t[m + ".weight"]))
    theirs = q.dequantize(dtype=torch.bfloat16, scale=_torch(t[m + ".weight_scale"]))
    assert _bits(theirs) == tensors_of(tmp_path / "bf16")[m + ".weight"].view(np.int16).tobytes()


@pytest.mark.parametrize("scheme", ["W4A16", "FP8_BLOCK"])
def test_float16_source_f16_equals_compressed_tensors_decompress(tmp_path, scheme):
    write_synthetic_checkpoint(tmp_path / "src", hidden=256, intermediate=384, layers=1, vocab=64, dtype="float16")
    convert(tmp_path / "src", tmp_path / "q", scheme, progress=False)
    convert(tmp_path / "q", tmp_path / "f16", "F16", progress=False)
    theirs, ours = _decompressed(tmp_path / "q"), tensors_of(tmp_path / "f16")
    for name, t in theirs.items():
        assert t.dtype == torch.float16, name
        assert t.contiguous().view(torch.int16).numpy().tobytes() == ours[name].view(np.int16).tobytes(), name


GPTOSS_TORCH = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


@pytest.mark.parametrize("target", ["BF16", "F16", "F32"])
def test_gptoss_equals_convert_moe_packed_tensors(tmp_path, target):
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    src, t = gptoss(tmp_path / "src", experts=3, hidden=64, inter=96)
    rng = np.random.default_rng(7)
    for n in t:
        if n.endswith("_scales"):  # every scale, 0 and 255 included; the blocks hold every code
            t[n][...] = rng.permutation(np.resize(np.arange(256, dtype=np.uint8), t[n].size)).reshape(t[n].shape)
    _write_shard(src, t)
    convert(src, tmp_path / "out", target, progress=False)
    out = tensors_of(tmp_path / "out")
    dtype = getattr(torch, GPTOSS_TORCH[target])
    for proj in ("gate_up_proj", "down_proj"):
        n = f"model.layers.0.mlp.experts.{proj}"
        theirs = convert_moe_packed_tensors(torch.from_numpy(t[n + "_blocks"]), torch.from_numpy(t[n + "_scales"]),
                                            dtype=dtype)
        assert tuple(theirs.shape) == out[n].shape
        assert theirs.contiguous().view(torch.uint8).numpy().tobytes() == np.ascontiguousarray(out[n]).tobytes(), n


def test_gptoss_bf16_loads_as_plain_gpt_oss_with_the_dequantized_logits(tmp_path):
    from transformers import GptOssConfig, GptOssForCausalLM, Mxfp4Config

    cfg = GptOssConfig(vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_local_experts=4,
                       num_experts_per_tok=2, sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                       max_position_embeddings=4096)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = GptOssForCausalLM(cfg).to(torch.bfloat16)
    plain = {k: v.contiguous().view(torch.int16).numpy().view(BF16) for k, v in model.state_dict().items()
             if ".experts." not in k}
    config = {k: v for k, v in cfg.to_dict().items() if k != "quantization_config"}
    src, _ = gptoss(tmp_path / "src", plain=plain, config=dict(config, torch_dtype="bfloat16"), layers=2)
    convert(src, tmp_path / "bf16", "BF16", progress=False)
    ids = torch.tensor([[1, 5, 9, 100, 3, 7, 64, 2, 11, 90, 4, 33]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, info = GptOssForCausalLM.from_pretrained(tmp_path / "bf16", dtype=torch.bfloat16,
                                                       output_loading_info=True)
        theirs = GptOssForCausalLM.from_pretrained(src, dtype=torch.bfloat16,
                                                   quantization_config=Mxfp4Config(dequantize=True))
    assert not any(info.values()), info  # no missing, unexpected or mismatched keys
    assert "quantization_config" not in json.loads((tmp_path / "bf16" / "config.json").read_text())
    for name, p in theirs.state_dict().items():
        assert _bits(p) == _bits(ours.state_dict()[name]), name
    with torch.no_grad():
        assert torch.equal(ours(ids).logits, theirs(ids).logits)
