"""``nbquant convert model.gguf OUT --scheme BF16``: a GGUF file as the source of a Hugging Face checkpoint.

Small synthetic GGUF files (``_gguf_source.write_llama_gguf``, nbquant's writer; no torch). The
parity tier (``test_parity_gguf_source.py``) checks the bytes against transformers' own loader.
"""

from __future__ import annotations

import json
import os
import pickle
import struct

import ml_dtypes
import numpy as np
import pytest
from _gguf_source import gemma_tensors, llama_tensors, phi3_tensors, split_gguf, write_llama_gguf

from nbquant import gguf
from nbquant.cli import main
from nbquant.convert import ConvertError, convert
from nbquant.convert.gguf import write_synthetic_gguf
from nbquant.convert.safetensors import SafetensorsFile
from nbquant.convert.schemes import get_scheme
from nbquant.convert.sources.gguf import _cast, open_gguf
from nbquant.gguf.file import FLOAT32, Field, read_gguf


def _tensors(folder) -> dict[str, np.ndarray]:
    index = json.loads(open(os.path.join(folder, "model.safetensors.index.json")).read())
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        f = SafetensorsFile(os.path.join(folder, shard))
        out.update({n: np.array(f.tensor(n)) for n in f.entries})
    return out


def _decoded(path: str, name: str) -> np.ndarray:
    """Tensor ``name`` of the GGUF file as float32 (nbquant's NumPy reference decoder), in the file's row order."""
    with read_gguf(path) as g:
        info = g.tensors[name]
        raw = np.frombuffer(g.tensor_bytes(name), np.uint8).copy()
    qtype = {0: "F32", 1: "F16", 30: "BF16"}.get(info.type_id)
    rows = raw.reshape(info.shape[0] if len(info.shape) == 2 else 1, -1)
    if qtype == "F32":
        x = rows.view("<f4")
    elif qtype == "F16":
        x = rows.view("<f2").astype(np.float32)
    elif qtype == "BF16":
        x = rows.view(ml_dtypes.bfloat16).astype(np.float32)
    else:
        x = gguf.dequantize(rows, info.type_id, backend="reference")
    return x.reshape(info.shape)


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's Q/K row order back to Hugging Face's: each head's rows (pairs) de-interleaved into two halves."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_bf16_gguf_to_bf16_checkpoint(tmp_path):
    src = write_synthetic_gguf(str(tmp_path / "m.gguf"), hidden=128, intermediate=256, layers=2, vocab=64, heads=8,
                               kv_heads=2)
    r = convert(src, str(tmp_path / "out"), "BF16", progress=False)
    assert sorted(os.listdir(tmp_path / "out")) == ["config.json", "model.safetensors", "model.safetensors.index.json"]
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config == {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "tie_word_embeddings": False,
                      "max_position_embeddings": 2048, "hidden_size": 128, "num_hidden_layers": 2,
                      "intermediate_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
                      "rms_norm_eps": float(np.float32(1e-5)), "vocab_size": 64, "torch_dtype": "bfloat16",
                      "transformers_version": "5.17.0"}
    out = _tensors(tmp_path / "out")
    assert len(out) == len(r.quantized) == 21 and {t.encoding for t in r.quantized} == {"decoded"}
    assert all(v.dtype == ml_dtypes.bfloat16 for v in out.values())
    for gname, hname, heads in [("blk.1.attn_q.weight", "model.layers.1.self_attn.q_proj.weight", 8),
                                ("blk.1.attn_k.weight", "model.layers.1.self_attn.k_proj.weight", 2),
                                ("blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight", None),
                                ("blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight", None),
                                ("token_embd.weight", "model.embed_tokens.weight", None),
                                ("output.weight", "lm_head.weight", None)]:
        want = _decoded(src, gname)
        want = _unpermute(want, heads) if heads else want
        assert np.array_equal(out[hname], want.astype(ml_dtypes.bfloat16)), hname


@pytest.mark.parametrize("scheme", ["F32", "F16"])
def test_quantized_gguf_types_decoded(tmp_path, scheme):
    types = {"attn_q.weight": "Q8_0", "attn_k.weight": "Q4_K", "attn_v.weight": "Q6_K", "ffn_up.weight": "Q4_0",
             "ffn_down.weight": "IQ4_NL", "attn_output.weight": "F16"}
    src = write_llama_gguf(str(tmp_path / "m.gguf"), hidden=256, intermediate=256, layers=1, vocab=32, types=types)
    convert(src, str(tmp_path / "out"), scheme, progress=False)
    out = _tensors(tmp_path / "out")
    dtype = np.float32 if scheme == "F32" else np.float16
    for gname, hname, heads in [("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", 8),
                                ("blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj.weight", 2),
                                ("blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight", None),
                                ("blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight", None),
                                ("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight", None),
                                ("blk.0.attn_output.weight", "model.layers.0.self_attn.o_proj.weight", None)]:
        want = _decoded(src, gname)
        want = _unpermute(want, heads) if heads else want
        assert out[hname].dtype == dtype and np.array_equal(out[hname], want.astype(dtype)), hname


