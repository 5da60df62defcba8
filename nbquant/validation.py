"""Argument checks run in Python before any kernel: each names the argument, the value and what is allowed."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from .formats import QuantFormat
from .layout import BlockLayout, as_int, param_grid
from .placement import FLOAT_INPUT_DTYPES, check_float_input, check_known_chunks, check_out, is_dask_array

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
    "check_packed",
    "as_real_array",
    "show",
    "check_finite",
    "check_float_scalar",
    "check_int",
    "check_bool",
    "check_amax",
    "check_affine_range",
]

FLOAT_OUTPUT_DTYPES = tuple(map(np.dtype, (np.float32, np.float16, ml_dtypes.bfloat16)))
_NAMES = "float32, float16, bfloat16 (ml_dtypes) or float64"


def show(value) -> str:
    """``value`` as an error message shows it: its repr, or the dtype and shape of a large array."""
    if isinstance(value, np.ndarray) and value.size > 8:
        return f"<array of dtype {value.dtype} and shape {value.shape}>"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def as_real_array(name: str, value) -> np.ndarray:
    """``np.asarray(value)`` when it holds real numbers (integers or floats); else a TypeError naming ``name``.

    Bools are refused (``True`` would silently be 1), also inside a list of numbers, as
    are strings, complex numbers, None and other objects.

    Examples
    --------
    >>> as_real_array("scale", [0.5, 2]).dtype
    dtype('float64')
    >>> as_real_array("scale", True)
    Traceback (most recent call last):
    ...
    TypeError: scale has dtype bool: scale=True is a bool, not a number; use a float (float32, float16, bfloat16 \
(ml_dtypes) or float64) or integer array or scalar
    """
    try:
        arr = np.asarray(value)
    except ValueError:  # ragged nesting
        raise TypeError(f"{name}={show(value)} is not an array of numbers; use a float ({_NAMES}) or integer "
                        "array or scalar") from None
    if arr.dtype.kind not in "iu" and arr.dtype not in FLOAT_INPUT_DTYPES:
        what = "is a bool, not a number" if arr.dtype.kind == "b" else "is not a real number"
        raise TypeError(f"{name} has dtype {arr.dtype}: {name}={show(value)} {what}; use a float ({_NAMES}) or "
                        "integer array or scalar")
    if isinstance(value, (list, tuple)):  # NumPy turns [0.5, True] into [0.5, 1.0]
        items = np.asarray(value, dtype=object)
        is_bool = np.vectorize(lambda v: isinstance(v, (bool, np.bool_)), otypes=[bool])(items)
        if is_bool.any():
            index = np.unravel_index(int(np.argmax(is_bool)), is_bool.shape)
            raise TypeError(f"{name}={show(value)} holds a bool, not a number: {name}{[int(i) for i in index]} is "
                            f"{items[index]!r}; use a float ({_NAMES}) or integer array or scalar")
    return arr


def _all_within(arr: np.ndarray, low: float, high: float) -> bool:
    """Whether every value lies in ``(low, high)``: two reductions, no temporaries (NaN fails)."""
    if arr.size == 1:
        v = float(arr.reshape(-1)[0])
        return low < v < high
    return arr.size == 0 or bool(arr.min() > low and arr.max() < high)


def _element(value, index: tuple[int, ...]):
    """The element ``index`` of ``value`` as the user wrote it (a list element as a Python number)."""
    if isinstance(value, np.ndarray):
        return value[index]
    if not index:
        return value
    return np.asarray(value)[index].item()


def _conversion_note(given, converted) -> str:
    """Why ``given`` fails once converted to ``converted``: ``"overflows float32 (...)"``, ``"is 0 in ..."``, ``""``."""
    values = np.asarray(given)
    if values.size != 1:
        return ""
    g, c = float(values.reshape(())), float(converted)
    info = ml_dtypes.finfo(converted.dtype)
    if math.isfinite(g) and not math.isfinite(c):
        return f"overflows {converted.dtype} (largest finite value {float(info.max):.8g})"
    if g != 0 and c == 0:
        return f"is 0 in {converted.dtype} (smallest subnormal {float(info.smallest_subnormal):.3g})"
    return ""


def _first_bad(name: str, value, arr: np.ndarray, bad: np.ndarray, allowed: str) -> None:
    """Raise naming the first element where ``bad``, as the user passed it (``value``; ``arr`` is its conversion)."""
    if bad.any():
        index = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
        where = [int(i) for i in index] if index else ""
        given = _element(value, index)
        note = _conversion_note(given, arr[index])
        raise ValueError(f"{name} must be {allowed}; {name}{where} is {given!r}{', which ' + note if note else ''}")


def check_finite(name: str, value, dtype=np.float32, *, positive: bool = False) -> np.ndarray:
    """Return ``value`` (real numbers) as a ``dtype`` array of its own shape; every value must be finite (and > 0).

    The values are checked after the conversion, and a message shows the first bad
    one as the user passed it, with why it fails: ``scale=1e300`` is reported as
    ``1e+300, which overflows float32``, ``zero_point=300`` as ``300``.

    Examples
    --------
    >>> check_finite("scale", [0.5, 1e-50], positive=True)
    Traceback (most recent call last):
    ...
    ValueError: scale must be finite and > 0; scale[1] is 1e-50, which is 0 in float32 (smallest subnormal 1.4e-45)
    """
    arr = as_real_array(name, value)
    # beyond dtype becomes inf, which the check reports with the value given; bfloat16 compares NaN with a warning
    with np.errstate(over="ignore", invalid="ignore"):
        converted = arr.astype(dtype, copy=False)
        if _all_within(converted, 0 if positive else -np.inf, np.inf):
            return converted
        bad = ~(np.isfinite(converted) & (converted > 0)) if positive else ~np.isfinite(converted)
    _first_bad(name, value, converted, bad, "finite and > 0" if positive else "finite")
    return converted


def check_scale(scale, layout: BlockLayout, name: str = "scale", *, lazy: bool = False) -> np.ndarray:
    """Return the scale as a float32 block-grid array; every value must be finite and > 0.

    With ``lazy``, a dask scale is checked for its shape only and returned as its block
    grid: its values are checked chunk by chunk, when computed, by this function.
    """
    if lazy and is_dask_array(scale):
        check_known_chunks(scale, name)
        return param_grid(name, scale, layout)
    return np.ascontiguousarray(param_grid(name, check_finite(name, scale, positive=True), layout))


def check_half_scale(s: np.ndarray, precision: str, x_dtype: np.dtype, passed) -> np.ndarray:
    """The float32 scale grid ``s`` rounded to ``precision`` (``compute_dtype``), as float32.

    ``x`` must not be float64 (rounding it to float32 and then to the half type could
    differ from one rounding), and every scale must stay finite and nonzero.

    Examples
    --------
    >>> check_half_scale(np.array([1e-8], np.float32), "float16", np.dtype(np.float32), 1e-8)
    Traceback (most recent call last):
    ...
    ValueError: scale must stay finite and > 0 in float16, the compute_dtype; scale is 1e-08, which is 0.0 in float16
    """
    if x_dtype == np.float64:
        raise TypeError(f"x has dtype float64; compute_dtype={precision!r} needs float32, float16 or bfloat16 input "
                        f"(cast x to {precision} or float32 first, or use compute_dtype='float32')")
    if is_dask_array(s):  # a dask scale (check_scale with lazy=True): checked chunk by chunk when computed
        return s
    with np.errstate(over="ignore"):
        half = s.astype(ml_dtypes.bfloat16 if precision == "bfloat16" else np.float16)
    bad = ~np.isfinite(half.astype(np.float32)) | (half == 0)
    if bad.any():
        flat = int(np.argmax(bad.reshape(-1)))
        index = tuple(map(int, np.unravel_index(flat, np.shape(passed)))) if np.size(passed) == bad.size else ()
        where = list(index) if index else ""
        given = _element(passed, index) if index else np.asarray(passed).reshape(-1)[0]
        given = given.item() if isinstance(given, np.generic) else given
        raise ValueError(f"scale must stay finite and > 0 in {precision}, the compute_dtype; "
                         f"scale{where} is {given!r}, which is {half.reshape(-1)[flat]} in {precision}")
    return half.astype(np.float32)


def check_zero_point(zero_point, layout: BlockLayout, fmt: QuantFormat, integral: bool, *,
                     lazy: bool = False) -> np.ndarray | None:
    """Return the zero point as a float32 block-grid array, or None when absent or all zero.

    With ``integral`` (zero point added after rounding) every value must be an
    integer within the format's range (a float64 zero point is checked before its
    float32 rounding: 127.00001 is refused); otherwise any finite float is allowed.
    With ``lazy``, a dask zero point is checked as :func:`check_scale` checks a dask scale.
    """
    if zero_point is None:
        return None
    if lazy and is_dask_array(zero_point):
        check_known_chunks(zero_point, "zero_point")
        return param_grid("zero_point", zero_point, layout)
    raw = check_finite("zero_point", zero_point)
    z = param_grid("zero_point", raw, layout)
    if integral:
        given = np.asarray(zero_point)
        exact = given if given.dtype == np.float64 else raw  # float32 holds any other dtype's in-range integers
        _first_bad("zero_point", zero_point, raw, exact != np.rint(exact),
                   "integers when added after rounding (zero_point_order='after_rounding')")
        _first_bad("zero_point", zero_point, raw, (exact < fmt.qmin) | (exact > fmt.qmax),
                   f"within the {fmt.name} range [{fmt.qmin}, {fmt.qmax}]")
        if given.dtype.kind in "iuf" and given.dtype.itemsize >= 4:  # int32 zero points beyond 2**24
            _first_bad("zero_point", zero_point, raw, given.astype(np.float64) != raw.astype(np.float64),
                       "integers float32 holds exactly (the arithmetic is float32; every integer up to 2**24)")
    return np.ascontiguousarray(z) if z.any() else None


def check_float_scalar(name: str, value, *, positive: bool) -> np.float32:
    """Return one float32 value (a number or a one-element array): finite, and > 0 with ``positive``.

    Examples
    --------
    >>> check_float_scalar("eps", 1e-6, positive=True)
    np.float32(1e-06)
    >>> check_float_scalar("eps", 1e300, positive=True)
    Traceback (most recent call last):
    ...
    ValueError: eps=1e+300 must be finite and > 0; 1e+300 overflows float32 (largest finite value 3.4028235e+38)
    """
    arr = as_real_array(name, value)
    if arr.size != 1:
        raise TypeError(f"{name}={show(value)} must be one number (shape {arr.shape} holds {arr.size} values)")
    with np.errstate(over="ignore"):
        f = np.float32(arr.reshape(()))
    if not (np.isfinite(f) and (f > 0 or not positive)):
        note = _conversion_note(arr, f)
        raise ValueError(f"{name}={show(value)} must be {'finite and > 0' if positive else 'finite'}"
                         f"{f'; {show(value)} {note}' if note else ''}")
    return f


def check_int(name: str, value, *, low: int | None = None, high: int | None = None,
              integral_float: bool = False) -> int:
    """Return ``value`` as an int in ``[low, high]`` (either bound optional).

    Python and NumPy integers are accepted; with ``integral_float`` also a float with
    an integral value (``3.0``). Bools, strings and other floats raise TypeError,
    values out of range ValueError; each message names ``name`` and shows the value.

    Examples
    --------
    >>> check_int("quant_min", -3.0, integral_float=True)
    -3
    >>> check_int("quant_min", -3.7, integral_float=True)
    Traceback (most recent call last):
    ...
    TypeError: quant_min=-3.7 must be an integer (or an integral float such as 3.0)
    """
    allowed = "an integer (or an integral float such as 3.0)" if integral_float else "an integer"
    if integral_float and isinstance(value, (float, np.floating)) and float(value).is_integer():
        n = int(value)
    else:
        n = as_int(name, value, allowed)
    if (low is not None and n < low) or (high is not None and n > high):
        bounds = f"{low} <= {name} <= {high}" if low is not None and high is not None else (
            f"{name} >= {low}" if low is not None else f"{name} <= {high}")
        raise ValueError(f"{name}={value!r} is out of range; use {bounds}")
    return n


def check_bool(name: str, value, *, none: bool = False) -> bool:
    """Return ``value`` as a bool: only ``True``/``False`` (Python or NumPy) are accepted.

    ``none`` says, in the message, that the caller also takes None (and handles it itself).
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}={show(value)} must be True{', False or None' if none else ' or False'}")
    return bool(value)


