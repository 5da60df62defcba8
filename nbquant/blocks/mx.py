"""The OCP Microscaling formats (MX v1.0): MXFP8 (E4M3, E5M2), MXFP6 (E2M3, E3M2), MXFP4 and MXINT8.

A block of ``block_size`` (32) values shares one E8M0 scale ``2**(floor(log2(amax)) -
emax)`` (``emax``: the exponent of the element format's largest normal; with
``round_up`` the smallest power of two that clips nothing); the elements are ``x /
scale`` encoded with saturation. Tensors: ``data`` (the element codes, or uint8 with two
4-bit codes per byte, low nibble first, when ``packed``) and ``scales`` (E8M0 bits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import ml_dtypes
import numpy as np

from ..formats import QuantFormat, get_format
from ._format import BlockFormat, Tensor

__all__ = ["MXFormat", "MXParams"]

_U8 = np.dtype(np.uint8)


@dataclass(frozen=True)
class MXParams:
    """An MX call's parameters: ``packed`` (4-bit codes two per byte), ``round_up`` (``scale_rounding="ceil"``)."""

    packed: bool = False
    round_up: bool = False


class MXFormat(BlockFormat, family="mx"):
    """The MX family: one registered subclass per element format (``element_name``), one set of kernels."""

    element_name: ClassVar[str]
    block_size = 32
    Params = MXParams

    @property
    def element(self) -> QuantFormat:
        """The element format."""
        return get_format(self.element_name)

    @property
    def is_int(self) -> bool:
        """Whether the elements are MXINT8's (``code / 64``) rather than minifloats."""
        return not self.element.is_float

    @property
    def emax(self) -> int:
        """The exponent of the element format's largest normal (0 for MXINT8)."""
        return self.element.emax

    @property
    def max_value(self) -> float:
        """The largest element value (MXINT8: 127 / 64)."""
        return 127 / 64 if self.is_int else self.element.max_value

    @property
    def max_mantissa(self) -> int:
        """The float32 mantissa bits of :attr:`max_value` (what ``round_up`` compares a block's amax with)."""
        return int(np.array([self.max_value], np.float32).view(np.uint32)[0]) & 0x7FFFFF

    @property
    def fp(self) -> tuple[int, ...]:
        """The element encoding tuple the kernels take (all zeros for MXINT8)."""
        return (0,) * 7 if self.is_int else self.element.fp_params

    def default_params(self) -> MXParams:
        """Packed for 4-bit elements (MXFP4), one code per byte otherwise."""
        return MXParams(packed=self.element.bits == 4)

    def block_multiple(self, params: MXParams) -> int:
        """2 when packed (whole bytes per block), else 1."""
        return 2 if params.packed else 1

    def tensors(self, spec) -> tuple[Tensor, ...]:
        """``data`` (element codes, or packed bytes) and ``scales`` (E8M0), one per block."""
        b = spec.block_size
        data = Tensor("data", _U8, b // 2) if spec.params.packed else Tensor("data", _U8, b, self.element.dtype)
        return data, Tensor("scales", _U8, 1, ml_dtypes.float8_e8m0fnu)


#: The registered MX formats: name -> (element format, what the class says of itself).
_ELEMENTS = {
    "mxfp8_e4m3": ("float8_e4m3fn", "MXFP8 with E4M3 elements."),
    "mxfp8_e5m2": ("float8_e5m2", "MXFP8 with E5M2 elements."),
    "mxfp6_e2m3": ("float6_e2m3fn", "MXFP6 with E2M3 elements."),
    "mxfp6_e3m2": ("float6_e3m2fn", "MXFP6 with E3M2 elements."),
    "mxfp4": ("float4_e2m1fn", "MXFP4: E2M1 elements, packed two per byte by default."),
    "mxint8": ("int8", "MXINT8: int8 elements with six fraction bits (``code / 64``)."),
}
for _name, (_element, _doc) in _ELEMENTS.items():  # one registered subclass each, a module global (pickle finds it)
    _cls = _name.upper().replace("_", "")  # MXFP8E4M3, ..., MXINT8
    globals()[_cls] = type(_cls, (MXFormat,), {"element_name": _element, "__doc__": _doc, "__module__": __name__},
                           name=_name)
