"""A GGUF source's tokenizer written back as ``tokenizer.json`` / ``tokenizer_config.json`` (no dependency).

What the files encode is checked in the parity tier (tests/test_parity_gguf_tokenizer.py: llama.cpp's vocabulary
tests, ids from each model's own Hugging Face tokenizer). Here: the structure for each tokenizer kind, the SentencePiece
merges' order, the refusals as one note, and the files in a converted checkpoint.
"""

from __future__ import annotations

import json
import struct

import pytest
from _gguf_source import write_llama_gguf

from nbquant.convert import convert
from nbquant.convert.sources.gguf_tokenizer import tokenizer_files
from nbquant.gguf.file import FLOAT32, INT32, STRING, Field
from nbquant.gguf.split import open_model

BYTE_LEVEL = ["a", "b", "c", "ab", "abc", "Ġ", "Ġa", "<|endoftext|>", "<|im_start|>", "<tool>"]
BYTE_TYPES = [1, 1, 1, 1, 1, 1, 1, 3, 3, 4]
NO_TOKENIZER = ("tokenizer not written: the file holds none (no tokenizer.ggml.model); copy tokenizer.json and "
                "tokenizer_config.json from the original model")


def _meta(**kw):
    return {f"tokenizer.ggml.{k}" if not k.startswith("chat") else "tokenizer.chat_template": v
            for k, v in kw.items()}.get


def _byte_level(pre="qwen2", **kw):
    return _meta(model="gpt2", pre=pre, tokens=BYTE_LEVEL, token_type=BYTE_TYPES, merges=["a b", "ab c", "Ġ a"],
                 **kw)


def test_qwen2_byte_level_bpe():
    files, notes = tokenizer_files(_byte_level(eos_token_id=7, padding_token_id=7, bos_token_id=7,
                                               chat_template="{{ messages }}"), context_length=4096)
    assert notes == []
    tok = json.loads(files["tokenizer.json"])
    assert tok["model"]["type"] == "BPE" and tok["model"]["vocab"] == {t: i for i, t in enumerate(BYTE_LEVEL)}
    assert tok["model"]["merges"] == [["a", "b"], ["ab", "c"], ["Ġ", "a"]]
    assert tok["model"]["ignore_merges"] is False and tok["model"]["byte_fallback"] is False
    assert tok["normalizer"] == {"type": "NFC"}
    split, byte_level = tok["pre_tokenizer"]["pretokenizers"]
    assert split["pattern"]["Regex"].startswith(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|")
    assert byte_level == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    assert tok["post_processor"]["type"] == "ByteLevel"  # qwen2 adds no BOS
    assert [(t["id"], t["content"], t["special"]) for t in tok["added_tokens"]] == [
        (7, "<|endoftext|>", True), (8, "<|im_start|>", True), (9, "<tool>", False)]
    config = json.loads(files["tokenizer_config.json"])
    assert config == {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False, "add_eos_token": False,
                      "clean_up_tokenization_spaces": False, "bos_token": "<|endoftext|>",
                      "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "chat_template": "{{ messages }}",
                      "model_max_length": 4096}


def test_llama3_adds_bos_and_ignores_merges():
    files, _ = tokenizer_files(_byte_level("llama-bpe", bos_token_id=8, eos_token_id=7))
    tok = json.loads(files["tokenizer.json"])
    assert tok["model"]["ignore_merges"] is True and tok["normalizer"] is None
    assert r"\p{N}{1,3}" in tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    byte_level, template = tok["post_processor"]["processors"]
    assert byte_level["type"] == "ByteLevel" and template["type"] == "TemplateProcessing"
    assert template["single"] == [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                                  {"Sequence": {"id": "A", "type_id": 0}}]
    assert template["special_tokens"] == {"<|im_start|>": {"id": "<|im_start|>", "ids": [8],
                                                             "tokens": ["<|im_start|>"]}}
    assert json.loads(files["tokenizer_config.json"])["add_bos_token"] is True
    # the file's own flags win over llama.cpp's default for the tokenizer
    files, _ = tokenizer_files(_byte_level("llama-bpe", bos_token_id=8, eos_token_id=7, add_bos_token=False,
                                           add_eos_token=True))
    template = json.loads(files["tokenizer.json"])["post_processor"]["processors"][1]
    assert template["single"] == [{"Sequence": {"id": "A", "type_id": 0}},
                                  {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}]


def test_gpt2_uses_the_byte_level_pattern():
    tok = json.loads(tokenizer_files(_byte_level("gpt-2"))[0]["tokenizer.json"])
    assert tok["pre_tokenizer"] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                    "use_regex": True}


