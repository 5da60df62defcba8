"""A synthetic Llama-shaped bfloat16 checkpoint (for the demo, the tests and the benchmark): no hub, no torch.

Weights are Student-t samples (4 degrees of freedom: heavy tails, like trained weights) times
a magnitude per row, so per-group scales matter. The tensors are cut into shards of at most
``shard_bytes`` in the order a Hugging Face checkpoint lists them, so that a layer's q/k/v or
gate/up weights can sit in different shards. Options give the head tied to the embedding (no
``lm_head.weight``, ``tie_word_embeddings``) and two MoE layouts: Qwen3-MoE's
(``mlp.experts.E.{gate,up,down}_proj``, router ``mlp.gate``, ``q_norm``/``k_norm``) and
Mixtral's (``block_sparse_moe.experts.E.w1/w2/w3``, router ``block_sparse_moe.gate``).

Examples
--------
>>> import tempfile, os
>>> from nbquant.convert.synthetic import write_synthetic_checkpoint
>>> d = tempfile.mkdtemp()
>>> names = write_synthetic_checkpoint(d, hidden=64, intermediate=128, layers=1, vocab=32, shard_bytes=20000)
>>> sorted(os.listdir(d))[:3], len(names)
(['config.json', 'generation_config.json', 'model-00001-of-00006.safetensors'], 12)
"""

from __future__ import annotations

import json
import os

import ml_dtypes
import numpy as np

from .safetensors import ShardWriter

__all__ = ["write_synthetic_checkpoint", "synthetic_tokenizer", "llama_tensors", "attention_heads", "MOE_LAYOUTS"]


