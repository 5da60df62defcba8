"""torchao 0.18's float8 primitives (``quant_primitives._choose_scale_float8`` and friends) on NumPy arrays.

Numerics (torchao 0.18 ``quant_primitives.py``):

* :func:`_choose_scale_float8`: ``scale = amax(|x|) / finfo(float8_dtype).max`` per
  block, the amax clamped to ``[hp_value_lb, hp_value_ub]`` when given. Both are
  computed **in the input's dtype** (a bfloat16 input gives a bfloat16-rounded scale),
  then widened to float32. The scale has one entry per block, shaped as the block grid.
* :func:`_quantize_affine_float8`: ``float8(clamp(float32(x) / scale, ±max))``: a
  float32 division, saturated, rounded to the float8 format (``nbquant.quantize`` with
  ``saturate=True``). A scale of 0 (an all-zero block) or NaN (a block holding a NaN)
  gives what IEEE division gives: ``0 / 0`` and ``x / NaN`` are NaN, ``±x / 0`` saturates.
  The quotients are NumPy's, so ``0 / 0`` is x86's negative NaN (code ``0xff``), as in torch.
* :func:`_dequantize_affine_float8`: ``float32(q) * scale``, cast to ``output_dtype``.

The scale broadcasts as torchao expands it: one value, a shape that broadcasts
against the input, or one value per block of the input's rank (``repeat_interleave``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import numpy.typing as npt

from .. import api
from ..formats import get_format
from ..reductions import reduce_amax
from ..validation import as_real_array, check_float_scalar, check_int, show
from ._common import dtype_key

__all__ = ["_choose_scale_float8", "_quantize_affine_float8", "_dequantize_affine_float8"]

_FLOAT8 = {"float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}
_INPUTS = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
_OUTPUTS = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
            "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def _tensor(value, name: str = "tensor") -> np.ndarray:
    x = np.asarray(value)
    if x.dtype not in _INPUTS:
        raise TypeError(f"{name} has dtype {x.dtype} ({name}={show(value)}); torchao's float8 primitives take "
                        "float32, float16 or bfloat16 here")
    return x


def _float8(float8_dtype) -> str:
    return dtype_key(float8_dtype, "float8_dtype", _FLOAT8)


def _blocks(shape: tuple[int, ...], block_size) -> tuple[int, ...]:
    """torchao's ``block_size``: one entry per dimension, each dividing it (``_get_reduction_params``)."""
    if isinstance(block_size, (str, bytes)) or np.ndim(block_size) != 1:
        raise TypeError(f"block_size={show(block_size)} must be a list or tuple with one entry per dimension")
    if len(block_size) != len(shape):
        raise ValueError(f"block_size={tuple(block_size)} has {len(block_size)} entries; the tensor has "
                         f"{len(shape)} dimensions {shape}")
    block = []
    for d, (n, b) in enumerate(zip(shape, block_size, strict=True)):
        if isinstance(b, (bool, np.bool_)) or not isinstance(b, (int, np.integer)) or b < 1:
            raise ValueError(f"block_size[{d}]={b!r} must be a positive integer")
        if n % int(b):
            raise ValueError(f"block_size[{d}]={b} does not divide the tensor's dimension {d} of size {n}")
        block.append(int(b))
    if all(b == 1 for b in block) and int(np.prod(shape)) > 1:
        raise ValueError(f"block_size={tuple(block)}: torchao reduces over no dimension and cannot shape the "
                         "scale (RuntimeError in torchao); use block_size=tensor.shape for one scale per tensor")
    return tuple(block)


