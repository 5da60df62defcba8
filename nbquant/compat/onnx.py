"""ONNX ``QuantizeLinear`` / ``DequantizeLinear`` / ``DynamicQuantizeLinear`` (opset 25) on NumPy arrays.

Numerics (ONNX operator spec and its reference implementation):

* ``QuantizeLinear``: ``y = saturate(rne(x / y_scale) + y_zero_point)`` — divide,
  ties to even, zero point added after rounding; float8 outputs are ``x / y_scale``
  rounded to the format, clamped to its largest value when ``saturate=1``. A NaN input
  gives the type's lowest code, as onnxruntime and the reference evaluator do (the core
  gives the zero point);
* ``DequantizeLinear``: ``y = (x - x_zero_point) * x_scale`` in float32, then cast
  to ``output_dtype`` (default: the scale's dtype);
* ``DynamicQuantizeLinear``: uint8 with ``y_scale = (max(0, max(x)) - min(0, min(x))) / 255``
  and ``y_zero_point = rne(clip(0 - min(0, min(x)) / y_scale, 0, 255))``.

Granularity: a scalar (or one-element) scale is per-tensor; a 1-D scale is
per-axis along ``axis`` (default 1, negative values count from the end); with
``block_size > 0`` the scale has the input's rank and ``ceil(n / block_size)``
along ``axis`` (the last block may be partial). The zero point is read the same way,
on its own: a one-element zero point beside a per-axis scale (or the reverse) is
accepted, as by the reference evaluator.

Arithmetic: ``x / y_scale`` runs in ``precision`` or, without it, in the common type of
``x`` and ``y_scale`` (float16 or bfloat16 when both are; nbquant's ``compute_dtype``).

The quantized type is the zero point's dtype when a zero point is given, else
``output_dtype``, else uint8. ``output_dtype`` may be a ``TensorProto`` enum value
(``3`` = INT8), its name (``"INT8"``, ``"FLOAT8E4M3FN"``) or a numpy/ml_dtypes dtype.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import numpy.typing as npt

from .. import api
from ..formats import get_format
from ..validation import check_finite, check_int, show
from ._common import dtype_key

__all__ = ["quantize_linear", "dequantize_linear", "dynamic_quantize_linear", "TENSOR_TYPES"]

#: ONNX ``TensorProto.DataType`` values of the quantized types nbquant can produce.
TENSOR_TYPES: dict[int, str] = {
    2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 21: "uint4", 22: "int4", 25: "uint2", 26: "int2",
    17: "float8_e4m3fn", 19: "float8_e5m2", 23: "float4_e2m1fn", 27: "float6_e2m3fn", 28: "float6_e3m2fn",
}
_UNSUPPORTED = {18: "FLOAT8E4M3FNUZ (nbquant has no FNUZ formats; use 17, FLOAT8E4M3FN)",
                20: "FLOAT8E5M2FNUZ (nbquant has no FNUZ formats; use 19, FLOAT8E5M2)",
                24: "FLOAT8E8M0, not a QuantizeLinear/DequantizeLinear type in opset 25 (the evaluator refuses it)"}
_ONNX_NAMES = {"uint8": "uint8", "int8": "int8", "uint16": "uint16", "int16": "int16", "int32": "int32",
               "uint4": "uint4",
               "int4": "int4", "uint2": "uint2", "int2": "int2", "float8e4m3fn": "float8_e4m3fn",
               "float8e5m2": "float8_e5m2", "float4e2m1": "float4_e2m1fn", "float6e2m3": "float6_e2m3fn",
               "float6e3m2": "float6_e3m2fn"}
_QTYPES = {**_ONNX_NAMES, **{v: v for v in TENSOR_TYPES.values()}}
_FLOAT_TYPES = {1: np.dtype(np.float32), 10: np.dtype(np.float16), 16: np.dtype(ml_dtypes.bfloat16)}
_FLOAT_NAMES = {"float": np.dtype(np.float32), "float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
                "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def _qtype(value, name: str) -> str:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        v = int(value)
        if v in TENSOR_TYPES:
            return TENSOR_TYPES[v]
        what = _UNSUPPORTED.get(v, "not a quantized type")
        raise ValueError(f"{name}={v} ({what}) is not supported; use one of {sorted(TENSOR_TYPES)} "
                         f"({', '.join(TENSOR_TYPES.values())})")
    return dtype_key(value, name, _QTYPES)


def _float_type(value, name: str) -> np.dtype:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if int(value) not in _FLOAT_TYPES:
            raise ValueError(f"{name}={int(value)} is not supported; use 1 (FLOAT), 10 (FLOAT16) or 16 (BFLOAT16)")
        return _FLOAT_TYPES[int(value)]
    return dtype_key(value, name, _FLOAT_NAMES)


def _float_arg(name: str, value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype not in _FLOAT_NAMES.values():
        raise TypeError(f"{name} has dtype {arr.dtype} ({name}={show(value)}); ONNX allows float32, float16 or "
                        "bfloat16 here")
    return arr


def _scale_arg(name: str, value) -> np.ndarray:
    """A float32/float16/bfloat16 scale whose every value is finite and > 0 (the core's rule, under ONNX's name)."""
    arr = _float_arg(name, value)
    return check_finite(name, arr, arr.dtype, positive=True)


def _param_layout(name: str, value: np.ndarray, shape: tuple[int, ...], axis: int, block: int) -> dict | None:
    """The core layout of one scale or zero point, as the reference evaluator reshapes it; None: per-tensor."""
    if value.ndim == 0 or value.size == 1:
        return None
    rank = len(shape)
    if not -rank <= axis < rank:
        raise ValueError(f"axis={axis} is out of range for an input of rank {rank}; use {-rank} <= axis < {rank}")
    a = axis % rank
    if block == 0:
        if value.ndim != 1 or value.shape[0] != shape[a]:
            raise ValueError(f"{name} has shape {value.shape}; per-axis quantization along axis={axis} needs a 1-D "
                             f"{name} of length {shape[a]}, or one value (or set block_size for blocked quantization)")
        return {"axis": a}
    want = tuple(-(-n // block) if d == a else n for d, n in enumerate(shape))
    if value.shape != want:
        raise ValueError(f"{name} has shape {value.shape}; blocked quantization with block_size={block} along "
                         f"axis={axis} of an input of shape {shape} needs shape {want}, or one value")
    return {"axis": a, "block_size": block}


def _layout(shape: tuple[int, ...], scale: np.ndarray, zp: np.ndarray | None, axis, block_size,
            names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray | None, dict]:
    """ONNX scale and zero-point shapes → ``(scale, zero_point, core layout)``.

    Each is read on its own, as the opset-25 reference evaluator does: a scalar or
    one-element tensor is per-tensor, else per-axis (1-D) or blocked. A per-tensor one
    beside a per-axis or blocked other is repeated to the other's shape (exact: the same
    value for every block).
    """
    axis, block = check_int("axis", axis), check_int("block_size", block_size)
    if block < 0:
        raise ValueError(f"block_size={block} must be >= 0 (0: no blocking)")
    layout = _param_layout(names[0], scale, shape, axis, block)
    zp_layout = None if zp is None else _param_layout(names[1], zp, shape, axis, block)
    if layout is None and zp_layout is None:
        return scale.reshape(()), None if zp is None else zp.reshape(()), {}
    if layout is None:
        return np.broadcast_to(scale.reshape(()), zp.shape), zp, zp_layout
    if zp is not None and zp_layout is None:
        zp = np.broadcast_to(zp.reshape(()), scale.shape)
    return scale, zp, layout


def _zero_point(zp: np.ndarray | None, fmt: str, name: str) -> np.ndarray | None:
    if zp is None:
        return None
    if fmt.startswith("float"):
        if np.any(zp.astype(np.float32) != 0):
            raise ValueError(f"{name} must be zero for the floating-point type {fmt}")
        return None
    return zp.astype(np.int32)  # the core takes numpy integers, not ml_dtypes int4/int2 arrays


def _division_dtype(x: np.ndarray, s: np.ndarray, precision) -> np.dtype:
    """The dtype ``x / y_scale`` runs in: ``precision``, else NumPy's promotion of the two (the evaluator's)."""
    if precision != 0 and precision is not None:
        return _float_type(precision, "precision")
    if x.dtype != s.dtype and np.float32 not in (x.dtype, s.dtype):
        raise TypeError(f"x is {x.dtype} and y_scale is {s.dtype}, which have no common type (the evaluator "
                        "cannot divide them); pass precision=1 (FLOAT), or a float32 y_scale")
    return np.dtype(np.float32) if x.dtype != s.dtype else x.dtype


def quantize_linear(x: npt.ArrayLike, y_scale: npt.ArrayLike, y_zero_point: npt.ArrayLike | None = None, *,
                    axis: int = 1, block_size: int = 0, output_dtype=0, precision=0,
                    saturate: int = 1) -> np.ndarray:
    """ONNX ``QuantizeLinear``: ``saturate(rne(x / y_scale) + y_zero_point)``.

    Parameters
    ----------
    x : numpy.ndarray
        float32, float16 or bfloat16.
    y_scale : numpy.ndarray
        float32, float16 or bfloat16: a scalar or one-element tensor (per-tensor), 1-D
        (per-axis) or blocked.
    y_zero_point : numpy.ndarray, optional
        Its dtype is the output type (int8, uint8, int16, uint16, ml_dtypes
        int4/uint4/int2/uint2, or a float8/float4/float6 type with zeros). Per-tensor,
        per-axis or blocked independently of ``y_scale`` (a one-element zero point beside
        a per-axis scale, or the reverse, as ONNX's own node tests pass them).
    axis : int
        The per-axis or blocked dimension (default 1).
    block_size : int
        ``> 0``: blocked quantization along ``axis``.
    output_dtype : int, str or dtype
        The output type when no zero point is given (``0``: uint8).
    precision : int, str or dtype
        The dtype of the division: FLOAT (1), FLOAT16 (10) or BFLOAT16 (16); ``0``: the
        common type of ``x`` and ``y_scale`` (a half type when both are). ``x`` and
        ``y_scale`` are rounded to it and so is the quotient (``compute_dtype``); the
        zero point is then added exactly. A half division with an int16/uint16 output
        and a nonzero zero point raises ``NotImplementedError`` (nbquant rounds that sum
        to the half type as well, where ONNX adds in int32).
    saturate : int
        Floating-point outputs: ``1`` clamps to the largest finite value, ``0`` gives
        NaN (e4m3fn) or inf (e5m2) on overflow.

    Returns
    -------
    numpy.ndarray
        ``y``: codes of ``x``'s shape in the quantized type (the zero point's dtype,
        else ``output_dtype``, else uint8); int4/uint4/int2/uint2 and the float
        types as ml_dtypes arrays.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[-1.0, 0.25, 2.5, 300.0]], np.float32)
    >>> quantize_linear(x, np.float32(0.5), np.uint8(128))
    array([[126, 128, 133, 255]], dtype=uint8)
    >>> quantize_linear(x, np.float32(0.5), output_dtype="INT4")
    array([[-2, 0, 5, 7]], dtype=int4)
    >>> quantize_linear(x, np.array([0.5], np.float32), np.array([1, 2, 3, 4], np.int8), axis=1)
    array([[ -1,   2,   8, 127]], dtype=int8)
    """
    xa = _float_arg("x", x)
    s = _scale_arg("y_scale", y_scale)
    zp = None if y_zero_point is None else np.asarray(y_zero_point)
    fmt = _qtype(output_dtype, "output_dtype") if (output_dtype != 0 and output_dtype is not None) else None
    if zp is not None:
        zfmt = _qtype(zp.dtype, f"y_zero_point={show(y_zero_point)}: its dtype")
        if fmt is not None and fmt != zfmt:
            raise ValueError(f"output_dtype={output_dtype!r} ({fmt}) does not match the y_zero_point dtype "
                             f"{zp.dtype}; they must be the same type")
        fmt = zfmt
    fmt = fmt or "uint8"
    if fmt == "int32":
        raise ValueError("QuantizeLinear has no INT32 output (DequantizeLinear reads int32); use one of "
                         f"{sorted(k for k, v in TENSOR_TYPES.items() if v != 'int32')}")
    div = _division_dtype(xa, s, precision)
    if not isinstance(saturate, (int, np.integer, np.bool_)) or saturate not in (0, 1):
        raise ValueError(f"saturate={saturate!r} must be 0 or 1")
    s, zp, kwargs = _layout(xa.shape, s, zp, axis, block_size, ("y_scale", "y_zero_point"))
    zp = _zero_point(zp, fmt, "y_zero_point")
    if div != np.float32 and zp is not None and fmt in ("int16", "uint16") and np.any(zp != 0):
        raise NotImplementedError(f"a {div} division with a nonzero {fmt} y_zero_point: ONNX adds the zero point in "
                                  f"int32, nbquant's {div} arithmetic rounds that sum to {div}; pass precision=1 "
                                  "(FLOAT) or a float32 y_scale")
    kwargs["compute_dtype"] = str(div)
    if fmt.startswith("float"):
        return api.quantize(xa, s, fmt, saturate=bool(saturate), **kwargs)
    y = api.quantize(xa, s, fmt, zero_point=zp, **kwargs)
    nan = np.isnan(xa)
    if nan.any():  # ONNX (onnxruntime and the reference evaluator): NaN becomes the lowest code
        y[nan] = np.array(get_format(fmt).qmin).astype(y.dtype)
    return y


def dequantize_linear(x: npt.ArrayLike, x_scale: npt.ArrayLike, x_zero_point: npt.ArrayLike | None = None, *,
                      axis: int = 1, block_size: int = 0, output_dtype=0) -> np.ndarray:
    """ONNX ``DequantizeLinear``: ``(x - x_zero_point) * x_scale`` in float32, cast to ``output_dtype``.

    Parameters
    ----------
    x : numpy.ndarray
        Codes: int8, uint8, int16, uint16, int32, ml_dtypes int4/uint4/int2/uint2,
        float8 e4m3fn/e5m2, float4 e2m1, float6.
    x_scale : numpy.ndarray
        float32, float16 or bfloat16; per-tensor, per-axis or blocked.
    x_zero_point : numpy.ndarray, optional
        Same dtype as ``x`` (zeros for floating-point types); per-tensor, per-axis or
        blocked independently of ``x_scale``. int32 codes with a nonzero zero point raise
        ``NotImplementedError``: ONNX computes ``x - x_zero_point`` in float64 there.
    axis : int
        As in :func:`quantize_linear`.
    block_size : int
        As in :func:`quantize_linear`.
    output_dtype : int, str or dtype
        ``0``: the scale's dtype; else FLOAT (1), FLOAT16 (10) or BFLOAT16 (16).

    Returns
    -------
    numpy.ndarray
        ``y``: floats of ``x``'s shape, dtype ``output_dtype`` (default: the
        scale's dtype).

    Examples
    --------
    >>> import numpy as np
    >>> dequantize_linear(np.array([126, 128, 133, 255], np.uint8), np.float32(0.5), np.uint8(128))
    array([-1. ,  0. ,  2.5, 63.5], dtype=float32)
    >>> dequantize_linear(np.array([-7, 2**24 + 1], np.int32), np.float32(0.25))  # an int32 bias
    array([-1.750000e+00,  4.194304e+06], dtype=float32)
    """
    q = np.asarray(x)
    fmt = _qtype(q.dtype, "x dtype")
    s = _scale_arg("x_scale", x_scale)
    out = s.dtype if (output_dtype == 0 or output_dtype is None) else _float_type(output_dtype, "output_dtype")
    zp = None if x_zero_point is None else np.asarray(x_zero_point)
    if zp is not None and not fmt.startswith("float") and zp.dtype != q.dtype:
        raise TypeError(f"x_zero_point has dtype {zp.dtype} (x_zero_point={show(x_zero_point)}); it must have x's "
                        f"dtype {q.dtype}")
    if fmt == "int32" and zp is not None and np.any(zp != 0):
        raise NotImplementedError("int32 x with a nonzero x_zero_point: ONNX computes x - x_zero_point and the "
                                  "product in float64, nbquant in float32; subtract the zero point first (int64) "
                                  "or pass x_zero_point=None")
    s, zp, kwargs = _layout(q.shape, s, zp, axis, block_size, ("x_scale", "x_zero_point"))
    zp = _zero_point(zp, fmt, "x_zero_point")
    return api.dequantize(q, s, zero_point=zp, out_dtype=out, **kwargs)


def dynamic_quantize_linear(x: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX ``DynamicQuantizeLinear``: per-tensor uint8 with a scale and zero point computed from ``x``.

    ``y_scale = (max(0, max(x)) - min(0, min(x))) / 255`` (``1 / 255`` when both are
    0), ``y_zero_point = rne(clip(0 - min(0, min(x)) / y_scale, 0, 255))``, then
    :func:`quantize_linear` with them. All in float32.

    Parameters
    ----------
    x : numpy.ndarray
        float32, not empty, finite.

    Returns
    -------
    y : numpy.ndarray
        uint8 codes.
    y_scale : numpy.ndarray
        0-d float32.
    y_zero_point : numpy.ndarray
        0-d uint8.

    Examples
    --------
    >>> import numpy as np
    >>> y, s, z = dynamic_quantize_linear(np.array([0.0, 2.0, -3.0, -1.0], np.float32))
    >>> y, s, z
    (array([153, 255,   0, 102], dtype=uint8), array(0.01960784, dtype=float32), array(153, dtype=uint8))
    """
    xa = np.asarray(x)
    if xa.dtype != np.float32:
        raise TypeError(f"x has dtype {xa.dtype}; DynamicQuantizeLinear takes float32")
    if xa.size == 0:
        raise ValueError("x is empty; DynamicQuantizeLinear needs at least one element")
    hi, lo = np.max(xa), np.min(xa)
    if not (np.isfinite(hi) and np.isfinite(lo)):
        raise ValueError(f"x must be finite; its range is [{lo}, {hi}]")
    maxx = np.float32(max(np.float32(0), hi))
    minx = np.float32(min(np.float32(0), lo))
    scale = np.float32(np.float32(1.0) if maxx == minx else maxx - minx) / np.float32(255)
    zp = np.rint(np.float32(min(np.float32(255), max(np.float32(0), np.float32(0) - minx / scale))))
    y = api.quantize(xa, scale, "uint8", zero_point=zp)
    return y, np.array(scale, np.float32), np.array(zp, np.uint8)
