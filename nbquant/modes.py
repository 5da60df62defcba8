"""The modes a kernel is compiled for, as ``IntEnum``s (numba-free, so the API and the reference backend need no numba).

Kernels receive them as plain ``int64`` arguments (``int(mode)``) and the element
functions compare them with the members, which Numba folds to constants.

Examples
--------
>>> from nbquant.modes import Mapping, ScaleOp
>>> int(ScaleOp.MULTIPLY), Mapping.ASYMMETRIC.uses_min_and_max
(1, True)
"""

from __future__ import annotations

import enum

__all__ = ["ScaleOp", "Mapping", "NanRule"]


class ScaleOp(enum.IntEnum):
    """How a quantize kernel applies its scale, and in which precision.

    ``x / scale`` or ``x * scale`` (a reciprocal arrives inverted) in float32; the
    ``_F16`` / ``_BF16`` members compute in float16 / bfloat16 (``compute_dtype``): the
    input is rounded to that type, and so are the quotient (or product) and the sum with
    the zero point, as a library that divides half-precision tensors does.
    """

    DIVIDE = 0
    MULTIPLY = 1
    DIVIDE_F16 = 2
    MULTIPLY_F16 = 3
    DIVIDE_BF16 = 4
    MULTIPLY_BF16 = 5

    @property
    def multiplies(self) -> bool:
        """Whether the scale multiplies (else it divides)."""
        return bool(self & 1)

    @property
    def compute_dtype(self) -> str:
        """``"float32"``, ``"float16"`` or ``"bfloat16"``: the precision of the arithmetic."""
        return ("float32", "float16", "bfloat16")[self >> 1]

    @classmethod
    def of(cls, multiply: bool, compute_dtype: str = "float32") -> ScaleOp:
        """The member for an operation and a precision.

        Examples
        --------
        >>> ScaleOp.of(True, "bfloat16").name
        'MULTIPLY_BF16'
        """
        return cls(int(multiply) + 2 * ("float32", "float16", "bfloat16").index(compute_dtype))


class Mapping(enum.IntEnum):
    """How dynamic quantization turns a block's min and max into a scale and zero point.

    ``SYMMETRIC``, ``ASYMMETRIC`` and ``SYMMETRIC_NO_CLIPPING_ERR`` are torchao's
    ``MappingType``; ``MODELOPT`` is modelopt's multiplier ``maxbound / amax``.
    """

    SYMMETRIC = 0
    ASYMMETRIC = 1
    SYMMETRIC_NO_CLIPPING_ERR = 2
    MODELOPT = 3

    @property
    def uses_min_and_max(self) -> bool:
        """Whether the block reduction needs min and max (else the absolute maximum suffices)."""
        return self in (Mapping.ASYMMETRIC, Mapping.SYMMETRIC_NO_CLIPPING_ERR)


class NanRule(enum.IntEnum):
    """Which codes of a sign/exponent/mantissa format are NaN or inf (``decode_minifloat``)."""

    #: Every code is finite (fp6, fp4).
    ALL_FINITE = 0
    #: Only the all-ones magnitude is NaN, there is no inf (float8_e4m3fn).
    ALL_ONES_NAN = 1
    #: IEEE: an all-ones exponent is inf (mantissa 0) or NaN (float8_e5m2).
    IEEE = 2
