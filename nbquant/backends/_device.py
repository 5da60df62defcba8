"""What the registry and the cuda backend share about CUDA arrays and streams, without importing numba.

:func:`is_device_array` recognises CUDA arrays of any producer; :func:`use_cuda_stream`
sets the stream the ``cuda`` backend queues its work on (read with :func:`selected_stream`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import numpy as np

__all__ = ["is_device_array", "use_cuda_stream", "selected_stream"]

#: DLPack device types of CUDA memory: kDLCUDA and kDLCUDAManaged.
_DLPACK_CUDA = (2, 13)

_cuda_stream: contextvars.ContextVar[object | None] = contextvars.ContextVar("nbquant_cuda_stream", default=None)


def is_device_array(a) -> bool:
    """Whether ``a`` is a CUDA array: a numba device array, ``__cuda_array_interface__`` or CUDA DLPack.

    Examples
    --------
    >>> import numpy as np
    >>> is_device_array(np.zeros(3))
    False
    """
    if a is None or isinstance(a, np.ndarray):
        return False
    if getattr(a, "__cuda_ndarray__", False) or hasattr(a, "__cuda_array_interface__"):
        return True
    device = getattr(a, "__dlpack_device__", None)
    try:
        return device is not None and int(device()[0]) in _DLPACK_CUDA
    except Exception:
        return False


@contextlib.contextmanager
def use_cuda_stream(stream) -> Iterator[None]:
    """Queue the ``cuda`` backend's copies and kernels on ``stream`` inside the ``with`` block.

    ``stream`` is a ``numba.cuda`` stream, a CuPy or PyTorch stream, or a raw
    ``cudaStream_t`` handle (int). Without it the CUDA default stream is used.

    Examples
    --------
    >>> import nbquant
    >>> from nbquant.backends import use_cuda_stream
    >>> with use_cuda_stream(None):
    ...     pass
    """
    token = _cuda_stream.set(stream)
    try:
        yield
    finally:
        _cuda_stream.reset(token)


def selected_stream():
    """The stream of the innermost :func:`use_cuda_stream`, or None (the default stream)."""
    return _cuda_stream.get()
