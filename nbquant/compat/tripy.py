"""``nvtripy.quantize`` / ``nvtripy.dequantize`` on NumPy arrays.

nvtripy lowers both calls one to one onto TensorRT's Quantize/Dequantize layers, so
the numerics are TensorRT's: ``q = rne(clip(x / scale, lo, hi))`` (divide, ties to
even, int8 ``[-128, 127]``, int4 ``[-8, 7]``, float8 = E4M3FN saturating at ±448)
and ``x = q * scale``. The argument rules are nvtripy's ``check_qdq_args``:

* ``dim`` given: per-channel, ``scale`` 1-D of length ``input.shape[dim]``;
* ``dim=None`` and a scalar scale: per-tensor;
* ``dim=None`` and a 2-D scale: block-wise, ``dtype`` int4 only, ``input`` 2-D
  ``[D0, D1]``, ``scale`` ``[D0 / B, D1]`` (blocks of ``B`` rows along dim 0).

A Python number or sequence given as ``scale`` takes the input's dtype (as
nvtripy converts it); an array scale must already have it.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import numpy.typing as npt

from .. import api
from ..validation import check_finite, check_int, show
from ._common import dtype_key, float_array

__all__ = ["quantize", "dequantize"]

_QDTYPES = {"int8": "int8", "int4": "int4", "float8": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn"}
_FLOATS = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
           "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def _scale(scale, dtype: np.dtype) -> np.ndarray:
    if isinstance(scale, (np.ndarray, np.generic)):
        s = np.asarray(scale)
        if s.dtype != dtype:
            raise TypeError(f"scale has dtype {s.dtype} (scale={show(scale)}), but nvtripy requires the scale dtype "
                            f"to equal the float dtype {dtype}; convert it with scale.astype({dtype.name})")
        return s
    return check_finite("scale", scale, dtype, positive=True)  # nvtripy converts numbers to the input's dtype


def _layout(shape: tuple[int, ...], scale: np.ndarray, dim, fmt: str) -> dict:
    """nvtripy's check_qdq_args: the core ``axis`` / ``block_size`` arguments for this call."""
    if dim is not None:
        d = check_int("dim", dim)
        if not -len(shape) <= d < len(shape):
            raise ValueError(f"dim={dim} is out of range for an input of rank {len(shape)}")
        if scale.ndim != 1:
            raise ValueError(f"scale has shape {scale.shape}; if dim is given (per-channel quantization), scale "
                             "must be a 1-D tensor")
        if scale.shape[0] != shape[d]:
            raise ValueError(f"scale has {scale.shape[0]} values; per-channel quantization along dim={dim} needs "
                             f"input.shape[{dim}] = {shape[d]}")
        return {"axis": d}
    if scale.ndim == 0:
        return {}
    if scale.ndim == 2:
        if fmt != "int4":
            raise ValueError(f"block-wise quantization (2-D scale {scale.shape}) is only supported for dtype int4, "
                             f"not {fmt}")
        if len(shape) != 2:
            raise ValueError(f"block-wise quantization needs a 2-D input [D0, D1]; input has shape {shape}")
        d0, d1 = shape
        if scale.shape[1] != d1 or scale.shape[0] == 0 or d0 % scale.shape[0]:
            raise ValueError(f"scale has shape {scale.shape}; block-wise quantization of an input of shape {shape} "
                             f"needs [D0 / B, {d1}] with D0 / B dividing D0 = {d0}")
        return {"block_size": (d0 // scale.shape[0], 1)}
    raise ValueError(f"scale has shape {scale.shape}; with dim=None it must be a scalar (per-tensor) or a 2-D "
                     "tensor (block-wise int4)")


def quantize(input: npt.ArrayLike, scale, dtype, dim: int | None = None) -> np.ndarray:
    """Quantize like ``nvtripy.quantize``: ``rne(clip(input / scale))``.

    Parameters
    ----------
    input : array_like
        float32, float16 or bfloat16; a Python (nested) sequence becomes float32.
    scale : number, sequence or array
        Scalar (per-tensor), 1-D (per-channel, with ``dim``) or 2-D ``[D0 / B, D1]``
        (block-wise int4). Arrays must have the input's dtype.
    dtype : str or dtype
        ``"int8"``, ``"int4"`` or ``"float8"`` (E4M3FN), or the numpy/ml_dtypes dtype.
    dim : int, optional
        The channel dimension for per-channel quantization.

    Returns
    -------
    numpy.ndarray
        Codes of the input's shape as ``dtype`` names them: int8, ml_dtypes.int4 or
        ml_dtypes.float8_e4m3fn (E4M3FN for ``"float8"``).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], np.float32)
    >>> quantize(x, [0.99872, 0.96125], "int8", dim=0)
    array([[0, 1, 2],
           [3, 4, 5]], dtype=int8)
    """
    fmt = dtype_key(dtype, "dtype", _QDTYPES)
    x = float_array(input, "input")
    s = _scale(scale, x.dtype)
    kwargs = _layout(x.shape, s, dim, fmt)
    return api.quantize(x, s, fmt, **kwargs)


def dequantize(input: npt.ArrayLike, scale, dtype, dim: int | None = None) -> np.ndarray:
    """Dequantize like ``nvtripy.dequantize``: ``input * scale`` in ``dtype``.

    Parameters
    ----------
    input : numpy.ndarray
        int8, ml_dtypes.int4 or ml_dtypes.float8_e4m3fn codes.
    scale : number, sequence or array
        As in :func:`quantize`; arrays must have dtype ``dtype``.
    dtype : str or dtype
        The result dtype: ``"float32"``, ``"float16"`` or ``"bfloat16"``.
    dim : int, optional
        The channel dimension for per-channel dequantization.

    Returns
    -------
    numpy.ndarray
        ``input * scale`` of the input's shape, in ``dtype``.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0, 1.0], [2.0, 3.0]], np.float32)
    >>> q = quantize(x, [[1.0, 1.0]], "int4")
    >>> dequantize(q, [[1.0, 1.0]], "float32")
    array([[0., 1.],
           [2., 3.]], dtype=float32)
    """
    out = _FLOATS[dtype_key(dtype, "dtype", {k: k for k in _FLOATS})]
    q = np.asarray(input)
    fmt = dtype_key(q.dtype, "input dtype", _QDTYPES)
    s = _scale(scale, out)
    kwargs = _layout(q.shape, s, dim, fmt)
    return api.dequantize(q, s, out_dtype=out, **kwargs)