def test_phi3_keeps_its_fused_projections(tmp_path):
    """Phi-3 stores query/key/value and gate/up fused in both formats: the tensors keep their rows as they are
    (no rotary reordering), renamed to ``qkv_proj`` / ``gate_up_proj``; its rope factors are left out with a note."""
    shapes = phi3_tensors(64, 96, 1, 32, 4, 2) + [("rope_factors_long.weight", (8,))]
    src = write_llama_gguf(str(tmp_path / "m.gguf"), hidden=64, intermediate=96, layers=1, vocab=32, heads=4,
                           kv_heads=2, arch="phi3", tensors=shapes, types={"attn_qkv.weight": "Q8_0"})
    r = convert(src, str(tmp_path / "out"), "F32", progress=False)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == ["Phi3ForCausalLM"] and config["model_type"] == "phi3"
    assert "head_dim" not in config and config["intermediate_size"] == 96
    out = _tensors(tmp_path / "out")
    assert out["model.layers.0.self_attn.qkv_proj.weight"].shape == (128, 64)
    assert out["model.layers.0.mlp.gate_up_proj.weight"].shape == (192, 64)
    for gname, hname in [("blk.0.attn_qkv.weight", "model.layers.0.self_attn.qkv_proj.weight"),
                         ("blk.0.ffn_up.weight", "model.layers.0.mlp.gate_up_proj.weight")]:
        assert np.array_equal(out[hname], _decoded(src, gname)), hname
    assert r.notes[0] == ("tensor rope_factors_long.weight left out: Phi-3's long-context rope factors, which "
                          "transformers' model has no place for (it reads no rope scaling from a GGUF file)")


@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
def test_gemma_norms_lose_the_one_llama_cpp_added(tmp_path, arch):
    """llama.cpp stores Gemma's norm weights as ``1 + w``; transformers subtracts the one in float32, then casts.
    Four norms a layer (Gemma 3: and the query/key norms), the head size and sliding window from the metadata."""
    extra = [Field.u32(f"{arch}.attention.key_length", 48), Field.u32(f"{arch}.attention.sliding_window", 16)]
    src = write_llama_gguf(str(tmp_path / "m.gguf"), hidden=64, intermediate=96, layers=1, vocab=32, heads=4,
                           kv_heads=2, arch=arch, extra=extra,
                           tensors=gemma_tensors(64, 96, 1, 32, 4, 2, 48, qk_norms=arch == "gemma3"))
    report = convert(src, str(tmp_path / "out"), "BF16", progress=False)
    assert report.notes == [f"tokenizer not written: {arch}'s tokenizer is not one nbquant writes; copy "
                            "tokenizer.json and tokenizer_config.json from the original model"]
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["model_type"] == {"gemma2": "gemma2", "gemma3": "gemma3_text"}[arch]
    assert (config["head_dim"], config["sliding_window"], config["tie_word_embeddings"]) == (48, 16, True)
    out = _tensors(tmp_path / "out")
    norms = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
             "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}
    if arch == "gemma3":
        norms.update(attn_q_norm="self_attn.q_norm", attn_k_norm="self_attn.k_norm")
    for gname, hname in norms.items():
        want = (_decoded(src, f"blk.0.{gname}.weight") - np.float32(1)).astype(ml_dtypes.bfloat16)
        assert out[f"model.layers.0.{hname}.weight"].tobytes() == want.tobytes(), gname
    want = (_decoded(src, "output_norm.weight") - np.float32(1)).astype(ml_dtypes.bfloat16)
    assert out["model.norm.weight"].tobytes() == want.tobytes()
    q = _decoded(src, "blk.0.attn_q.weight").astype(ml_dtypes.bfloat16)  # no rotary reordering
    assert out["model.layers.0.self_attn.q_proj.weight"].tobytes() == q.tobytes()


