"""How many threads the ``cpu`` backend splits a call over.

The count is, in order: the last :func:`set_num_threads`, else the environment
variable ``NBQUANT_NUM_THREADS``, else the CPUs this process may run on (its affinity
mask, read once per process). The cpu backend runs each large call as that many parts,
one on the calling thread and the rest on a pool of worker threads; a call of less than
4 MiB runs on the calling thread alone (see ``nbquant/backends/cpu/_kernel.py``).
Inside :func:`thread_limit` the count is capped for the calls of that thread only: the
dask chunk calls use it so that dask's threads times nbquant's do not exceed the cores
(docs/dask.md). This module imports nothing heavy: reading or setting the count starts no
thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["get_num_threads", "set_num_threads", "thread_limit", "usable_cpus", "ENV_VAR"]

#: The environment variable read for the default thread count.
ENV_VAR = "NBQUANT_NUM_THREADS"

_requested: list[int] = []
#: The cap :func:`thread_limit` puts on this thread's (this context's) count; None: no cap.
_limit: ContextVar[int | None] = ContextVar("nbquant_thread_limit", default=None)


#: The CPUs of this process's affinity mask, read on first use (a system call; every cpu kernel call asks).
_cpus: list[int] = []
#: The last ``NBQUANT_NUM_THREADS`` text read and the count it gave, so each call does not parse it again.
_parsed: list[tuple[str, int | None]] = [("", None)]


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), read once per process and again after a fork.

    Examples
    --------
    >>> usable_cpus() >= 1
    True
    """
    if not _cpus:
        affinity = getattr(os, "sched_getaffinity", None)
        _cpus.append(len(affinity(0)) if affinity else (os.cpu_count() or 1))
    return _cpus[0]


os.register_at_fork(after_in_child=_cpus.clear)  # a child may be given other CPUs


def _from_environment() -> int | None:
    text = os.environ.get(ENV_VAR, "")
    last, n = _parsed[0]
    if text == last:
        return n
    stripped = text.strip()
    if not stripped:
        n = None
    else:
        try:
            n = int(stripped)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"{ENV_VAR}={stripped!r}: expected a positive integer thread count, e.g. {ENV_VAR}=4")
    _parsed[0] = (text, n)
    return n


def get_num_threads() -> int:
    """The number of threads the ``cpu`` backend uses for one call.

    Returns
    -------
    int
        The count set by :func:`set_num_threads`, else ``NBQUANT_NUM_THREADS``, else
        the number of CPUs in this process's affinity mask; at most the cap of an
        enclosing :func:`thread_limit` on this thread.

    Raises
    ------
    ValueError
        If ``NBQUANT_NUM_THREADS`` is set to something other than a positive integer.

    Examples
    --------
    >>> import nbquant
    >>> nbquant.get_num_threads() >= 1
    True
    """
    if _requested:
        n = _requested[0]
    else:
        from_env = _from_environment()
        n = from_env if from_env is not None else usable_cpus()
    cap = _limit.get()
    return n if cap is None else min(n, cap)


@contextmanager
def thread_limit(n: int | None) -> Iterator[None]:
    """Cap :func:`get_num_threads` at ``n`` for the calls this thread makes inside the block (None: no cap).

    The cap is a :class:`contextvars.ContextVar`: other threads, and calls that run after the
    block, keep their count.

    Parameters
    ----------
    n : int or None
        The most threads one call may use, at least 1; None leaves the count as it is.

    Examples
    --------
    >>> import nbquant
    >>> with nbquant.threads.thread_limit(1):
    ...     nbquant.get_num_threads()
    1
    """
    if n is not None and n < 1:
        raise ValueError(f"n={n!r}: a thread cap is at least 1 (or None for no cap)")
    token = _limit.set(n)
    try:
        yield
    finally:
        _limit.reset(token)


def set_num_threads(n: int) -> None:
    """Set the number of threads the ``cpu`` backend uses for one call, for the whole process.

    Parameters
    ----------
    n : int
        A positive thread count; 1 runs every kernel on the calling thread.

    Raises
    ------
    TypeError
        If ``n`` is not an integer (bool included).
    ValueError
        If ``n`` is less than 1.

    Examples
    --------
    >>> import nbquant
    >>> before = nbquant.get_num_threads()
    >>> nbquant.set_num_threads(1)
    >>> nbquant.get_num_threads()
    1
    >>> nbquant.set_num_threads(before)
    """
    if type(n).__name__ in ("bool", "bool_") or not hasattr(n, "__index__"):
        raise TypeError(f"n={n!r}: expected a positive integer thread count")
    n = n.__index__()
    if n < 1:
        raise ValueError(f"n={n!r}: expected a positive integer thread count (1 runs on the calling thread)")
    _requested[:] = [n]
