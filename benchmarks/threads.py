"""Threads of the ratio benchmark: OpenMP's wait policy, and the ``--threads`` count for nbquant, numba and torch.

Importing this module sets ``OMP_WAIT_POLICY=PASSIVE`` (unless it is already set):
libgomp reads it when it loads, which numba does at its first parallel call and torch
on import. With spinning waiters, two OpenMP pools in one process stall each other.
"""

from __future__ import annotations

import os
import sys


def _openmp_loaded() -> bool:
    """Whether an OpenMP runtime may already be loaded (numba's pool started, or torch imported)."""
    par = sys.modules.get("numba.np.ufunc.parallel")
    return bool(getattr(par, "_is_initialized", False)) or "torch" in sys.modules


#: Whether an OpenMP runtime may have been loaded before the policy was set (it may then not apply).
OPENMP_PRELOADED = _openmp_loaded()
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

#: Thread count requested with ``--threads`` (empty: each library's default).
_REQUESTED: list[int] = []


def use_threads(n: int) -> None:
    """Run nbquant's and the roofline's (numba ``parallel=True``) kernels on ``n`` threads; torch's once imported."""
    import numba

    import nbquant

    nbquant.set_num_threads(n)
    numba.set_num_threads(n)
    _REQUESTED[:] = [n]


def requested_threads() -> int | None:
    """The count given to :func:`use_threads`, None when it was not called."""
    return _REQUESTED[0] if _REQUESTED else None
