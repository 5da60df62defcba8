"""Dask support: recognise a dask array without importing dask; the chunk mechanics live in :mod:`.engine`.

The front doors ask :func:`is_dask_array` about their array arguments and, for a dask
array, validate the arguments as for a NumPy array of that shape and dtype, then hand
their own NumPy implementation to :mod:`nbquant._dask.engine` (which imports dask), so
``import nbquant`` never imports dask (docs/dask.md).
"""

from __future__ import annotations

import math

__all__ = ["is_dask_array", "any_dask_array", "check_known_chunks", "packed_format"]


def is_dask_array(x) -> bool:
    """Whether ``x`` is a ``dask.array.Array`` (or a subclass), decided without importing dask.

    Examples
    --------
    >>> import numpy as np
    >>> is_dask_array(np.zeros(2))
    False
    """
    module = type(x).__module__
    return (module == "dask" or module.startswith("dask.")) and hasattr(x, "chunks") and hasattr(x, "dask")


def any_dask_array(*values) -> bool:
    """Whether any of ``values`` is a dask array.

    Examples
    --------
    >>> any_dask_array(None, 1.0)
    False
    """
    return any(map(is_dask_array, values))


def check_known_chunks(x, name: str) -> None:
    """Refuse a dask array whose chunk sizes are unknown, with a ValueError naming the argument ``name``.

    A value-dependent operation (boolean indexing such as ``x[x > 0]``) leaves a dask array's
    chunk sizes unknown (NaN); nbquant needs them to align the chunks to its blocks, so every
    front door checks its dask arguments here, at call time. Anything else passes.

    Examples
    --------
    >>> check_known_chunks([1.0, 2.0], "x")  # not a dask array: nothing to check
    """
    if is_dask_array(x) and any(math.isnan(c) for sizes in x.chunks for c in sizes):
        raise ValueError(f"{name} is a dask array of unknown chunk sizes (shape {x.shape}, e.g. after boolean "
                         f"indexing); call {name}.compute_chunk_sizes() first: nbquant aligns the chunks to its "
                         "blocks")


def packed_format(q) -> str | None:
    """The format of a dask array of packed codes (its meta is a :class:`~nbquant.PackedCodes`), else None.

    Examples
    --------
    >>> packed_format([1, 2]) is None
    True
    """
    meta = getattr(q, "_meta", None) if is_dask_array(q) else None
    return getattr(meta, "format", None)
