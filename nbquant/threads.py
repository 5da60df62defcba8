"""How many threads the ``cpu`` backend splits a call over.

The count is, in order: the last :func:`set_num_threads`, else the environment
variable ``NBQUANT_NUM_THREADS``, else the CPUs this process may run on (its affinity
mask). The cpu backend runs each large call as that many parts, one on the calling
thread and the rest on a pool of worker threads (see ``nbquant/backends/cpu/_kernel.py``).
This module imports nothing heavy: reading or setting the count starts no thread.
"""

from __future__ import annotations

import os

__all__ = ["get_num_threads", "set_num_threads", "ENV_VAR"]

#: The environment variable read for the default thread count.
ENV_VAR = "NBQUANT_NUM_THREADS"

_requested: list[int] = []


def _usable_cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


def _from_environment() -> int | None:
    text = os.environ.get(ENV_VAR, "").strip()
    if not text:
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{ENV_VAR}={text!r}: expected a positive integer thread count, e.g. {ENV_VAR}=4")
    return n


def get_num_threads() -> int:
    """The number of threads the ``cpu`` backend uses for one call.

    Returns
    -------
    int
        The count set by :func:`set_num_threads`, else ``NBQUANT_NUM_THREADS``, else
        the number of CPUs in this process's affinity mask.

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
        return _requested[0]
    from_env = _from_environment()
    return from_env if from_env is not None else _usable_cpus()


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
