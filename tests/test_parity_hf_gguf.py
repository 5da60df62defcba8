"""Hugging Face checkpoint → GGUF parity: ``nbquant convert DIR OUT.gguf`` writes llama.cpp's own route's bytes.

llama.cpp's route is two programs of the llama.cpp tree the GGUF oracle already fetches (``tools/ggml_oracle.py``):
``convert_hf_to_gguf.py DIR --outtype T --model-name NAME`` (its gguf-py; torch, transformers and sentencepiece
from the parity environment), then, for a quantized scheme, ``llama-quantize`` on that file. The checkpoints carry
real tokenizers: llama.cpp's vocabulary test files (Llama 3's and Qwen2's), written back as ``tokenizer.json`` by
nbquant's GGUF source, so that the converter recognizes their pre-tokenizers by its hash.

* ``BF16`` / ``F16`` / ``F32``: byte for byte the converter's file (``--model-name``: the folder's name, which
  nbquant writes as ``general.name``);
* ``Q8_0``, ``Q4_0``, ``Q4_K_M``, ``Q6_K``: byte for byte ``llama-quantize`` applied to the converter's BF16 file;
* a W4A16 checkpoint (compressed-tensors, groups of 128): its BF16 file byte for byte the converter's (which
  decodes ``pack-quantized`` itself), ``Q4_K_M`` the route's; ``Q4_0`` holds the source's codes and scales: it
  decodes, rounded to bfloat16, to the converter's BF16 weights bit for bit.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _gguf_source import write_llama_gguf

from nbquant import gguf
from nbquant.convert import convert
from nbquant.convert.gguf import convert_hf_gguf
from nbquant.gguf.file import Field, type_name
from nbquant.gguf.split import open_model

pytestmark = pytest.mark.parity

_ORACLE = Path(__file__).resolve().parents[1] / "tools" / "ggml_oracle.py"
#: (vocabulary test file, GGUF architecture, options of write_llama_gguf).
MODELS = {"llama3": ("llama-bpe", "llama", {}), "llama2": ("llama-spm", "llama", {}),
          "qwen2": ("qwen2", "qwen2", {"biases": True}),
          "qwen3": ("qwen2", "qwen3", {"qk_norms": True}), "llama3_tied": ("llama-bpe", "llama", {"tied": True})}


@pytest.fixture(scope="session")
def oracle():
    spec = importlib.util.spec_from_file_location("ggml_oracle", _ORACLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def llama_quantize(oracle):
    return oracle.build_quantize(optimized=False)


def _converter(oracle, folder: Path, out: Path, outtype: str) -> Path:
    tree = oracle.vocab_folder().parent
    env = dict(os.environ, PYTHONPATH=str(tree / "gguf-py"))
    subprocess.run([sys.executable, str(tree / "convert_hf_to_gguf.py"), str(folder), "--outfile", str(out),
                    "--outtype", outtype, "--model-name", folder.name], check=True, env=env, capture_output=True)
    return out


def _folder(oracle, tmp: Path, model: str, hidden: int = 64, intermediate: int = 128, heads: int = 4,
            rope: dict | None = None) -> Path:
    """A bf16 Hugging Face checkpoint with the vocabulary file's tokenizer (through nbquant's GGUF source)."""
    vocab_file, arch, options = MODELS[model]
    with open_model(str(oracle.vocab_folder() / f"ggml-vocab-{vocab_file}.gguf")) as g:
        extra = [f for k, f in g.fields.items() if k.startswith("tokenizer.")]
        vocab = len(g.value("tokenizer.ggml.tokens"))
    if arch == "qwen3":  # its head size apart from hidden / heads (transformers' default is 128)
        extra.append(Field.u32("qwen3.attention.key_length", hidden // heads))
    src = write_llama_gguf(str(tmp / f"{model}.gguf"), hidden=hidden, intermediate=intermediate, layers=2,
                           vocab=vocab, heads=heads, kv_heads=2, arch=arch, extra=extra, **options)
    folder = tmp / f"hf-{model}"
    convert(src, str(folder), "BF16", progress=False)
    if rope is not None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(dict(config, rope_scaling=rope)))
    return folder


def _check_quantized(llama_quantize, ref: Path, folder: Path, tmp_path: Path, scheme: str) -> None:
    """nbquant's ``scheme`` file of ``folder`` is llama-quantize's of the converter's file ``ref``, byte for byte."""
    subprocess.run([str(llama_quantize), str(ref), str(tmp_path / f"ref-{scheme}.gguf"), scheme, "2"], check=True,
                   capture_output=True)
    convert_hf_gguf(folder, tmp_path / f"nb-{scheme}.gguf", scheme, progress=False)
    assert (tmp_path / f"nb-{scheme}.gguf").read_bytes() == (tmp_path / f"ref-{scheme}.gguf").read_bytes()


