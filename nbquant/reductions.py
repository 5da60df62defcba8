"""Per-block reductions that are not a quantization: ``min`` and ``max`` in one pass."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .backends import resolve_backend
from .backends.interface import key_floats
from .layout import BlockLayout, resolve_layout
from .placement import Host, placement
from .spec import DynamicSpec

__all__ = ["reduce_min_max"]


def block_min_max(x, layout: BlockLayout, p: Host, backend) -> tuple[np.ndarray, np.ndarray]:
    """The float32 per-block min and max of the checked ``x`` (placed by ``p``), as host arrays of the grid."""
    if x.size == 0:
        return np.zeros(layout.grid, np.float32), np.zeros(layout.grid, np.float32)
    lo, hi = resolve_backend(backend, p).reduce_keys(x, DynamicSpec.reduction(layout, use_minmax=True))
    return key_floats(p.to_host(lo)).reshape(layout.grid), key_floats(p.to_host(hi)).reshape(layout.grid)


def reduce_min_max(x: npt.ArrayLike, *, axis: int | None = None, block_size=None,
                   backend: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``min(x)`` and ``max(x)`` per block (float32 host arrays of the block grid), in one pass.

    The blocks are given by ``axis``/``block_size`` as in :func:`nbquant.quantize`. A
    block holding a NaN (of either sign, any payload) has the canonical NaN (``numpy.nan``'s
    bits) as both its minimum and its maximum, as ``numpy.min`` and ``numpy.max`` give;
    ``-0.0`` orders below ``+0.0``.

    Parameters
    ----------
    x : array_like
        float32, float16, bfloat16 or float64 data.
    axis : int, optional
        As in :func:`nbquant.quantize` (per channel, or the blocked axis with an int ``block_size``).
    block_size : int or tuple of int, optional
        As in :func:`nbquant.quantize`; neither: one block (the whole tensor).
    backend : str, optional
        ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``; default: the selected backend.

    Returns
    -------
    lo : numpy.ndarray
        The minimum per block, float32, shaped as the block grid.
    hi : numpy.ndarray
        The maximum per block, the same shape.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> lo, hi = nbquant.reduce_min_max(np.array([[1.0, -3.0], [0.5, 2.0]], np.float32), axis=0)
    >>> lo.ravel().tolist(), hi.ravel().tolist()
    ([-3.0, 0.5], [1.0, 2.0])
    >>> nbquant.reduce_min_max(np.array([1.0, -np.nan, 2.0], np.float32))
    (array([nan], dtype=float32), array([nan], dtype=float32))
    """
    p = placement(x)
    x = p.float_input(x)
    return block_min_max(x, resolve_layout(tuple(x.shape), axis, block_size), p, backend)
