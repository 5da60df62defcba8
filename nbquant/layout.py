"""Layout normalisation: every granularity becomes one canonical block layout.

The user-facing conventions all reduce to "each dimension ``d`` of the input is cut
into blocks of ``block[d]`` elements; the scale holds one value per block, row-major
over the block grid; element ``i`` uses ``scale[i // block]``":

=====================================  =============================================
call                                   per-dimension block sizes
=====================================  =============================================
``axis=None, block_size=None``         the whole tensor (per-tensor)
``axis=k``                             1 along ``k``, whole dims elsewhere (per-channel,
                                       ``k`` is the *kept* dim, as in TensorRT/ONNX)
``axis=k, block_size=B``               ``B`` along ``k`` (last block may be partial),
                                       1 elsewhere (ONNX blocked; scale has the input's
                                       rank with ``ceil(n/B)`` along ``k``)
``block_size=(b0, ..., bn)``           ``b_d`` along ``d``, each dividing its dim
                                       (torchao ``block_size``)
=====================================  =============================================

Kernels never see those conventions. :func:`canonical_dims` merges adjacent
dimensions wherever the block index of the merged dimension is still
``index // block``, which turns nearly every case into at most three dimensions
``(P, R, C)`` with blocks ``(bp, br, bc)``. Kernels then look a scale up once per
row and once per column block, never dividing an index per element.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

__all__ = ["BlockLayout", "as_int", "resolve_layout", "canonical_dims", "param_grid", "canonical_views", "row_blocks"]


@dataclass(frozen=True)
class BlockLayout:
    """Per-dimension blocking of one input shape.

    Attributes
    ----------
    shape : tuple of int
        The input's shape (``(1,)`` for a 0-d input).
    block : tuple of int
        Block size along each dimension, ``1 <= block[d] <= shape[d]``.
    kind : str
        ``"per-tensor"``, ``"per-channel"``, ``"blocked"`` or ``"block_size"``.
    axis : int or None
        The normalised axis for the per-channel and blocked kinds.
    """

    shape: tuple[int, ...]
    block: tuple[int, ...]
    kind: str
    axis: int | None = None

    @property
    def grid(self) -> tuple[int, ...]:
        """Number of blocks along each dimension (``ceil(n / b)``).

        A whole dimension (per-tensor, and per-channel off the axis) is one block even
        when it is empty, so an empty input takes the same scale shapes as any other.
        """
        whole = self.kind in ("per-tensor", "per-channel")
        return tuple(1 if n == 0 and whole and d != self.axis else -(-n // b)
                     for d, (n, b) in enumerate(zip(self.shape, self.block, strict=True)))

    @property
    def num_blocks(self) -> int:
        return int(np.prod(self.grid, dtype=np.int64))


def _normalise_axis(axis, ndim: int) -> int:
    k = as_int("axis", axis, "an integer or None")
    if not -ndim <= k < ndim:
        raise ValueError(f"axis={axis} is out of range for an input of {ndim} dimension(s); "
                         f"use -{ndim} <= axis < {ndim}")
    return k % ndim


def as_int(name: str, value, allowed: str = "an integer") -> int:
    """``value`` as an int: a Python or NumPy integer (a float, a string or a bool raises TypeError naming ``name``).

    Examples
    --------
    >>> as_int("axis", np.int64(-1))
    -1
    >>> as_int("axis", True)
    Traceback (most recent call last):
    ...
    TypeError: axis=True must be an integer, not a bool
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}={value!r} must be {allowed}, not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name}={value!r} must be {allowed}") from None


