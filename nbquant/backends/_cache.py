"""Numba on-disk cache keyed on the shared element source too."""

from __future__ import annotations

import hashlib
from pathlib import Path

from .. import element


def stamp_cache_with_element_source(kernels, helpers=()) -> None:
    """Make the on-disk kernel cache depend on :mod:`nbquant.element` (and ``helpers`` modules) too.

    Numba keys a cached kernel on its own file only, so an edit to an inlined
    element function would silently reuse stale machine code. numba is pinned below
    0.69, whose ``Cache`` keeps the stamp in ``_cache_file._source_stamp``.
    ``helpers`` are further modules whose inline functions the kernels use.
    """
    digest = hashlib.sha256(Path(element.__file__).read_bytes())
    for module in helpers:
        digest.update(Path(module.__file__).read_bytes())
    extra = digest.digest()
    for kernel in kernels:
        cache_file = kernel._cache._cache_file
        cache_file._source_stamp = (cache_file._source_stamp, extra)