def _choose_scale_float8(tensor: npt.ArrayLike, block_size, float8_dtype="float8_e4m3fn",
                         scale_dtype="float32", hp_value_lb: float | None = None,
                         hp_value_ub: float | None = None) -> np.ndarray:
    """The float8 scale of each block: ``amax(|x|) / finfo(float8_dtype).max``, in the input's dtype.

    Parameters
    ----------
    tensor : numpy.ndarray
        float32, float16 or bfloat16.
    block_size : list or tuple of int
        One entry per dimension, each dividing it; ``tensor.shape`` for one scale per
        tensor, ``(1, n)`` for one per row.
    float8_dtype : str or dtype
        ``"float8_e4m3fn"`` (default) or ``"float8_e5m2"``.
    scale_dtype : str or dtype
        ``"float32"`` only (torchao's ``float8_e8m0fnu`` power-of-two rounding goes
        through ``log2``, which is not reproduced: ``NotImplementedError``).
    hp_value_lb, hp_value_ub : float, optional
        Bounds the amax is clamped to first (in the input's dtype).

    Returns
    -------
    numpy.ndarray
        float32 scales, shaped as the block grid (``tensor.shape[d] // block_size[d]``).
        A NaN in a block gives a NaN scale; an all-zero block a scale of 0.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0, 0.0, 0.0, 0.0], [1.0, -2.0, 3.0, 448.0]], np.float32)
    >>> _choose_scale_float8(x, (1, 4))
    array([[0.],
           [1.]], dtype=float32)
    """
    x = _tensor(tensor)
    fmt = _float8(float8_dtype)
    if dtype_key(scale_dtype, "scale_dtype", {"float32": "float32", "float8_e8m0fnu": "float8_e8m0fnu"}) != "float32":
        raise NotImplementedError(f"scale_dtype={scale_dtype!r}: torchao rounds the scale to a power of two through "
                                  "log2 in float32, which nbquant does not reproduce; use scale_dtype='float32' (or "
                                  "nbquant.quantize_mx for E8M0 block scales)")
    lo = None if hp_value_lb is None else check_float_scalar("hp_value_lb", hp_value_lb, positive=False)
    hi = None if hp_value_ub is None else check_float_scalar("hp_value_ub", hp_value_ub, positive=False)
    block = _blocks(x.shape, block_size)
    amax = reduce_amax(x, block_size=block).astype(np.float32)
    with np.errstate(invalid="ignore"):  # NaN amax stays NaN, as torch.clamp keeps it
        if lo is not None or hi is not None:  # torch.clamp in the input dtype: bounds rounded to it
            lo_t = -np.inf if lo is None else np.float32(x.dtype.type(lo))
            hi_t = np.inf if hi is None else np.float32(x.dtype.type(hi))
            amax = np.where(np.isnan(amax), amax, np.minimum(np.maximum(amax, lo_t), hi_t)).astype(np.float32)
        scale = amax / np.float32(get_format(fmt).max_value)
    return scale.astype(x.dtype).astype(np.float32)  # the division in the input's dtype (exact for one op)


