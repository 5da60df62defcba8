"""A Hugging Face tokenizer as GGUF metadata (``tokenizer.ggml.*``), as llama.cpp's converter writes it.

The reference is ``convert_hf_to_gguf.py``'s byte-level BPE path (``_set_vocab_gpt2``: the token list
and types of ``get_vocab_base``, then gguf-py's ``SpecialVocab``): the same keys, in the same order,
with the same values, read from ``tokenizer.json``, ``tokenizer_config.json``, ``config.json`` and
``chat_template.jinja`` / ``chat_template.json`` with no tokenizer library.

* ``tokenizer.ggml.pre``: llama.cpp names a pre-tokenizer by hashing the ids of a test text; nbquant
  reads the split pattern and normalizer of ``tokenizer.json`` instead and knows those of
  :data:`~nbquant.convert.sources.gguf_tokenizer.PRE_TOKENIZERS` (Llama 3, Qwen2/2.5/3, GPT-2); any other
  tokenizer is refused (llama.cpp's converter is then the tool).
* Tokens: the vocabulary and the added tokens by id, ``[PAD{i}]`` (unused) for ids up to the config's
  ``vocab_size`` that have none; an added token is a control token when it is special or looks special
  (``<|...|>``, ``<｜...｜>``, ``<unused...>``, ``<pad>``, ``<mask>``...), else user-defined.
* Special token ids from ``tokenizer_config.json`` (by content, in ``tokenizer.json``'s added tokens),
  then ``config.json``; ``add_bos_token`` / ``add_eos_token`` / ``add_sep_token`` from the
  post-processor, then ``tokenizer_config.json``; the chat template.

Examples
--------
>>> tok = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
...        "added_tokens": [{"id": 3, "content": "<|endoftext|>", "special": True, "normalized": False}],
...        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}}
>>> fields = tokenizer_fields(tok, {"eos_token": "<|endoftext|>"}, {"vocab_size": 4}, None)
>>> [(f.key, f.value) for f in fields if not f.is_array]
[('tokenizer.ggml.model', 'gpt2'), ('tokenizer.ggml.pre', 'gpt-2'), ('tokenizer.ggml.eos_token_id', 3)]
"""

from __future__ import annotations

import struct
from typing import Any

from nbquant.gguf.file import BOOL, INT32, STRING, Field

from ..safetensors import ConvertError
from ..sources.gguf_tokenizer import PRE_TOKENIZERS

__all__ = ["looks_special", "special_fields", "tokenizer_fields", "TokenizerRefused"]

#: llama.cpp's token types.
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5
#: The special token kinds read, in gguf-py's order, and their keys.
_KINDS = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
_ID_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id", "sep": "seperator_token_id",
            "pad": "padding_token_id", "cls": "cls_token_id", "mask": "mask_token_id", "eot": "eot_token_id",
            "eom": "eom_token_id"}
_LOOK_SPECIAL = ("<pad>", "<mask>", "<2mass>", "[@BOS@]")


class TokenizerRefused(ConvertError):
    """A tokenizer the GGUF metadata cannot be written for (one line: why)."""


def looks_special(token: str) -> bool:
    """The converter's ``does_token_look_special``: an added token it makes a control token though not special."""
    return token in _LOOK_SPECIAL or (token.startswith("<|") and token.endswith("|>")) or \
        (token.startswith("<｜") and token.endswith("｜>")) or (token.startswith("<unused") and token.endswith(">"))


def _split_patterns(node: Any) -> tuple[str, ...] | None:
    """The ``Split`` regex patterns of a pre-tokenizer, in order (None: a shape nbquant does not read)."""
    if not isinstance(node, dict):
        return None
    kind = node.get("type")
    if kind == "ByteLevel":
        return () if node.get("use_regex") is False else None
    if kind == "Split":
        pattern = node.get("pattern")
        regex = pattern.get("Regex") if isinstance(pattern, dict) else None
        return (regex,) if isinstance(regex, str) and node.get("behavior") == "Isolated" and \
            not node.get("invert") else None
    if kind == "Sequence" and isinstance(node.get("pretokenizers"), list):
        out: tuple[str, ...] = ()
        for child in node["pretokenizers"]:
            part = _split_patterns(child)
            if part is None:
                return None
            out += part
        return out
    return None


def _pre(tok: dict) -> str:
    """The ``tokenizer.ggml.pre`` name of ``tok`` (see the module docstring)."""
    node = tok.get("pre_tokenizer")
    if isinstance(node, dict) and node.get("type") == "ByteLevel" and node.get("use_regex", True) is True:
        patterns: tuple[str, ...] | None = ()  # GPT-2's own split
    else:
        patterns = _split_patterns(node)
    normalizer = tok.get("normalizer")
    for name, (split, ignore_merges, norm) in PRE_TOKENIZERS.items():
        if patterns == split and normalizer == norm and bool(tok["model"].get("ignore_merges")) == ignore_merges:
            return name
    raise TokenizerRefused("tokenizer.json's pre-tokenizer is not one nbquant recognizes (it knows Llama 3's, "
                           "Qwen2's and GPT-2's)")


