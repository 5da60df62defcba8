"""``pypto.quantize`` / ``pypto.dequantize`` (Ascend) on NumPy arrays.

Numerics (doc page, ``quantization.cpp`` and the upstream goldens):

* symmetric, ``otype`` int8, no zero point: ``dst = clamp(rne(x * scale), -128, 127)``;
* asymmetric, ``otype`` uint8, float ``zero_points``:
  ``dst = clamp(rne(x * scale + zero_points), 0, 255)`` — the scale **multiplies**
  (pypto's scale is the reciprocal of a TensorRT/ONNX scale) and the zero point is
  added **before** rounding;
* dequantize: ``dst = (float(x) - zero_points) * scale`` (the upstream golden
  ``gen_dequantize_op_golden``; the doc page writes ``+ zero_points``, see
  ``docs/compat/pypto.md``).

``axis`` names the **reduced** dimension: ``scale`` and ``zero_points`` have the
input's shape without it. ``axis=-1`` (or ``rank - 1``) gives one scale per row
(``scale[..., row]``), ``axis=-2`` (or ``rank - 2``) one per column
(``scale[..., col]``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .. import api
from ..validation import check_finite, check_int, show
from ._common import dtype_key

__all__ = ["quantize", "dequantize"]

_OTYPES = {"int8": "int8", "uint8": "uint8"}


def _f32(name: str, value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype != np.float32:
        raise TypeError(f"{name} has dtype {arr.dtype} ({name}={show(value)}); pypto supports DT_FP32 only "
                        "(numpy.float32)")
    return arr


def _reduced_axis(axis, ndim: int, low: int = 2) -> int:
    a = check_int("axis", axis)
    if not low <= ndim <= 4:
        raise ValueError(f"input has {ndim} dimension(s); pypto supports {low}-4")
    allowed = (-1, ndim - 1) if ndim == 1 else (-1, -2, ndim - 1, ndim - 2)
    if a not in allowed:
        raise ValueError(f"axis={axis} is not supported; pypto quantizes along one of the last two axes: "
                         f"{sorted(set(allowed))}")
    return a % ndim


def _param(name: str, value, shape: tuple[int, ...], a: int) -> np.ndarray:
    """Check a pypto scale/zero point (input shape without ``a``) and give it the core's keep-dims grid."""
    arr = check_finite(name, _f32(name, value), positive=name == "scale")  # zero points: any finite value
    want = shape[:a] + shape[a + 1:]
    if arr.shape != want:
        raise ValueError(f"{name} has shape {arr.shape}; with axis reducing dimension {a} of an input of shape "
                         f"{shape} it must have shape {want}")
    return arr.reshape(shape[:a] + (1,) + shape[a + 1:])


def _block(shape: tuple[int, ...], a: int) -> tuple[int, ...]:
    return tuple(n if d == a else 1 for d, n in enumerate(shape))


def quantize(input: npt.ArrayLike, scale: npt.ArrayLike, otype, axis: int,
             zero_points: npt.ArrayLike | None = None) -> np.ndarray:
    """``pypto.quantize``: ``rne(input * scale)`` (int8) or ``rne(input * scale + zero_points)`` (uint8).

    Parameters
    ----------
    input : numpy.ndarray
        float32, 2 to 4 dimensions ``[..., row, col]``, not empty.
    scale : numpy.ndarray
        float32 multipliers with the input's shape minus ``axis``.
    otype : str or dtype
        ``"DT_INT8"`` / ``"int8"`` (symmetric, ``zero_points=None``) or
        ``"DT_UINT8"`` / ``"uint8"`` (asymmetric, ``zero_points`` given).
    axis : int
        The reduced dimension: ``-1`` / ``rank - 1`` (scale ``[..., row]``) or
        ``-2`` / ``rank - 2`` (scale ``[..., col]``).
    zero_points : numpy.ndarray, optional
        float32 offsets, shaped like ``scale``, added before rounding.

    Returns
    -------
    numpy.ndarray
        int8 or uint8 codes of the input's shape.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[1.1, -2.2, 3.3, -4.4]], np.float32)
    >>> quantize(x, np.array([1.0], np.float32), "DT_UINT8", -1, np.array([5.0], np.float32))
    array([[6, 3, 8, 1]], dtype=uint8)
    """
    fmt = dtype_key(otype, "otype", _OTYPES)
    x = _f32("input", input)
    if x.size == 0:
        raise ValueError("input is empty; pypto does not support empty tensors")
    a = _reduced_axis(axis, x.ndim)
    s = _param("scale", scale, x.shape, a)
    if zero_points is None:
        if fmt != "int8":
            raise ValueError(f"otype={otype!r} without zero_points: symmetric quantization must produce DT_INT8")
        return api.quantize(x, s, "int8", block_size=_block(x.shape, a), scale_op="multiply")
    if fmt != "uint8":
        raise ValueError(f"otype={otype!r} with zero_points: asymmetric quantization must produce DT_UINT8")
    zp = _param("zero_points", zero_points, x.shape, a)
    return api.quantize(x, s, "uint8", zero_point=zp, block_size=_block(x.shape, a), scale_op="multiply",
                        zero_point_order="before_rounding")


def dequantize(input: npt.ArrayLike, scale: npt.ArrayLike, otype="DT_FP32", axis: int = -1,
               zero_points: npt.ArrayLike | None = None) -> np.ndarray:
    """``pypto.dequantize``: ``(float(input) - zero_points) * scale`` (the upstream golden).

    Parameters
    ----------
    input : numpy.ndarray
        int8, int16 or uint8 codes, 1 to 4 dimensions (1-D: ``axis=-1`` only).
    scale : numpy.ndarray
        float32 multipliers with the input's shape minus ``axis``.
    otype : str or dtype
        ``"DT_FP32"`` (the only supported output).
    axis : int
        The reduced dimension, as in :func:`quantize`.
    zero_points : numpy.ndarray, optional
        float32, shaped like ``scale``; **subtracted** (the doc page's formula adds it).

    Returns
    -------
    numpy.ndarray
        float32.

    Examples
    --------
    >>> import numpy as np
    >>> q = np.array([[1, 2, 3, 4]], np.int8)
    >>> dequantize(q, np.array([1.0], np.float32), "DT_FP32", -1, np.array([-2.0], np.float32))
    array([[3., 4., 5., 6.]], dtype=float32)
    """
    dtype_key(otype, "otype", {"fp32": "float32", "float32": "float32"})
    q = np.asarray(input)
    if q.dtype not in (np.int8, np.int16, np.uint8):
        raise TypeError(f"input has dtype {q.dtype}; pypto dequantizes DT_INT8, DT_INT16 (doc page) or DT_UINT8 "
                        "(docstring) codes")
    if q.size == 0:
        raise ValueError("input is empty; pypto does not support empty tensors")
    a = _reduced_axis(axis, q.ndim, low=1)
    if q.ndim == 1:
        s = _param("scale", scale, (1,) + q.shape, 1).reshape(1)
        zp = None if zero_points is None else _param("zero_points", zero_points, (1,) + q.shape, 1).reshape(1)
        return api.dequantize(q, s, zero_point=zp)
    s = _param("scale", scale, q.shape, a)
    zp = None if zero_points is None else _param("zero_points", zero_points, q.shape, a)
    return api.dequantize(q, s, zero_point=zp, block_size=_block(q.shape, a))
