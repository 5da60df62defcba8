"""The GGUF block formats nbquant knows: ggml type id, block size, bytes per block, bits per weight.

A numba-free table (ggml's ``ggml_type_traits``, ``ggml.h`` type ids); :func:`get_format`
resolves a format from a :class:`GGUFFormat`, a ``gguf.GGMLQuantizationType`` (an
``IntEnum``), its int value or its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

__all__ = ["GGUFFormat", "FORMATS", "get_format", "implemented_formats"]


@dataclass(frozen=True)
class GGUFFormat:
    """One GGUF block format.

    Attributes
    ----------
    name : str
        ggml's name (``"Q4_0"``), as ``gguf.GGMLQuantizationType`` spells it.
    type_id : int
        ggml's ``enum ggml_type`` value.
    block_size : int
        Float values per block.
    type_size : int
        Bytes per block record.
    implemented : bool
        Whether nbquant quantizes and dequantizes it.
    """

    name: str
    type_id: int
    block_size: int
    type_size: int
    implemented: bool

    @property
    def bits_per_weight(self) -> float:
        """Storage bits per value, ``8 * type_size / block_size``.

        Examples
        --------
        >>> get_format("Q4_0").bits_per_weight
        4.5
        """
        return 8 * self.type_size / self.block_size

    def row_bytes(self, n: int) -> int:
        """Bytes of a row of ``n`` values (``n`` a multiple of :attr:`block_size`)."""
        return n // self.block_size * self.type_size


_TABLE = [
    ("Q4_0", 2, 32, 18, True), ("Q4_1", 3, 32, 20, True), ("Q5_0", 6, 32, 22, True), ("Q5_1", 7, 32, 24, True),
    ("Q8_0", 8, 32, 34, True), ("Q2_K", 10, 256, 84, True), ("Q3_K", 11, 256, 110, True),
    ("Q4_K", 12, 256, 144, True), ("Q5_K", 13, 256, 176, True), ("Q6_K", 14, 256, 210, True),
    ("IQ4_NL", 20, 32, 18, True), ("IQ4_XS", 23, 256, 136, True), ("MXFP4", 39, 32, 17, True),
]
#: Every GGUF block format of the table, by name.
FORMATS: dict[str, GGUFFormat] = {row[0]: GGUFFormat(*row) for row in _TABLE}
_BY_ID = {f.type_id: f for f in FORMATS.values()}


def implemented_formats() -> tuple[str, ...]:
    """Names of the formats nbquant quantizes and dequantizes.

    Examples
    --------
    >>> implemented_formats()
    ('Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q2_K', 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K', 'IQ4_NL', 'IQ4_XS', 'MXFP4')
    """
    return tuple(name for name, f in FORMATS.items() if f.implemented)


def get_format(qtype) -> GGUFFormat:
    """The :class:`GGUFFormat` of ``qtype``: a format, a ``GGMLQuantizationType``, its int value or its name.

    Examples
    --------
    >>> f = get_format(8)
    >>> f.name, f.block_size, f.type_size, f.bits_per_weight
    ('Q8_0', 32, 34, 8.5)
    """
    if isinstance(qtype, GGUFFormat):
        return qtype
    if isinstance(qtype, Integral) and not isinstance(qtype, bool):
        found = _BY_ID.get(int(qtype))
    elif isinstance(qtype, str):
        found = FORMATS.get(qtype.upper())
    else:
        raise TypeError(f"qtype must be a GGMLQuantizationType, an int or a name, got {type(qtype).__name__}")
    if found is None:
        raise ValueError(f"qtype {qtype!r} is not a GGUF block format nbquant knows; known: {', '.join(FORMATS)}")
    return found
