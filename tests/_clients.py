"""The real-client harness of tests/test_parity_clients.py: tiny transformers models, both converters, the loader.

Needs the parity environment (torch CPU, transformers, llmcompressor); the test module imports it only there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import loguru
import torch
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[1]

#: Shapes shared by every model: every K (128, 256) is a multiple of the integer schemes' group of 128.
COMMON = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 32, "vocab_size": 512, "max_position_embeddings": 256}
#: model name -> (transformers model_type, config arguments). save_pretrained writes the checkpoint layout
#: (one ``experts.<e>.<proj>.weight`` per expert; transformers fuses them again when it loads).
MODELS = {
    "llama": ("llama", {"intermediate_size": 256, "tie_word_embeddings": False}),
    "qwen3-tied": ("qwen3", {"intermediate_size": 256, "tie_word_embeddings": True}),
    "qwen3-moe": ("qwen3_moe", {"intermediate_size": 256, "moe_intermediate_size": 128, "num_experts": 4,
                                "num_experts_per_tok": 2, "decoder_sparse_step": 1, "tie_word_embeddings": False}),
    "mixtral": ("mixtral", {"intermediate_size": 256, "num_local_experts": 4, "num_experts_per_tok": 2,
                            "tie_word_embeddings": False}),
}
#: The fixed token batch of every forward pass: 4 sequences of 32 tokens.
BATCH = (4, 32)


def build_source(name: str, path: Path, seed: int = 0) -> Path:
    """Save the random-init bfloat16 model ``name`` (seeded) as a safetensors checkpoint in ``path``."""
    model_type, kwargs = MODELS[name]
    config = AutoConfig.for_model(model_type, **COMMON, **kwargs)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(path, safe_serialization=True)
    return path


def tokens(vocab: int = COMMON["vocab_size"], seed: int = 1) -> torch.Tensor:
    """The fixed token batch (int64, ``BATCH``)."""
    return torch.randint(0, vocab, BATCH, generator=torch.Generator().manual_seed(seed))


def nbquant_convert(src: Path, dst: Path, scheme: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m nbquant convert SRC DST --scheme S ARGS...`` with this interpreter; raises on a non-zero exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "nbquant", "convert", str(src), str(dst), "--scheme", scheme, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    if r.returncode:
        raise AssertionError(f"{' '.join(cmd[1:])} exited {r.returncode}: {r.stderr.strip()}")
    return r


def peer_convert(src: Path, dst: Path, scheme: str, ignore: list[str]) -> None:
    """llm-compressor's ``model_free_ptq`` with the same scheme and ignore list."""
    from llmcompressor import model_free_ptq

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model_free_ptq(str(src), str(dst), scheme=scheme, ignore=ignore, max_workers=1, device="cpu")


def quantization_config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())["quantization_config"]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@dataclass
class Loaded:
    """A model transformers loaded, with what it said while loading."""

    model: torch.nn.Module
    info: dict  # output_loading_info: missing_keys, unexpected_keys, mismatched_keys, error_msgs
    log: list[str]  # WARNING and above of the transformers loggers and of loguru (compressed-tensors)
    warned: list[str]  # Python warnings


@contextlib.contextmanager
def _captured():
    """The transformers loggers' records and loguru's messages (WARNING and above), and the Python warnings."""
    handler = _Records()
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    messages: list[str] = []
    sink = loguru.logger.add(lambda m: messages.append(m.record["message"]), level="WARNING")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield handler.records, messages, caught
    finally:
        logger.removeHandler(handler)
        loguru.logger.remove(sink)


def load(folder: Path, **kwargs) -> Loaded:
    """``AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)`` on the CPU, in eval mode."""
    with _captured() as (records, messages, caught):
        model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True, **kwargs)
    model.eval()
    return Loaded(model, info, [r.getMessage() for r in records] + messages,
                  [f"{w.category.__name__}: {w.message}" for w in caught])


def logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """One forward pass (no cache); float32 logits ``(batch, seq, vocab)``."""
    with torch.no_grad():
        return model(ids, use_cache=False).logits.float()


def agreement(reference: torch.Tensor, other: torch.Tensor) -> tuple[float, float]:
    """Cosine similarity of the two logit tensors (flattened) and the fraction of positions with the same top-1."""
    cos = torch.nn.functional.cosine_similarity(reference.flatten(), other.flatten(), dim=0).item()
    top1 = (reference.argmax(-1) == other.argmax(-1)).float().mean().item()
    return cos, top1
