"""The ``same`` column of the ratio benchmark: does a peer's result hold nbquant's codes or values?

``"="`` means the same codes or values, ``"≠k"`` that k elements differ, ``"-"`` that
the results cannot be compared (other sizes or widths, no result). Results may be
NumPy arrays or scalars, numba device arrays, torch tensors on any device (quantized ones by their integer codes),
onnxruntime's output lists, torchao's ``(scales, data)`` or nbquant's block formats.
"""

from __future__ import annotations

import sys

import numpy as np


def _host(result) -> np.ndarray | None:
    """A peer's result as a NumPy array of the stored bits or values (None when there is none)."""
    if isinstance(result, np.generic):  # a NumPy scalar (np.abs(x).max())
        result = np.asarray(result)
    if isinstance(result, list):  # onnxruntime
        result = result[0]
    if isinstance(result, tuple):  # torchao to_mx: (scales, data)
        result = result[1]
    if hasattr(result, "scales") and hasattr(result, "block_size"):  # nbquant BlockQuantized
        result = result.data
    if result is None:
        return None
    if hasattr(result, "copy_to_host"):  # a numba device array (the cuda backend's results), ml_dtypes too
        from nbquant.backends.cuda.runtime import to_host

        result = to_host(result)
    if isinstance(result, np.ndarray):  # ml_dtypes' user-defined dtypes (fp8, ...) by their bits
        return result.view(f"u{result.dtype.itemsize}") if result.dtype.isbuiltin == 2 else result
    torch = sys.modules["torch"]
    if result.is_quantized:
        result = result.int_repr()
    elif result.dtype.is_floating_point and result.element_size() == 1:
        result = result.view(torch.uint8)
    return result.cpu().numpy()


def _values(result) -> np.ndarray:
    """A result's values as a flat float64 array."""
    return np.asarray(_host(result), np.float64).reshape(-1)


def _mark(mismatches: int) -> str:
    return "=" if mismatches == 0 else f"≠{mismatches}"


def _mismatches(ref, result) -> int | None:
    """Elements of ``result`` whose bits differ from nbquant's ``ref`` (None when not comparable)."""
    a, b = _host(ref), _host(result)
    if a is None or b is None or a.size != b.size or a.dtype.itemsize != b.dtype.itemsize:
        return None
    if a.dtype != b.dtype:
        a, b = a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}")
    return int(np.count_nonzero(a.reshape(-1) != b.reshape(-1)))


def _compare_dynamic(ref: tuple, result: tuple) -> str:
    """Codes by bits, then scales and zero points by value (peers may keep other shapes or int widths)."""
    bad = _mismatches(ref[0], result[0])
    if bad is None:
        return "-"
    for a, b in zip(ref[1:], result[1:], strict=True):
        a, b = _values(a), _values(b)
        if a.size != b.size:
            return "-"
        bad += int(np.count_nonzero(a != b))
    return _mark(bad)


def compare(ref, result) -> str:
    """``"="`` when ``result`` holds the same values (or bits) as nbquant's ``ref``, ``"≠k"`` for k mismatches.

    Dynamic cases return ``(codes, scale, zero_point)``: all three are compared.

    Examples
    --------
    >>> import numpy as np
    >>> compare(np.array([1, 2, 3], np.int8), np.array([1, 2, 4], np.int8))
    '≠1'
    >>> compare(np.array([1, 2], np.int8), np.array([1, 2, 3], np.int8))
    '-'
    """
    if isinstance(ref, tuple) and isinstance(result, tuple) and len(ref) == len(result) == 3:
        return _compare_dynamic(ref, result)
    bad = _mismatches(ref, result)
    return "-" if bad is None else _mark(bad)


def compare_values(ref, result) -> str:
    """``"="`` when ``result`` holds the same values as nbquant's ``ref`` whatever the dtypes, ``"≠k"`` for k.

    For calibrators: an amax (0-d array, NumPy scalar or tensor) or histogram counts
    (int64, or torch.histc's float32), where k counts the bins whose counts differ;
    ``"-"`` when the sizes differ.

    Examples
    --------
    >>> import numpy as np
    >>> compare_values(np.array([3, 0, 1]), np.array([3.0, 0.0, 1.0], np.float32))
    '='
    """
    a, b = _values(ref), _values(result)
    if a.size != b.size:
        return "-"
    return _mark(int(np.count_nonzero(a != b)))
