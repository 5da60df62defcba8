"""A Hugging Face checkpoint written as GGUF (``nbquant convert DIR OUT.gguf``): mapping, exact re-encodings, refusals.

The byte-for-byte comparison with llama.cpp's converter and llama-quantize is in
tests/test_parity_hf_gguf.py; here: the file reads back (through nbquant's GGUF source) as the checkpoint it came
from, the codes of a W4A16 / W8A16 checkpoint reach Q4_0 / Q8_0 unchanged, and every refusal is one line that
leaves no file.
"""

from __future__ import annotations

import json
import os

import ml_dtypes
import numpy as np
import pytest

from nbquant import gguf
from nbquant.cli import main
from nbquant.convert import ConvertError, convert, write_synthetic_checkpoint
from nbquant.convert.gguf import convert_hf_gguf
from nbquant.convert.gguf.hf_metadata import rope_freqs
from nbquant.convert.plan import open_checkpoint
from nbquant.convert.safetensors import SafetensorsFile
from nbquant.gguf.file import type_name
from nbquant.gguf.split import open_model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    src = str(tmp_path_factory.mktemp("hf") / "tiny-llama")
    write_synthetic_checkpoint(src, hidden=256, intermediate=512, layers=2, vocab=300, tokenizer=True)
    return src


@pytest.fixture(scope="module")
def w4(checkpoint, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("w4") / "w4")
    convert(checkpoint, out, "W4A16", progress=False)
    return out


def _copy(folder: str, to, skip: tuple[str, ...] = ()) -> None:
    """The files of ``folder`` copied into the new folder ``to`` (but ``skip``)."""
    os.makedirs(to)
    for name in os.listdir(folder):
        if name not in skip:
            with open(os.path.join(folder, name), "rb") as f:
                (to / name).write_bytes(f.read())


def _tensors(folder: str) -> dict[str, np.ndarray]:
    ckpt = open_checkpoint(folder)
    return {n: np.asarray(ckpt.shards[s].tensor(n)) for n, s in ckpt.weight_map.items()}


def test_bf16_file_reads_back_as_the_checkpoint(checkpoint, tmp_path):
    report = convert_hf_gguf(checkpoint, tmp_path / "m.gguf", "BF16", progress=False)
    with open_model(str(tmp_path / "m.gguf")) as g:
        assert g.value("general.architecture") == "llama" and g.value("general.name") == "tiny-llama"
        assert g.value("general.file_type") == 32 and g.value("tokenizer.ggml.pre") == "gpt-2"
        assert g.value("llama.attention.head_count_kv") == 1 and g.value("llama.rope.dimension_count") == 64
        types = {n: type_name(i.type_id) for n, i in g.tensors.items()}
    assert types["blk.0.attn_norm.weight"] == "F32" and types["blk.0.attn_q.weight"] == "BF16"
    assert all("as llama.cpp's converter writes it" in t.reason for t in report.tensors)
    back = tmp_path / "back"
    convert(str(tmp_path / "m.gguf"), str(back), "BF16", progress=False)  # Q/K rows put back, norms from F32
    original, again = _tensors(checkpoint), _tensors(str(back))
    assert sorted(original) == sorted(again)
    for name, x in original.items():
        assert np.array_equal(x.view(np.uint16), again[name].view(np.uint16)), name
    tok = json.loads((back / "tokenizer.json").read_text())
    assert tok["model"]["merges"][:2] == [["!", "!"], ["!", '"']]


@pytest.mark.parametrize("scheme, block", [("Q4_0", 18), ("Q8_0", 34)])
def test_w4a16_codes_and_scales_reach_q4_0_and_q8_0_unchanged(w4, tmp_path, scheme, block):
    report = convert_hf_gguf(w4, tmp_path / "m.gguf", scheme, progress=False)
    exact = {t.name for t in report.tensors if "exact: the source's codes and scales" in t.reason}
    assert len(exact) == 14 and all(t.sqnr_db == np.inf for t in report.tensors if t.name in exact)
    decoded = tmp_path / "bf16"
    convert(w4, str(decoded), "BF16", progress=False)  # compressed-tensors' decoding (its parity tests)
    convert_hf_gguf(str(decoded), tmp_path / "ref.gguf", "BF16", progress=False)
    with open_model(str(tmp_path / "m.gguf")) as g, open_model(str(tmp_path / "ref.gguf")) as ref:
        for name in exact:
            info = g.tensors[name]
            raw = np.frombuffer(g.tensor_bytes(name), np.uint8).reshape(info.ne[1], -1)
            assert raw.shape[1] == info.ne[0] // 32 * block
            x = gguf.dequantize(raw, scheme)  # code x scale, exact in float32
            want = np.frombuffer(ref.tensor_bytes(name), ml_dtypes.bfloat16).reshape(x.shape)
            assert np.array_equal(x.astype(ml_dtypes.bfloat16).view(np.uint16), want.view(np.uint16)), name


