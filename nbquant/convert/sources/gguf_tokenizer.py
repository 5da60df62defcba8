"""The tokenizer of a GGUF model written back as Hugging Face files: ``tokenizer.json`` and ``tokenizer_config.json``.

llama.cpp's converter stores the tokenizer in the metadata (``tokenizer.ggml.*``): the tokens, their
types, the BPE merges or the SentencePiece scores, the special token ids, the pre-tokenizer's name
and the chat template. :func:`tokenizer_files` turns them back into the two files
``AutoTokenizer.from_pretrained`` reads, with no dependency (the JSON is written directly). The
definition of right is the model's original Hugging Face tokenizer: llama.cpp's vocabulary tests
(``models/ggml-vocab-*.gguf.inp``/``.out``, written with that tokenizer) give the ids, and the parity tier
checks that the written files encode every test text to those ids.

What is written:

* ``tokenizer.model == "gpt2"`` (byte-level BPE) with ``tokenizer.ggml.pre`` one of :data:`PRE_TOKENIZERS`
  (Llama 3, Qwen2/Qwen2.5/Qwen3, DeepSeek-Coder, GPT-2): the vocabulary and merges as stored, that model's split
  pattern, normalizer and ``ignore_merges``, the byte-level decoder.
* ``tokenizer.model == "llama"`` (SentencePiece BPE: Llama 2, Mistral): byte fallback, the merges
  rebuilt from the scores as transformers' ``generate_merges`` builds them, the ``▁`` normalizer and
  decoder.
* Added tokens: every ``CONTROL`` token (special) and ``USER_DEFINED`` token (not special).
* A post-processor that adds BOS and EOS where llama.cpp does (``tokenizer.ggml.add_bos_token``,
  ``add_eos_token``, else llama.cpp's default for the tokenizer type).
* ``tokenizer_config.json``: the generic fast tokenizer class, the special tokens by name, the chat
  template, ``model_max_length`` from the context length.

Any other tokenizer is not written; the reason comes back as a note, and the model's weights are
written all the same.

Examples
--------
>>> meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
...         "tokenizer.ggml.tokens": ["a", "b", "ab", "<|endoftext|>"], "tokenizer.ggml.token_type": [1, 1, 1, 3],
...         "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.eos_token_id": 3}
>>> files, notes = tokenizer_files(meta.get, context_length=32)
>>> sorted(files), notes
(['tokenizer.json', 'tokenizer_config.json'], [])
>>> import json
>>> tok = json.loads(files["tokenizer.json"])
>>> tok["model"]["vocab"]["ab"], tok["model"]["merges"], tok["added_tokens"][0]["content"]
(2, [['a', 'b']], '<|endoftext|>')
>>> json.loads(files["tokenizer_config.json"])["eos_token"]
'<|endoftext|>'
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["PRE_TOKENIZERS", "tokenizer_files"]

#: llama.cpp's token types (``llama_token_type``) that become added tokens: special, and not special.
CONTROL, USER_DEFINED = 3, 4

_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+",)
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+",)
_DEEPSEEK_CODER_SPLIT = ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}")

#: ``tokenizer.ggml.pre`` → (the split patterns, applied in turn, or none for GPT-2's own; ``ignore_merges``; the
#: normalizer), as in those models' own ``tokenizer.json``.
PRE_TOKENIZERS: dict[str, tuple[tuple[str, ...], bool, dict | None]] = {
    "llama-bpe": (_LLAMA3_SPLIT, True, None),
    "llama3": (_LLAMA3_SPLIT, True, None),
    "llama-v3": (_LLAMA3_SPLIT, True, None),
    "qwen2": (_QWEN2_SPLIT, False, {"type": "NFC"}),
    "deepseek-coder": (_DEEPSEEK_CODER_SPLIT, False, None),
    "gpt-2": ((), False, None),
}
#: The longest SentencePiece piece whose splits are searched for merges (see :func:`_spm_merges`).
MAX_MERGED_PIECE = 256
#: llama.cpp's BOS default for a byte-level BPE tokenizer that does not state it (Llama 3's pre-tokenizers add it).
_BPE_ADDS_BOS = {"llama-bpe", "llama3", "llama-v3"}

Metadata = Callable[[str], Any]


def _added(tokens: list[str], types: list[int] | None, *ids: int | None) -> list[dict]:
    """The added tokens: CONTROL (special) and USER_DEFINED ones, and the BOS, EOS and UNK ids (special)."""
    kinds = {}
    if types is not None:
        kinds = {i: t == CONTROL for i, t in enumerate(types) if t in (CONTROL, USER_DEFINED)}
    for i in ids:
        if i is not None and i not in kinds:
            kinds[i] = True
    return [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": special} for i, special in sorted(kinds.items())]


def _template(bos: str | None, bos_id: int | None, eos: str | None, eos_id: int | None) -> dict | None:
    """A ``TemplateProcessing`` that puts BOS before and EOS after each sequence (None when neither is added)."""
    marks = [(t, i) for t, i in ((bos, bos_id), (eos, eos_id)) if t is not None]
    if not marks:
        return None

    def seq(name: str, type_id: int) -> list[dict]:
        out = [{"SpecialToken": {"id": bos, "type_id": type_id}}] if bos is not None else []
        out.append({"Sequence": {"id": name, "type_id": type_id}})
        return out + ([{"SpecialToken": {"id": eos, "type_id": type_id}}] if eos is not None else [])

    return {"type": "TemplateProcessing", "single": seq("A", 0), "pair": seq("A", 0) + seq("B", 1),
            "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in marks}}


def _spm_merges(tokens: list[str], scores: list[float]) -> list[list[str]]:
    """SentencePiece BPE merges from the scores, ordered as transformers' ``generate_merges`` orders them.

    A piece longer than :data:`MAX_MERGED_PIECE` characters is not split: SentencePiece builds none (its
    ``max_sentencepiece_length`` is 16 by default), and a hostile file's long strings cannot make the search
    quadratic.
    """
    ids = {t: i for i, t in enumerate(tokens)}
    merges = []
    for piece, score in zip(tokens, scores, strict=True):
        if len(piece) > MAX_MERGED_PIECE:
            continue
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece)) if piece[:k] in ids and piece[k:] in ids]
        local.sort(key=lambda lr: (ids[lr[0]], ids[lr[1]]))
        merges.extend((score, left, right) for left, right in local)
    merges.sort(key=lambda m: (m[0], len(m[1]), len(m[2])), reverse=True)
    return [[left, right] for _, left, right in merges]


def _flag(meta: Metadata, key: str, default: bool) -> bool:
    value = meta(f"tokenizer.ggml.{key}")
    return value if isinstance(value, bool) else default


def _all(values: object, kind: type | tuple[type, ...]) -> bool:
    """Whether ``values`` is a list of ``kind`` (a file's metadata are untrusted: an array may hold any type)."""
    return isinstance(values, list) and all(isinstance(v, kind) and not isinstance(v, bool) for v in values)


def tokenizer_files(meta: Metadata, context_length: int | None = None) -> tuple[dict[str, str], list[str]]:
    """``tokenizer.json`` and ``tokenizer_config.json`` of a GGUF model, or none and a note saying why.

    Parameters
    ----------
    meta : callable
        ``meta(key)`` is the decoded metadata value of ``key`` (None when absent), e.g.
        :meth:`nbquant.gguf.split.SplitModel.value`.
    context_length : int, optional
        ``model_max_length`` in ``tokenizer_config.json``.

    Returns
    -------
    files : dict
        File name → text; empty when the tokenizer is not one this module writes.
    notes : list of str
        Why nothing was written, for the convert report.

    Examples
    --------
    >>> tokenizer_files({"tokenizer.ggml.model": "bert"}.get)
    ({}, ["tokenizer not written: tokenizer.ggml.model 'bert' is not one nbquant writes (gpt2, llama); copy \
tokenizer.json and tokenizer_config.json from the original model"])
    """
    model = meta("tokenizer.ggml.model")
    tokens = meta("tokenizer.ggml.tokens")
    pre = meta("tokenizer.ggml.pre") or "default"
    pre = pre if isinstance(pre, str) else repr(pre)

    def refuse(why: str) -> tuple[dict[str, str], list[str]]:
        return {}, [f"tokenizer not written: {why}; copy tokenizer.json and tokenizer_config.json from the "
                    "original model"]

    if model is None:
        return refuse("the file holds none (no tokenizer.ggml.model)")
    if model not in ("gpt2", "llama"):
        return refuse(f"tokenizer.ggml.model {model!r} is not one nbquant writes (gpt2, llama)")
    if not _all(tokens, str) or not tokens:
        return refuse("the file holds no tokenizer.ggml.tokens (an array of strings)")
    if model == "gpt2" and pre not in PRE_TOKENIZERS:
        return refuse(f"tokenizer.ggml.pre {pre!r} is not a pre-tokenizer nbquant writes "
                      f"({', '.join(PRE_TOKENIZERS)})")
    types = meta("tokenizer.ggml.token_type")
    scores = meta("tokenizer.ggml.scores")
    merges = meta("tokenizer.ggml.merges")
    for key, value, kind in (("token_type", types, int), ("scores", scores, (int, float))):
        if value is not None and (not _all(value, kind) or len(value) != len(tokens)):
            return refuse(f"tokenizer.ggml.{key} does not have one number per token ({len(tokens)})")
    if model == "gpt2" and not (_all(merges, str) and all(" " in m for m in merges)):
        return refuse("a BPE tokenizer without tokenizer.ggml.merges (strings 'left right')")
    if model == "llama" and scores is None:
        return refuse("a SentencePiece tokenizer without tokenizer.ggml.scores")

    def special(key: str) -> tuple[str | None, int | None]:
        i = meta(f"tokenizer.ggml.{key}_token_id")
        return (tokens[i], i) if isinstance(i, int) and 0 <= i < len(tokens) else (None, None)

    (bos, bos_id), (eos, eos_id) = special("bos"), special("eos")
    (unk, unk_id), (pad, _) = special("unknown"), special("padding")
    add_bos = _flag(meta, "add_bos_token", model == "llama" or pre in _BPE_ADDS_BOS) and bos is not None
    add_eos = _flag(meta, "add_eos_token", False) and eos is not None
    template = _template(bos if add_bos else None, bos_id, eos if add_eos else None, eos_id)
    vocab = {t: i for i, t in enumerate(tokens)}
    if model == "gpt2":
        splits, ignore_merges, normalizer = PRE_TOKENIZERS[pre]
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": not splits}
        pre_tokenizer = byte_level if not splits else {"type": "Sequence", "pretokenizers": [
            *({"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": False} for p in splits),
            dict(byte_level, trim_offsets=False)]}
        post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
        post_processor = post if template is None else {"type": "Sequence", "processors": [post, template]}
        decoder = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
        bpe = {"unk_token": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
               "merges": [m.split(" ", 1) for m in merges]}
    else:
        prefix = _flag(meta, "add_space_prefix", True)
        normalizer = {"type": "Sequence", "normalizers": [
            *([{"type": "Prepend", "prepend": "▁"}] if prefix else []),
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        pre_tokenizer, post_processor = None, template
        decoder = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, *([{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if prefix else [])]}
        bpe = {"unk_token": unk, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
               "merges": _spm_merges(tokens, scores)}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": _added(tokens, types, bos_id, eos_id, unk_id),
        "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
        "decoder": decoder,
        "model": {"type": "BPE", "dropout": None, "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  **bpe, "vocab": vocab},
    }
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": add_bos,
                              "add_eos_token": add_eos, "clean_up_tokenization_spaces": False}
    for name, token in (("bos_token", bos), ("eos_token", eos), ("unk_token", unk), ("pad_token", pad)):
        if token is not None:
            config[name] = token
    template_text = meta("tokenizer.chat_template")
    if isinstance(template_text, str):
        config["chat_template"] = template_text
    if context_length:
        config["model_max_length"] = context_length
    return {"tokenizer.json": json.dumps(tokenizer, ensure_ascii=False, indent=2),
            "tokenizer_config.json": json.dumps(config, ensure_ascii=False, indent=2, sort_keys=True)}, []
