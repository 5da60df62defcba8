"""The chunk mechanics of nbquant's dask support: alignment, block-grid parameters, one NumPy call per chunk.

A front door that receives a dask array validates its arguments from the array's shape
and dtype (the values of dask arguments are checked chunk by chunk, by the same checks),
then calls :func:`map_layout` with its own NumPy implementation. :func:`map_layout`

1. rechunks the array to the nearest chunking whose boundaries fall on block boundaries
   (and on packed-byte boundaries): a chunk then holds whole blocks, so the NumPy call on
   a chunk computes exactly what the call on the whole array computes there;
2. cuts the block-grid parameters (scales, zero points) into the chunks' grids;
3. runs the NumPy call once per chunk (``dask.array.map_blocks``), with the chunk's own
   ``axis``/``block_size`` arguments and nbquant's threads capped (:func:`task_threads`).

Scales that need more than one chunk (a block that spans the whole of a chunked
dimension: per-tensor, per-channel across chunks) take two passes: :func:`block_keys`
reduces every chunk with the backend's reduction and combines the chunks with a dask tree
reduction, :func:`qparams_from_keys` turns the combined keys into qparams with the NumPy
``choose_qparams``, and a second :func:`map_layout` quantizes with them.
"""

from __future__ import annotations

import math
import multiprocessing
import operator
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import accumulate

import dask.array as da
import numpy as np
from dask.array.dispatch import concatenate_lookup

from ..backends import resolve_backend
from ..backends.interface import key_floats
from ..codes import PackedCodes
from ..layout import BlockLayout, param_grid, resolve_layout
from ..placement import is_dask_array
from ..spec import DynamicSpec
from ..threads import thread_limit
from ..validation import check_float_input

__all__ = ["NO_PACK", "Output", "as_dask", "task_threads", "aligned_chunks", "chunk_arguments", "map_layout",
           "map_grids", "block_keys", "qparams_from_keys", "chunk_sum", "chunk_amax", "split_dims"]

#: The packing of an array that holds one code (or value) per element.
NO_PACK = (1, 1)


@concatenate_lookup.register(PackedCodes)
def _concatenate_codes(arrays, axis=0):
    """Packed codes concatenated are packed codes of the same format (so a computed dask result keeps it)."""
    fmt = next(a.format for a in arrays if isinstance(a, PackedCodes))
    return PackedCodes(np.concatenate([np.asarray(a).view(np.ndarray) for a in arrays], axis=axis), fmt)


def _pickle_packed_codes_on_distributed() -> None:
    """Make ``dask.distributed`` (when a process uses it) send :class:`~nbquant.PackedCodes` by pickle.

    Its ndarray serializer would take a ``PackedCodes`` for an ndarray and deliver a plain
    uint8 array, which :func:`nbquant.dequantize` would read as uint8 codes; refusing that
    serializer for the subclass makes distributed fall back to pickle, which keeps the format.
    Worker processes import this module with their first nbquant task, before they send its result.
    """
    if "distributed" not in sys.modules:
        return
    from distributed.protocol import dask_serialize

    @dask_serialize.register(PackedCodes)
    def _refuse(codes):
        raise NotImplementedError("PackedCodes travel by pickle, which keeps their format")


_pickle_packed_codes_on_distributed()


@dataclass(frozen=True)
class Output:
    """One array a chunk call returns.

    ``kind`` is ``"data"`` (the chunk's shape, its packed axis holding ``pack = (codes, bytes)``)
    or ``"grid"`` (the chunk's block grid, full rank); ``format`` tags packed codes, whose dask
    meta is then a :class:`~nbquant.PackedCodes` (``dequantize`` reads the format off it).
    """

    kind: str
    dtype: np.dtype
    pack: tuple[int, int] = NO_PACK
    format: str | None = None

    def meta(self, ndim: int) -> np.ndarray:
        empty = np.empty((0,) * ndim, self.dtype)
        return PackedCodes(empty, self.format) if self.format else empty


