"""NVFP4 (modelopt/TensorRT numerics): e2m1 elements, E4M3 block scales of 16, a float32 global scale.

Global scale ``g = amax(x) / (6 * 448)`` (1.0 for an all-zero input) unless given; block
scales ``e4m3(max(amax_b / (6 * g), 2**-9))`` (an exact zero becomes 1.0); elements
``e2m1(x / (scale_b * g))`` saturated at 6. Tensors: ``data`` (two codes per byte, low
nibble first) and ``scales`` (E4M3 bits).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..placement import is_dask_array
from ._format import BlockFormat, Tensor

__all__ = ["NVFP4", "NVFP4Params", "amax_global_scale"]

_GLOBAL_DIVISOR = np.float32(6.0 * 448.0)
_U8 = np.dtype(np.uint8)


def amax_global_scale(amax) -> np.float32:
    """NVFP4's global scale ``amax / (6 * 448)`` (1.0 for an all-zero input) of the input's ``amax``.

    Examples
    --------
    >>> amax_global_scale(np.float32(2688.0))
    np.float32(1.0)
    """
    amax = np.float32(amax)
    if not np.isfinite(amax):
        raise ValueError(f"x holds {'NaN' if np.isnan(amax) else 'inf'}: the global scale amax / (6 * 448) would "
                         "make every value NaN. Pass finite data, or an explicit global_scale (then a block with "
                         "inf saturates and a block with NaN decodes to NaN)")
    return np.float32(1.0) if amax == 0 else np.float32(amax / _GLOBAL_DIVISOR)


@dataclass(frozen=True)
class NVFP4Params:
    """An NVFP4 call's float32 ``global_scale`` (None: computed from the input's amax when quantizing)."""

    global_scale: np.float32 | None = None


class NVFP4(BlockFormat, name="nvfp4"):
    """NVFP4: blocks of 16 (any even length), packed e2m1 codes and E4M3 scales under a float32 global scale."""

    block_size = 16
    Params = NVFP4Params

    def block_multiple(self, params) -> int:
        """2: the codes are packed two per byte."""
        return 2

    def prepare(self, x, params: NVFP4Params, impl) -> NVFP4Params:
        """The global scale from the backend's ``amax(x)`` when none is given (a dask amax maps lazily)."""
        if params.global_scale is not None:
            return params
        amax = impl.amax(x)
        if is_dask_array(amax):
            return NVFP4Params(amax.map_blocks(amax_global_scale, dtype=np.float32))
        return NVFP4Params(amax_global_scale(amax))

    def tensors(self, spec) -> tuple[Tensor, ...]:
        """``data`` (packed e2m1) and ``scales`` (E4M3), one per block."""
        return Tensor("data", _U8, spec.block_size // 2), Tensor("scales", _U8, 1, ml_dtypes.float8_e4m3fn)
