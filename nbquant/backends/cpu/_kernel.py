"""The ``cpu_kernel`` decorator: how every CPU kernel is compiled, cached, registered and run on threads.

A CPU kernel is a serial ``njit(cache=True, error_model="numpy", nogil=True)`` function
whose first two arguments are ``part, parts``: it does the share
:func:`part_range` gives part ``part`` of its work units. Calling the
:class:`CpuKernel` runs the parts at once, one on the calling thread and the others on
a pool of worker threads; the compiled code releases the GIL, so the parts run in
parallel. This replaces Numba's ``parallel=True``, which costs twice the compile time
(the parfor passes and lowering: 3.2 s against 1.5 s for the int8 quantize kernel), and
whose default OpenMP layer kills a ``fork()``-ed child (a ``multiprocessing`` pool then
hangs). A forked child starts a fresh pool.

The decorator also keys the on-disk cache on the element package and this package:
Numba keys a cached kernel on its own file only, so an edit to an inlined element
function would otherwise silently reuse stale machine code.
"""

from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np
from numba import njit

from ... import element
from ...threads import get_num_threads

__all__ = ["cpu_kernel", "CpuKernel", "KERNELS", "source_digest", "parallel_parts", "part_range", "work_unit",
           "row_tile", "ROW_TILE", "PART_BYTES"]

#: Every kernel made by :func:`cpu_kernel`, in definition order.
KERNELS: list[CpuKernel] = []
#: Elements of one row handled by one work unit.
ROW_TILE = 1 << 16
#: Bytes of array arguments per part below which a call is not split further (handing a part
#: to a worker thread costs ~100 µs on a 2-core VM, the time one core takes to move ~2 MiB).
PART_BYTES = 1 << 21


def source_digest() -> bytes:
    """SHA-256 of the sources the CPU kernels inline: every module of :mod:`nbquant.element` and of this package."""
    digest = hashlib.sha256()
    for package in (Path(element.__file__).parent, Path(__file__).parent):
        for path in sorted(package.glob("*.py")):
            digest.update(path.read_bytes())
    return digest.digest()


_DIGEST = source_digest()


def parallel_parts(nbytes: int) -> int:
    """How many parts a call moving ``nbytes`` runs as: one per :data:`PART_BYTES`, at most the thread count."""
    return max(1, min(get_num_threads(), nbytes // PART_BYTES))


class _Pool:
    """Worker threads shared by every kernel call; a forked child starts with none."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.executors: dict[int, ThreadPoolExecutor] = {}

    def executor(self, workers: int) -> ThreadPoolExecutor:
        """A pool of ``workers`` threads, started on first use (pools of other sizes stay alive for calls in flight)."""
        with self.lock:
            pool = self.executors.get(workers)
            if pool is None:
                pool = self.executors[workers] = ThreadPoolExecutor(workers, thread_name_prefix="nbquant-cpu")
            return pool


_POOL = _Pool()


def _new_pool_in_child() -> None:
    global _POOL
    _POOL = _Pool()  # the parent's worker threads do not exist in a forked child


os.register_at_fork(after_in_child=_new_pool_in_child)


class CpuKernel:
    """A compiled CPU kernel that runs its work units as parts on several threads.

    Parameters
    ----------
    fn : callable
        ``fn(part, parts, *args)``: the kernel body, doing part ``part`` of ``parts``.
    """

    def __init__(self, fn) -> None:
        self.dispatcher = njit(cache=True, error_model="numpy", nogil=True)(fn)
        cache_file = self.dispatcher._cache._cache_file
        cache_file._source_stamp = (cache_file._source_stamp, _DIGEST)
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args, parts: int | None = None) -> None:
        """Run the kernel on ``args`` as ``parts`` parts (default: :func:`parallel_parts` of the arrays' bytes)."""
        if parts is None:
            parts = parallel_parts(sum(a.nbytes for a in args if isinstance(a, np.ndarray)))
        if parts == 1:
            self.dispatcher(0, 1, *args)
            return
        pool = _POOL.executor(get_num_threads())
        futures = [pool.submit(self.dispatcher, part, parts, *args) for part in range(1, parts)]
        try:
            self.dispatcher(0, parts, *args)
        finally:
            wait(futures)  # never return while a worker still writes into the caller's arrays
        for future in futures:
            future.result()

    def __repr__(self) -> str:
        return f"<cpu kernel {self.__qualname__}>"


def cpu_kernel(fn) -> CpuKernel:
    """Compile ``fn(part, parts, *args)`` as a :class:`CpuKernel` and add it to :data:`KERNELS`.

    The on-disk cache is keyed on :func:`source_digest` too (numba is pinned below
    0.69, whose ``Cache`` keeps the stamp in ``_cache_file._source_stamp``).
    """
    kernel = CpuKernel(fn)
    KERNELS.append(kernel)
    return kernel


@element.element_function
def part_range(n, part, parts):
    """Work units ``[first, last)`` of part ``part`` of ``parts`` over ``n`` units: contiguous, sizes within one."""
    return part * n // parts, (part + 1) * n // parts


@element.element_function
def work_unit(unit, ntiles, tile, R, C, bp, br):
    """Coordinates of one work unit: ``(p, r)`` row, its scale row ``(sp, sr)``, columns ``[c, end)``."""
    row = unit // ntiles
    c = (unit - row * ntiles) * tile
    p = row // R
    r = row - p * R
    return p, r, p // bp, r // br, c, min(c + tile, C)


def row_tile(columns: int, codes_per_byte: int = 1) -> int:
    """Columns per work unit: the whole row up to :data:`ROW_TILE`, a multiple of the packing."""
    if columns <= ROW_TILE:
        return max(columns, 1)
    return ROW_TILE - ROW_TILE % codes_per_byte