def as_dask(a) -> da.Array:
    """``a`` as a dask array of NumPy chunks (a NumPy array becomes one chunk).

    Its chunk sizes are known: the front doors refuse unknown ones (:func:`~nbquant._dask.check_known_chunks`).
    """
    if not is_dask_array(a):
        return da.from_array(np.asarray(a), chunks=-1)
    if not isinstance(a._meta, np.ndarray):
        raise TypeError(f"a dask array of {type(a._meta).__name__} chunks was passed; nbquant quantizes dask arrays "
                        "of NumPy chunks (map CUDA chunks with map_blocks and the cuda backend instead)")
    return a


def task_threads() -> int | None:
    """The thread cap of a kernel call in a dask task: 1, or None (no cap) on the synchronous scheduler.

    dask runs one task per worker thread and sizes its pools to the cores (a ``LocalCluster``'s
    workers × threads, the threaded scheduler's pool), and its nanny starts workers with
    ``OMP_NUM_THREADS=1``: a task's native code should use one thread. Only a task on the main
    thread of a process that is not a worker process (``scheduler="synchronous"``, one task at
    a time) keeps nbquant's count (:func:`nbquant.get_num_threads`).
    """
    synchronous = threading.current_thread() is threading.main_thread() and multiprocessing.parent_process() is None
    return None if synchronous else 1


