"""``PackedCodes``: packed sub-byte codes that remember their format, so ``dequantize`` needs no ``dtype=``."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["PackedCodes"]


class PackedCodes(np.ndarray):
    """The uint8 bytes of packed codes (``quantize(..., packed=True)``), tagged with their format.

    A ``numpy.ndarray`` subclass: it indexes, slices, saves and converts like the uint8
    array it is, and :func:`nbquant.dequantize` reads :attr:`format` from it, so
    ``dequantize(q, scale)`` decodes int4 codes as int4 (a plain uint8 array would be
    read as one uint8 code per byte). Arithmetic on it gives plain arrays: the result
    of ``q + 1`` holds no codes. ``q.view(numpy.ndarray)`` drops the tag.

    Parameters
    ----------
    data : numpy.ndarray
        uint8 bytes of packed codes (a view is taken, nothing is copied).
    format : str
        The code format's name (``"int4"``, ``"uint4"``, ``"int2"``, ``"uint2"``,
        ``"float4_e2m1fn"``, ``"float6_e2m3fn"``, ``"float6_e3m2fn"``).

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> q = nbquant.quantize(np.array([[1.0, -1.0]], np.float32), 0.5, "int4", packed=True)
    >>> q.format, q.view(np.ndarray)
    ('int4', array([[226]], dtype=uint8))
    >>> nbquant.dequantize(q, 0.5)
    array([[ 1., -1.]], dtype=float32)
    """

    format: str | None

    def __new__(cls, data: np.ndarray, format: str) -> PackedCodes:
        if data.dtype != np.uint8:
            raise TypeError(f"PackedCodes holds uint8 bytes; got dtype {data.dtype}")
        codes = data.view(cls)
        codes.format = format
        return codes

    def __array_finalize__(self, obj: Any) -> None:
        self.format = getattr(obj, "format", None)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """Compute on the plain uint8 arrays: arithmetic on codes does not give codes of the same format."""
        plain = tuple(a.view(np.ndarray) if isinstance(a, PackedCodes) else a for a in inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(a.view(np.ndarray) if isinstance(a, PackedCodes) else a for a in kwargs["out"])
        return getattr(ufunc, method)(*plain, **kwargs)

    def __reduce__(self):
        rebuild, args, state = super().__reduce__()
        return rebuild, args, (state, self.format)

    def __setstate__(self, state) -> None:
        array_state, self.format = state
        super().__setstate__(array_state)

    def __repr__(self) -> str:
        prefix = "PackedCodes("
        body = np.array2string(self.view(np.ndarray), separator=", ", prefix=prefix)
        return f"{prefix}{body}, dtype=uint8, format={self.format!r})"
