"""A SentencePiece ``tokenizer.model`` as GGUF metadata, as llama.cpp's converter writes it (Llama 2, Mistral).

``convert_hf_to_gguf.py``'s ``_set_vocab_sentencepiece``: ``tokenizer.ggml.model`` ``llama``, ``pre``
``default``, every piece with its score and type (normal, unknown, control, unused, byte), the tokens
of ``added_tokens.json`` and of ``tokenizer_config.json``'s ``added_tokens_decoder`` over them (score
-1000, control when special or special-looking, else user-defined), ``[PAD{i}]`` up to the config's
``vocab_size``, then gguf-py's ``SpecialVocab`` (:func:`~.hf_tokenizer.special_fields`). The model file is
read with a small protobuf reader of its own (field 1, the pieces: their text, score and type), under
fixed limits: no dependency, and an untrusted file cannot make it read past its end.

Examples
--------
>>> piece = b"\\x0a\\x03\\xe2\\x96\\x81" + b"\\x15" + (1.5).hex().encode()[:0] + b"\\x00\\x00\\xc0\\x3f"
>>> model = b"\\x0a" + bytes([len(piece)]) + piece
>>> read_pieces(model)
[('▁', 1.5, 1)]
"""

from __future__ import annotations

import struct

from nbquant.gguf.file import FLOAT32, INT32, STRING, Field

from .hf_tokenizer import TokenizerRefused, looks_special, special_fields

__all__ = ["read_pieces", "sentencepiece_fields", "MAX_MODEL_BYTES"]

#: The largest ``tokenizer.model`` read.
MAX_MODEL_BYTES = 64 << 20
#: SentencePiece's piece types, which are llama.cpp's token types.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise TokenizerRefused("tokenizer.model is not a SentencePiece model (a varint runs past its end)")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at


def _fields(data: bytes):
    """``(field number, wire type, value)`` of one protobuf message: an int for varints, bytes otherwise."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, at = data[at:at + size], at + size
        elif wire == 2:
            size, at = _varint(data, at)
            value, at = data[at:at + size], at + size
        else:
            raise TokenizerRefused(f"tokenizer.model is not a SentencePiece model (wire type {wire})")
        if at > len(data):
            raise TokenizerRefused("tokenizer.model is not a SentencePiece model (a field runs past its end)")
        yield number, wire, value


def read_pieces(data: bytes) -> list[tuple[str, float, int]]:
    """The pieces of a serialized SentencePiece ``ModelProto``: ``(text, score, type)`` in id order."""
    pieces = []
    for number, wire, value in _fields(data):
        if number != 1 or wire != 2:
            continue
        text, score, kind = None, 0.0, NORMAL
        for n, w, v in _fields(value):
            if n == 1 and w == 2:
                try:
                    text = v.decode("utf-8")
                except UnicodeDecodeError:
                    raise TokenizerRefused(f"tokenizer.model: piece {len(pieces)} is not UTF-8") from None
            elif n == 2 and w == 5:
                score = struct.unpack("<f", v)[0]
            elif n == 3 and w == 0:
                kind = v
        if text is None or kind not in (NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE):
            raise TokenizerRefused(f"tokenizer.model: piece {len(pieces)} has no text or an unknown type")
        pieces.append((text, score, kind))
    if not pieces:
        raise TokenizerRefused("tokenizer.model holds no pieces")
    return pieces


def sentencepiece_fields(model: bytes, tok: dict | None, tc: dict | None, added: dict | None, config: dict,
                         chat_template: str | None) -> list[Field]:
    """The ``tokenizer.*`` fields of a SentencePiece tokenizer, in the converter's order.

    Parameters
    ----------
    model : bytes
        ``tokenizer.model``.
    tok, tc, added : dict or None
        ``tokenizer.json``, ``tokenizer_config.json`` and ``added_tokens.json`` (None: absent).
    config : dict
        ``config.json`` as transformers fills it in (``vocab_size``, the ``*_token_id`` keys).
    chat_template : str or None
        ``chat_template.jinja``'s text.
    """
    pieces = read_pieces(model)
    size = config.get("vocab_size") or len(pieces)
    tokens = [f"[PAD{i}]" for i in range(size)]
    scores, types = [-10000.0] * size, [UNUSED] * size
    for i, (text, score, kind) in enumerate(pieces[:size]):
        tokens[i], scores[i] = text, score
        types[i] = kind if kind in (UNKNOWN, CONTROL, UNUSED, BYTE) else NORMAL
    for text, i in (added or {}).items():
        if isinstance(i, int) and 0 <= i < size:
            tokens[i], scores[i], types[i] = text, -1000.0, USER_DEFINED
    decoder = (tc or {}).get("added_tokens_decoder") or {}
    for key, entry in decoder.items():
        i, text = int(key), entry["content"]
        if not 0 <= i < size:
            continue
        if entry.get("special") or looks_special(text):
            types[i] = CONTROL
        else:
            text, types[i] = text.replace("\u2581", " "), USER_DEFINED
        tokens[i], scores[i] = text, -1000.0
    fields = [Field.string("tokenizer.ggml.model", "llama"), Field.string("tokenizer.ggml.pre", "default"),
              Field("tokenizer.ggml.tokens", STRING, [t.encode("utf-8", "surrogatepass") for t in tokens], True),
              Field("tokenizer.ggml.scores", FLOAT32, struct.pack(f"<{size}f", *scores), True),
              Field("tokenizer.ggml.token_type", INT32, struct.pack(f"<{size}i", *types), True)]
    return fields + special_fields(tok or {}, tc, config, size, chat_template)
