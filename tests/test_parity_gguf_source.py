"""GGUF source parity: ``nbquant convert model.gguf OUT --scheme BF16`` (F16, F32) writes what transformers loads.

The peer is transformers' own GGUF loader, ``from_pretrained(folder, gguf_file=..., dtype=...)`` (its
legacy path for llama and qwen2: gguf-py's ``dequantize``, the Q/K un-permutation, the cast). Its
``save_pretrained`` refuses a model loaded from a GGUF file (transformers 5.17: "not serializable"),
so its ``state_dict`` is the reference: nbquant's output holds every tensor of it byte for byte (the
tied ``lm_head`` is the embedding, left out as ``save_pretrained`` leaves it out), its config gives
transformers the same model, and transformers loads it and gives the same logits.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from _gguf_source import MIXED, gemma_tensors, phi3_tensors, write_llama_gguf

from nbquant.convert import convert
from nbquant.gguf.file import Field

pytestmark = pytest.mark.parity

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
#: The test files hold no tokenizer (tests/test_parity_gguf_tokenizer.py converts one that does).
NO_TOKENIZER = ("tokenizer not written: the file holds none (no tokenizer.ggml.model); copy tokenizer.json and "
                "tokenizer_config.json from the original model")
#: The config fields that decide the model.
_FIELDS = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_parameters",
           "tie_word_embeddings", "bos_token_id", "eos_token_id", "attention_bias", "hidden_act", "sliding_window")


def _load_output(folder) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    index = json.loads((folder / "model.safetensors.index.json").read_text())
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        out.update(load_file(folder / shard))
    return out


@pytest.mark.parametrize("scheme", ["BF16", "F16", "F32"])
@pytest.mark.parametrize(("arch", "tied"), [("llama", False), ("llama", True), ("qwen2", False), ("qwen3", True),
                                           ("phi3", False), ("gemma2", True), ("gemma3", True)])
def test_gguf_source_equals_transformers(tmp_path, scheme, arch, tied):
    heads = 2 if arch == "qwen3" else 8  # qwen3: transformers' head size, 128 (the file states none)
    kv_heads = 1 if arch == "qwen3" else 2
    types = dict(MIXED, **{"attn_qkv.weight": "Q5_K"})
    tensors = phi3_tensors(256, 512, 2, 64, heads, kv_heads) if arch == "phi3" else \
        gemma_tensors(256, 512, 2, 64, heads, kv_heads, 48, arch == "gemma3") if arch.startswith("gemma") else None
    # Phi3Config's default pad_token_id (32000) is past this vocabulary: the file states its own, as real ones do;
    # Gemma's files state their head size (here not hidden / heads) and sliding window
    extra = [Field.u32("tokenizer.ggml.padding_token_id", 0)] if arch in ("phi3", "gemma2", "gemma3") else None
    if arch.startswith("gemma"):
        extra += [Field.u32(f"{arch}.attention.key_length", 48), Field.u32(f"{arch}.attention.value_length", 48),
                  Field.u32(f"{arch}.attention.sliding_window", 16)]
    src = write_llama_gguf(str(tmp_path / "m.gguf"), types=types, arch=arch, tied=tied, biases=arch == "qwen2",
                           qk_norms=arch == "qwen3", heads=heads, kv_heads=kv_heads, seed=len(arch) + tied,
                           tensors=tensors, extra=extra)
    out = tmp_path / "out"
    report = convert(src, out, scheme, progress=False)
    no_tokenizer = NO_TOKENIZER if not arch.startswith("gemma") else (
        f"tokenizer not written: {arch}'s tokenizer is not one nbquant writes; copy tokenizer.json and "
        "tokenizer_config.json from the original model")
    assert report.notes == [no_tokenizer] and {t.encoding for t in report.quantized} == {"decoded"}
    dtype = getattr(torch, _DTYPES[scheme])
    peer = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf", dtype=dtype)
    expected = {k: v.contiguous() for k, v in peer.state_dict().items()}
    if tied:
        assert expected["lm_head.weight"].data_ptr() == expected["model.embed_tokens.weight"].data_ptr()
        del expected["lm_head.weight"]
    mine = _load_output(out)
    assert sorted(mine) == sorted(expected)
    for name, t in expected.items():
        assert t.dtype == dtype, name
        want = t.view(torch.int16 if t.element_size() == 2 else torch.int32).numpy()
        assert mine[name].shape == tuple(t.shape), name
        assert mine[name].tobytes() == want.tobytes(), name
    ours = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=dtype)
    for field in _FIELDS:
        assert getattr(ours.config, field, None) == getattr(peer.config, field, None), field
    ids = torch.tensor([[1, 5, 9, 33, 2, 60, 17]])
    with torch.no_grad():
        assert torch.equal(ours(ids).logits, peer(ids).logits)


def test_gguf_source_requantized_equals_bf16_then_quantized(tmp_path):
    """W4A16 from the GGUF file is, byte for byte, W4A16 from the BF16 checkpoint converted from it."""
    src = write_llama_gguf(str(tmp_path / "m.gguf"), types=MIXED)
    convert(src, tmp_path / "bf16", "BF16", progress=False)
    convert(src, tmp_path / "direct", "W4A16", progress=False)
    convert(tmp_path / "bf16", tmp_path / "twostep", "W4A16", progress=False)
    a, b = _load_output(tmp_path / "direct"), _load_output(tmp_path / "twostep")
    assert sorted(a) == sorted(b) and all(a[k].tobytes() == b[k].tobytes() for k in a)
    ca, cb = (json.loads((tmp_path / d / "config.json").read_text()) for d in ("direct", "twostep"))
    assert ca == cb