def check_quant_range(fmt: QuantFormat, quant_min, quant_max) -> tuple[int, int]:
    """Return ``(qmin, qmax)``: the format's range unless overridden inside it (integral floats accepted).

    ``qmax`` is at most :attr:`~nbquant.formats.QuantFormat.largest_code` (int32: ``2**31 - 128``).
    """
    lo = fmt.qmin if quant_min is None else check_int("quant_min", quant_min, integral_float=True)
    hi = fmt.qmax if quant_max is None else check_int("quant_max", quant_max, integral_float=True)
    for arg, v in (("quant_min", lo), ("quant_max", hi)):
        if not fmt.qmin <= v <= fmt.qmax:
            raise ValueError(f"{arg}={v} is outside the {fmt.name} range; use {fmt.qmin} <= {arg} <= {fmt.qmax}")
    if lo > hi:
        raise ValueError(f"quant_min={lo} is greater than quant_max={hi}; quant_min must be <= quant_max")
    return lo, min(hi, fmt.largest_code)


def check_packed(packed, fmt: QuantFormat, last_dim: int) -> bool:
    """``packed`` as a bool, checked: True only for a packable format whose group divides the last axis."""
    if not isinstance(packed, (bool, np.bool_)):
        raise TypeError(f"packed={packed!r} must be True or False")
    if packed:
        if not fmt.packable:
            raise ValueError(f"packed=True needs a 2-, 4- or 6-bit format (int4, uint4, int2, uint2, float4_e2m1fn, "
                             f"float6_*); dtype is {fmt.name}")
        k, nbytes = fmt.pack_group
        if last_dim % k:
            raise ValueError(f"packed=True stores {k} {fmt.name} codes in {nbytes} byte(s) along the last axis, whose "
                             f"length {last_dim} is not a multiple of {k}; pad the last axis to a multiple of {k}")
    return bool(packed)


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
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; use one of {list(allowed)}")
    return value