def _scale_blocks(scale: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
    """torchao's ``_maybe_expand_scale_to_tensor_shape`` as a block layout: ``(scale grid, block_size)``."""
    if scale.size == 1:
        return scale.reshape((1,) * len(shape)), tuple(shape)
    if scale.ndim != len(shape) or any(n % g for n, g in zip(shape, scale.shape, strict=True)):
        raise ValueError(f"scale has shape {scale.shape}; torchao needs one value, or one per block of the "
                         f"tensor's rank: each dimension dividing the tensor's {shape}")
    return scale, tuple(n // g for n, g in zip(shape, scale.shape, strict=True))


def _float32_scale(scale) -> np.ndarray:
    """The scale as float32: >= 0 or NaN (what :func:`_choose_scale_float8` gives a block holding a NaN)."""
    with np.errstate(over="ignore"):  # a value beyond float32 becomes inf, refused below
        s = np.asarray(as_real_array("scale", scale), np.float32)
    if (s < 0).any() or np.isinf(s).any():
        raise ValueError(f"scale must be finite and >= 0, or NaN (scale={show(scale)}); torchao's scales are "
                         "amax / max")
    return s


def _quantize_affine_float8(tensor: npt.ArrayLike, scale: npt.ArrayLike,
                            float8_dtype="float8_e4m3fn") -> np.ndarray:
    """``float8(clamp(float32(tensor) / scale, ±max))``, with the scale expanded as torchao expands it.

    Parameters
    ----------
    tensor : numpy.ndarray
        float32, float16 or bfloat16.
    scale : numpy.ndarray
        >= 0 or NaN: one value, or one per block (the tensor's rank, each dimension
        dividing the tensor's). A 0 scale gives NaN for 0 (and NaN) and ±max otherwise.
    float8_dtype : str or dtype
        ``"float8_e4m3fn"`` or ``"float8_e5m2"``.

    Returns
    -------
    numpy.ndarray
        ml_dtypes float8 codes of the tensor's shape.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0, 0.0], [1.0, -600.0]], np.float32)
    >>> _quantize_affine_float8(x, np.array([[0.0], [1.0]], np.float32)).view(np.uint8)
    array([[255, 255],
           [ 56, 254]], dtype=uint8)
    """
    x = _tensor(tensor)
    fmt = _float8(float8_dtype)
    s, block = _scale_blocks(_float32_scale(scale), x.shape)
    special = _special_elements(s, block)
    q = api.quantize(x, np.where((s == 0) | np.isnan(s), np.float32(1), s), fmt, block_size=block, saturate=True)
    if special is not None:  # IEEE: x / 0 is ±inf (saturates) or NaN, x / NaN is NaN; quotients taken in NumPy
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            quotient = x[special].astype(np.float32) / _expanded(s, block)[special]
        q[special] = api.quantize(quotient, np.float32(1), fmt, saturate=True)
    return q


def _expanded(s: np.ndarray, block: tuple[int, ...]) -> np.ndarray:
    for d, b in enumerate(block):
        s = np.repeat(s, b, axis=d)
    return s


def _special_elements(s: np.ndarray, block: tuple[int, ...]) -> np.ndarray | None:
    """Where the scale is 0 (an all-zero block) or NaN (a NaN in the block), which the core refuses; or None."""
    special = (s == 0) | np.isnan(s)
    return _expanded(special, block) if special.any() else None


def _dequantize_affine_float8(tensor: npt.ArrayLike, scale: npt.ArrayLike, output_dtype="float32") -> np.ndarray:
    """``float32(tensor) * scale``, cast to ``output_dtype``.

    Parameters
    ----------
    tensor : numpy.ndarray
        ml_dtypes float8_e4m3fn or float8_e5m2 codes.
    scale : numpy.ndarray
        Finite, >= 0: one value, or one per block (as in :func:`_quantize_affine_float8`).
    output_dtype : str or dtype
        ``"float32"`` (default), ``"float16"`` or ``"bfloat16"``.

    Returns
    -------
    numpy.ndarray
        The tensor's shape, ``output_dtype``; NaN codes give nbquant's canonical NaN.

    Examples
    --------
    >>> import numpy as np, ml_dtypes
    >>> q = np.array([[56, 254]], np.uint8).view(ml_dtypes.float8_e4m3fn)
    >>> _dequantize_affine_float8(q, np.float32(0.5))
    array([[   0.5, -224. ]], dtype=float32)
    """
    q = np.asarray(tensor)
    if q.dtype not in (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)):
        raise TypeError(f"tensor has dtype {q.dtype}; pass float8_e4m3fn or float8_e5m2 codes (ml_dtypes)")
    out = dtype_key(output_dtype, "output_dtype", _OUTPUTS)
    s, block = _scale_blocks(_float32_scale(scale), q.shape)
    special = _special_elements(s, block)
    y = api.dequantize(q, np.where((s == 0) | np.isnan(s), np.float32(1), s), block_size=block, out_dtype=out)
    if special is not None:  # float32(q) * 0 or * NaN in NumPy, then the output dtype, NaN canonical
        with np.errstate(invalid="ignore"):
            v = api.dequantize(q[special], np.float32(1)) * _expanded(s, block)[special]
        y[special] = np.where(np.isnan(v), np.float32(np.nan), v).astype(out)
    return y


_FLOAT8_MAX = {"float8_e4m3fn": 448, "float8_e5m2": 57344}


def float8_key(dtype) -> str | None:
    """``"float8_e4m3fn"`` or ``"float8_e5m2"`` for those dtypes (any spelling), else None."""
    try:
        return dtype_key(dtype, "output_dtype", {k: k for k in _FLOAT8_MAX})
    except ValueError:
        return None


def round_to_float8(x: np.ndarray, block: tuple[int, ...], applied: dict, key: str, quant_min, quant_max):
    """``float8(clamp(rne(x * (1 / scale)), lo, hi))``: integers from the core (int32), then the float8 cast."""
    top = _FLOAT8_MAX[key]
    lo = -top if quant_min is None else check_int("quant_min", quant_min, integral_float=True)
    hi = top if quant_max is None else check_int("quant_max", quant_max, integral_float=True)
    if not -top <= lo <= hi <= top:
        raise ValueError(f"quant_min={quant_min}, quant_max={quant_max} must lie in [-{top}, {top}] ({key}) with "
                         "quant_min <= quant_max")
    ints = api.quantize(x, dtype="int32", block_size=block, quant_min=lo, quant_max=hi, **applied)
    q = ints.astype(np.float32)
    q[q == 0] = np.copysign(np.float32(0), x[q == 0])  # torch's rounded product keeps the sign of zero
    q[np.isnan(x)] = np.nan  # the core reads NaN as 0; torch's round and clamp keep it
    return q.astype(getattr(ml_dtypes, key))