def test_rows_read_as_the_whole(tmp_path):
    """A weight read by rows (the report's samples, a step) equals those rows of the whole."""
    src = write_llama_gguf(str(tmp_path / "m.gguf"), hidden=256, intermediate=256, layers=1, vocab=32,
                           types={"attn_q.weight": "Q8_0"})
    ckpt = open_gguf(src, get_scheme("F32"))
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.up_proj.weight", "model.norm.weight"):
        w = ckpt.shards[ckpt.weight_map[name]].tensor(name)
        whole = np.asarray(w)
        for rows in (slice(3, 40, 7), slice(0, 1), slice(None, None, 5)):
            assert np.array_equal(w[rows], whole[rows]), (name, rows)
        shard = pickle.loads(pickle.dumps(ckpt.shards[ckpt.weight_map[name]]))  # a cluster's task
        assert np.array_equal(np.asarray(shard.tensor(name)), whole)


def test_cast_as_torch_writes_it():
    x = np.array([1.0, np.nan, -np.nan, np.inf, 65520.0, 1e-8], np.float32)
    x = np.concatenate([x, np.array([0x3F808000, 0x3F818000, 0x7FA00001], np.uint32).view(np.float32)])
    b = np.empty(x.shape, ml_dtypes.bfloat16)
    _cast(x, b.dtype, b)
    assert [hex(v) for v in b.view(np.uint16)] == ["0x3f80", "0xffff", "0xffff", "0x7f80", "0x4780", "0x322c",
                                                     "0x3f80", "0x3f82", "0xffff"]
    h = np.empty(x.shape, np.float16)
    _cast(x, h.dtype, h)
    assert [hex(v) for v in h.view(np.uint16)] == ["0x3c00", "0x7e00", "0xfe00", "0x7c00", "0x7c00", "0x0",
                                                     "0x3c04", "0x3c0c", "0x7f00"]


def test_tied_embeddings_and_notes(tmp_path):
    extra = [Field.string("llama.rope.scaling.type", "linear"), Field("llama.rope.scaling.factor", FLOAT32,
                                                                      struct.pack("<f", 2.0))]
    shapes = llama_tensors(128, 256, 1, 32, 8, 2, tied=True) + [("rope_freqs.weight", (8,))]
    src = write_llama_gguf(str(tmp_path / "m.gguf"), hidden=128, intermediate=256, layers=1, vocab=32, extra=extra,
                           tensors=shapes)
    r = convert(src, str(tmp_path / "out"), "BF16", progress=False)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["tie_word_embeddings"] is True and config["rope_theta"] == 10000.0 and config["bos_token_id"] == 1
    assert "lm_head.weight" not in _tensors(tmp_path / "out")
    assert r.notes == ["llama.rope.scaling.type is not mapped by transformers and left out of config.json",
                       "llama.rope.scaling.factor is not mapped by transformers and left out of config.json",
                       "tensor rope_freqs.weight left out: llama 3's rope frequency factors, which transformers' "
                       "model has no place for (it reads no rope scaling from a GGUF file)",
                       "tokenizer not written: the file holds none (no tokenizer.ggml.model); copy tokenizer.json "
                       "and tokenizer_config.json from the original model"]


def test_qwen3_head_size(tmp_path):
    small = {"hidden": 256, "intermediate": 256, "layers": 1, "vocab": 32, "arch": "qwen3", "qk_norms": True}
    ckpt = open_gguf(write_llama_gguf(str(tmp_path / "a.gguf"), heads=2, kv_heads=1, **small), get_scheme("BF16"))
    assert ckpt.config["head_dim"] == 128 and "model.layers.0.self_attn.k_norm.weight" in ckpt.weight_map
    src = write_llama_gguf(str(tmp_path / "b.gguf"), heads=4, kv_heads=1, extra=[Field.u32("qwen3.attention.key_length",
                                                                                          64)], **small)
    assert open_gguf(src, get_scheme("BF16")).config["head_dim"] == 64
    with pytest.raises(ConvertError, match=r"c.gguf: tensor blk.0.attn_q.weight has shape \[256, 256\]; .* "
                                           r"the shape \[512, 256\]"):
        open_gguf(write_llama_gguf(str(tmp_path / "c.gguf"), heads=4, kv_heads=1, **small), get_scheme("BF16"))