@pytest.fixture(scope="session")
def models(oracle, tmp_path_factory):
    """model → (its folder, the converter's BF16 file), made once: the converter takes ~20 s on a 128k vocabulary."""
    made = {}

    def get(model: str) -> tuple[Path, Path]:
        if model not in made:
            tmp = tmp_path_factory.mktemp(model)
            folder = _folder(oracle, tmp, model, hidden=256, intermediate=512)
            made[model] = folder, _converter(oracle, folder, tmp / "ref-bf16.gguf", "bf16")
        return made[model]

    return get


@pytest.mark.parametrize("model, outtype", [(m, "BF16") for m in sorted(MODELS) if m != "llama2"] +
                         [("llama3", "F16")])
def test_float_files_are_the_converters(oracle, models, tmp_path, model, outtype):
    folder, bf16 = models(model)
    ref = bf16 if outtype == "BF16" else _converter(oracle, folder, tmp_path / "ref.gguf", outtype.lower())
    convert_hf_gguf(folder, tmp_path / "nb.gguf", outtype, progress=False)
    assert (tmp_path / "nb.gguf").read_bytes() == ref.read_bytes()


def test_llama3_rope_scaling_writes_the_converters_rope_freqs(oracle, tmp_path):
    rope = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64}
    folder = _folder(oracle, tmp_path, "llama3", hidden=256, heads=4, rope=rope)
    ref = _converter(oracle, folder, tmp_path / "ref.gguf", "f32")
    convert_hf_gguf(folder, tmp_path / "nb.gguf", "F32", progress=False)
    with open_model(str(tmp_path / "nb.gguf")) as g:
        factors = np.frombuffer(g.tensor_bytes("rope_freqs.weight"), "<f4")
        assert 1.0 in factors and 32.0 in factors and ((factors > 1) & (factors < 32)).any()  # all three branches
    assert (tmp_path / "nb.gguf").read_bytes() == ref.read_bytes()


@pytest.mark.parametrize("model, scheme", [("llama3", s) for s in ("Q8_0", "Q4_0", "Q4_K_M", "Q6_K")] +
                         [("qwen2", "Q4_K_M"), ("qwen3", "Q5_K_M"), ("llama3_tied", "Q4_K_S")])
def test_quantized_files_are_llama_quantize_of_the_converters(models, llama_quantize, tmp_path, model, scheme):
    folder, bf16 = models(model)
    _check_quantized(llama_quantize, bf16, folder, tmp_path, scheme)


def test_w4a16_source_decodes_as_the_converter_and_re_encodes_exactly(oracle, models, llama_quantize, tmp_path):
    folder, _ = models("llama3")
    w4 = tmp_path / "w4"
    convert(str(folder), str(w4), "W4A16", progress=False)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (w4 / name).exists()
    bf16 = _converter(oracle, w4, tmp_path / "ref-bf16.gguf", "bf16")  # the converter decodes pack-quantized
    convert_hf_gguf(w4, tmp_path / "nb-bf16.gguf", "BF16", progress=False)
    assert (tmp_path / "nb-bf16.gguf").read_bytes() == bf16.read_bytes()
    _check_quantized(llama_quantize, bf16, w4, tmp_path, "Q4_K_M")
    report = convert_hf_gguf(w4, tmp_path / "q4_0.gguf", "Q4_0", progress=False)
    exact = [t.name for t in report.tensors if "exact" in t.reason]
    assert len(exact) == 14  # every quantized projection of the two layers
    with open_model(str(tmp_path / "q4_0.gguf")) as q, open_model(str(bf16)) as ref:
        for name in exact:
            info = q.tensors[name]
            x = gguf.dequantize(np.frombuffer(q.tensor_bytes(name), np.uint8).reshape(info.ne[1], -1), "Q4_0")
            u = x.view(np.uint32)
            rounded = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
            assert type_name(ref.tensors[name].type_id) == "BF16"
            assert np.array_equal(rounded.reshape(-1), np.frombuffer(ref.tensor_bytes(name), "<u2")), name


