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

The decorator also owns the on-disk cache (:class:`KernelCache`). It keys it on the
element package and this package: Numba keys a cached kernel on its own file only, so an
edit to an inlined element function would otherwise silently reuse stale machine code.
And the cache never makes a call fail: with no writable cache location the kernels are
compiled uncached, a damaged cache file is recompiled and rewritten, and a failed write
is skipped, each with a :class:`~nbquant.backends.NumbaCacheWarning`.
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import numba
import numpy as np
from numba import njit
from numba.core import inline_closurecall, ir
from numba.core.caching import FunctionCache, IndexDataCacheFile, NullCache
from numba.core.runtime import rtsys

from ... import element
from ...threads import get_num_threads
from .._format_kernel import format_kernel
from .._inlining import install as install_fast_inlining
from .._warning import NumbaCacheWarning

__all__ = ["cpu_kernel", "template_kernel", "CpuKernel", "KernelCache", "KERNELS", "source_digest", "disk_cached",
           "parallel_parts", "part_range", "work_unit", "quotient", "row_tile", "ROW_TILE", "PART_BYTES"]

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
#: Whether Numba inlines the element functions with :mod:`nbquant.backends._inlining` (compiles in a fraction of
#: the time; the same code).
FAST_INLINING = install_fast_inlining(inline_closurecall, ir, numba.__version__, "0.68.")
#: What each :class:`NumbaCacheWarning` of this process was about (a warning is emitted once per subject).
_WARNED: set = set()


def _warn_once(subject, message: str) -> None:
    if subject not in _WARNED:
        _WARNED.add(subject)
        warnings.warn(message, NumbaCacheWarning, stacklevel=2)


class _CacheFile(IndexDataCacheFile):
    """Numba's index and data files of one kernel, where a damaged file reads as a cache miss.

    A truncated or overwritten file fails to unpickle (``EOFError``, ``UnpicklingError``,
    or whatever the garbage decodes to); Numba would raise that on every call of every
    process. Here the entry is missed instead: the kernel is recompiled and the entry
    rewritten. A missing or unreadable file (``OSError``) is left to Numba.
    """

    def _damaged(self, path: str, exc: Exception) -> None:
        _warn_once(("damaged", path), f"nbquant: the compile cache file {path} is damaged ({type(exc).__name__}: "
                                      f"{exc}); the kernel is recompiled and the file rewritten")

    def _load_index(self):
        try:
            return super()._load_index()
        except OSError:
            raise
        except Exception as exc:  # unpickling damaged bytes can raise anything
            self._damaged(self._index_path, exc)
            return {}

    def _load_data(self, name):
        try:
            return super()._load_data(name)
        except OSError:
            raise
        except Exception as exc:  # unpickling damaged bytes can raise anything
            self._damaged(self._data_path(name), exc)
            return None


class KernelCache(FunctionCache):
    """The on-disk cache of one CPU kernel: Numba's, keyed on :func:`source_digest` too, and never fatal.

    Its file object is a :class:`_CacheFile` (a damaged file is a miss), its source stamp
    ``(numba's stamp of the kernel's file, source_digest())``, and a write that fails
    with an ``OSError`` (a full disk, a directory turned read-only) is skipped.

    Raises
    ------
    RuntimeError
        Numba's "no locator available" when no cache location is writable.
    """

    def __init__(self, py_func) -> None:
        super().__init__(py_func)
        numba_file = self._cache_file
        self._cache_file = _CacheFile(numba_file._cache_path, self._impl.filename_base,
                                      (numba_file._source_stamp, _DIGEST))

    def load_overload(self, sig, target_context):
        """Load the compiled ``sig`` (or ``None``), without Numba's refresh of the whole target context.

        Numba refreshes the context first, importing and installing every typing and lowering
        registry (a quarter of a second): a compile needs them, and a compile refreshes them itself;
        loading machine code needs only the runtime (NRT) its allocations call, initialized here.
        """
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    def save_overload(self, sig, data) -> None:
        """Save the compiled ``data`` of ``sig``, or warn (once per directory) when it cannot be written."""
        try:
            super().save_overload(sig, data)
        except OSError as exc:
            _warn_once(("unwritable", self._cache_path), f"nbquant: cannot write the compile cache in "
                       f"{self._cache_path} ({exc}); the kernel runs uncached, so the next process compiles it again "
                       "(other writes there that fail are skipped silently). Free space there, or set "
                       "NUMBA_CACHE_DIR to a writable directory.")


