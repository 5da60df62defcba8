"""Host result arrays from a small pool of reused buffers: large outputs without first-touch page faults.

A fresh large NumPy array is ``mmap``-ed memory that the kernel must fault in and zero on
first touch; for outputs above glibc's mmap threshold (32 MiB at most) that costs as much
as the kernel's own writes (a 64 MiB float32 result: 12.8 ms fresh against 6.0 ms into a
touched buffer, 2 cores, docs/performance.md). :func:`host_empty` hands out large results
as views of pooled buffers instead: when the last view of a result is gone, its buffer
returns to the pool (bounded by :func:`set_output_pool`), and the next result of that
size reuses the already-mapped pages, as onnxruntime's arena and torch's caching
allocators do.

A result's ``base`` is then a ctypes buffer that keeps the pooled memory alive; the
array is an ordinary writable, C-contiguous ``numpy.ndarray``.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import weakref

import numpy as np

from .layout import as_int

__all__ = ["host_empty", "set_output_pool", "output_pool_bytes"]

#: Results smaller than this come from ``numpy.empty`` (glibc reuses its heap for them).
POOL_MIN_BYTES = 1 << 22
_GRAIN = 1 << 20
_lock = threading.Lock()
_idle: dict[int, list[np.ndarray]] = {}
#: The environment variable of the pool's bound (read at the pool's first use; :func:`set_output_pool` overrides it).
ENV_VAR = "NBQUANT_OUTPUT_POOL_BYTES"
_DEFAULT_LIMIT = 512 << 20
#: ``limit`` is None until the first use reads it from :data:`ENV_VAR`.
_state: dict[str, int | None] = {"limit": None, "idle": 0}


def _limit() -> int:
    """The bound in force: the last :func:`set_output_pool`'s, else :data:`ENV_VAR`'s, else 512 MiB.

    A bad value raises here, where the pool is used, naming the variable, the value and what
    is allowed (as ``NBQUANT_NUM_THREADS`` does): ``import nbquant`` never fails on it, and it
    is never silently replaced by the default, which would hide a typo in a deployment.
    """
    limit = _state["limit"]
    if limit is None:
        text = os.environ.get(ENV_VAR, "").strip()
        try:
            limit = int(text) if text else _DEFAULT_LIMIT
        except ValueError:
            limit = -1
        if limit < 0:
            raise ValueError(f"{ENV_VAR}={text!r}: expected a byte count >= 0 (0 turns the output pool off), "
                             f"e.g. {ENV_VAR}={_DEFAULT_LIMIT}")
        _state["limit"] = limit
    return limit


def output_pool_bytes() -> tuple[int, int]:
    """``(limit, idle)``: the pool's bound and the bytes it holds for reuse now.

    Returns
    -------
    tuple of int
        The bound in bytes (0: no pooling) and the idle bytes held.

    Raises
    ------
    ValueError
        If the bound comes from ``NBQUANT_OUTPUT_POOL_BYTES`` and that is not a byte count.

    Examples
    --------
    >>> import nbquant
    >>> limit, idle = nbquant.output_pool_bytes()
    >>> limit >= 0 and idle >= 0
    True
    """
    with _lock:
        return _limit(), _state["idle"]


def set_output_pool(max_bytes: int) -> int:
    """Bound the idle bytes kept for reusing large results; 0 frees them and turns pooling off.

    Parameters
    ----------
    max_bytes : int
        The most bytes of idle result buffers kept (default 512 MiB, or the
        ``NBQUANT_OUTPUT_POOL_BYTES`` environment variable). Buffers beyond it are freed.

    Returns
    -------
    int
        The previous bound.

    Raises
    ------
    ValueError
        If ``max_bytes`` is negative, or the previous bound comes from ``NBQUANT_OUTPUT_POOL_BYTES``
        and that is not a byte count.

    Examples
    --------
    >>> import nbquant
    >>> previous = nbquant.set_output_pool(0)  # no pooling: every result is a fresh numpy.empty
    >>> nbquant.set_output_pool(previous)
    0
    """
    limit = as_int("max_bytes", max_bytes, "an integer")
    if limit < 0:
        raise ValueError(f"max_bytes={max_bytes!r} is out of range; use max_bytes >= 0")
    dropped = []
    with _lock:
        previous, _state["limit"] = _limit(), limit
        while _state["idle"] > limit:
            size = max(_idle)
            dropped.append(_idle[size].pop())
            if not _idle[size]:
                del _idle[size]
            _state["idle"] -= size
    del dropped  # freed outside the lock
    return previous


def _release(size: int, owner: np.ndarray) -> None:
    """A result's buffer, back from its last view: kept for reuse if the bound allows."""
    with _lock:
        if _state["idle"] + size <= _state["limit"]:
            _idle.setdefault(size, []).append(owner)
            _state["idle"] += size


def host_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised C-contiguous host array, from the pool when it is large.

    Parameters
    ----------
    shape : tuple of int
        The result's shape.
    dtype : dtype
        Its dtype.

    Returns
    -------
    numpy.ndarray
        Writable and C-contiguous; large ones view a pooled buffer.

    Raises
    ------
    ValueError
        If ``NBQUANT_OUTPUT_POOL_BYTES`` is not a byte count (and :func:`set_output_pool` was not called).
    """
    limit = _limit()  # first: a bad NBQUANT_OUTPUT_POOL_BYTES fails every call alike, not only large ones
    dtype = np.dtype(dtype)
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if nbytes < POOL_MIN_BYTES or nbytes > limit:
        return np.empty(shape, dtype)
    size = -(-nbytes // _GRAIN) * _GRAIN
    owner = None
    with _lock:
        free = _idle.get(size)
        if free:
            owner = free.pop()
            _state["idle"] -= size
    if owner is None:
        owner = np.empty(size, np.uint8)
    exporter = (ctypes.c_byte * size).from_address(owner.ctypes.data)
    weakref.finalize(exporter, _release, size, owner).atexit = False
    return np.frombuffer(exporter, dtype, count).reshape(shape)
