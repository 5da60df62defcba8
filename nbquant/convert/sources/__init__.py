"""Quantized checkpoints in: ``nbquant convert`` reads compressed-tensors and FP8-block checkpoints, detected.

* :mod:`.formats`: the formats read, from the source's ``quantization_config`` (no flag), each a
  :class:`~nbquant.convert.schemes.Scheme` decoded by the existing codec of its format.
* :mod:`.view`: :func:`open_source`, the source seen as a plain checkpoint whose quantized modules
  are decoded weights (:class:`Decoded`), read one at a time.
* :mod:`.exact`: the targets that hold the source's codes and scales unchanged, re-encoded without
  rounding (:func:`reencode`).
* :mod:`.dense`: the ``BF16`` / ``F16`` / ``F32`` targets (a plain Hugging Face checkpoint).

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

from .dense import DENSE_DTYPES, Dense, codec_of
from .exact import exact_dtype, reencode
from .formats import SourceFormat
from .view import Decoded, DecodedFile, decoded_names, open_source

__all__ = ["DENSE_DTYPES", "Dense", "Decoded", "DecodedFile", "SourceFormat", "codec_of", "decoded_names",
           "exact_dtype", "open_source", "reencode", "encode"]


def encode(x, codec):
    """The exact re-encoding of the decoded weight ``x`` into ``codec``'s tensors, or None (plain array, or no
    exact route); :func:`reencode` on the source's tensors."""
    if not isinstance(x, Decoded):
        return None
    return reencode(x.fmt, x.tensors, x.shape, codec, x.dtype)
