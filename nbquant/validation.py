"""Argument checks run in Python before any kernel: each names the argument, the value and what is allowed."""

from __future__ import annotations

import operator

import ml_dtypes
import numpy as np

from .formats import QuantFormat
from .layout import BlockLayout, param_grid

__all__ = [
    "FLOAT_INPUT_DTYPES",
    "FLOAT_OUTPUT_DTYPES",
    "check_float_input",
    "check_scale",
    "check_zero_point",
    "check_quant_range",
    "check_out",
    "check_choice",
    "check_out_dtype",
    "check_float_format_arguments",
]

FLOAT_INPUT_DTYPES = tuple(map(np.dtype, (np.float32, np.float16, ml_dtypes.bfloat16, np.float64)))
FLOAT_OUTPUT_DTYPES = tuple(map(np.dtype, (np.float32, np.float16, ml_dtypes.bfloat16)))
_NAMES = "float32, float16, bfloat16 (ml_dtypes) or float64"


def check_float_input(x, name: str = "x") -> np.ndarray:
    """Return ``x`` as a C-contiguous NumPy array of a supported float dtype (copies only if not contiguous)."""
    arr = np.asarray(x)
    if arr.dtype not in FLOAT_INPUT_DTYPES:
        raise TypeError(f"{name} has dtype {arr.dtype}; nbquant quantizes {_NAMES} arrays. "
                        f"Convert it first, e.g. {name}.astype(numpy.float32)")
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)  # ascontiguousarray makes 0-d 1-d


def _as_float_param(name: str, value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind in "biu":
        arr = arr.astype(np.float32)
    elif arr.dtype not in FLOAT_INPUT_DTYPES:
        raise TypeError(f"{name} has dtype {arr.dtype}; use a float ({_NAMES}) or integer array or scalar")
    with np.errstate(over="ignore"):  # beyond float32 becomes inf, which the finiteness checks reject
        return arr.astype(np.float32, copy=False)


def _all_within(arr: np.ndarray, low: float, high: float) -> bool:
    """Whether every value lies in ``(low, high)``: two reductions, no temporaries (NaN fails)."""
    if arr.size == 1:
        v = float(arr.reshape(-1)[0])
        return low < v < high
    return arr.size == 0 or bool(arr.min() > low and arr.max() < high)


def _first_bad(name: str, arr: np.ndarray, bad: np.ndarray, allowed: str) -> None:
    if bad.any():
        index = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
        where = [int(i) for i in index] if index else ""
        raise ValueError(f"{name} must be {allowed}; {name}{where} is {arr[index]!r}")


def check_scale(scale, layout: BlockLayout, name: str = "scale") -> np.ndarray:
    """Return the scale as a float32 block-grid array; every value must be finite and > 0."""
    raw = _as_float_param(name, scale)
    s = param_grid(name, raw, layout)
    if not _all_within(raw, 0, np.inf):
        _first_bad(name, raw, ~(np.isfinite(raw) & (raw > 0)), "finite and > 0")
    return np.ascontiguousarray(s)


def check_zero_point(zero_point, layout: BlockLayout, fmt: QuantFormat, integral: bool) -> np.ndarray | None:
    """Return the zero point as a float32 block-grid array, or None when absent or all zero.

    With ``integral`` (zero point added after rounding) every value must be an
    integer within the format's range; otherwise any finite float is allowed.
    """
    if zero_point is None:
        return None
    raw = _as_float_param("zero_point", zero_point)
    z = param_grid("zero_point", raw, layout)
    if not _all_within(raw, -np.inf, np.inf):
        _first_bad("zero_point", raw, ~np.isfinite(raw), "finite")
    if integral:
        _first_bad("zero_point", raw, raw != np.rint(raw),
                   "integers when added after rounding (zero_point_order='after_rounding')")
        _first_bad("zero_point", raw, (raw < fmt.qmin) | (raw > fmt.qmax),
                   f"within the {fmt.name} range [{fmt.qmin}, {fmt.qmax}]")
    return np.ascontiguousarray(z) if z.any() else None


def _int_or_none(name: str, value):
    if value is None:
        return None
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}={value!r} must be an integer") from None


def check_quant_range(fmt: QuantFormat, quant_min, quant_max) -> tuple[int, int]:
    """Return ``(qmin, qmax)``: the format's range unless overridden inside it."""
    lo = _int_or_none("quant_min", quant_min)
    hi = _int_or_none("quant_max", quant_max)
    lo = fmt.qmin if lo is None else lo
    hi = fmt.qmax if hi is None else hi
    for arg, v in (("quant_min", lo), ("quant_max", hi)):
        if not fmt.qmin <= v <= fmt.qmax:
            raise ValueError(f"{arg}={v} is outside the {fmt.name} range; use {fmt.qmin} <= {arg} <= {fmt.qmax}")
    if lo > hi:
        raise ValueError(f"quant_min={lo} is greater than quant_max={hi}; quant_min must be <= quant_max")
    return lo, hi


def _overlaps(out: np.ndarray, value) -> bool:
    """Whether ``out`` shares a byte with ``value`` (an array, or an object NumPy views without a copy).

    Bounds first (``may_share_memory``), then the exact test; an overlap too hard to
    decide exactly counts as one.
    """
    if not isinstance(value, np.ndarray):
        if not (hasattr(value, "__array_interface__") or hasattr(value, "__array__")):
            return False  # Python scalars, lists: NumPy copies them, nothing to overlap
        value = np.asarray(value)
    if not np.may_share_memory(out, value):
        return False
    try:
        return bool(np.shares_memory(out, value, max_work=1 << 20))
    except np.exceptions.TooHardError:
        return True


def check_out(out, shape: tuple[int, ...], dtype: np.dtype, inputs: dict | None = None) -> np.ndarray:
    """Check a user ``out=`` array: exact shape and dtype, C-contiguous, writeable, not overlapping inputs.

    ``inputs`` maps argument names to the values the user passed (before any copy or
    conversion), so a view into a scale's bytes or a non-contiguous input is caught too.
    """
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype:
        raise ValueError(f"out has shape {out.shape} and dtype {out.dtype}; this call needs shape {shape} "
                         f"and dtype {np.dtype(dtype)}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be a writeable C-contiguous array; allocate it with numpy.empty(shape, dtype)")
    for name, value in (inputs or {}).items():
        if value is not None and _overlaps(out, value):
            raise ValueError(f"out shares memory with {name}; nbquant never modifies its inputs, so pass a separate "
                             f"array, e.g. out=numpy.empty({shape}, {np.dtype(dtype).name!r})")
    return out


def check_float_format_arguments(fmt: QuantFormat, **integer_only) -> None:
    """Reject integer-format arguments (zero point, quant_min/quant_max) for a floating-point format."""
    for arg, value in integer_only.items():
        if value is not None:
            raise ValueError(f"{arg}={value!r} applies to integer formats only; {fmt.name} is a floating-point "
                             f"format: leave {arg}=None")


def check_out_dtype(out_dtype) -> np.dtype:
    """Check a dequantize ``out_dtype``: float32, float16 or bfloat16."""
    try:
        dt = np.dtype(out_dtype)
    except TypeError:
        dt = None
    if dt not in FLOAT_OUTPUT_DTYPES:
        raise TypeError(f"out_dtype={out_dtype!r} is not supported; use float32, float16 or ml_dtypes.bfloat16")
    return dt


def check_choice(name: str, value, allowed: tuple[str, ...]) -> str:
    """Check a string option against its allowed values."""
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; use one of {list(allowed)}")
    return value