def test_a_scale_float16_cannot_hold_is_requantized(w4, tmp_path):
    w4b = tmp_path / "w4b"
    _copy(w4, w4b)
    shard = next(n for n in os.listdir(w4b) if n.endswith(".safetensors"))
    f = SafetensorsFile(str(w4b / shard))
    entry = f.entries["model.layers.0.mlp.up_proj.weight_scale"]
    with open(w4b / shard, "r+b") as out:  # one scale below float16's subnormal step: no exact Q4_0 block
        out.seek(entry.begin)
        out.write(np.array([1e-9], ml_dtypes.bfloat16).tobytes())
    report = convert_hf_gguf(str(w4b), tmp_path / "m.gguf", "Q4_0", progress=False)
    reasons = {t.name: t.reason for t in report.tensors}
    assert "exact" not in reasons["blk.0.ffn_up.weight"] and "exact" in reasons["blk.0.ffn_gate.weight"]


def test_llama3_rope_factors_follow_the_three_bands():
    rope = {"rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}
    f = rope_freqs(rope, 128)
    assert f.dtype == np.float32 and f.shape == (64,)
    assert f[0] == 1 and f[-1] == 8 and ((f > 1) & (f < 8)).sum() > 0 and np.all(np.diff(f) >= 0)


def test_tied_llama3_with_rope_scaling_maps_its_tensors(tmp_path):
    src = tmp_path / "q3"
    write_synthetic_checkpoint(str(src), hidden=128, intermediate=256, layers=1, vocab=300, tokenizer=True,
                               tie_word_embeddings=True)
    config = json.loads((src / "config.json").read_text())
    config.update(architectures=["LlamaForCausalLM"], rope_scaling={"rope_type": "llama3", "factor": 8.0},
                  rope_theta=500000.0)
    (src / "config.json").write_text(json.dumps(config))
    convert_hf_gguf(str(src), tmp_path / "m.gguf", "F16", progress=False)
    with open_model(str(tmp_path / "m.gguf")) as g:
        names = list(g.tensors)
        assert names[0] == "rope_freqs.weight" and "output.weight" not in names
        assert g.value("llama.rope.freq_base") == 500000.0 and g.value("general.file_type") == 1


@pytest.mark.parametrize("change, message", [
    ({"architectures": ["Phi3ForCausalLM"]}, r"architectures \['Phi3ForCausalLM'\] is not one nbquant maps"),
    ({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}, "rope type 'longrope' is not mapped"),
    ({"num_local_experts": 8}, "a mixture-of-experts config is not mapped"),
    ({"use_sliding_window": True}, "sliding-window attention is not mapped"),
])
def test_configs_it_cannot_map_are_one_line_and_leave_no_file(checkpoint, tmp_path, change, message):
    src = tmp_path / "src"
    _copy(checkpoint, src)
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps(dict(config, **change)))
    with pytest.raises(ConvertError, match=message) as e:
        convert_hf_gguf(str(src), tmp_path / "m.gguf", "Q8_0", progress=False)
    assert "\n" not in str(e.value) and os.listdir(tmp_path) == ["src"]


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.pop("pre_tokenizer"), "pre-tokenizer is not one nbquant recognizes"),
    (lambda t: t["model"].update(byte_fallback=True), "not a byte-level BPE tokenizer"),
    (lambda t: t["model"].update(type="WordPiece"), "not a byte-level BPE tokenizer"),
    (lambda t: t["model"].update(merges=[1, 2]), "merges are neither strings nor pairs"),
    (lambda t: t["model"]["vocab"].update({"far": 10**6}), "past config.json's vocab_size"),
    (None, "no tokenizer.json"),
])
def test_tokenizers_it_cannot_write_are_one_line(checkpoint, tmp_path, edit, message):
    src = tmp_path / "src"
    _copy(checkpoint, src)
    if edit is None:
        os.remove(src / "tokenizer.json")
    else:
        tok = json.loads((src / "tokenizer.json").read_text())
        edit(tok)
        (src / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(ConvertError, match=message) as e:
        convert_hf_gguf(str(src), tmp_path / "m.gguf", "BF16", progress=False)
    assert "\n" not in str(e.value) and not (tmp_path / "m.gguf").exists()


def test_a_quantized_option_with_a_float_scheme_is_refused(checkpoint, tmp_path):
    with pytest.raises(ConvertError, match="pure applies to a quantized GGUF scheme, not to BF16"):
        convert_hf_gguf(checkpoint, tmp_path / "m.gguf", "BF16", pure=True)


def test_cli_writes_gguf_from_a_folder(checkpoint, tmp_path, capsys):
    assert main(["convert", checkpoint, str(tmp_path / "m.gguf"), "--scheme", "Q4_K_M"]) == 0
    out = capsys.readouterr().out
    assert "Q4_K" in out and (tmp_path / "m.gguf").exists()
    assert main(["convert", checkpoint, str(tmp_path / "m.gguf"), "--scheme", "Q4_K_M"]) == 1
    assert "pass --overwrite" in capsys.readouterr().err


def test_a_scheme_that_writes_a_folder_is_refused_for_a_gguf_destination(checkpoint, tmp_path):
    with pytest.raises(ConvertError, match=r"scheme 'W4A16' is not one a .gguf destination takes: BF16, F16, F32"):
        convert_hf_gguf(checkpoint, tmp_path / "m.gguf", "W4A16")
    assert os.listdir(tmp_path) == []


def _piece(text: str, score: float, kind: int) -> bytes:
    raw = text.encode()
    body = b"\x0a" + bytes([len(raw)]) + raw + b"\x15" + np.float32(score).tobytes() + b"\x18" + bytes([kind])
    return b"\x0a" + bytes([len(body)]) + body


def test_a_sentencepiece_model_is_read_with_its_types_and_sampling_settings(checkpoint, tmp_path):
    src = tmp_path / "spm"
    _copy(checkpoint, src, skip=("tokenizer.json",))
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3), ("<0x41>", 0.0, 6), ("\u2581a", -1.5, 1),
              ("<tool>", 0.0, 4), ("x", -2.0, 5)]
    (src / "tokenizer.model").write_bytes(b"".join(_piece(*p) for p in pieces) + b"\x12\x02\x08\x01")  # + a spec
    (src / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_k": 40, "do_sample": True}))
    convert_hf_gguf(str(src), tmp_path / "m.gguf", "BF16", progress=False)
    with open_model(str(tmp_path / "m.gguf")) as g:
        assert g.value("tokenizer.ggml.model") == "llama" and g.value("tokenizer.ggml.pre") == "default"
        tokens, types = g.value("tokenizer.ggml.tokens"), g.value("tokenizer.ggml.token_type")
        assert tokens[:7] == [p[0] for p in pieces] and tokens[7] == "[PAD7]" and len(tokens) == 300
        assert types[:8] == [2, 3, 3, 6, 1, 1, 5, 5]  # a user-defined piece is normal, as the converter reads it
        assert g.value("tokenizer.ggml.scores")[4] == -1.5 and g.value("tokenizer.ggml.scores")[7] == -10000.0
        keys = list(g.fields)
        assert keys[2:5] == ["general.sampling.top_k", "general.sampling.temp", "general.name"]
    (src / "tokenizer.model").write_bytes(_piece("<unk>", 0.0, 2)[:-3])
    with pytest.raises(ConvertError, match="tokenizer.model is not a SentencePiece model"):
        convert_hf_gguf(str(src), tmp_path / "n.gguf", "BF16", progress=False)
    (src / "tokenizer.model").write_bytes(_piece("<unk>", 0.0, 2))
    (src / "generation_config.json").write_text(json.dumps({"top_k": "forty"}))
    with pytest.raises(ConvertError, match=r"generation_config.json: top_k is 'forty'; expected a number"):
        convert_hf_gguf(str(src), tmp_path / "n.gguf", "BF16", progress=False)
    assert not (tmp_path / "n.gguf").exists()


@pytest.mark.parametrize("name, content, message", [
    ("chat_template.jinja", b"\xff\xfe{{ x }}", "chat_template.jinja: not readable UTF-8 text"),
    ("tokenizer_config.json", b'{"added_tokens_decoder": {"x": {"content": "a"}}}', "a tokenizer file nbquant does "
                                                                                   "not read"),
    ("generation_config.json", b"{", "generation_config.json: not readable JSON"),
])
def test_broken_side_files_are_one_line(checkpoint, tmp_path, name, content, message):
    src = tmp_path / "src"
    _copy(checkpoint, src, skip=("tokenizer.json",) if name == "tokenizer_config.json" else ())
    if name == "tokenizer_config.json":
        (src / "tokenizer.model").write_bytes(_piece("<unk>", 0.0, 2))
    (src / name).write_bytes(content)
    with pytest.raises(ConvertError, match=message) as e:
        convert_hf_gguf(str(src), tmp_path / "m.gguf", "BF16", progress=False)
    assert "\n" not in str(e.value) and not (tmp_path / "m.gguf").exists()


def test_a_tokenizer_linked_from_outside_the_folder_is_refused(checkpoint, tmp_path):
    src = tmp_path / "src"
    _copy(checkpoint, src, skip=("tokenizer.json",))
    outside = tmp_path / "elsewhere.json"
    outside.write_bytes(open(os.path.join(checkpoint, "tokenizer.json"), "rb").read())
    os.symlink(outside, src / "tokenizer.json")
    with pytest.raises(ConvertError, match="tokenizer.json"):
        convert_hf_gguf(str(src), tmp_path / "m.gguf", "BF16", progress=False)
    assert not (tmp_path / "m.gguf").exists()
