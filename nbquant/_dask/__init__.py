"""Dask support: the chunk mechanics live in :mod:`.engine`, which imports dask; this package init does not.

The front doors ask :func:`nbquant.placement.placement` where a call runs; a call with a
dask argument is a :class:`~nbquant.placement.Lazy` one, which validates the arguments as
for a NumPy array of that shape and dtype, then hands the front door's own NumPy
implementation to :mod:`nbquant._dask.engine` (plugged in here, imported on first use),
so ``import nbquant`` never imports dask (docs/dask.md). The predicates are the
placement's, named here for the engine.
"""

from __future__ import annotations

from .. import placement as _placement
from ..placement import any_dask_array, check_known_chunks, is_dask_array, packed_format

__all__ = ["is_dask_array", "any_dask_array", "check_known_chunks", "packed_format"]


def _engine():
    """The dask engine, imported on first use (it imports dask)."""
    from . import engine

    return engine


_placement.plug("lazy", _engine)
