"""The table of quantized formats nbquant can produce.

Each :class:`QuantFormat` row says how codes of one format are stored and which
integer range they cover. Kernels never see ml_dtypes types: they write the raw
storage (``uint8`` or ``uint16`` bytes, one code per element, or several codes per
byte when packed) and the public API views the result as :attr:`QuantFormat.dtype`.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = ["QuantFormat", "FORMATS", "get_format"]


@dataclass(frozen=True)
class QuantFormat:
    """One quantized integer format.

    Attributes
    ----------
    name : str
        Canonical name, e.g. ``"int4"``.
    dtype : numpy.dtype
        The dtype of an unpacked result (ml_dtypes for sub-byte formats).
    bits : int
        Bits per code.
    signed : bool
        Whether codes are two's complement.
    qmin, qmax : int
        The full range of the format.
    packable : bool
        Whether ``packed=True`` is allowed (sub-byte formats: several codes per byte).

    Examples
    --------
    >>> from nbquant.formats import get_format
    >>> f = get_format("int4")
    >>> (f.qmin, f.qmax, f.codes_per_byte)
    (-8, 7, 2)
    """

    name: str
    dtype: np.dtype
    bits: int
    signed: bool

    @property
    def qmin(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def qmax(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def packable(self) -> bool:
        return self.bits < 8

    @property
    def codes_per_byte(self) -> int:
        """Codes stored in one byte when packed (1 for formats of 8 bits or more)."""
        return 8 // self.bits if self.bits < 8 else 1

    @property
    def storage(self) -> np.dtype:
        """The unsigned dtype kernels write one unpacked code into."""
        return np.dtype(np.uint16) if self.bits > 8 else np.dtype(np.uint8)

    @property
    def mask(self) -> int:
        """The low-bit mask that keeps one code."""
        return (1 << self.bits) - 1


def _row(name: str, dtype, bits: int, signed: bool) -> QuantFormat:
    return QuantFormat(name, np.dtype(dtype), bits, signed)


FORMATS: dict[str, QuantFormat] = {
    f.name: f
    for f in (
        _row("int8", np.int8, 8, True),
        _row("uint8", np.uint8, 8, False),
        _row("int16", np.int16, 16, True),
        _row("uint16", np.uint16, 16, False),
        _row("int4", ml_dtypes.int4, 4, True),
        _row("uint4", ml_dtypes.uint4, 4, False),
        _row("int2", ml_dtypes.int2, 2, True),
        _row("uint2", ml_dtypes.uint2, 2, False),
    )
}

_BY_DTYPE = {f.dtype: f for f in FORMATS.values()}


def get_format(dtype: str | np.dtype | type) -> QuantFormat:
    """Look a quantized format up by name or by numpy/ml_dtypes dtype.

    Parameters
    ----------
    dtype : str, numpy.dtype or type
        ``"int8"``, ``numpy.int8``, ``ml_dtypes.int4``, ...

    Returns
    -------
    QuantFormat

    Raises
    ------
    ValueError
        If the format is unknown; the message lists the known ones.

    Examples
    --------
    >>> import numpy as np
    >>> get_format(np.uint8).qmax
    255
    """
    if isinstance(dtype, str):
        fmt = FORMATS.get(dtype.lower())
    else:
        try:
            fmt = _BY_DTYPE.get(np.dtype(dtype))
        except TypeError:
            fmt = None
    if fmt is None:
        raise ValueError(
            f"dtype={dtype!r} is not a quantized format nbquant knows; "
            f"use one of {sorted(FORMATS)} (a name or the numpy/ml_dtypes dtype)"
        )
    return fmt
