"""The ``BF16`` / ``F16`` / ``F32`` targets: a decoded weight written as it is, under its original name.

:class:`Dense` is a :class:`~nbquant.convert.codecs.Codec` whose one tensor is the weight itself
(already decoded to the target's dtype, rounded once from the source's float32 decoding), so that
the shard writer, resume and the report handle a dequantization like any conversion. It is not
registered among the compressed-tensors formats: :func:`codec_of` picks it for a dense scheme.

Examples
--------
>>> import numpy as np
>>> from nbquant.convert.schemes import get_scheme
>>> c = codec_of(get_scheme("bf16"))
>>> type(c).__name__, c.entries((4, 8), DENSE_DTYPES["BF16"])
('Dense', [('weight', 'BF16', (4, 8))])
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import ml_dtypes
import numpy as np

from ..codecs import Codec, Context, codec_for
from ..codecs.base import Entry
from ..safetensors import dtype_name
from ..schemes import Scheme

__all__ = ["DENSE_DTYPES", "Dense", "codec_of"]

#: The dense schemes' dtypes.
DENSE_DTYPES = {"BF16": np.dtype(ml_dtypes.bfloat16), "F16": np.dtype(np.float16), "F32": np.dtype(np.float32)}


class Dense(Codec):
    """A weight kept in its (decoded) dtype: one tensor, ``weight``."""

    format = "dense"

    def check(self, name: str, dtype: np.dtype | str, shape: tuple[int, ...]) -> None:
        """:meth:`Codec.check` of the weight as 2-D: a decoded weight may be 3-D (gpt-oss' fused experts)."""
        super().check(name, dtype, (math.prod(shape[:-1]), shape[-1]))

    def entries(self, shape: tuple[int, ...], dtype: np.dtype) -> list[Entry]:
        return [("weight", dtype_name(dtype), tuple(shape))]

    def quantize(self, x: np.ndarray, ctx: Context) -> dict[str, np.ndarray]:
        return {"weight": np.asarray(x)}

    def dequantize(self, tensors: Mapping[str, np.ndarray], dtype: np.dtype,
                   rows: slice = slice(None)) -> np.ndarray:
        return np.asarray(tensors["weight"][rows]).astype(dtype)


def codec_of(scheme: Scheme) -> Codec:
    """The codec that writes ``scheme``: :class:`Dense` for ``BF16``/``F16``/``F32``, else its format's."""
    return Dense(scheme) if scheme.kind == "dense" else codec_for(scheme)
