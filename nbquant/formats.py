"""The table of quantized formats nbquant can produce.

Each :class:`QuantFormat` row says how codes of one format are stored: integer
formats by their range, floating-point element formats (fp8, fp6, fp4, e8m0) by
their exponent/mantissa layout and their overflow and NaN encodings (ml_dtypes'
conventions). Kernels never see ml_dtypes types: they write the raw storage
(``uint8`` or ``uint16``, one code per element, or several codes per byte when
packed) and the public API views the result as :attr:`QuantFormat.dtype`.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = ["QuantFormat", "FORMATS", "get_format"]


@dataclass(frozen=True)
class QuantFormat:
    """One quantized format: integer, or a floating-point element format.

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
    ebits, mbits : int
        Exponent and mantissa bits of a floating-point format (0 for integers).
    max_code, overflow_code, nan_code, nan_flips_sign, nan_rule : int
        Floating-point encoding rules, see :func:`nbquant.element.encode_minifloat`
        and :func:`nbquant.element.decode_minifloat`.

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
    ebits: int = 0
    mbits: int = 0
    max_code: int = 0
    overflow_code: int = 0
    nan_code: int = 0
    nan_flips_sign: int = 0
    nan_rule: int = 0

    @property
    def is_float(self) -> bool:
        """Whether this is a floating-point element format (fp8, fp6, fp4, e8m0)."""
        return self.ebits > 0

    @property
    def fp_params(self) -> tuple[int, ...]:
        """The tuple kernels take for a floating-point format (see ``quantize_float_value``)."""
        return (self.ebits, self.mbits, self.max_code, self.overflow_code, self.nan_code,
                self.nan_flips_sign, self.nan_rule)

    @property
    def max_value(self) -> float:
        """The largest finite value (``qmax`` for integer formats)."""
        return float(ml_dtypes.finfo(self.dtype).max) if self.is_float else float(self.qmax)

    @property
    def qmin(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def qmax(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def packable(self) -> bool:
        """Whether ``packed=True`` is supported: 2-, 4- and 6-bit formats."""
        return self.bits in (2, 4, 6)

    @property
    def pack_group(self) -> tuple[int, int]:
        """``(codes, bytes)`` of one packed group: 4 codes in 1 byte (2-bit), 2 in 1 (4-bit), 4 in 3 (6-bit).

        Codes fill a little-endian bit stream: code ``i`` of a group occupies bits
        ``[bits * i, bits * (i + 1))``, byte ``b`` holds bits ``[8b, 8b + 8)``.
        """
        return {2: (4, 1), 4: (2, 1), 6: (4, 3)}.get(self.bits, (1, 1))

    def packed_length(self, n: int) -> int:
        """Bytes that ``n`` packed codes take (``n`` a multiple of ``pack_group[0]``)."""
        codes, nbytes = self.pack_group
        return n // codes * nbytes

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
        # name, dtype, bits, signed, ebits, mbits, max, overflow (not saturating), NaN, NaN flips sign, NaN rule
        QuantFormat("float8_e4m3fn", np.dtype(ml_dtypes.float8_e4m3fn), 8, True, 4, 3, 0x7E, 0x7F, 0x7F, 0, 1),
        QuantFormat("float8_e5m2", np.dtype(ml_dtypes.float8_e5m2), 8, True, 5, 2, 0x7B, 0x7C, 0x7E, 0, 2),
        QuantFormat("float6_e2m3fn", np.dtype(ml_dtypes.float6_e2m3fn), 6, True, 2, 3, 0x1F, 0x1F, 0, 1, 0),
        QuantFormat("float6_e3m2fn", np.dtype(ml_dtypes.float6_e3m2fn), 6, True, 3, 2, 0x1F, 0x1F, 0, 1, 0),
        QuantFormat("float4_e2m1fn", np.dtype(ml_dtypes.float4_e2m1fn), 4, True, 2, 1, 0x7, 0x7, 0, 1, 0),
    )
}

_BY_DTYPE = {f.dtype: f for f in FORMATS.values()}
_ALIASES = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "fp4": "float4_e2m1fn",
            "fp6_e2m3": "float6_e2m3fn", "fp6_e3m2": "float6_e3m2fn"}


def get_format(dtype: str | np.dtype | type) -> QuantFormat:
    """Look a quantized format up by name or by numpy/ml_dtypes dtype.

    Names are the ml_dtypes names; ``"fp8_e4m3"``, ``"fp8_e5m2"`` and ``"fp4"`` are
    aliases of ``float8_e4m3fn``, ``float8_e5m2`` and ``float4_e2m1fn``.

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
        fmt = FORMATS.get(_ALIASES.get(dtype.lower(), dtype.lower()))
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
