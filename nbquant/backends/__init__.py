"""The backend registry and the device switch.

Each backend is a package (``reference``, ``cpu``, ``cuda``) exposing one object,
``BACKEND``, that implements :class:`~nbquant.backends.interface.Backend`. Packages
are imported only when first used, so ``import nbquant`` loads neither numba nor
numba.cuda.

Which backend runs a call, first match wins: the call's ``backend=``, the innermost
``with use_backend(...)``, :func:`set_backend`, the ``NBQUANT_BACKEND`` environment
variable, then ``"auto"``. ``"auto"`` picks ``cuda`` for CUDA device arrays (numba,
``__cuda_array_interface__`` or CUDA DLPack), else ``cpu``, else ``reference``. A
backend named explicitly that cannot run, or a device array when ``cuda`` cannot run
or a host-only backend is named, raises :class:`BackendUnavailableError` saying why. The
``cpu`` backend runs even where its compile cache cannot be used (it emits a
:class:`NumbaCacheWarning` and compiles without it), so it stays available there.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import importlib.util
import os
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from .._dask import check_known_chunks, is_dask_array
from ..interop import as_host_array
from ._device import is_device_array, use_cuda_stream
from ._warning import NumbaCacheWarning
from .interface import Backend

__all__ = [
    "Backend",
    "BackendInfo",
    "BackendUnavailableError",
    "NumbaCacheWarning",
    "backends",
    "set_backend",
    "get_backend",
    "use_backend",
    "resolve_backend",
    "use_cuda_stream",
    "is_device_array",
]

AUTO = "auto"
#: The backend packages, in the order ``auto`` prefers them for host arrays (last first).
_PACKAGES = {
    "reference": "nbquant.backends.reference",
    "cpu": "nbquant.backends.cpu",
    "cuda": "nbquant.backends.cuda",
}


class BackendUnavailableError(RuntimeError):
    """A backend was asked for by name but cannot run here; the message says why."""


class BackendInfo(NamedTuple):
    """One row of :func:`backends`: whether a backend can run, and if not, why.

    Parameters
    ----------
    name : str
        ``"reference"``, ``"cpu"`` or ``"cuda"``.
    available : bool
        Whether the backend can run in this process.
    reason : str
        ``"available"``, or why the backend cannot run (what is missing and how to install it).
    """

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
    try:
        runtime = importlib.import_module("nbquant.backends.cuda.runtime")
    except Exception as exc:  # a broken CUDA install must not break backends()
        return f"no CUDA driver or GPU found ({type(exc).__name__}: {exc})"
    return runtime.unavailable_reason()


def backends() -> list[BackendInfo]:
    """List every backend nbquant knows, with availability and the reason when unavailable.

    Returns
    -------
    list of BackendInfo
        ``reference``, ``cpu`` and ``cuda``, in that order.

    Examples
    --------
    >>> import nbquant
    >>> [b.name for b in nbquant.backends()]
    ['reference', 'cpu', 'cuda']
    """
    return [BackendInfo(n, not (r := _unavailable_reason(n)), r or "available") for n in _PACKAGES]


def _check_name(name: str, argument: str) -> str:
    if not isinstance(name, str) or (name != AUTO and name not in _PACKAGES):
        raise ValueError(f"{argument}={name!r} is not a backend; use one of {[AUTO, *_PACKAGES]}")
    return name


_selected: str | None = None
_context: contextvars.ContextVar[str | None] = contextvars.ContextVar("nbquant_backend", default=None)


def set_backend(name: str) -> None:
    """Set the process-wide backend (``"auto"``, ``"reference"``, ``"cpu"``, ...).

    Parameters
    ----------
    name : str
        ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``. A call's ``backend=`` and
        :func:`use_backend` take precedence; this takes precedence over ``NBQUANT_BACKEND``.

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
    """Return the backend name in force here (before ``auto`` is resolved).

    Returns
    -------
    str
        The innermost :func:`use_backend`, else :func:`set_backend`'s, else ``NBQUANT_BACKEND``, else ``"auto"``.
    """
    name = _context.get() or _selected or os.environ.get("NBQUANT_BACKEND") or AUTO
    return _check_name(name, "NBQUANT_BACKEND" if name == os.environ.get("NBQUANT_BACKEND") else "backend")


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Use ``name`` for calls inside the ``with`` block (thread- and task-local).

    Parameters
    ----------
    name : str
        ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``.

    Yields
    ------
    None
        Control to the ``with`` block; the previous choice is restored when it ends.

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


def _load(name: str) -> Backend:
    return importlib.import_module(_PACKAGES[name]).BACKEND


def _cuda_backend() -> Backend:
    reason = _unavailable_reason("cuda")
    if reason:
        raise BackendUnavailableError(f"a CUDA device array was passed, but backend 'cuda' is not available: "
                                      f"{reason}")
    return _load("cuda")


def device_float_input(x, name: str = "x", *, lazy: bool = False):
    """Validate a CUDA float input and return a zero-copy numba device array (host arrays: checked NumPy).

    With ``lazy``, a dask array is returned as it is, its dtype checked.
    """
    if not is_device_array(x):
        from ..validation import check_float_input

        return check_float_input(x, name, lazy=lazy)
    return _cuda_backend().device_float_input(x, name)


def device_code_input(q, name: str = "q", *, lazy: bool = False):
    """Return a zero-copy numba device array of CUDA codes ``q`` (host arrays: C-contiguous NumPy, read by
    :func:`nbquant.interop.as_host_array`; with ``lazy``, a dask array of known chunk sizes as it is)."""
    if lazy and is_dask_array(q):
        check_known_chunks(q, name)
        return q
    if is_device_array(q):
        return _cuda_backend().device_code_input(q, name)
    return np.asarray(as_host_array(q, name), order="C")


def device_result(out, shape: tuple[int, ...], dtype, inputs=()):
    """A new device result array, or ``out`` checked as one (shape, dtype, contiguity, no overlap)."""
    cuda = _cuda_backend()
    return cuda.device_empty(shape, dtype) if out is None else cuda.check_device_out(out, shape, dtype, inputs)


def device_copy(a: np.ndarray):
    """A new device array holding a copy of the host array ``a`` (on the current stream)."""
    return _cuda_backend().to_device(np.ascontiguousarray(a))


def host_array(a) -> np.ndarray:
    """``a`` as a NumPy array: a copy of a device array, ``numpy.asarray`` of anything else."""
    return _cuda_backend().to_host(a) if is_device_array(a) else np.asarray(a)


def resolve_backend(name: str | None, arrays=()) -> Backend:
    """Return the backend for a call, resolving ``auto``.

    Raises
    ------
    BackendUnavailableError
        If ``name`` (or the selected backend) cannot run here.

    Examples
    --------
    >>> import numpy as np
    >>> resolve_backend("reference", (np.zeros(2),)).name
    'reference'
    """
    name = _check_name(name, "backend") if name is not None else get_backend()
    device = any(map(is_device_array, arrays))
    if device and name not in (AUTO, "cuda"):
        raise BackendUnavailableError(f"backend {name!r} works on host (NumPy) arrays only, and a CUDA device array "
                                      "was passed; use backend='cuda' or 'auto', or copy the array to the host")
    if device:
        return _cuda_backend()
    if name == AUTO:
        name = next(n for n in ("cpu", "reference") if not _unavailable_reason(n))
    elif reason := _unavailable_reason(name):
        raise BackendUnavailableError(f"backend {name!r} is not available: {reason}")
    return _load(name)