def _kernel_cache(fn) -> KernelCache | NullCache:
    """A :class:`KernelCache` for ``fn``, or Numba's no-op cache (warning once) when no location is writable."""
    try:
        return KernelCache(fn)
    except RuntimeError as exc:
        if "no locator available" not in str(exc):  # not the environment: e.g. a bad NUMBA_CACHE_LOCATOR_CLASSES
            raise
        _warn_once("no locator", "nbquant: no writable location for the compile cache of the cpu kernels (neither "
                   "NUMBA_CACHE_DIR, if set, nor the package's __pycache__, nor the user cache directory), so they "
                   "are compiled without caching: every process compiles each kernel it uses again (0.3 s to a few "
                   "seconds each). Set NUMBA_CACHE_DIR to a writable directory to cache them.")
        return NullCache()


def disk_cached() -> bool:
    """Whether the cpu kernels compiled in this process go to an on-disk cache (False with no writable location).

    Examples
    --------
    >>> isinstance(disk_cached(), bool)
    True
    """
    return not any(isinstance(kernel.dispatcher._cache, NullCache) for kernel in KERNELS)


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
        self.dispatcher = njit(error_model="numpy", nogil=True)(fn)
        self.dispatcher._cache = _kernel_cache(fn)  # what njit(cache=True) installs, made robust
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

    The on-disk cache is a :class:`KernelCache` (numba is pinned below 0.69, whose
    ``Cache`` and ``IndexDataCacheFile`` it extends).
    """
    kernel = CpuKernel(fn)
    KERNELS.append(kernel)
    return kernel


_TEMPLATE_LOCK = threading.Lock()


def template_kernel(table: dict[str, CpuKernel], name: str, template, doc: str, **bound: object) -> CpuKernel:
    """``table[name]``, made on first use as a :func:`cpu_kernel` of ``template`` with the globals ``bound``.

    The kernel is a function of its own (:func:`~nbquant.backends._format_kernel.format_kernel`),
    so Numba's disk cache keys it on its own name, in every process. A family of kernels (one
    per mode) costs nothing until a mode is called, and a first call compiles its mode alone.
    """
    kernel = table.get(name)
    if kernel is None:
        with _TEMPLATE_LOCK:  # one kernel per name, whichever thread asks first
            kernel = table.get(name)
            if kernel is None:
                kernel = table[name] = cpu_kernel(format_kernel(template, name, doc, **bound))
    return kernel


@element.element_function
def part_range(n, part, parts):
    """Work units ``[first, last)`` of part ``part`` of ``parts`` over ``n`` units: contiguous, sizes within one."""
    return part * n // parts, (part + 1) * n // parts


@element.element_function
def quotient(a, b):
    """``a // b`` for ``a >= 0`` and ``b >= 1``, without the hardware divide when ``b == 1`` or ``a < b``.

    A signed 64-bit floor division costs tens of cycles; a work unit used to take four,
    about 85 ns per 4096-element row (a quarter of an int8 quantize of that row). The
    branches are the same for every unit of a call, so they predict.
    """
    if b == 1:
        return a
    if a < b:
        return a - a
    return a // b


@element.element_function
def work_unit(unit, ntiles, tile, R, C, bp, br):
    """Coordinates of one work unit: ``(p, r)`` row, its scale row ``(sp, sr)``, columns ``[c, end)``."""
    row = quotient(unit, ntiles)
    c = (unit - row * ntiles) * tile
    p = quotient(row, R)
    r = row - p * R
    return p, r, quotient(p, bp), quotient(r, br), c, min(c + tile, C)


def row_tile(columns: int, codes_per_byte: int = 1) -> int:
    """Columns per work unit: the whole row up to :data:`ROW_TILE`, a multiple of the packing."""
    if columns <= ROW_TILE:
        return max(columns, 1)
    return ROW_TILE - ROW_TILE % codes_per_byte