def aligned_chunks(chunks: tuple[int, ...], n: int, align: int) -> tuple[int, ...]:
    """``chunks`` of a dimension of length ``n``, each boundary moved to the nearest multiple of ``align``.

    Examples
    --------
    >>> aligned_chunks((5, 5, 5), 15, 4)  # boundaries 5 and 10 move to 4 and 12
    (4, 8, 3)
    >>> aligned_chunks((8, 8), 16, 4)
    (8, 8)
    """
    if align == 1 or all(c % align == 0 for c in chunks[:-1]):
        return chunks
    bounds = sorted({b for b in ((e + align // 2) // align * align for e in accumulate(chunks[:-1])) if 0 < b < n})
    edges = [0, *bounds, n]
    return tuple(e1 - e0 for e0, e1 in zip(edges, edges[1:], strict=False))


def _resized(chunks: tuple, axis: int, num: int, den: int) -> tuple:
    """``chunks`` (a tuple per dimension) with each size along ``axis`` scaled by ``num / den`` (packing, unpacking)."""
    return chunks[:axis] + (tuple(c // den * num for c in chunks[axis]),) + chunks[axis + 1:]


def _shape(shape: tuple[int, ...], axis: int, num: int, den: int) -> tuple[int, ...]:
    """``shape`` with its size along ``axis`` scaled by ``num / den``."""
    return tuple(cs[0] for cs in _resized(tuple((n,) for n in shape), axis, num, den))


def chunk_arguments(layout: BlockLayout, shape: tuple[int, ...]) -> dict:
    """The ``axis``/``block_size`` that give a chunk of ``shape`` (whole blocks) its part of ``layout``.

    A dimension cut into one block (per-tensor, per-channel off its axis, a tuple entry equal
    to the dimension) is one block of the chunk's length; an ONNX block longer than the chunk
    is the last, partial block.

    Examples
    --------
    >>> chunk_arguments(resolve_layout((8, 64), block_size=(1, 64)), (4, 32))
    {'block_size': (1, 32)}
    >>> chunk_arguments(resolve_layout((8, 70), axis=1, block_size=32), (8, 6))
    {'axis': 1, 'block_size': 6}
    """
    if layout.kind == "per-tensor":
        return {}
    if layout.kind == "per-channel":
        return {"axis": layout.axis}
    if layout.kind == "blocked":
        n, b = shape[layout.axis], layout.block[layout.axis]
        return {"axis": layout.axis, "block_size": min(b, n) if n else b}
    return {"block_size": tuple((c or b) if g == 1 else b for c, b, g in zip(shape, layout.block, layout.grid,
                                                                           strict=True))}


@dataclass(frozen=True)
class _ChunkCall:
    """``fn(chunk, **params, **chunk arguments)`` on one chunk, nbquant's threads capped; grid outputs full rank."""

    fn: Callable
    layout: BlockLayout | None
    names: tuple[str, ...]
    absent: tuple[str, ...]
    pack: tuple[int, int]
    pack_axis: int
    kinds: tuple[str, ...]

    def __call__(self, x, *params, **kwargs):
        shape = _shape(x.shape, self.pack_axis, *self.pack)
        arguments = chunk_arguments(self.layout, shape) if self.layout is not None else {}
        named = dict(zip(self.names, params, strict=True)) | dict.fromkeys(self.absent)
        with thread_limit(task_threads()):
            result = self.fn(x, **named, **arguments, **kwargs)
        results = result if len(self.kinds) > 1 else (result,)
        if "grid" in self.kinds:  # the front doors return squeezed grids (per-channel: (n,)); full rank here
            grid = resolve_layout(shape, **arguments).grid
            results = tuple(np.asarray(r).reshape(grid) if kind == "grid" else r
                            for r, kind in zip(results, self.kinds, strict=True))
        return results if len(self.kinds) > 1 else results[0]


@dataclass(frozen=True)
class _LocatedChunkCall(_ChunkCall):
    """A :class:`_ChunkCall` that passes dask's ``block_info`` (where the chunk lies) on to ``fn``."""

    def __call__(self, x, *params, block_info=None, **kwargs):
        return super().__call__(x, *params, block_info=block_info, **kwargs)


@dataclass(frozen=True)
class _GridCall:
    """``fn(*blocks, **kwargs)``, nbquant's threads capped."""

    fn: Callable

    def __call__(self, *blocks, **kwargs):
        with thread_limit(task_threads()):
            return self.fn(*blocks, **kwargs)


def _outputs(call, args: list, chunks: list, outputs: list[Output], ndim: int, token: str, **kwargs) -> list[da.Array]:
    """``map_blocks`` of ``call``; several outputs come from one task each (a tuple, then one getitem per output)."""
    if len(outputs) == 1:
        out = outputs[0]
        return [da.map_blocks(call, *args, chunks=chunks[0], dtype=out.dtype, meta=out.meta(ndim), token=token,
                              **kwargs)]
    joint = da.map_blocks(call, *args, dtype=object, meta=np.empty((0,) * ndim, object), token=token, **kwargs)
    return [da.map_blocks(operator.getitem, joint, i, chunks=c, dtype=out.dtype, meta=out.meta(ndim),
                          token=f"{token}-{i}") for i, (c, out) in enumerate(zip(chunks, outputs, strict=True))]


def _rechunked(x: da.Array, layout: BlockLayout, pack: tuple[int, int], axis: int, outputs: list[Output]) -> da.Array:
    """``x`` rechunked so that every chunk holds whole blocks and whole packed bytes (of ``x`` and the outputs)."""
    if x.size == 0:
        return x.rechunk(-1)
    align = [1 if g == 1 else b for g, b in zip(layout.grid, layout.block, strict=True)]
    codes = math.lcm(pack[0], *(o.pack[0] for o in outputs if o.kind == "data"))
    align[axis] = math.lcm(align[axis], codes) // pack[0] * pack[1]
    chunks = tuple(aligned_chunks(c, n, a) for c, n, a in zip(x.chunks, x.shape, align, strict=True))
    return x if chunks == x.chunks else x.rechunk(chunks)


def _grid_chunks(layout: BlockLayout, echunks, split: bool) -> tuple[tuple[int, ...], ...]:
    """The block-grid chunks of element chunks ``echunks``: one per chunk along whole dimensions when ``split``."""
    return tuple(((1,) * len(cs) if split else (1,)) if g == 1 else tuple(-(-c // b) for c in cs)
                 for cs, b, g in zip(echunks, layout.block, layout.grid, strict=True))


def _as_grid(name: str, value, layout: BlockLayout, chunks) -> da.Array:
    """A block-grid parameter (NumPy or dask, as the user passed it: its values unconverted) cut into ``chunks``."""
    grid = param_grid(name, value if is_dask_array(value) else np.asarray(value), layout)
    return grid.rechunk(chunks) if is_dask_array(grid) else da.from_array(grid, chunks=chunks)


def map_layout(fn: Callable, x, layout: BlockLayout, outputs: list[Output], *, params: Mapping | None = None,
               pack: tuple[int, int] = NO_PACK, pack_axis: int = -1, arguments: bool = True,
               block_info: bool = False, token: str = "nbquant", **kwargs) -> list[da.Array]:
    """Run ``fn`` on each chunk of ``x`` (blocked by ``layout``) after aligning the chunks to the blocks.

    Parameters
    ----------
    fn : callable
        ``fn(chunk, **params, axis=..., block_size=..., **kwargs)``: a NumPy front door (or a
        function of one), returning one array per ``outputs`` entry (a tuple for several).
    x : dask.array.Array or array_like
        The input; a NumPy array becomes one chunk.
    layout : BlockLayout
        The blocking of ``x``'s element shape (``x``'s ``pack_axis`` holds ``pack`` elements per bytes).
    outputs : list of Output
        What ``fn`` returns per chunk: data (the chunk's shape) or its block grid.
    params : mapping, optional
        Block-grid parameters by keyword (NumPy or dask; None passes None); each chunk gets its slice.
    pack : (int, int)
        ``(codes, bytes)`` of ``x``'s ``pack_axis`` when it holds packed codes; the packing of
        the outputs (:class:`Output`) is along the same axis.
    pack_axis : int
        The packed axis (the last by default; the blocked axis of MX and NVFP4).
    arguments : bool
        Pass the chunk's ``axis``/``block_size`` (:func:`chunk_arguments`) to ``fn``.
    block_info : bool
        Pass dask's ``block_info`` (the chunk's location) to ``fn``.
    token : str
        The prefix of the graph keys.
    **kwargs
        More keyword arguments of ``fn``, passed through ``map_blocks`` (so not named as its own:
        ``dtype``, ``chunks``, ``name``, ``meta``...; bind those with ``functools.partial``);
        dask arrays among them (a global scale) are computed first.

    Returns
    -------
    list of dask.array.Array
        One per output; grid outputs have one block-grid slice per chunk (several along a
        whole dimension that ``x`` splits: combine them with a reduction).

    Examples
    --------
    >>> import functools, dask.array as da, numpy as np, nbquant
    >>> x = da.arange(8, dtype=np.float32, chunks=3).reshape(2, 4)
    >>> layout = resolve_layout((2, 4), axis=1, block_size=2)
    >>> quantize = functools.partial(nbquant.quantize, dtype="int8")
    >>> codes, = map_layout(quantize, x, layout, [Output("data", np.dtype(np.int8))],
    ...                     params={"scale": np.full((2, 2), 0.5, np.float32)})
    >>> codes.compute()
    array([[ 0,  2,  4,  6],
           [ 8, 10, 12, 14]], dtype=int8)
    """
    x = as_dask(x)
    scalar = x.ndim == 0
    if scalar:
        x = x.reshape(1)
    axis = pack_axis % x.ndim
    x = _rechunked(x, layout, pack, axis, outputs)
    echunks = _resized(x.chunks, axis, *pack)
    params = dict(params or {})
    names = tuple(k for k, v in params.items() if v is not None)
    args = [x, *(_as_grid(k, params[k], layout, _grid_chunks(layout, echunks, False)) for k in names)]
    absent = tuple(k for k in params if k not in names)
    call = (_LocatedChunkCall if block_info else _ChunkCall)(fn, layout if arguments else None, names, absent, pack,
                                                             axis, tuple(o.kind for o in outputs))
    chunks = [_resized(echunks, axis, *o.pack[::-1]) if o.kind == "data" else _grid_chunks(layout, echunks, True)
              for o in outputs]
    results = _outputs(call, args, chunks, outputs, x.ndim, token, **kwargs)
    return [r.reshape(()) if scalar and o.kind == "data" else r for r, o in zip(results, outputs, strict=True)]


def map_grids(fn: Callable, grids: list[da.Array], outputs: list[Output], *, token: str, **kwargs) -> list[da.Array]:
    """``fn(*blocks, **kwargs)`` on matching blocks of equally chunked ``grids``; the outputs are chunked alike."""
    call = _GridCall(fn)
    chunks = [grids[0].chunks] * len(outputs)
    return _outputs(call, grids, chunks, outputs, grids[0].ndim, token, **kwargs)


def split_dims(x: da.Array, layout: BlockLayout) -> tuple[int, ...]:
    """The dimensions cut into one block (grid 1) that ``x`` nevertheless splits into several chunks."""
    if x.ndim == 0 or x.size == 0:  # map_layout runs these as one chunk
        return ()
    return tuple(d for d, (cs, g) in enumerate(zip(x.chunks, layout.grid, strict=True)) if g == 1 and len(cs) > 1)


def _chunk_keys(x, *, use_minmax: bool, backend: str | None, axis=None, block_size=None):
    """The backend's block reduction of one chunk: int64 ``(lo, hi)`` keys (``DynamicSpec.reduction``)."""
    x = check_float_input(x)
    spec = DynamicSpec.reduction(resolve_layout(x.shape, axis, block_size), use_minmax)
    return resolve_backend(backend, (x,)).reduce_keys(x, spec)


def block_keys(x: da.Array, layout: BlockLayout, use_minmax: bool, backend: str | None) -> tuple[da.Array, da.Array]:
    """The block-grid keys of ``layout`` over the whole of ``x``: each chunk reduced, then a dask tree reduction.

    The keys are integers (:func:`~nbquant.element.order_key`, or the absmax bits), so
    the minimum and maximum over chunks are those over the whole block, bit for bit
    (``-0.0`` below ``+0.0``, NaN above inf, payloads kept).
    """
    int64 = np.dtype(np.int64)
    lo, hi = map_layout(_chunk_keys, x, layout, [Output("grid", int64), Output("grid", int64)],
                        token="nbquant-block-keys", use_minmax=use_minmax, backend=backend)
    axes = split_dims(lo, layout)
    return lo.min(axis=axes, keepdims=True), hi.max(axis=axes, keepdims=True)


def qparams_from_keys(lo: np.ndarray, hi: np.ndarray, *, choose: Callable, use_minmax: bool):
    """``choose_qparams`` of reduced keys: each block's two extremes quantized as a block of two values.

    The reduction of ``[min, max]`` (or ``[0, absmax]``) gives the same keys as the block's,
    so ``choose`` (:func:`nbquant.choose_qparams` with the call's mapping and range) computes
    the block's qparams with the backend's own numerics.
    """
    hi_values = key_floats(hi) if use_minmax else hi.astype(np.uint32).view(np.float32)
    lo_values = key_floats(lo) if use_minmax else np.zeros_like(hi_values)
    scale, zero_point = choose(np.stack([lo_values.reshape(-1), hi_values.reshape(-1)], axis=1), block_size=(1, 2))
    return scale.reshape(lo.shape), zero_point.reshape(lo.shape)


def chunk_sum(fn: Callable, x, length: int, dtype: np.dtype, *, token: str, **kwargs) -> da.Array:
    """``fn(chunk, **kwargs)`` (a 1-D array of ``length``, histogram counts) summed over the chunks: a dask tree."""
    x = as_dask(x)
    chunks = tuple((1,) * len(c) for c in x.chunks) + ((length,),)
    parts = da.map_blocks(_Summand(fn), x, new_axis=x.ndim, chunks=chunks, dtype=dtype, token=token, **kwargs)
    return parts.sum(axis=tuple(range(x.ndim)), dtype=dtype)


@dataclass(frozen=True)
class _Summand:
    """``fn(chunk, **kwargs)``, nbquant's threads capped, as a ``(1, ..., 1, length)`` block of the chunk's rank + 1."""

    fn: Callable

    def __call__(self, x, **kwargs):
        with thread_limit(task_threads()):
            return np.asarray(self.fn(x, **kwargs)).reshape((1,) * x.ndim + (-1,))


def chunk_amax(x: da.Array, backend: str | None) -> da.Array:
    """``max |x|`` over the whole array (0-d float32; NaN if any element is NaN): the backend per chunk, then a tree."""
    x = as_dask(x)
    partial = da.map_blocks(_amax, x, backend=backend, chunks=tuple((1,) * len(c) for c in x.chunks),
                            dtype=np.float32, token="nbquant-amax")
    return partial.max()


def _amax(x, backend: str | None) -> np.ndarray:
    """The backend's ``max |x|`` of one chunk, as a one-element array of the chunk's rank."""
    x = check_float_input(x)
    with thread_limit(task_threads()):
        amax = resolve_backend(backend, (x,)).amax(x)
    return np.full((1,) * x.ndim, amax, np.float32)
