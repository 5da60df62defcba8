"""Quantized checkpoints in: ``nbquant convert`` reads compressed-tensors, FP8-block, modelopt and gpt-oss checkpoints.

* :mod:`.formats`: the formats read, from the source's ``quantization_config`` (no flag), each a
  :class:`~nbquant.convert.schemes.Scheme` decoded by the existing codec of its format.
* :mod:`.view`: :func:`open_source`, the source seen as a plain checkpoint whose quantized modules
  are decoded weights (:class:`Decoded`), read one at a time.
* :mod:`.exact`: the targets that hold the source's codes and scales unchanged, re-encoded without
  rounding (:func:`reencode`).
* :mod:`.modelopt`: modelopt's NVFP4 and FP8 exports (``hf_quant_config.json``).
* :mod:`.gptoss`: gpt-oss' MXFP4 experts (``quant_method: "mxfp4"``), to BF16/F16/F32 only.
* :mod:`.dense`: the ``BF16`` / ``F16`` / ``F32`` targets (a plain Hugging Face checkpoint).
* :mod:`.gguf`: a GGUF file (llama, qwen2, qwen3, phi3, gemma2, gemma3), every tensor decoded under its
  transformers name, and its tokenizer (:mod:`.gguf_tokenizer`).

See docs/convert.md, "Quantized checkpoints in".

Examples
--------
>>> import tempfile, os
>>> from nbquant.convert import convert, write_synthetic_checkpoint
>>> src, q, back = tempfile.mkdtemp(), tempfile.mkdtemp(), os.path.join(tempfile.mkdtemp(), "bf16")
>>> _ = write_synthetic_checkpoint(src, hidden=128, intermediate=256, layers=1, vocab=64)
>>> _ = convert(src, os.path.join(q, "w4"), "W4A16", progress=False)
>>> r = convert(os.path.join(q, "w4"), back, "BF16", progress=False)
>>> r.quantized[0].encoding, "quantization_config" in open(os.path.join(back, "config.json")).read()
('decoded', False)
"""

from __future__ import annotations

import numpy as np

from ..codecs import Codec
from ..plan import Checkpoint
from .dense import DENSE_DTYPES, Dense, codec_of
from .exact import exact_dtype, reencode
from .formats import SourceFormat
from .view import Decoded, DecodedFile, decoded_names, open_source

__all__ = ["DENSE_DTYPES", "Dense", "Decoded", "DecodedFile", "SourceFormat", "codec_of", "decoded_names",
           "exact_dtype", "open_source", "reencode", "encode", "encoding", "first_decoded", "dense_kept"]


def encode(x: object, codec: Codec) -> dict[str, np.ndarray] | None:
    """The exact re-encoding of weight ``x`` into ``codec``'s tensors, or None.

    None for a plain array (an unquantized source), or a :class:`Decoded` weight whose format
    ``codec`` cannot hold unchanged (:func:`reencode` on its source tensors), or a BF16/F16/F32 ``codec``.

    Examples
    --------
    >>> import numpy as np
    >>> from nbquant.convert.codecs import codec_for
    >>> from nbquant.convert.schemes import get_scheme
    >>> encode(np.ones((2, 128), np.float32), codec_for(get_scheme("W4A16"))) is None
    True
    """
    if not isinstance(x, Decoded) or codec.format == "dense" or x.fmt is None:  # None: a GGUF tensor
        return None
    return reencode(x.fmt, x.tensors, x.shape, codec, x.dtype)


def encoding(x: object, out: dict | None, codec: Codec) -> str:
    """The report's ``encoding`` of weight ``x`` written as ``out`` (None: quantized by ``codec``): ``exact``,
    ``decoded`` (a BF16/F16/F32 target), ``requantized``, or empty for a weight of an unquantized source."""
    if not isinstance(x, Decoded):
        return ""
    return "exact" if out is not None else "decoded" if codec.format == "dense" else "requantized"


def first_decoded(ckpt: Checkpoint) -> Decoded | None:
    """The first decoded weight of ``ckpt`` (its decoder's kernels are loaded ahead), None for a plain checkpoint."""
    return next((f.tensor(n) for f in ckpt.shards.values() if isinstance(f, DecodedFile) for n in f.decoded), None)


def dense_kept(kept: dict[str, str], names: list[str], ckpt: Checkpoint) -> dict[str, str]:
    """What a BF16/F16/F32 target keeps as it is, and why: every tensor of ``names`` but the decoded weights."""
    decoded = decoded_names(ckpt)
    return {n: kept.get(n, "not quantized in the source") for n in names if n not in decoded}
