"""The ``cpu_kernel`` decorator: how every CPU kernel is compiled, cached and registered.

It owns the compile options (``parallel``, ``cache``, numpy's error model, ``nogil``)
and keys the on-disk cache on the element package and this package too: Numba keys a
cached kernel on its own file only, so an edit to an inlined element function would
otherwise silently reuse stale machine code.

Importing this module sets ``OMP_WAIT_POLICY=PASSIVE`` unless the environment already
sets it; the OpenMP runtime reads it when the first parallel kernel starts it. With
GNU OpenMP's default policy (Numba's usual threading layer) idle workers spin, and
each small call cost 8-16 ms instead of 0.1 ms on a shared 2-core machine
(docs/performance.md). It has no effect if OpenMP was already started.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from numba import njit

from ... import element

__all__ = ["cpu_kernel", "KERNELS", "source_digest", "work_unit", "row_tile", "ROW_TILE"]

# Read by the OpenMP runtime when the first parallel kernel starts it, so setting it here is in time.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

#: Every kernel made by :func:`cpu_kernel`, in definition order.
KERNELS: list = []
#: Elements of one row handled by one parallel work unit.
ROW_TILE = 1 << 16


def source_digest() -> bytes:
    """SHA-256 of the sources the CPU kernels inline: every module of :mod:`nbquant.element` and of this package."""
    digest = hashlib.sha256()
    for package in (Path(element.__file__).parent, Path(__file__).parent):
        for path in sorted(package.glob("*.py")):
            digest.update(path.read_bytes())
    return digest.digest()


_DIGEST = source_digest()


def cpu_kernel(fn):
    """Compile ``fn`` as a CPU kernel: ``njit(parallel=True, cache=True, error_model="numpy", nogil=True)``.

    The kernel's on-disk cache is keyed on :func:`source_digest` too (numba is pinned
    below 0.69, whose ``Cache`` keeps the stamp in ``_cache_file._source_stamp``), and
    the kernel is added to :data:`KERNELS`.
    """
    kernel = njit(parallel=True, cache=True, error_model="numpy", nogil=True)(fn)
    cache_file = kernel._cache._cache_file
    cache_file._source_stamp = (cache_file._source_stamp, _DIGEST)
    KERNELS.append(kernel)
    return kernel


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