def test_sentencepiece_tokenizer_and_sampling_settings_are_the_converters(oracle, models, llama_quantize, tmp_path):
    """A ``tokenizer.model`` (trained here: byte fallback, a user-defined piece), ``added_tokens.json``, an
    ``added_tokens_decoder`` and a ``generation_config.json`` with sampling settings."""
    import io
    import shutil

    import sentencepiece

    folder = tmp_path / "spm"
    shutil.copytree(models("llama2")[0], folder)
    os.remove(folder / "tokenizer.json")
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text().splitlines() * 3
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=model, vocab_size=400,
                                             model_type="bpe", byte_fallback=True, user_defined_symbols=["<tool>"],
                                             minloglevel=2)
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    tc = json.loads((folder / "tokenizer_config.json").read_text())
    tc.update(chat_template="{{ messages }}", add_prefix_space=False, added_tokens_decoder={
        "1": {"content": "<s>", "special": True}, "3": {"content": "<tool>", "special": False},
        "500": {"content": "<|im_start|>", "special": False}, "501": {"content": "my\u2581word", "special": False}})
    (folder / "tokenizer_config.json").write_text(json.dumps(tc))
    (folder / "added_tokens.json").write_text(json.dumps({"<extra>": 600, "<far>": 40000}))
    (folder / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_p": 0.9, "top_k": 50,
                                                               "repetition_penalty": 1.1, "do_sample": True}))
    ref = _converter(oracle, folder, tmp_path / "ref-bf16.gguf", "bf16")
    convert_hf_gguf(folder, tmp_path / "nb.gguf", "BF16", progress=False)
    assert (tmp_path / "nb.gguf").read_bytes() == ref.read_bytes()
    with open_model(str(ref)) as g:
        assert g.value("tokenizer.ggml.model") == "llama" and g.value("general.sampling.top_k") == 50
    _check_quantized(llama_quantize, ref, folder, tmp_path, "Q4_0")


def test_sharded_float16_checkpoint_is_read_in_the_converters_order(oracle, models, llama_quantize, tmp_path):
    """11 layers in several shards (``blk.10`` sorts before ``blk.2``), float16 weights: the F16 file, and Q4_K_M from
    the converter's F16 file."""
    from nbquant.convert import write_synthetic_checkpoint

    source = models("llama3")[0]
    config = json.loads((source / "config.json").read_text())
    folder = tmp_path / "sharded"
    write_synthetic_checkpoint(folder, hidden=256, intermediate=512, layers=11, vocab=config["vocab_size"],
                               dtype="float16", shard_bytes=40 << 20)
    assert len([f for f in os.listdir(folder) if f.endswith(".safetensors")]) > 2
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((source / name).read_bytes())
    synthetic = json.loads((folder / "config.json").read_text())
    synthetic.update({k: config[k] for k in ("bos_token_id", "eos_token_id")})
    (folder / "config.json").write_text(json.dumps(synthetic))
    ref = _converter(oracle, folder, tmp_path / "ref-f16.gguf", "f16")
    convert_hf_gguf(folder, tmp_path / "nb.gguf", "F16", progress=False)
    assert (tmp_path / "nb.gguf").read_bytes() == ref.read_bytes()
    _check_quantized(llama_quantize, ref, folder, tmp_path, "Q4_K_M")