def _tokens(tok: dict, vocab_size: int) -> tuple[list[str], list[int]]:
    """The token list and types of ``get_vocab_base``."""
    by_id: dict[int, str] = {}
    for text, i in tok["model"]["vocab"].items():
        by_id[i] = text
    added = {}
    for entry in tok.get("added_tokens", []):
        by_id[entry["id"]] = entry["content"]
        added[entry["content"]] = entry
    if by_id and max(by_id) >= vocab_size:
        raise TokenizerRefused(f"tokenizer.json holds token id {max(by_id)}, past config.json's vocab_size "
                               f"{vocab_size}")
    tokens, types = [], []
    for i in range(vocab_size):
        text = by_id.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
            continue
        entry = added.get(text)
        if entry is None:
            types.append(NORMAL)
        elif entry.get("special") or looks_special(text):
            types.append(CONTROL)
        else:
            text = text.replace("\u2581", " ")
            types.append(USER_DEFINED)
        tokens.append(text)
    return tokens, types


def _merges(tok: dict) -> list[str]:
    merges = tok["model"].get("merges")
    if not isinstance(merges, list) or not merges:
        return []
    kinds = set(map(type, merges))
    if kinds == {str}:
        return merges
    if kinds == {list} and set(map(len, merges)) == {2} and \
            set(map(type, (s for pair in merges for s in pair))) == {str}:
        space = "\u0120"  # a space inside a merge part, as gguf-py encodes it (chr(ord(" ") + 256))
        return [f"{a} {b}" if " " not in a and " " not in b else f"{a.replace(' ', space)} {b.replace(' ', space)}"
                for a, b in merges]
    raise TokenizerRefused("tokenizer.json's merges are neither strings nor pairs of strings")


class _Special:
    """gguf-py's ``SpecialVocab`` for a tokenizer.json: the special ids and the add_* flags, in their order."""

    def __init__(self, tok: dict, tc: dict | None, config: dict, n_vocab: int) -> None:
        self.ids: dict[str, int] = {}
        self.add: dict[str, bool] = {}
        self.kinds = list(_KINDS)
        self.n_vocab = n_vocab
        tc = None if not tc else dict(tc)
        self._post_processor(tok.get("post_processor"), tc)
        if tc:
            added = tok.get("added_tokens", [])
            for kind in self.kinds:
                flag = tc.get(f"add_{kind}_token")
                if isinstance(flag, bool) and kind not in self.add:
                    self.add[kind] = flag
                entry = tc.get(f"{kind}_token")
                content = entry.get("content") if isinstance(entry, dict) else entry
                if isinstance(content, str):
                    self._set(kind, next((a.get("id") for a in added if a.get("content") == content), None))
        for kind in self.kinds:
            self._set(kind, config.get(f"{kind}_token_id"))

    def _set(self, kind: str, tid: Any) -> None:
        if not isinstance(tid, int) or isinstance(tid, bool):
            return
        if tid < 0:
            raise TokenizerRefused(f"special token {kind} has the id {tid}")
        if tid < self.n_vocab and kind not in self.ids:
            self.ids[kind] = tid

    def _post_processor(self, post: Any, tc: dict | None) -> None:
        if not isinstance(post, dict):
            return
        cfg = tc or {}
        bos, cls, eos, sep = (cfg.get(k) for k in ("bos_token", "cls_token", "eos_token", "sep_token"))
        if not bos and cls and tc:
            tc["bos_token"] = bos = cls
        if not eos and sep and tc:
            tc["eos_token"] = eos = sep
        for proc in post.get("processors", [post]):
            kind = proc.get("type") if isinstance(proc, dict) else None
            if kind == "ByteLevel":
                self.add.setdefault("bos", False)
                self.add.setdefault("eos", False)
            elif kind == "RobertaProcessing":
                self.add.update(bos=True, eos=True, sep=True)
                if not cls and tc:
                    tc["cls_token"] = cls = proc.get("cls", [bos])[0]
                if not sep and tc:
                    tc["sep_token"] = sep = proc.get("sep", [eos])[0]
            elif kind == "TemplateProcessing":
                bos, cls, eos, sep = self._template(proc, tc, bos, cls, eos, sep)

    def _template(self, proc: dict, tc: dict | None, bos, cls, eos, sep):
        single, pair = proc.get("single", []), proc.get("pair", [])
        first = last = None
        if len(single) > 1:
            first = single[0].get("SpecialToken", {}).get("id")
            if first:
                if not tc:
                    bos = first
                elif first not in (bos, cls):
                    if not bos:
                        tc["bos_token"] = bos = first
                    if not cls:
                        tc["cls_token"] = cls = first
                self.add["bos"] = first in (bos, cls)
            last = single[-1].get("SpecialToken", {}).get("id")
            if last:
                if not tc:
                    eos = last
                elif last != eos:
                    for extra in ("eot", "eom"):
                        if extra not in self.kinds:
                            self.kinds.append(extra)
                            tc[f"{extra}_token"] = eos
                            break
                    tc["eos_token"] = eos = last
                self.add["eos"] = last == eos
        if pair:
            start = 1 if first and pair[0].get("SpecialToken", {}).get("id") == first else 0
            stop = -1 if last and pair[-1].get("SpecialToken", {}).get("id") == last else None
            middle = pair[start:stop]
            if middle and middle[0].get("Sequence", {}).get("id") == "A" and \
                    middle[-1].get("Sequence", {}).get("id") == "B" and middle[1:-1]:
                middle = middle[1:-1]
                add_sep = False
                entry = middle[0].get("SpecialToken", {}).get("id")
                if entry and entry in (sep, eos) and not last:
                    add_sep = True
                if len(middle) == 2:
                    entry = middle[1].get("SpecialToken", {}).get("id")
                    if entry and entry in (sep, eos):
                        add_sep = True
                self.add["sep"] = add_sep
                if add_sep and not sep and tc:
                    tc["sep_token"] = eos
        return bos, cls, eos, sep