#: The MoE layouts of :func:`llama_tensors`: the experts' module, their projections ``(name, transposed)`` and the
#: ``config.json`` entries.
MOE_LAYOUTS = {
    "qwen3_moe": ("mlp", [("down_proj", True), ("gate_proj", False), ("up_proj", False)],
                  {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                   "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []}),
    "mixtral": ("block_sparse_moe", [("w1", False), ("w2", True), ("w3", False)],
                {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral"}),
}


def attention_heads(hidden: int, kv_heads_ratio: int = 4) -> tuple[int, int, int]:
    """``(head_dim, heads, kv_heads)`` of the synthetic model: heads of 64 (fewer when ``k_proj`` is smaller).

    ``k_proj``/``v_proj`` have ``hidden // kv_heads_ratio`` rows; the config's head counts match them, so
    that a client (transformers) runs the model, not only loads it.

    Examples
    --------
    >>> attention_heads(4096), attention_heads(128)
    ((64, 64, 16), (32, 4, 1))
    """
    kv = max(hidden // kv_heads_ratio, 1)
    head_dim = min(64, kv)
    return head_dim, max(hidden // head_dim, 1), max(kv // head_dim, 1)


def llama_tensors(hidden: int, intermediate: int, layers: int, vocab: int, kv_heads_ratio: int = 4, *,
                  tie_word_embeddings: bool = False, moe: str | None = None,
                  experts: int = 4) -> list[tuple[str, tuple[int, ...]]]:
    """Names and shapes of a Llama checkpoint's tensors, in Hugging Face's order (grouped-query attention).

    ``tie_word_embeddings`` leaves out ``lm_head.weight``; ``moe`` (a key of :data:`MOE_LAYOUTS`)
    replaces each MLP with ``experts`` experts of ``intermediate`` rows and a router of ``experts`` rows.

    Examples
    --------
    >>> [n for n, _ in llama_tensors(128, 256, 1, 64, moe="mixtral", experts=2) if "moe" in n]  # doctest: +ELLIPSIS
    ['model.layers.0.block_sparse_moe.experts.0.w1.weight', ..., 'model.layers.0.block_sparse_moe.gate.weight']
    """
    head_dim, _, kv_heads = attention_heads(hidden, kv_heads_ratio)
    kv = head_dim * kv_heads
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        if moe is None:
            mlp = [(p + f"mlp.{m}.weight", (hidden, intermediate) if m == "down_proj" else (intermediate, hidden))
                   for m in ("down_proj", "gate_proj", "up_proj")]
        else:
            block, projections, _ = MOE_LAYOUTS[moe]
            mlp = [(p + f"{block}.experts.{e}.{m}.weight", (hidden, intermediate) if down else (intermediate, hidden))
                   for e in range(experts) for m, down in projections]
            mlp.append((p + f"{block}.gate.weight", (experts, hidden)))
        norms = [(p + f"self_attn.{m}.weight", (head_dim,)) for m in ("k_norm", "q_norm")] if moe == "qwen3_moe" else []
        out += [(p + "input_layernorm.weight", (hidden,)), *mlp,
                (p + "post_attention_layernorm.weight", (hidden,)),
                (p + "self_attn.k_proj.weight", (kv, hidden)), *norms[:1],
                (p + "self_attn.o_proj.weight", (hidden, hidden)),
                (p + "self_attn.q_proj.weight", (hidden, hidden)), *norms[1:],
                (p + "self_attn.v_proj.weight", (kv, hidden))]
    out.append(("model.norm.weight", (hidden,)))
    return out if tie_word_embeddings else [*out, ("lm_head.weight", (vocab, hidden))]


def _tensor(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if len(shape) == 1:
        return (1.0 + 0.1 * rng.standard_normal(shape, np.float32)).astype(dtype)
    rows = np.exp(rng.uniform(np.log(0.1), np.log(10.0), (shape[0], 1))).astype(np.float32)
    w = rng.standard_t(4, shape).astype(np.float32)
    w *= rows * np.float32(0.02)
    return w.astype(dtype)


def write_synthetic_checkpoint(path: str | os.PathLike, *, hidden: int = 1024, intermediate: int = 2816,
                               layers: int = 4, vocab: int = 8192, shard_bytes: int = 64 << 20, seed: int = 0,
                               index: bool = True, dtype: str = "bfloat16", tie_word_embeddings: bool = False,
                               moe: str | None = None, experts: int = 4, tokenizer: bool = False) -> list[str]:
    """Write a Llama-shaped bfloat16 checkpoint to ``path``: shards, index, ``config.json``, a generation config.

    Parameters
    ----------
    path : path
        The folder (created).
    hidden, intermediate, layers, vocab : int
        The model's sizes (``hidden`` and ``intermediate`` multiples of 128 keep every scheme applicable).
    shard_bytes : int
        A new shard starts when the next tensor would make the current one larger.
    seed : int
    index : bool
        Write ``model.safetensors.index.json`` (a single shard is then ``model.safetensors``
        only when ``index`` is False).
    dtype : {"bfloat16", "float16", "float32"}
        The tensors' dtype.
    tie_word_embeddings : bool
        The head shares the embedding: no ``lm_head.weight``, ``tie_word_embeddings: true``.
    moe : {None, "qwen3_moe", "mixtral"}
        An MoE model of that layout (:data:`MOE_LAYOUTS`): ``experts`` experts per layer of
        ``intermediate`` rows (``moe_intermediate_size``), and a router of ``experts`` rows.
    experts : int
        Experts per layer (``num_experts`` / ``num_local_experts``).
    tokenizer : bool
        Also write a byte-level BPE ``tokenizer.json`` (:func:`synthetic_tokenizer`) and its
        ``tokenizer_config.json``: a GGUF file carries its tokenizer.

    Returns
    -------
    list of str
        The tensor names written.

    Examples
    --------
    >>> import tempfile
    >>> names = write_synthetic_checkpoint(tempfile.mkdtemp(), hidden=64, intermediate=128, layers=1, vocab=16)
    >>> names[:2], len(names)
    (['model.embed_tokens.weight', 'model.layers.0.input_layernorm.weight'], 12)
    """
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(seed)
    dt = np.dtype({"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}[dtype])
    code = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[dtype]
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in llama_tensors(hidden, intermediate, layers, vocab, tie_word_embeddings=tie_word_embeddings,
                                     moe=moe, experts=experts):
        n = int(np.prod(shape)) * dt.itemsize
        if shards[-1] and size + n > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += n
    files = (["model.safetensors"] if len(shards) == 1 and not index else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    weight_map, total = {}, 0
    for file, tensors in zip(files, shards, strict=True):
        w = ShardWriter(os.path.join(path, file), [(n, code, s) for n, s in tensors], {"format": "pt"})
        for name, shape in tensors:
            t = _tensor(rng, shape, dt)
            w.write(name, t)
            weight_map[name] = file
            total += t.nbytes
        w.close()
    if index:
        with open(os.path.join(path, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    head_dim, heads, kv_heads = attention_heads(hidden)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
              "intermediate_size": intermediate, "num_hidden_layers": layers, "vocab_size": vocab,
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
              "rms_norm_eps": 1e-5, "torch_dtype": dtype, "tie_word_embeddings": tie_word_embeddings}
    if moe is not None:
        config.update(MOE_LAYOUTS[moe][2], num_experts_per_tok=min(2, experts),
                      **({"num_experts": experts, "moe_intermediate_size": intermediate} if moe == "qwen3_moe" else
                         {"num_local_experts": experts}))
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(path, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f, indent=2)
    if tokenizer:
        with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(synthetic_tokenizer(vocab), f, indent=2)
        with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
                       "model_max_length": 4096}, f, indent=2)
    return list(weight_map)


def _byte_chars() -> list[str]:
    """GPT-2's byte-level alphabet: the character that stands for each byte value."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def synthetic_tokenizer(vocab: int) -> dict:
    """A GPT-2-style byte-level BPE ``tokenizer.json`` of ``vocab`` ids (at least 2).

    The first ``min(vocab - 1, 256)`` ids are byte tokens, pairs of the first bytes merged fill the ids up to
    ``vocab - 1``, and the last id is ``<|endoftext|>`` (special).

    Examples
    --------
    >>> t = synthetic_tokenizer(260)
    >>> t["model"]["vocab"]["!"], t["model"]["merges"][:2], t["added_tokens"][0]["id"]
    (33, [['!', '!'], ['!', '"']], 259)
    """
    chars = _byte_chars()
    tokens = chars[:min(vocab - 1, 256)]
    merges = []
    for a in chars[33:]:
        for b in chars[33:]:
            if len(tokens) >= vocab - 1:
                break
            merges.append([a, b])
            tokens.append(a + b)
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": vocab - 1, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                              "use_regex": True},
            "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                               "use_regex": True},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges}}