def test_sentencepiece_merges_follow_transformers_order():
    # transformers' generate_merges: every split of a piece into two tokens, by the pieces' scores (highest
    # first), then the longer left part, then the longer right part; ties keep the order of the ids
    tokens = ["<unk>", "<s>", "</s>", "▁", "a", "b", "ab", "▁a", "▁ab", "ba", "<0x41>"]
    scores = [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -4.0, 0.0]
    types = [2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6]
    files, notes = tokenizer_files(_meta(model="llama", tokens=tokens, scores=scores, token_type=types,
                                         bos_token_id=1, eos_token_id=2, unknown_token_id=0))
    assert notes == []
    tok = json.loads(files["tokenizer.json"])
    assert tok["model"]["merges"] == [["a", "b"], ["b", "a"], ["▁", "a"], ["▁a", "b"], ["▁", "ab"]]
    assert tok["model"]["byte_fallback"] is True and tok["model"]["unk_token"] == "<unk>"
    assert tok["normalizer"]["normalizers"][0] == {"type": "Prepend", "prepend": "▁"}
    assert tok["decoder"]["decoders"][-1] == {"type": "Strip", "content": " ", "start": 1, "stop": 0}
    assert tok["post_processor"]["single"][0] == {"SpecialToken": {"id": "<s>", "type_id": 0}}  # llama.cpp: BOS
    assert [t["content"] for t in tok["added_tokens"]] == ["<unk>", "<s>", "</s>"]
    assert [t["special"] for t in tok["added_tokens"]] == [True, True, True]
    config = json.loads(files["tokenizer_config.json"])
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    # no space prefix: neither the prepended "▁" nor the stripped space
    tok = json.loads(tokenizer_files(_meta(model="llama", tokens=tokens, scores=scores,
                                           add_space_prefix=False))[0]["tokenizer.json"])
    assert tok["normalizer"]["normalizers"] == [{"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]
    assert {"type": "Strip", "content": " ", "start": 1, "stop": 0} not in tok["decoder"]["decoders"]


def test_a_hostile_long_piece_is_not_searched_for_merges():
    """A file's strings are untrusted: a piece of a million characters is not split a million ways (SentencePiece
    builds no merged piece longer than 16 characters by default)."""
    long = "a" * 1_000_000
    tokens = ["<unk>", "a", "aa", long]
    files, notes = tokenizer_files(_meta(model="llama", tokens=tokens, scores=[0.0, -1.0, -2.0, -3.0]))
    assert notes == [] and json.loads(files["tokenizer.json"])["model"]["merges"] == [["a", "a"]]


@pytest.mark.parametrize(("meta", "why"), [
    (_meta(), "the file holds none (no tokenizer.ggml.model)"),
    (_meta(model="bert", tokens=["a"]), "tokenizer.ggml.model 'bert' is not one nbquant writes (gpt2, llama)"),
    (_meta(model="gpt2", tokens=[]), "the file holds no tokenizer.ggml.tokens (an array of strings)"),
    (_meta(model="gpt2", tokens=[1, 2]), "the file holds no tokenizer.ggml.tokens (an array of strings)"),
    (_meta(model="gpt2", pre=["qwen2"], tokens=["a"], merges=[]),
     "tokenizer.ggml.pre \"['qwen2']\" is not a pre-tokenizer nbquant writes (llama-bpe, llama3, llama-v3, qwen2, "
     "deepseek-coder, gpt-2)"),
    (_meta(model="gpt2", pre="tekken", tokens=["a"], merges=[]),
     "tokenizer.ggml.pre 'tekken' is not a pre-tokenizer nbquant writes (llama-bpe, llama3, llama-v3, qwen2, "
     "deepseek-coder, gpt-2)"),
    (_meta(model="gpt2", pre="qwen2", tokens=["a", "b"]),
     "a BPE tokenizer without tokenizer.ggml.merges (strings 'left right')"),
    (_meta(model="gpt2", pre="qwen2", tokens=["a", "b"], merges=[7]),
     "a BPE tokenizer without tokenizer.ggml.merges (strings 'left right')"),
    (_meta(model="gpt2", pre="qwen2", tokens=["a", "b"], merges=["ab"]),
     "a BPE tokenizer without tokenizer.ggml.merges (strings 'left right')"),
    (_meta(model="llama", tokens=["a", "b"]), "a SentencePiece tokenizer without tokenizer.ggml.scores"),
    (_meta(model="llama", tokens=["a", "b"], scores=[0.0]),
     "tokenizer.ggml.scores does not have one number per token (2)"),
    (_meta(model="llama", tokens=["a", "b"], scores=["x", "y"]),
     "tokenizer.ggml.scores does not have one number per token (2)"),
    (_meta(model="gpt2", pre="qwen2", tokens=["a", "b"], merges=[], token_type=[1]),
     "tokenizer.ggml.token_type does not have one number per token (2)"),
])
def test_what_is_not_written_is_one_note(meta, why):
    assert tokenizer_files(meta) == ({}, [f"tokenizer not written: {why}; copy tokenizer.json and "
                                          "tokenizer_config.json from the original model"])


def test_flags_that_are_not_booleans_are_ignored():
    """An untrusted ``add_bos_token`` that is not a boolean (a string "false") leaves llama.cpp's default."""
    files, _ = tokenizer_files(_byte_level("llama-bpe", bos_token_id=8, add_bos_token="false"))
    assert json.loads(files["tokenizer_config.json"])["add_bos_token"] is True


def test_special_ids_outside_the_vocabulary_are_left_out():
    files, _ = tokenizer_files(_byte_level(bos_token_id=99, eos_token_id=-1, padding_token_id=7))
    config = json.loads(files["tokenizer_config.json"])
    assert "bos_token" not in config and "eos_token" not in config and config["pad_token"] == "<|endoftext|>"


def _tokenizer_fields() -> list[Field]:
    strings = [Field("tokenizer.ggml.tokens", STRING, [t.encode() for t in BYTE_LEVEL], True),
               Field("tokenizer.ggml.merges", STRING, [b"a b", b"ab c"], True)]
    return [Field.string("tokenizer.ggml.model", "gpt2"), Field.string("tokenizer.ggml.pre", "llama-bpe"),
            *strings, Field("tokenizer.ggml.token_type", INT32, struct.pack(f"<{len(BYTE_TYPES)}i", *BYTE_TYPES),
                            True),
            Field("tokenizer.ggml.scores", FLOAT32, struct.pack(f"<{len(BYTE_LEVEL)}f", *[0.0] * len(BYTE_LEVEL)),
                  True),
            Field.string("tokenizer.chat_template", "{% for m in messages %}{{ m['content'] }}{% endfor %}")]


def test_a_converted_gguf_model_carries_its_tokenizer(tmp_path):
    src = write_llama_gguf(str(tmp_path / "m.gguf"), hidden=64, intermediate=128, layers=1, vocab=len(BYTE_LEVEL),
                           heads=4, kv_heads=2, extra=_tokenizer_fields())
    out = tmp_path / "out"
    report = convert(src, str(out), "BF16", progress=False)
    assert report.notes == []
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors",
                                                     "model.safetensors.index.json", "tokenizer.json",
                                                     "tokenizer_config.json"]
    with open_model(src) as g:
        expected, _ = tokenizer_files(g.value, 512)
    assert (out / "tokenizer.json").read_text(encoding="utf-8") == expected["tokenizer.json"]
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    # write_llama_gguf states bos_token_id 1 and eos_token_id 2
    assert (config["bos_token"], config["eos_token"], config["model_max_length"]) == ("b", "c", 512)


def test_a_gguf_model_without_a_tokenizer_says_so(tmp_path):
    src = write_llama_gguf(str(tmp_path / "m.gguf"), hidden=64, intermediate=128, layers=1, vocab=32, heads=4,
                           kv_heads=2)
    report = convert(src, str(tmp_path / "out"), "BF16", progress=False)
    assert report.notes == [NO_TOKENIZER]
    assert not (tmp_path / "out" / "tokenizer.json").exists()
