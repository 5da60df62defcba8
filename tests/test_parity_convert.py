"""``nbquant convert`` against llm-compressor's ``model_free_ptq`` itself (the parity tier: torch CPU, llmcompressor).

Every file of the two output folders is compared byte for byte (shards, index, ``config.json``,
copied files), for every scheme, on bfloat16 and float16 checkpoints whose fused partners sit
in different shards and whose weights hold all-zero groups, ``-0.0`` and tiny values, with
``default_ignore=False`` (``--no-default-ignore``: the same ignore list); with the defaults, on
tied and MoE checkpoints, ``model_free_ptq`` given the ignore list nbquant records writes the
same bytes; and compressed-tensors' own decompression of nbquant's output equals nbquant's
dequantization.
"""

from __future__ import annotations

import json
import os
import warnings

import ml_dtypes
import numpy as np
import pytest

from nbquant.convert import SafetensorsFile, convert, dequantize_weight, get_scheme, write_synthetic_checkpoint
from nbquant.convert.safetensors import ShardWriter
from nbquant.convert.synthetic import llama_tensors

pytestmark = pytest.mark.parity
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch = pytest.importorskip("torch")
    pytest.importorskip("llmcompressor")
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig, preset_name_to_scheme
    from llmcompressor import model_free_ptq

SCHEMES = ["W4A16", "W4A16_ASYM", "W8A16", "W2A16", "W8A8", "INT8", "W4A8", "W3A8", "W4AFP8", "FP8_DYNAMIC",
           "FP8_BLOCK", "NVFP4A16", "MXFP4A16", "MXFP4", "MXFP8A16", "MXFP8"]


def _weight(rng, name: str, shape, dtype) -> np.ndarray:
    if len(shape) == 1:
        return (1 + 0.1 * rng.standard_normal(shape)).astype(dtype)
    rows = np.exp(rng.uniform(-3, 3, (*shape[:-1], 1)))
    w = (rng.standard_t(3, shape) * rows * 0.02).astype(np.float32)
    if name.endswith("up_proj.weight"):
        w[0, :128] = 0  # an all-zero group (eps scales, the asymmetric zero point of 0 / 0)
        w[1, ::7] = -0.0
        w[2, :64] *= 1e-30  # tiny values: subnormal quotients
        w[3, 5] = 1e4 * abs(w[3]).max()  # an outlier far above its group
    return w.astype(dtype)


def _checkpoint(path, dtype, shard_bytes: int = 200_000) -> str:
    """A Llama-shaped checkpoint in many small shards (q/k/v and gate/up partners split across them)."""
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(7)
    tensors = llama_tensors(hidden=256, intermediate=384, layers=2, vocab=160)
    tensors += [("model.layers.1.mlp.experts.gate_up_proj", (2, 256, 256)),  # fused MoE experts, split per expert
                ("model.layers.1.mlp.experts.down_proj", (2, 256, 128)),
                ("model.layers.1.mlp.experts.gate_up_proj_bias", (2, 256))]
    shards, size = [[]], 0
    for name, shape in tensors:
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if shards[-1] and size + n > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += n
    code = {np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(np.float16): "F16"}[np.dtype(dtype)]
    weight_map = {}
    for i, part in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        w = ShardWriter(os.path.join(path, file), [(n, code, s) for n, s in part], {"format": "pt"})
        for name, shape in part:
            w.write(name, _weight(rng, name, shape, dtype))
            weight_map[name] = file
        w.close()
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "torch_dtype": str(np.dtype(dtype))},
                  f)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        f.write('{"bos_token": "<s>"}\n')
    return str(path)


@pytest.fixture(scope="module")
def bf16_checkpoint(tmp_path_factory):
    return _checkpoint(tmp_path_factory.mktemp("bf16"), ml_dtypes.bfloat16)


@pytest.fixture(scope="module")
def f16_checkpoint(tmp_path_factory):
    return _checkpoint(tmp_path_factory.mktemp("f16"), np.float16)


def _files(folder) -> dict[str, bytes]:
    return {f: open(os.path.join(folder, f), "rb").read() for f in sorted(os.listdir(folder))}


