"""The backend registry and the device switch.

Backends are modules with ``quantize(x, scale, zero_point, spec, out)`` and
``dequantize(q, scale, zero_point, spec, out)``; they are imported only when first
used, so ``import nbquant`` loads neither numba nor numba.cuda.

Which backend runs a call, first match wins: the call's ``backend=``, the innermost
``with use_backend(...)``, :func:`set_backend`, the ``NBQUANT_BACKEND`` environment
variable, then ``"auto"``. ``"auto"`` picks ``cuda`` for device arrays when a GPU is
usable, else ``cpu``, else ``reference``; a backend named explicitly that cannot run
raises :class:`BackendUnavailableError` saying why.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.util
import os
from collections.abc import Iterator
from types import ModuleType
from typing import NamedTuple

__all__ = [
    "BackendInfo",
    "BackendUnavailableError",
    "backends",
    "set_backend",
    "get_backend",
    "use_backend",
    "resolve_backend",
]

AUTO = "auto"
_MODULES = {
    "reference": "nbquant.backends.reference",
    "cpu": "nbquant.backends.cpu",
}


class BackendUnavailableError(RuntimeError):
    """A backend was asked for by name but cannot run here; the message says why."""


class BackendInfo(NamedTuple):
    """One row of :func:`backends`: whether a backend can run, and if not, why."""

    name: str
    available: bool
    reason: str


def _unavailable_reason(name: str) -> str:
    if name == "cpu" and importlib.util.find_spec("numba") is None:
        return "numba is not installed; pip install 'numba>=0.68.1,<0.69'"
    return ""


def backends() -> list[BackendInfo]:
    """List every backend nbquant knows, with availability and the reason when unavailable.

    Examples
    --------
    >>> import nbquant
    >>> [b.name for b in nbquant.backends()]
    ['reference', 'cpu']
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


def _is_device_array(a) -> bool:
    return hasattr(a, "__cuda_array_interface__")


def resolve_backend(name: str | None, arrays=()) -> ModuleType:
    """Return the backend module for a call, resolving ``auto``.

    Raises
    ------
    BackendUnavailableError
        If ``name`` (or the selected backend) cannot run here.
    """
    name = _check_name(name, "backend") if name is not None else get_backend()
    if name == AUTO:
        candidates = [n for n in ("cuda",) if n in _MODULES and any(map(_is_device_array, arrays))]
        candidates += ["cpu", "reference"]
        name = next(n for n in candidates if not _unavailable_reason(n))
    elif reason := _unavailable_reason(name):
        raise BackendUnavailableError(f"backend {name!r} is not available: {reason}")
    return importlib.import_module(_MODULES[name])
