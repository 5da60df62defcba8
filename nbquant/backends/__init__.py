"""The backend registry and the device switch.

Backends are modules with ``quantize(x, scale, zero_point, spec, out)`` and
``dequantize(q, scale, zero_point, spec, out)``; they are imported only when first
used, so ``import nbquant`` loads neither numba nor numba.cuda.

Which backend runs a call, first match wins: the call's ``backend=``, the innermost
``with use_backend(...)``, :func:`set_backend`, the ``NBQUANT_BACKEND`` environment
variable, then ``"auto"``. ``"auto"`` picks ``cuda`` for CUDA device arrays (numba,
``__cuda_array_interface__`` or CUDA DLPack), else ``cpu``, else ``reference``. A
backend named explicitly that cannot run, or a device array when ``cuda`` cannot run
or a host-only backend is named, raises :class:`BackendUnavailableError` saying why.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import NamedTuple

import numpy as np

__all__ = [
    "BackendInfo",
    "BackendUnavailableError",
    "backends",
    "set_backend",
    "get_backend",
    "use_backend",
    "resolve_backend",
    "use_cuda_stream",
    "is_device_array",
]

AUTO = "auto"
_MODULES = {
    "reference": "nbquant.backends.reference",
    "cpu": "nbquant.backends.cpu",
    "cuda": "nbquant.backends._cuda",
}


class BackendUnavailableError(RuntimeError):
    """A backend was asked for by name but cannot run here; the message says why."""


class BackendInfo(NamedTuple):
    """One row of :func:`backends`: whether a backend can run, and if not, why."""

    name: str
    available: bool
    reason: str


def _unavailable_reason(name: str) -> str:
    if name == "cpu":
        return _cpu_unavailable_reason()
    if name == "cuda":
        return _cuda_unavailable_reason()
    return ""


@functools.cache
def _cpu_unavailable_reason() -> str:
    """Why the cpu backend cannot run ("" when it can); probed once (a module search costs ~10 µs a call)."""
    if importlib.util.find_spec("numba") is None:
        return "numba is not installed; pip install 'numba>=0.68.1,<0.69'"
    return ""


@functools.cache
def _cuda_unavailable_reason() -> str:
    """Why the cuda backend cannot run ("" when it can); probed once, imports numba.cuda only here."""
    if importlib.util.find_spec("numba") is None:
        return "numba is not installed; pip install 'nbquant[cuda]'"
    if importlib.util.find_spec("numba_cuda") is None:
        return "numba-cuda is not installed; pip install 'nbquant[cuda]' (or numba-cuda[cu13] for the CUDA libraries)"
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return ""  # the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) runs kernels without a GPU
    try:
        from numba import cuda

        if cuda.is_available():
            return ""
        from numba.cuda.cudadrv.driver import driver

        detail = " ".join(str(driver.initialization_error or "").split())
    except Exception as exc:  # a broken CUDA install must not break backends()
        detail = f"{type(exc).__name__}: {exc}"
    return "no CUDA driver or GPU found" + (f" ({detail})" if detail else "")


def backends() -> list[BackendInfo]:
    """List every backend nbquant knows, with availability and the reason when unavailable.

    Examples
    --------
    >>> import nbquant
    >>> [b.name for b in nbquant.backends()]
    ['reference', 'cpu', 'cuda']
    """
    return [BackendInfo(n, not (r := _unavailable_reason(n)), r or "available") for n in _MODULES]


def _check_name(name: str, argument: str) -> str:
    if not isinstance(name, str) or (name != AUTO and name not in _MODULES):
        raise ValueError(f"{argument}={name!r} is not a backend; use one of {[AUTO, *_MODULES]}")
    return name


_selected: str | None = None
_context: contextvars.ContextVar[str | None] = contextvars.ContextVar("nbquant_backend", default=None)


def set_backend(name: str) -> None:
    """Set the process-wide backend (``"auto"``, ``"reference"``, ``"cpu"``, ...).

    Examples
    --------
    >>> import nbquant
    >>> nbquant.set_backend("reference"); nbquant.get_backend()
    'reference'
    >>> nbquant.set_backend("auto")
    """
    global _selected
    _selected = _check_name(name, "name")


def get_backend() -> str:
    """The backend name in force here (before ``auto`` is resolved)."""
    name = _context.get() or _selected or os.environ.get("NBQUANT_BACKEND") or AUTO
    return _check_name(name, "NBQUANT_BACKEND" if name == os.environ.get("NBQUANT_BACKEND") else "backend")


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Use ``name`` for calls inside the ``with`` block (thread- and task-local).

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> with nbquant.use_backend("reference"):
    ...     nbquant.quantize(np.array([0.5, 1.5], np.float32), 1.0, "int8")
    array([0, 2], dtype=int8)
    """
    token = _context.set(_check_name(name, "name"))
    try:
        yield
    finally:
        _context.reset(token)