def _compare(src, tmp_path, scheme, ignore, default_ignore=False):
    """nbquant's output against model_free_ptq's given ``ignore`` (with the defaults: the list nbquant records)."""
    peer, mine = tmp_path / "peer", tmp_path / "nbquant"
    convert(src, mine, scheme, ignore=ignore, progress=False, default_ignore=default_ignore)
    if default_ignore:
        ignore = json.loads((mine / "config.json").read_text())["quantization_config"]["ignore"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model_free_ptq(src, str(peer), scheme=scheme, ignore=ignore, max_workers=1, device="cpu")
    a, b = _files(peer), _files(mine)
    assert sorted(a) == sorted(b)
    differ = [f for f in a if a[f] != b[f]]
    assert not differ, f"{scheme}: {differ} differ from model_free_ptq's"
    return mine


@pytest.mark.parametrize("scheme", SCHEMES)
def test_bytes_equal_model_free_ptq(bf16_checkpoint, tmp_path, scheme):
    _compare(bf16_checkpoint, tmp_path, scheme, ["lm_head"])


@pytest.mark.parametrize("scheme", ["W4A16", "W4A16_ASYM", "FP8_BLOCK", "NVFP4A16", "MXFP4A16", "MXFP8A16"])
def test_bytes_equal_model_free_ptq_float16(f16_checkpoint, tmp_path, scheme):
    _compare(f16_checkpoint, tmp_path, scheme, [])


def test_bytes_equal_with_regex_ignores(bf16_checkpoint, tmp_path):
    _compare(bf16_checkpoint, tmp_path, "NVFP4A16", ["lm_head", "re:.*k_proj$", "re:model\\.embed"])


@pytest.mark.parametrize(("layout", "scheme"), [("qwen3_moe", "W4A16"), ("mixtral", "NVFP4A16"), (None, "FP8_BLOCK")])
def test_defaults_equal_model_free_ptq_given_the_recorded_ignore(tmp_path, layout, scheme):
    """The default ignore list (tied head, embedding, MoE routers) is an ignore list model_free_ptq takes as it is."""
    src = tmp_path / "src"
    write_synthetic_checkpoint(src, hidden=256, intermediate=384, layers=2, vocab=160, shard_bytes=600_000,
                               moe=layout, experts=3, tie_word_embeddings=layout != "qwen3_moe")
    mine = _compare(str(src), tmp_path, scheme, ["re:.*k_proj$"], default_ignore=True)
    ignore = json.loads((mine / "config.json").read_text())["quantization_config"]["ignore"]
    assert "lm_head" in ignore and "model.embed_tokens" in ignore
    assert any(m.endswith(".gate") for m in ignore) == (layout is not None)


def _torch(a: np.ndarray):
    a = np.ascontiguousarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    if a.dtype == ml_dtypes.float8_e4m3fn:
        return torch.from_numpy(a.view(np.uint8).copy()).view(torch.float8_e4m3fn)
    return torch.from_numpy(a.copy())


@pytest.mark.parametrize("scheme", SCHEMES)
def test_compressed_tensors_decompresses_nbquant_output(bf16_checkpoint, tmp_path, scheme):
    r = convert(bf16_checkpoint, tmp_path / "out", scheme, progress=False)
    config = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]
    qc = QuantizationConfig.model_validate({k: v for k, v in config.items() if k != "version"})
    group = next(iter(qc.config_groups.values()))
    ct_scheme = preset_name_to_scheme(scheme, ["Linear"])
    compressor = BaseCompressor.get_value_from_registry(group.format)
    out = {}
    for f in os.listdir(tmp_path / "out"):
        if f.endswith(".safetensors"):
            sf = SafetensorsFile(str(tmp_path / "out" / f))
            out.update({n: np.asarray(sf.tensor(n)) for n in sf.entries})
    for t in r.quantized:
        module = t.name.rpartition(".")[0]
        mine = {k[len(module) + 1:]: v for k, v in out.items() if k.startswith(module + ".")}
        theirs = compressor.decompress({k: _torch(v) for k, v in mine.items()}, ct_scheme)["weight"]
        ours = dequantize_weight(mine, get_scheme(scheme), ml_dtypes.bfloat16)
        assert theirs.dtype == torch.bfloat16
        assert theirs.view(torch.int16).numpy().tobytes() == ours.view(np.int16).tobytes(), t.name