def _strings(key: str, values: list[str]) -> Field:
    return Field(key, STRING, [v.encode("utf-8", "surrogatepass") for v in values], True)


def tokenizer_fields(tok: dict, tc: dict | None, config: dict, chat_template: str | None) -> list[Field]:
    """The ``tokenizer.*`` fields of a byte-level BPE tokenizer, in the converter's order.

    Parameters
    ----------
    tok : dict
        ``tokenizer.json``.
    tc : dict or None
        ``tokenizer_config.json`` (None: absent).
    config : dict
        ``config.json`` (``vocab_size`` and the ``*_token_id`` keys).
    chat_template : str or None
        The text of ``chat_template.jinja`` (or ``chat_template.json``'s template), used when
        ``tokenizer_config.json`` has none.

    Raises
    ------
    TokenizerRefused
        A tokenizer this writer does not cover (not byte-level BPE, an unknown pre-tokenizer ...).
    """
    model = tok.get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict) or \
            model.get("byte_fallback"):
        raise TokenizerRefused("tokenizer.json is not a byte-level BPE tokenizer (SentencePiece and WordPiece "
                               "tokenizers are not written)")
    vocab_size = config.get("vocab_size")
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size <= 0:
        vocab_size = len(model["vocab"]) + len(tok.get("added_tokens", []))
    pre = _pre(tok)
    tokens, types = _tokens(tok, vocab_size)
    fields = [Field.string("tokenizer.ggml.model", "gpt2"), Field.string("tokenizer.ggml.pre", pre),
              _strings("tokenizer.ggml.tokens", tokens),
              Field("tokenizer.ggml.token_type", INT32, struct.pack(f"<{len(types)}i", *types), True)]
    merges = _merges(tok)
    if merges:
        fields.append(_strings("tokenizer.ggml.merges", merges))
    return fields + special_fields(tok, tc, config, len(tokens), chat_template)


def special_fields(tok: dict, tc: dict | None, config: dict, n_vocab: int, chat_template: str | None) -> list[Field]:
    """gguf-py's ``SpecialVocab`` keys: the special token ids, the ``add_*_token`` flags, the chat template.

    Parameters
    ----------
    tok, tc : dict or None
        ``tokenizer.json`` (``{}`` when absent) and ``tokenizer_config.json`` (None when absent).
    config : dict
        ``config.json`` (its ``*_token_id`` keys).
    n_vocab : int
        The token count: an id at or past it is left out.
    chat_template : str or None
        ``chat_template.jinja``'s text, used when ``tokenizer_config.json`` has none.
    """
    special = _Special(tok, tc, config, n_vocab)
    fields = [Field.u32(f"tokenizer.ggml.{_ID_KEYS[k]}", v) for k, v in special.ids.items()]
    fields += [Field(f"tokenizer.ggml.add_{k}_token", BOOL, bytes([v])) for k, v in special.add.items()]
    template = tc.get("chat_template", chat_template) if tc else None
    if isinstance(template, list):
        raise TokenizerRefused("tokenizer_config.json holds several chat templates (a list)")
    if isinstance(template, str):
        fields.append(Field.string("tokenizer.chat_template", template))
    return fields
