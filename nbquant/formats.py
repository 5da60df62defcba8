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

from .modes import NanRule

__all__ = ["QuantFormat", "FORMATS", "get_format"]


@dataclass(frozen=True)
class QuantFormat:
    """One quantized format: integer, or a floating-point element format.

    The rows of :data:`FORMATS` are the instances; look one up with :func:`get_format`.
    The fields below are the constructor's parameters (and the attributes); the
    properties (``qmin``, ``qmax``, ``max_value``, ``packable``, ...) derive from them.

    Parameters
    ----------
    name : str
        Canonical name, e.g. ``"int4"``.
    dtype : numpy.dtype
        The dtype of an unpacked result (ml_dtypes for sub-byte formats).
    bits : int
        Bits per code.
    signed : bool
        Whether codes are two's complement.
    ebits, mbits : int
        Exponent and mantissa bits of a floating-point format (0 for integers).
    max_code, overflow_code, nan_code, nan_flips_sign, nan_rule : int
        Floating-point encoding rules (derived from ml_dtypes), see
        :func:`nbquant.element.encode_minifloat` and :func:`nbquant.element.decode_minifloat`;
        ``nan_rule`` is a :class:`~nbquant.modes.NanRule`.

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
    def emax(self) -> int:
        """The exponent of the largest finite value (OCP MX's ``emax``; 0 for integer formats)."""
        return int(ml_dtypes.finfo(self.dtype).maxexp) - 1 if self.is_float else 0

    @property
    def max_value(self) -> float:
        """The largest finite value (``qmax`` for integer formats)."""
        return float(ml_dtypes.finfo(self.dtype).max) if self.is_float else float(self.qmax)

    @property
    def qmin(self) -> int:
        """The smallest code of the full range: ``-2**(bits - 1)`` if signed, else 0."""
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def qmax(self) -> int:
        """The largest code of the full range: ``2**(bits - 1) - 1`` if signed, else ``2**bits - 1``."""
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
        """Return the bytes that ``n`` packed codes take.

        Parameters
        ----------
        n : int
            A count of codes, a multiple of ``pack_group[0]``.

        Returns
        -------
        int
            ``n // pack_group[0] * pack_group[1]``.
        """
        codes, nbytes = self.pack_group
        return n // codes * nbytes

    @property
    def codes_per_byte(self) -> int:
        """Codes stored in one byte when packed (1 for formats of 8 bits or more)."""
        return 8 // self.bits if self.bits < 8 else 1

    @property
    def storage(self) -> np.dtype:
        """The unsigned dtype kernels write one unpacked code into."""
        return np.dtype(f"uint{max(8, self.bits)}") if self.bits in (8, 16, 32) else np.dtype(np.uint8)

    @property
    def largest_code(self) -> int:
        """The largest code float32 arithmetic can produce: ``qmax``, or ``2**31 - 128`` for int32.

        Codes are computed in float32 and converted; ``2**31 - 1`` is not a float32 (it
        rounds to ``2**31``, which int32 cannot hold), so int32 codes saturate at the
        largest float32 below ``2**31``.
        """
        return min(self.qmax, int(np.nextafter(np.float32(2.0 ** 31), np.float32(0))))

    @property
    def mask(self) -> int:
        """The low-bit mask that keeps one code."""
        return (1 << self.bits) - 1


def _row(name: str, dtype, bits: int, signed: bool) -> QuantFormat:
    return QuantFormat(name, np.dtype(dtype), bits, signed)


def _float_row(name: str) -> QuantFormat:
    """A floating-point element format whose encoding facts are read off ``ml_dtypes``.

    Bits, exponent and mantissa widths come from ``ml_dtypes.finfo``; the codes of the
    largest finite value, of an overflow (ml_dtypes' cast of ``+inf``) and of NaN (with
    the sign ml_dtypes gives ``+NaN``) come from ml_dtypes' own casts, and the NaN rule
    from decoding the all-ones codes.
    """
    dtype = np.dtype(getattr(ml_dtypes, name))
    info = ml_dtypes.finfo(dtype)
    magnitude = (1 << (info.bits - 1)) - 1

    def code_of(value: float) -> int:
        with np.errstate(over="ignore", invalid="ignore"):
            return int(np.array([value], np.float32).astype(dtype).view(np.uint8)[0]) & ((1 << info.bits) - 1)

    def value_of(code: int) -> float:
        return float(np.array([code], np.uint8).view(dtype).astype(np.float32)[0])

    all_ones_exponent = ((1 << info.nexp) - 1) << info.nmant
    if np.isinf(value_of(all_ones_exponent)):
        nan_rule = NanRule.IEEE
    elif np.isnan(value_of(magnitude)):
        nan_rule = NanRule.ALL_ONES_NAN
    else:
        nan_rule = NanRule.ALL_FINITE
    nan = code_of(np.nan)
    return QuantFormat(name, dtype, info.bits, True, info.nexp, info.nmant, code_of(float(info.max)),
                       code_of(np.inf) & magnitude, nan & magnitude, nan >> (info.bits - 1), int(nan_rule))


#: Every quantized format nbquant knows: canonical name -> :class:`QuantFormat` (the integers, int32 and the fp8, fp6
#: and fp4 element formats).
FORMATS: dict[str, QuantFormat] = {
    f.name: f
    for f in (
        _row("int8", np.int8, 8, True),
        _row("uint8", np.uint8, 8, False),
        _row("int16", np.int16, 16, True),
        _row("uint16", np.uint16, 16, False),
        _row("int32", np.int32, 32, True),
        _row("int4", ml_dtypes.int4, 4, True),
        _row("uint4", ml_dtypes.uint4, 4, False),
        _row("int2", ml_dtypes.int2, 2, True),
        _row("uint2", ml_dtypes.uint2, 2, False),
        *map(_float_row, ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")),
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
        The row of :data:`FORMATS`.

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
