"""GGUF tokenizer parity: the files nbquant writes encode text as each model's own Hugging Face tokenizer does.

The reference is llama.cpp's vocabulary tests (``models/ggml-vocab-NAME.gguf``: a real model's tokenizer metadata;
``.gguf.inp``: test texts; ``.gguf.out``: the ids the model's original Hugging Face tokenizer gives them, without
special tokens), from the llama.cpp tree the GGUF oracle uses (``tools/ggml_oracle.py``). The clients are the
``tokenizers`` library and transformers' ``AutoTokenizer``; a converted model with its tokenizer runs in transformers.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from _gguf_source import write_llama_gguf

from nbquant.convert import convert
from nbquant.convert.sources.gguf_tokenizer import tokenizer_files
from nbquant.gguf.split import open_model

pytestmark = pytest.mark.parity

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

_ORACLE = Path(__file__).resolve().parents[1] / "tools" / "ggml_oracle.py"
#: Vocabulary → whether llama.cpp (and the model's tokenizer) puts BOS first.
VOCABS = {"llama-bpe": True, "llama-spm": True, "qwen2": False, "deepseek-coder": True, "gpt-2": False,
          "phi-3": True}


@pytest.fixture(scope="session")
def vocab_folder() -> Path:
    spec = importlib.util.spec_from_file_location("ggml_oracle", _ORACLE)
    oracle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oracle)
    return oracle.vocab_folder()


def _cases(folder: Path, name: str) -> list[tuple[str, list[int]]]:
    """llama.cpp's ``read_tests``: texts split on the separator line, one line of ids for each."""
    texts = (folder / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    if texts[-1] == "":
        texts.pop()
    lines = (folder / f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8").split("\n")[:len(texts)]
    assert len(texts) == len(lines) >= 40
    return [(t, [int(i) for i in line.split()]) for t, line in zip(texts, lines, strict=True)]


def _write(folder: Path, name: str, out: Path) -> dict[str, str]:
    with open_model(str(folder / f"ggml-vocab-{name}.gguf")) as g:
        files, notes = tokenizer_files(g.value, 4096)
    assert notes == []
    out.mkdir()
    for rel, text in files.items():
        (out / rel).write_text(text, encoding="utf-8")
    return files


@pytest.mark.parametrize("name", VOCABS)
def test_written_tokenizer_gives_the_models_own_ids(vocab_folder, tmp_path, name):
    files = _write(vocab_folder, name, tmp_path / "tok")
    fast = tokenizers.Tokenizer.from_str(files["tokenizer.json"])
    auto = transformers.AutoTokenizer.from_pretrained(tmp_path / "tok")
    for text, ids in _cases(vocab_folder, name):
        assert fast.encode(text, add_special_tokens=False).ids == ids, text
        assert auto(text, add_special_tokens=False)["input_ids"] == ids, text
        with_special = auto(text)["input_ids"]
        assert with_special == ([auto.bos_token_id] if VOCABS[name] else []) + ids, text


def test_converted_model_and_tokenizer_run_in_transformers(vocab_folder, tmp_path, capfd):
    torch = pytest.importorskip("torch")
    with open_model(str(vocab_folder / "ggml-vocab-llama-spm.gguf")) as g:
        extra = [f for k, f in g.fields.items() if k.startswith("tokenizer.") and not k.endswith(("bos_token_id",
                                                                                                 "eos_token_id"))]
        vocab = len(g.value("tokenizer.ggml.tokens"))
    src = write_llama_gguf(str(tmp_path / "m.gguf"), hidden=64, intermediate=128, layers=1, vocab=vocab, heads=4,
                           kv_heads=2, extra=extra)
    out = tmp_path / "out"
    report = convert(src, str(out), "BF16", progress=False)
    assert report.notes == []
    capfd.readouterr()
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert "incorrect regex pattern" not in capfd.readouterr().err  # config.json states its transformers_version
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    batch = tok("Hello world", return_tensors="pt")
    assert batch["input_ids"][0].tolist() == [1, 15043, 3186]  # <s> ▁Hello ▁world, as Llama 2's tokenizer gives
    with torch.no_grad():
        generated = model.generate(**batch, max_new_tokens=3, do_sample=False)
    assert generated.shape == (1, 6) and tok.decode(generated[0][:3], skip_special_tokens=True) == "Hello world"
    assert json.loads((out / "tokenizer_config.json").read_text())["eos_token"] == "</s>"
