"""Per-block reductions that are not a quantization: ``max |x|``, and ``min`` and ``max`` in one pass.

The backends reduce a block to order keys (:meth:`~nbquant.backends.interface.Backend.reduce_keys`);
this module decodes them into float32 grids, once: :func:`amax_floats` for the absmax bits,
:func:`~nbquant.backends.interface.key_floats` for min/max keys. :func:`block_amax` and
:func:`block_min_max` are the reductions of a checked, placed input that the front doors
(modelopt's fake quantizers, the calibrators) share; :func:`reduce_amax` and
:func:`reduce_min_max` are the public calls.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .backends import resolve_backend
from .backends.interface import key_floats
from .layout import BlockLayout, resolve_layout
from .placement import Host, placement
from .spec import DynamicSpec
from .validation import show

__all__ = ["reduce_amax", "reduce_min_max", "block_amax", "block_min_max", "amax_floats"]


def amax_floats(keys) -> np.ndarray:
    """The float32 absmax values of a backend's absmax reduction keys (their bits); NaN the canonical one.

    Examples
    --------
    >>> amax_floats(np.array([0x3F800000, 0x7FC00001])).tolist()
    [1.0, nan]
    """
    amax = np.asarray(keys, np.int64).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(amax), np.float32(np.nan), amax)  # not the payload of whichever NaN was kept


def block_amax(x, layout: BlockLayout, p: Host, backend) -> np.ndarray:
    """The float32 ``max |x|`` grid of the checked ``x`` (placed by ``p``), as a host array."""
    if x.size == 0:
        return np.zeros(layout.grid, np.float32)
    _, hi = resolve_backend(backend, p).reduce_keys(x, DynamicSpec.reduction(layout))
    return amax_floats(p.to_host(hi)).reshape(layout.grid)


def block_min_max(x, layout: BlockLayout, p: Host, backend) -> tuple[np.ndarray, np.ndarray]:
    """The float32 per-block min and max of the checked ``x`` (placed by ``p``), as host arrays of the grid."""
    if x.size == 0:
        return np.zeros(layout.grid, np.float32), np.zeros(layout.grid, np.float32)
    lo, hi = resolve_backend(backend, p).reduce_keys(x, DynamicSpec.reduction(layout, use_minmax=True))
    return key_floats(p.to_host(lo)).reshape(layout.grid), key_floats(p.to_host(hi)).reshape(layout.grid)


def reduce_amax(x: npt.ArrayLike, *, axis: int | None = None, block_size=None, layout: BlockLayout | None = None,
                backend: str | None = None) -> np.ndarray:
    """Return ``max |x|`` per block; NaN if the block holds a NaN.

    Parameters
    ----------
    x : array_like
        float32, float16, bfloat16 or float64 input (a CUDA device array stays on its device).
    axis, block_size : int or tuple of int, optional
        The blocks, as in :func:`nbquant.quantize` (neither: the whole tensor).
    layout : BlockLayout, optional
        The blocks as a :class:`~nbquant.layout.BlockLayout` of ``x``'s shape, instead of ``axis``/``block_size``.
    backend : str, optional
        ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``; default: the selected backend.

    Returns
    -------
    numpy.ndarray
        float32, the block grid.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> nbquant.reduce_amax(np.array([[1.0, -3.0], [0.5, 2.0]], np.float32), axis=0)
    array([[3.],
           [2.]], dtype=float32)
    """
    p = placement(x)
    x = p.float_input(x)
    if layout is None:
        layout = resolve_layout(tuple(x.shape), axis, block_size)
    elif not isinstance(layout, BlockLayout):
        raise TypeError(f"layout={show(layout)} must be a nbquant.layout.BlockLayout (or pass axis=/block_size=)")
    elif layout.shape != resolve_layout(tuple(x.shape)).shape:
        raise ValueError(f"layout describes shape {layout.shape}, not x's shape {tuple(x.shape)}")
    elif axis is not None or block_size is not None:
        raise ValueError(f"axis={axis!r} and block_size={block_size!r} cannot be combined with layout=; pass one")
    return p.like_input(block_amax(x, layout, p, backend))


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
