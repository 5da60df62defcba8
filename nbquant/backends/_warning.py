"""The warning the cpu backend emits when its on-disk compile cache cannot be used; numba-free.

It lives apart from the registry (:mod:`nbquant.backends`) so that the cpu kernels can
raise it without an import cycle, and ``from nbquant.backends import NumbaCacheWarning``
works before numba is imported.
"""

from __future__ import annotations

__all__ = ["NumbaCacheWarning"]


class NumbaCacheWarning(UserWarning):
    """The cpu kernels' compile cache could not be read or written; the kernels still run.

    Emitted once per process when no cache location is writable (the kernels are then
    compiled in every process: set ``NUMBA_CACHE_DIR`` to a writable directory), or a
    cache directory stops accepting writes; and once per damaged cache file (it is
    recompiled and rewritten).
    """