def test_mistral_and_qwen2(tmp_path):
    src = write_llama_gguf(str(tmp_path / "m.gguf"), hidden=128, intermediate=256, layers=1, vocab=32,
                           extra=[Field.string("general.name", "mistral")])
    assert open_gguf(src, get_scheme("BF16")).config["architectures"] == ["MistralForCausalLM"]
    src = write_llama_gguf(str(tmp_path / "q.gguf"), hidden=128, intermediate=256, layers=1, vocab=32, arch="qwen2",
                           biases=True)
    ckpt = open_gguf(src, get_scheme("F16"))
    assert ckpt.config["model_type"] == "qwen2" and "head_dim" not in ckpt.config
    name = "model.layers.0.self_attn.k_proj.bias"
    assert np.array_equal(np.asarray(ckpt.shards[ckpt.weight_map[name]].tensor(name)),
                          _decoded(src, "blk.0.attn_k.bias").astype(np.float16))  # qwen2: no row reorder
    with pytest.raises(ConvertError, match=r"tensor blk.0.attn_q.bias is missing \(3 expected tensor"):
        open_gguf(write_llama_gguf(str(tmp_path / "n.gguf"), hidden=128, intermediate=256, layers=1, vocab=32,
                                   arch="qwen2"), get_scheme("BF16"))


def test_requantized_from_gguf(tmp_path):
    src = write_llama_gguf(str(tmp_path / "m.gguf"), hidden=128, intermediate=256, layers=1, vocab=32,
                           types={"attn_q.weight": "Q8_0"})
    r = convert(src, str(tmp_path / "out"), "W8A16", progress=False)
    assert {t.encoding for t in r.quantized} == {"requantized"} and len(r.quantized) == 7
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["quantization_config"]["ignore"] == ["lm_head", "model.embed_tokens"]
    assert _tensors(tmp_path / "out")["model.norm.weight"].dtype == ml_dtypes.bfloat16


