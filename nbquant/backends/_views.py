"""Host-side array views shared by the compiled backends (cpu, cuda); numba-free."""

from __future__ import annotations

import ml_dtypes
import numpy as np

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

def kernel_float_view(x: np.ndarray) -> np.ndarray:
    """View float16 as uint16 and bfloat16 as int16 bits (kernels decode them by type)."""
    if x.dtype == np.float16:
        return x.view(np.uint16)
    if x.dtype == _BFLOAT16:
        return x.view(np.int16)
    return x


def output_float_like(dtype: np.dtype):
    """A scalar whose type tells :func:`nbquant.element.store_float` what to encode."""
    if dtype == np.float16:
        return np.uint16(0)
    if dtype == _BFLOAT16:
        return np.int16(0)
    return np.float32(0)


def float32_from_bits(bits: int) -> np.float32:
    """The float32 whose IEEE bits are ``bits`` (a reduction's result)."""
    return np.array([bits], np.uint32).view(np.float32)[0]