def resolve_layout(shape: tuple[int, ...], axis=None, block_size=None) -> BlockLayout:
    """Turn ``axis`` / ``block_size`` into a :class:`BlockLayout` for ``shape``.

    Parameters
    ----------
    shape : tuple of int
        The input's shape.
    axis : int, optional
        Per-channel (alone) or ONNX-blocked (with an int ``block_size``) axis.
    block_size : int or tuple of int, optional
        An int needs ``axis``; a tuple (torchao convention) has one entry per
        dimension, each dividing its dimension, and excludes ``axis``.

    Returns
    -------
    BlockLayout

    Raises
    ------
    ValueError, TypeError
        On an axis out of range, a block size below 1, a tuple of the wrong length,
        or a tuple entry that does not divide its dimension.

    Examples
    --------
    >>> resolve_layout((4, 6), axis=0).block
    (1, 6)
    >>> resolve_layout((4, 6), axis=1, block_size=4).grid
    (4, 2)
    >>> resolve_layout((4, 6), block_size=(1, 3)).grid
    (4, 2)
    """
    shape = tuple(int(n) for n in shape) or (1,)
    ndim = len(shape)
    if block_size is None:
        if axis is None:
            return BlockLayout(shape, tuple(max(n, 1) for n in shape), "per-tensor")
        k = _normalise_axis(axis, ndim)
        block = tuple(1 if d == k else max(n, 1) for d, n in enumerate(shape))
        return BlockLayout(shape, block, "per-channel", k)
    if isinstance(block_size, (tuple, list)):
        if axis is not None:
            raise ValueError(f"axis={axis!r} cannot be combined with a tuple block_size={tuple(block_size)!r}; "
                             "a tuple gives the block along every dimension, so pass axis=None")
        if len(block_size) != ndim:
            raise ValueError(f"block_size={tuple(block_size)!r} has {len(block_size)} entries but the input has "
                             f"{ndim} dimension(s) {shape}; give one block length per dimension")
        block = tuple(as_int("block_size", b) for b in block_size)
        for d, (n, b) in enumerate(zip(shape, block, strict=True)):
            if b < 1 or (n > 0 and (b > n or n % b)):
                raise ValueError(f"block_size={block!r}: entry {d} is {b}, which does not divide dimension {d} of "
                                 f"size {n}; each entry must be a divisor of its dimension (1 .. {n})")
        return BlockLayout(shape, block, "block_size")
    b = as_int("block_size", block_size)
    if axis is None:
        raise ValueError(f"block_size={b} needs axis= to say which dimension is blocked "
                         "(or pass a tuple with one block length per dimension)")
    k = _normalise_axis(axis, ndim)
    if b < 1:
        raise ValueError(f"block_size={b} must be >= 1")
    if b > shape[k] and shape[k] > 0:
        raise ValueError(f"block_size={b} is larger than dimension axis={axis} of size {shape[k]}; "
                         f"use 1 <= block_size <= {shape[k]}")
    block = tuple(b if d == k else 1 for d in range(ndim))
    return BlockLayout(shape, block, "blocked", k)


def param_grid(name: str, param: np.ndarray, layout: BlockLayout) -> np.ndarray:
    """Check that a scale or zero point fits ``layout`` and view it as the block grid.

    Accepted shapes: exactly the grid; the grid with its size-1 dimensions removed
    (torchao ``keepdim=False``, NumPy scalars, a 1-D per-channel vector); and any
    shape of one element for per-tensor.

    Examples
    --------
    >>> import numpy as np
    >>> param_grid("scale", np.ones(3, np.float32), resolve_layout((2, 3), axis=1)).shape
    (1, 3)
    """
    grid = layout.grid
    squeezed = tuple(g for g in grid if g != 1)
    shape = tuple(param.shape)
    ok = shape == grid or shape == squeezed or (layout.num_blocks == 1 and param.size == 1)
    if not ok:
        allowed = " or ".join(dict.fromkeys(map(str, (grid, squeezed))))
        raise ValueError(f"{name} has shape {shape}, which does not fit {layout.kind} quantization of an input of "
                         f"shape {layout.shape} with blocks {layout.block}; expected shape {allowed}")
    return param.reshape(grid)


