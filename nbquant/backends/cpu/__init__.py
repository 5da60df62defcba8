"""The ``cpu`` backend: Numba ``njit(cache=True, nogil=True)`` kernels around the element functions, run on threads.

Kernels are declared with :func:`~nbquant.backends.cpu._kernel.cpu_kernel`, which owns
their compile options, their on-disk cache key and how a call is split over threads
(:func:`nbquant.set_num_threads`); their numerics are :mod:`nbquant.element`
calls only. Modules: :mod:`.static` (quantize/dequantize; kernels in :mod:`.elementwise` and
:mod:`.floats`), :mod:`.blocks` (MX, NVFP4,
NF4, amax), :mod:`.dynamic` (dynamic quantization), :mod:`.modelopt` (fake
quantization, gradients, histogram).
"""

from __future__ import annotations

from ._kernel import disk_cached
from .blocks import BlockOps
from .dynamic import DynamicOps
from .modelopt import ModeloptOps
from .static import StaticOps

__all__ = ["BACKEND", "CpuBackend", "disk_cached"]


class CpuBackend(StaticOps, BlockOps, DynamicOps, ModeloptOps):
    """Every :class:`~nbquant.backends.interface.Backend` operation as multi-threaded Numba kernels."""

    name = "cpu"


#: The cpu backend object.
BACKEND = CpuBackend()
