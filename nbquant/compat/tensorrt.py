"""TensorRT ``IQuantizeLayer`` / ``IDequantizeLayer`` on NumPy arrays.

Numerics (TensorRT operator docs and "Quantization Schemes"): quantize divides and
rounds half to even, ``q = rne(clip(x / scale, lo, hi))`` with int8 ``[-128, 127]``
(never narrow), int4 ``[-8, 7]``, and FP8 ``castToFp8(clip(x / scale, -448, 448))``
(E4M3FN); dequantize is ``x = (q - zero_point) * scale = q * scale``.

Validation follows TensorRT:

* ``zero_point`` is optional, must have ``scale``'s shape and only zeros;
* per-tensor: a scalar scale (a one-element 1-D scale is also taken as per-tensor,
  as in the operator page's example);
* per-channel: a 1-D scale of length ``input.shape[axis]``, ``0 <= axis < rank``
  (TensorRT's ``axis`` is the **kept** channel dimension; its default ``-1`` means
  "no axis");
* block: a scale of the input's rank whose shape differs from the input's in
  exactly one dimension, the last or the second-last, which it divides; element
  ``i`` along it uses ``scale[i // B]``. Block quantization is int4 (and, in newer
  TensorRT, FP8).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import numpy.typing as npt

from .. import api
from ..validation import as_real_array, check_finite, check_int, show
from ._common import dtype_key, float_array

__all__ = ["quantize", "dequantize"]

_QTYPES = {"int8": "int8", "int4": "int4", "fp8": "float8_e4m3fn", "float8": "float8_e4m3fn",
           "float8_e4m3fn": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn"}
_BLOCK_TYPES = ("int4", "float8_e4m3fn")
_FLOATS = {"float32": np.dtype(np.float32), "float": np.dtype(np.float32), "float16": np.dtype(np.float16),
           "half": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16), "bf16": np.dtype(ml_dtypes.bfloat16)}


def _scale(scale, dtype: np.dtype | None) -> np.ndarray:
    if isinstance(scale, (np.ndarray, np.generic)):
        s = np.asarray(scale)
        if dtype is not None and s.dtype != dtype:
            raise TypeError(f"scale has dtype {s.dtype} (scale={show(scale)}); TensorRT requires the scale to have "
                            f"the input's type {dtype} (T1)")
        if s.dtype.kind != "f":
            raise TypeError(f"scale has dtype {s.dtype} (scale={show(scale)}); use float32, float16 or bfloat16")
        return s
    return check_finite("scale", scale, dtype or np.float32, positive=True)


def _layout(shape: tuple[int, ...], scale: np.ndarray, zero_point, axis, fmt: str) -> dict:
    """TensorRT's scale/zero-point rules → the core ``axis`` / ``block_size`` arguments."""
    axis = check_int("axis", axis)
    if zero_point is not None:
        zp = as_real_array("zero_point", zero_point)
        if zp.shape != scale.shape:
            raise ValueError(f"zero_point has shape {zp.shape}; it must have the scale's shape {scale.shape}")
        if np.any(zp != 0):
            raise ValueError("zero_point must only contain zero-valued coefficients (TensorRT quantization is "
                             f"symmetric); got {zp.reshape(-1)[np.flatnonzero(zp)[0]]!r}")
    rank = len(shape)
    if scale.ndim == 0 or (scale.ndim == 1 and scale.size == 1 and not (rank == 1 and shape[0] > 1)):
        return {}
    if scale.ndim == 1 and (rank != 1 or scale.shape[0] == shape[0]):
        if not 0 <= axis < rank:
            raise ValueError(f"axis={axis}: per-channel quantization (1-D scale of shape {scale.shape}) needs "
                             f"0 <= axis < {rank}, the channel dimension")
        if scale.shape[0] != shape[axis]:
            raise ValueError(f"scale has {scale.shape[0]} values; per-channel quantization along axis={axis} needs "
                             f"input.shape[{axis}] = {shape[axis]}")
        return {"axis": axis}
    if scale.ndim != rank:
        raise ValueError(f"scale has shape {scale.shape}; it must be a scalar (per-tensor), 1-D (per-channel) or "
                         f"have the input's rank {rank} (block quantization)")
    if fmt not in _BLOCK_TYPES:
        raise ValueError(f"block quantization (scale of shape {scale.shape}) supports int4 and fp8 only, not {fmt}")
    differ = [d for d in range(rank) if scale.shape[d] != shape[d]]
    if len(differ) != 1:
        raise ValueError(f"scale has shape {scale.shape}; block quantization of an input of shape {shape} needs "
                         "exactly one dimension where they differ")
    d = differ[0]
    if d < rank - 2:
        raise ValueError(f"scale has shape {scale.shape}; the blocked dimension {d} must be the last or the "
                         "second-last dimension")
    if scale.shape[d] == 0 or shape[d] % scale.shape[d]:
        raise ValueError(f"scale has {scale.shape[d]} blocks along dimension {d}, which does not divide "
                         f"input.shape[{d}] = {shape[d]}")
    return {"block_size": tuple(shape[d] // scale.shape[d] if k == d else 1 for k in range(rank))}


def quantize(input: npt.ArrayLike, scale, zero_point=None, *, axis: int = -1, to_type="int8") -> np.ndarray:
    """``IQuantizeLayer``: ``q = rne(clip(input / scale))``.

    Parameters
    ----------
    input : array_like
        float32, float16 or bfloat16 (a Python sequence becomes float32).
    scale : number, sequence or array
        Scalar (per-tensor), 1-D (per-channel along ``axis``) or the input's rank
        (block quantization). Arrays must have the input's dtype.
    zero_point : array_like, optional
        Same shape as ``scale``, all zeros.
    axis : int
        The channel dimension for per-channel quantization (``-1``: none).
    to_type : str or dtype
        ``"int8"`` (default), ``"int4"`` or ``"fp8"`` (E4M3FN).

    Returns
    -------
    numpy.ndarray
        Codes of the input's shape in ``to_type``: int8, ml_dtypes.int4 or
        ml_dtypes.float8_e4m3fn.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([0.56, 6.0, -3.6, 0.5 / 127], np.float32)
    >>> quantize(x, np.float32(1 / 127))
    array([  71,  127, -128,    0], dtype=int8)
    """
    fmt = dtype_key(to_type, "to_type", _QTYPES)
    x = float_array(input, "input")
    s = _scale(scale, x.dtype)
    return api.quantize(x, s, fmt, **_layout(x.shape, s, zero_point, axis, fmt))


def dequantize(input: npt.ArrayLike, scale, zero_point=None, *, axis: int = -1, to_type="float32") -> np.ndarray:
    """``IDequantizeLayer``: ``x = (input - zero_point) * scale`` with an all-zero zero point.

    Parameters
    ----------
    input : numpy.ndarray
        int8, ml_dtypes.int4 or ml_dtypes.float8_e4m3fn codes.
    scale : array_like
        As in :func:`quantize`.
    zero_point : array_like, optional
        As in :func:`quantize` (all zeros).
    axis : int
        As in :func:`quantize`.
    to_type : str or dtype
        ``"float32"`` (default), ``"float16"`` or ``"bfloat16"``.

    Returns
    -------
    numpy.ndarray
        ``input * scale`` (the zero point is all zeros), the input's shape, cast to
        ``to_type``.

    Examples
    --------
    >>> import numpy as np
    >>> dequantize(np.array([71, 127, -128], np.int8), np.float32(1 / 127))
    array([ 0.5590551,  1.       , -1.007874 ], dtype=float32)
    """
    out = dtype_key(to_type, "to_type", _FLOATS)
    q = np.asarray(input)
    fmt = dtype_key(q.dtype, "input dtype", _QTYPES)
    s = _scale(scale, None)
    return api.dequantize(q, s, out_dtype=out, **_layout(q.shape, s, zero_point, axis, fmt))
