"""Argument translation shared by the front-ends: dtype names and float inputs (no numerics here)."""

from __future__ import annotations

from collections.abc import Mapping

import ml_dtypes
import numpy as np

__all__ = ["dtype_key", "float_array", "float_dtype_name"]

_PREFIXES = ("torch.", "tp.", "nvtripy.", "trt.", "datatype.", "pypto.", "dt_", "tensorproto.", "np.", "numpy.")


def _raw_name(value) -> str | None:
    """A lower-case name for a dtype given as a string, numpy/ml_dtypes dtype, or foreign dtype object."""
    if isinstance(value, str):
        name = value
    else:
        try:
            name = np.dtype(value).name
        except TypeError:
            name = str(value)  # torch.int8 -> "torch.int8", tripy/pypto dtype objects print their name
    name = name.strip().lower()
    changed = True
    while changed:
        changed = False
        for p in _PREFIXES:
            if name.startswith(p):
                name, changed = name[len(p):], True
    return name


def dtype_key(value, name: str, table: Mapping[str, str]) -> str:
    """Look ``value`` up in ``table`` (accepted lower-case name → result); raise naming ``name`` otherwise.

    Examples
    --------
    >>> import numpy as np
    >>> dtype_key(np.int8, "dtype", {"int8": "int8"})
    'int8'
    >>> dtype_key("torch.uint4", "output_dtype", {"uint4": "uint4"})
    'uint4'
    """
    key = _raw_name(value)
    if key not in table:
        raise ValueError(f"{name}={value!r} is not supported here; use one of {sorted(set(table))}")
    return table[key]


_FLOAT_NAMES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
                "bfloat16": np.dtype(ml_dtypes.bfloat16), "float64": np.dtype(np.float64)}


def float_dtype_name(dtype) -> str:
    """``"float32"``, ``"float16"``, ``"bfloat16"`` or ``"float64"`` for a float dtype, else its name."""
    return np.dtype(dtype).name


def float_array(x, name: str, allowed: tuple[str, ...] = ("float32", "float16", "bfloat16"),
                sequence_dtype=np.float32) -> np.ndarray:
    """``x`` as an array of one of the ``allowed`` float dtypes.

    Python numbers and (nested) sequences become ``sequence_dtype`` (float32, the
    default dtype of ``torch.tensor`` / ``tp.Tensor``); arrays keep their dtype,
    which must be one of ``allowed``.
    """
    if isinstance(x, np.ndarray) or isinstance(x, np.generic):
        arr = np.asarray(x)
    else:
        arr = np.asarray(x)
        if arr.dtype.kind in "biuf":
            arr = arr.astype(sequence_dtype)
    if arr.dtype.name not in allowed:
        raise TypeError(f"{name} has dtype {arr.dtype}; allowed: {', '.join(allowed)}")
    return arr