_cuda_stream: contextvars.ContextVar[object | None] = contextvars.ContextVar("nbquant_cuda_stream", default=None)


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
        return device is not None and int(device()[0]) in (2, 13)  # kDLCUDA, kDLCUDAManaged
    except Exception:
        return False


def _is_device_array(a) -> bool:
    return is_device_array(a)


def _cuda_module() -> ModuleType:
    reason = _unavailable_reason("cuda")
    if reason:
        raise BackendUnavailableError(f"a CUDA device array was passed, but backend 'cuda' is not available: "
                                      f"{reason}")
    return importlib.import_module(_MODULES["cuda"])


def device_float_input(x, name: str = "x"):
    """Validate a CUDA float input and return a zero-copy numba device array (host arrays: checked NumPy)."""
    if not is_device_array(x):
        from ..validation import check_float_input

        return check_float_input(x, name)
    return _cuda_module().device_float_input(x, name)


def device_code_input(q, name: str = "q"):
    """Return a zero-copy numba device array of CUDA codes ``q`` (host arrays: C-contiguous NumPy)."""
    return _cuda_module().device_code_input(q, name) if is_device_array(q) else np.asarray(q, order="C")


def device_result(out, shape: tuple[int, ...], dtype, inputs=()):
    """A new device result array, or ``out`` checked as one (shape, dtype, contiguity, no overlap)."""
    cuda = _cuda_module()
    return cuda.device_empty(shape, dtype) if out is None else cuda.check_device_out(out, shape, dtype, inputs)


def device_copy(a: np.ndarray):
    """A new device array holding a copy of the host array ``a`` (on the current stream)."""
    cuda = _cuda_module()
    return cuda._to_device(np.ascontiguousarray(a), cuda.current_stream())


def host_array(a) -> np.ndarray:
    """``a`` as a NumPy array: a copy of a device array, ``numpy.asarray`` of anything else."""
    if not is_device_array(a):
        return np.asarray(a)
    cuda = _cuda_module()
    stream = cuda.current_stream()
    h = cuda.as_device_array(a).copy_to_host(stream=stream)
    stream.synchronize()
    return h


def resolve_backend(name: str | None, arrays=()) -> ModuleType:
    """Return the backend module for a call, resolving ``auto``.

    Raises
    ------
    BackendUnavailableError
        If ``name`` (or the selected backend) cannot run here.
    """
    name = _check_name(name, "backend") if name is not None else get_backend()
    device = any(map(_is_device_array, arrays))
    if device and name not in (AUTO, "cuda"):
        raise BackendUnavailableError(f"backend {name!r} works on host (NumPy) arrays only, and a CUDA device array "
                                      "was passed; use backend='cuda' or 'auto', or copy the array to the host")
    if device:
        return _cuda_module()
    if name == AUTO:
        name = next(n for n in ("cpu", "reference") if not _unavailable_reason(n))
    elif reason := _unavailable_reason(name):
        raise BackendUnavailableError(f"backend {name!r} is not available: {reason}")
    return sys.modules.get(_MODULES[name]) or importlib.import_module(_MODULES[name])
