"""The ``cuda`` backend: ``numba.cuda.jit`` kernels over the same element functions as the CPU backend.

This package is the only place nbquant imports :mod:`numba.cuda`; it is imported
lazily, the first time the ``cuda`` backend runs (or a CUDA device array is passed).
Depend on it through the ``cuda`` extra (``pip install 'nbquant[cuda]'``, which brings
``numba-cuda``). Modules: :mod:`.runtime` (kernel registration, launch sizes, device
arrays and streams), :mod:`.static`, :mod:`.blocks`, :mod:`.dynamic`, :mod:`.modelopt`
(the kernels, each family with its host side). Every operation takes NumPy arrays
(copied in and out) or CUDA device arrays (used in place, results left on the device).
"""

from __future__ import annotations

from . import gguf as gguf  # registers the GGUF kernels with the others (the PTX check compiles them)
from . import runtime
from .blocks import BlockOps
from .dynamic import DynamicOps
from .modelopt import ModeloptOps
from .static import StaticOps

__all__ = ["BACKEND", "CudaBackend"]


class CudaBackend(StaticOps, BlockOps, DynamicOps, ModeloptOps):
    """Every :class:`~nbquant.backends.interface.Backend` operation on the GPU, plus the device-array helpers."""

    name = "cuda"
    device_float_input = staticmethod(runtime.device_float_input)
    device_code_input = staticmethod(runtime.device_code_input)
    device_empty = staticmethod(runtime.device_empty)
    check_device_out = staticmethod(runtime.check_device_out)
    to_device = staticmethod(runtime.to_device)
    to_host = staticmethod(runtime.to_host)


#: The cuda backend object.
BACKEND = CudaBackend()
