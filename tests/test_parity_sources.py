"""``nbquant convert SRC DST --scheme BF16`` of quantized checkpoints against their own decoders (parity tier).

* compressed-tensors: every format nbquant writes (and a per-tensor FP8 checkpoint), the BF16
  output byte for byte against compressed-tensors 0.19's ``decompress`` of each module, with the
  scheme parsed from the source's own ``quantization_config``; and, for W4A16 (MoE too),
  against the weights transformers loads with ``run_compressed=False``.
* modelopt exports: NVFP4 and FP8 against ``NVFP4QTensor.dequantize`` / ``FP8QTensor.dequantize``.
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
from test_convert_sources import _fp8_codes, _write, deepseek, modelopt_nvfp4, per_tensor_fp8, tensors_of

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
