"""A drop-in for gguf-py's ``gguf.quants.quantize`` / ``dequantize`` (gguf 0.19), on nbquant's GGUF kernels.

Same signatures, shapes and dtypes: ``quantize(data, qtype)`` returns uint8 records of
shape ``data.shape[:-1] + (row bytes,)``; ``dequantize(data, qtype)`` float32 values;
F32 and F16 are casts and views, as there. ``qtype`` may be a
``gguf.GGMLQuantizationType``, its int value or its name (gguf need not be installed).
Differences, all on purpose:

* the bytes are ggml's C quantizer's (``ggml_quantize_chunk``), which gguf-py's own
  quantizers also match except for signed zeros (a Q4_1/Q5_1 block minimum beside a
  ``-0.0``; an all-zero Q4_0/Q5_0 block stores ``d = -0.0``, as C does);
* ``quantize`` takes llama.cpp's importance matrix as ``imatrix=``;
* NaN values come back as ``numpy.nan`` (gguf-py keeps the float16 payload);
* runs on the ``cpu`` backend.

Examples
--------
>>> import numpy as np
>>> from nbquant.compat import gguf
>>> x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
>>> gguf.quantize(x, "Q4_0").shape
(2, 18)
>>> gguf.dequantize(gguf.quantize(x, 8), "Q8_0").dtype
dtype('float32')
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

from .. import gguf as _gguf

__all__ = ["quantize", "dequantize", "QuantError"]

_CASTS = {0: ("F32", np.float32), 1: ("F16", np.float16)}


class QuantError(ValueError):
    """A tensor whose rows do not split into whole blocks (gguf-py's ``QuantError``)."""


def _resolve(qtype):
    """``(name, cast dtype or None, GGUFFormat or None)`` for a qtype given as gguf-py accepts it."""
    name = getattr(qtype, "name", None)
    if isinstance(qtype, Integral) and not isinstance(qtype, bool):
        if int(qtype) in _CASTS:
            return (*_CASTS[int(qtype)], None)
        try:
            fmt = _gguf.get_format(int(qtype))
        except ValueError:
            return name or str(int(qtype)), None, None
        return fmt.name, None, fmt
    if isinstance(qtype, str):
        for cast_name, dtype in _CASTS.values():
            if qtype.upper() == cast_name:
                return cast_name, dtype, None
        try:
            fmt = _gguf.get_format(qtype)
        except ValueError:
            return qtype, None, None
        return fmt.name, None, fmt
    raise TypeError(f"qtype must be a GGMLQuantizationType, an int or a name, got {type(qtype).__name__}")


def quantize(data: np.ndarray, qtype, *, imatrix: np.ndarray | None = None) -> np.ndarray:
    """gguf-py's ``quantize(data, qtype)``, plus llama.cpp's importance matrix.

    Parameters
    ----------
    data : numpy.ndarray
        Float values; rows along the last axis.
    qtype : GGMLQuantizationType, int or str
        The type (F32 and F16 cast).
    imatrix : numpy.ndarray, optional
        One non-negative weight per column (``quant_weights``).

    Returns
    -------
    numpy.ndarray
        uint8 records (``data.shape[:-1] + (row bytes,)``), or the cast array.

    Examples
    --------
    >>> import numpy as np
    >>> quantize(np.ones((1, 32), np.float32), "Q8_0")[0, :3].tolist()  # d = 1 / 127 (float16 0x2008), code 127
    [8, 32, 127]
    """
    name, cast, fmt = _resolve(qtype)
    if cast is not None:
        return data.astype(cast, copy=False)
    if fmt is None or not fmt.implemented:
        raise NotImplementedError(f"Quantization for {name} is not yet implemented")
    if data.shape[-1] % fmt.block_size:
        raise QuantError(f"Can't quantize tensor with shape {data.shape} to {fmt.name}")
    return _gguf.quantize(np.asarray(data).astype(np.float32, copy=False), fmt, imatrix=imatrix)


def dequantize(data: np.ndarray, qtype) -> np.ndarray:
    """gguf-py's ``dequantize(data, qtype)``: float32 values of the records ``data``.

    Examples
    --------
    >>> import numpy as np
    >>> dequantize(np.array([[0, 60] + [0x98] * 16], np.uint8), "Q4_0")[0, [0, 16]].tolist()  # d = 1, codes 8 and 9
    [0.0, 1.0]
    """
    name, cast, fmt = _resolve(qtype)
    if cast is not None:
        return data.view(np.float32) if cast is np.float32 else data.view(np.float16).astype(np.float32)
    if fmt is None or not fmt.implemented:
        raise NotImplementedError(f"Dequantization for {name} is not yet implemented")
    if data.shape[-1] % fmt.type_size:
        raise ValueError(f"Quantized tensor bytes per row ({data.shape[-1]}) is not a multiple of {fmt.name} "
                         f"type size ({fmt.type_size})")
    return _gguf.dequantize(data.view(np.uint8), fmt)