def canonical_dims(shape: tuple[int, ...], block: tuple[int, ...]) -> list[tuple[int, int]]:
    """Merge dimensions into the fewest ``(n, b)`` pairs that keep ``block index = i // b``.

    Size-1 dimensions are dropped. An outer dim ``(n0, b0)`` and the next ``(n1, b1)``
    merge when the inner one is one whole block (``b1 == n1``: merged block
    ``b0 * n1``), or when the outer one is per-element and the inner blocks tile it
    exactly (``b0 == 1`` and ``n1 % b1 == 0``: merged block ``b1``). The merged grid
    is the product of the two grids in row-major order, so scale arrays reshape to it
    without copying.

    Examples
    --------
    >>> canonical_dims((8, 4, 32), (1, 1, 16))   # per-row groups of 16
    [(1024, 16)]
    >>> canonical_dims((8, 32), (2, 16))          # 2-D tiles stay two dims
    [(8, 2), (32, 16)]
    """
    dims: list[tuple[int, int]] = []
    for n, b in zip(shape, block, strict=True):
        if n == 1:
            continue
        if dims:
            n0, b0 = dims[-1]
            if b == n:
                dims[-1] = (n0 * n, b0 * n)
                continue
            if b0 == 1 and n % b == 0:
                dims[-1] = (n0 * n, b)
                continue
        dims.append((n, b))
    return dims


def canonical_views(layout: BlockLayout, data: list[np.ndarray], params: list[np.ndarray], last_divisors: list):
    """Yield ``(data3, params3, (bp, br, bc))`` for kernels over the canonical layout.

    ``data`` are C-contiguous arrays of the input's shape, except that array ``i``'s
    last dimension is packed by ``last_divisors[i]``: an int ``k`` (``k`` codes per
    byte) or a ``(codes, bytes)`` pair (see ``QuantFormat.pack_group``). ``params`` are
    block-grid arrays (see :func:`param_grid`). Each yielded item holds 3-D views
    ``(P, R, C / divisor)`` and ``(GP, GR, GC)``; when more than three dimensions
    remain after :func:`canonical_dims`, the extra leading ones are iterated here.
    """
    dims = canonical_dims(layout.shape, layout.block)
    dims = [(1, 1)] * (3 - len(dims)) + dims
    lead, inner = dims[:-3], dims[-3:]
    sizes = [n for n, _ in dims]
    grids = [-(-n // b) for n, b in dims]
    groups = [k if isinstance(k, tuple) else (k, 1) for k in last_divisors]
    # Shapes as tuples: numba's device reshape returns early only for a tuple equal to the shape (a list
    # takes its general path, which refuses an unchanged shape: "operation requires copying").
    views = [a.reshape((*sizes[:-1], sizes[-1] // k * m)) for a, (k, m) in zip(data, groups, strict=True)]
    pviews = [p.reshape(tuple(grids)) for p in params]
    blocks = tuple(b for _, b in inner)
    if not lead:  # the usual case: one launch over the whole array
        yield views, pviews, blocks
        return
    for idx in np.ndindex(*(n for n, _ in lead)):
        gidx = tuple(i // b for i, (_, b) in zip(idx, lead, strict=True))
        yield [v[idx] for v in views], [p[gidx] for p in pviews], blocks


def row_blocks(layout: BlockLayout) -> tuple[int, int, int] | None:
    """``(rows, C, bc)`` when every block lies inside one row of the last canonical dimension, else None.

    Such layouts (per-row, per-group, ONNX blocks along the last axis) are what the
    fused one-pass dynamic kernels take.

    Examples
    --------
    >>> row_blocks(resolve_layout((4, 64), block_size=(1, 32)))   # rows merge: 1 row of 256, blocks of 32
    (1, 256, 32)
    >>> row_blocks(resolve_layout((4, 64), axis=1)) is None
    True
    """
    dims = canonical_dims(layout.shape, layout.block)
    if not dims:
        return None
    *outer, (columns, bc) = dims
    if any(b != 1 for _, b in outer):
        return None
    return int(np.prod([n for n, _ in outer], dtype=np.int64)), columns, bc