def _damage(path: str, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def test_bad_inputs_one_line(tmp_path):
    def refused(src, match):
        with pytest.raises(ConvertError, match=match) as e:
            convert(src, str(tmp_path / "out"), "BF16", progress=False)
        assert "\n" not in str(e.value) and not (tmp_path / "out").exists()

    small = {"hidden": 128, "intermediate": 256, "layers": 1, "vocab": 32}
    src = write_llama_gguf(str(tmp_path / "a.gguf"), **small)
    size = os.path.getsize(src)
    with open(src, "r+b") as f:
        f.truncate(size - 100)
    refused(src, "a.gguf: not a readable GGUF file: tensor 'output.weight'.s 8192 bytes run past the end")
    refused(write_llama_gguf(str(tmp_path / "b.gguf"), arch="gemma", **small),
            r"b.gguf: GGUF architecture 'gemma' is not one nbquant writes as a Hugging Face checkpoint \(it maps "
            "llama, qwen2, qwen3, phi3, gemma2, gemma3\\); convert it to GGUF instead")
    bad_k = [(n, (48, 128) if n == "blk.0.attn_k.weight" else s) for n, s in llama_tensors(128, 256, 1, 32, 8, 2)]
    refused(write_llama_gguf(str(tmp_path / "c.gguf"), tensors=bad_k, **small),
            r"tensor blk.0.attn_k.weight has shape \[48, 128\]; the metadata \(llama.\*\) give "
            r"model.layers.0.self_attn.k_proj.weight the shape \[32, 128\]")
    more = llama_tensors(128, 256, 1, 32, 8, 2) + [("blk.1.attn_norm.weight", (128,)), ("blk.0.ffn_gate_inp.weight",
                                                                                       (4, 128))]
    refused(write_llama_gguf(str(tmp_path / "d.gguf"), tensors=more[:-1], **small),
            "tensor blk.1.attn_norm.weight is in layer 1, past llama.block_count 1")
    refused(write_llama_gguf(str(tmp_path / "e.gguf"), tensors=more[:-2] + more[-1:], **small),
            "tensor blk.0.ffn_gate_inp.weight has no place in transformers' LlamaForCausalLM")
    no_up = [(n, s) for n, s in llama_tensors(128, 256, 1, 32, 8, 2) if "ffn_up" not in n]
    refused(write_llama_gguf(str(tmp_path / "f.gguf"), tensors=no_up, **small),
            r"tensor blk.0.ffn_up.weight is missing \(1 expected")
    src = write_llama_gguf(str(tmp_path / "g.gguf"), types={"ffn_down.weight": "Q3_K"}, **small)  # rows of 256
    with read_gguf(src) as g:
        at = g.data_offset  # the type of ffn_down, Q3_K (11), becomes IQ3_S (21): the same 110 bytes per 256 values
        head = open(src, "rb").read(at)
    _damage(src, head.index(b"blk.0.ffn_down.weight") + len(b"blk.0.ffn_down.weight") + 4 + 16, struct.pack("<i", 21))
    refused(src, "tensor blk.0.ffn_down.weight is IQ3_S, a type nbquant does not decode")
    refused(write_llama_gguf(str(tmp_path / "h.gguf"), extra=[Field.string("llama.attention.head_count", "8")],
                             **small), "h.gguf: llama.attention.head_count is '8'; expected one int")


def test_destination_rules(tmp_path):
    src = write_synthetic_gguf(str(tmp_path / "m.gguf"), hidden=64, intermediate=128, layers=1, vocab=32)
    with pytest.raises(ConvertError, match="the destination contains the source"):
        convert(src, str(tmp_path), "BF16", progress=False)
    convert(src, str(tmp_path / "o"), "BF16", progress=False)
    with pytest.raises(ConvertError, match="not empty|overwrite"):
        convert(src, str(tmp_path / "o"), "BF16", progress=False)
    first = (tmp_path / "o" / "model.safetensors").read_bytes()
    convert(src, str(tmp_path / "o"), "BF16", progress=False, overwrite=True)
    assert (tmp_path / "o" / "model.safetensors").read_bytes() == first
    assert not [f for f in os.listdir(tmp_path / "o") if f.endswith(".partial") or f.startswith(".nbquant")]


def test_cli(tmp_path, capsys):
    src = write_synthetic_gguf(str(tmp_path / "m.gguf"), hidden=64, intermediate=128, layers=1, vocab=32)
    assert main(["convert", src, str(tmp_path / "o"), "--scheme", "F16", "--quiet"]) == 0
    assert json.loads((tmp_path / "o" / "config.json").read_text())["torch_dtype"] == "float16"
    capsys.readouterr()
    assert main(["convert", src, str(tmp_path / "x.gguf"), "--scheme", "BF16", "--quiet"]) == 1
    assert capsys.readouterr().err.startswith("nbquant convert: error: scheme 'BF16' is not a GGUF scheme")
    assert main(["convert", src, str(tmp_path / "p"), "--scheme", "BF16", "--pure"]) == 1
    assert capsys.readouterr().err.startswith("nbquant convert: error: --pure applies to GGUF sources written as GGUF")
    assert main(["convert", src, str(tmp_path / "q"), "--scheme", "Q8_0", "--quiet"]) == 0  # GGUF out, as before
    with read_gguf(str(tmp_path / "q")) as g:
        assert g.value("general.file_type") == 7


def test_bad_metadata_one_line(tmp_path):
    small = {"hidden": 128, "intermediate": 256, "layers": 1, "vocab": 32}
    for key, value, match in [("llama.attention.head_count", 0, "head_count|num_attention_heads = 0"),
                              ("llama.block_count", 1 << 30, "block_count is 1073741824 but the file holds 12"),
                              ("llama.attention.head_count_kv", 0, "num_key_value_heads = 0")]:
        src = write_llama_gguf(str(tmp_path / "m.gguf"), extra=[Field.u32(key, value)], **small)
        with pytest.raises(ConvertError, match=match):
            open_gguf(src, get_scheme("BF16"))


def test_split_model_reads_as_one(tmp_path):
    src = write_llama_gguf(str(tmp_path / "m.gguf"), hidden=128, intermediate=256, layers=2, vocab=32,
                           types={"attn_q.weight": "Q8_0"})
    first = split_gguf(src, 3, str(tmp_path / "s"))
    convert(src, str(tmp_path / "whole"), "BF16", progress=False)
    convert(first, str(tmp_path / "split"), "BF16", progress=False)
    assert (tmp_path / "whole" / "model.safetensors").read_bytes() == (tmp_path / "split" / "model.safetensors"
                                                                       ).read_bytes()


def test_interrupted_run_resumes(tmp_path, monkeypatch):
    from nbquant.convert.sources import gguf as source

    src = write_llama_gguf(str(tmp_path / "m.gguf"), hidden=128, intermediate=256, layers=2, vocab=32)
    monkeypatch.setattr(source, "SHARD_BYTES", 200_000)  # several shards
    convert(src, str(tmp_path / "clean"), "BF16", progress=False)

    def stop(line):
        if line.startswith("wrote model-00003"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert(src, str(tmp_path / "o"), "BF16", progress=False, log=stop)
    finished = [f for f in os.listdir(tmp_path / "o") if f.endswith(".safetensors")]
    assert not [f for f in os.listdir(tmp_path / "o") if f.endswith(".partial")]
    r = convert(src, str(tmp_path / "o"), "BF16", progress=False)
    assert sorted(r.resumed_shards) == sorted(finished) and len(r.shards) == 4
    assert sorted(os.listdir(tmp_path / "o")) == sorted(os.listdir(tmp_path / "clean"))
    for f in os.listdir(tmp_path / "clean"):
        assert (tmp_path / "o" / f).read_bytes() == (tmp_path / "clean" / f).read_bytes(), f