def check_amax(amax) -> np.ndarray:
    """Return modelopt's ``amax`` as a float32 array of its own shape; every value must be >= 0.

    NaN and inf are accepted, as modelopt accepts them (a NaN amax gives NaN, an inf
    one a zero scale: docs/dynamic.md); a finite value that overflows float32 is not.
    """
    arr = as_real_array("amax", amax)
    with np.errstate(over="ignore"):
        raw = arr.astype(np.float32, copy=False)
    _first_bad("amax", amax, raw, raw < 0, ">= 0 (modelopt: 'Negative values in amax')")
    if not np.isfinite(raw).all():  # NaN and inf as given are modelopt's; a finite value beyond float32 is refused
        _first_bad("amax", amax, raw, np.isinf(raw) & np.isfinite(arr.astype(np.float64)), "within float32's range "
                   "(NaN and inf are accepted, as in modelopt)")
    return raw


def check_affine_range(min_range, max_range) -> tuple[np.float32, np.float32]:
    """Return FakeAffine's ``(min_range, max_range)`` as float32: one finite value each, ``min_range < max_range``.

    The forward (:func:`nbquant.fake_affine_tensor_quant`) and its STE backward share this check.
    """
    lo = check_float_scalar("min_range", min_range, positive=False)
    hi = check_float_scalar("max_range", max_range, positive=False)
    if not lo < hi:
        same = " (they are equal in float32)" if lo == hi and min_range != max_range else ""
        raise ValueError(f"min_range={show(min_range)} must be below max_range={show(max_range)}{same}")
    return lo, hi
