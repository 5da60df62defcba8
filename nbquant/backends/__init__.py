"""The backend registry: which backend runs a call (where its arrays live is :mod:`nbquant.placement`'s).

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

from .. import placement as _placement
from ..placement import device_code_input as device_code_input  # the one-argument placement helpers, re-exported
from ..placement import device_copy as device_copy  # for front doors that place each argument on its own
from ..placement import device_float_input as device_float_input
from ..placement import device_result as device_result
from ..placement import host_array as host_array
from ..placement import is_device_array, use_cuda_stream
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


def check_backend_name(name: str, argument: str) -> str:
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
    _selected = check_backend_name(name, "name")


def get_backend() -> str:
    """Return the backend name in force here (before ``auto`` is resolved).

    Returns
    -------
    str
        The innermost :func:`use_backend`, else :func:`set_backend`'s, else ``NBQUANT_BACKEND``, else ``"auto"``.
    """
    name = _context.get() or _selected or os.environ.get("NBQUANT_BACKEND") or AUTO
    return check_backend_name(name, "NBQUANT_BACKEND" if name == os.environ.get("NBQUANT_BACKEND") else "backend")


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
    token = _context.set(check_backend_name(name, "name"))
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


_placement.plug("device", _cuda_backend)  # placement.Device hands its device I/O to the cuda backend


def resolve_backend(name: str | None, where=()) -> Backend:
    """Return the backend for a call, resolving ``auto``.

    Parameters
    ----------
    name : str or None
        The call's ``backend=`` (None: the selected one, :func:`get_backend`).
    where : Host or iterable of arrays
        The call's placement (:func:`nbquant.placement.placement`), or its arrays: a
        :class:`~nbquant.placement.Device` placement (or a CUDA array) needs ``cuda``.

    Returns
    -------
    Backend
        The backend object; for a device placement the one it already looked up.

    Raises
    ------
    BackendUnavailableError
        If ``name`` (or the selected backend) cannot run here.

    Examples
    --------
    >>> import numpy as np
    >>> from nbquant.placement import placement
    >>> resolve_backend("reference", placement(np.zeros(2))).name
    'reference'
    """
    name = check_backend_name(name, "backend") if name is not None else get_backend()
    placed = isinstance(where, _placement.Host)
    device = where.device if placed else any(map(is_device_array, where))
    if device and name not in (AUTO, "cuda"):
        raise BackendUnavailableError(f"backend {name!r} works on host (NumPy) arrays only, and a CUDA device array "
                                      "was passed; use backend='cuda' or 'auto', or copy the array to the host")
    if device:
        return where.backend if placed else _cuda_backend()
    if name == AUTO:
        name = next(n for n in ("cpu", "reference") if not _unavailable_reason(n))
    elif reason := _unavailable_reason(name):
        raise BackendUnavailableError(f"backend {name!r} is not available: {reason}")
    return _load(name)
