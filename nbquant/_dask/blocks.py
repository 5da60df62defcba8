"""The one dask path of every block format: chunks of whole blocks, one NumPy call per chunk.

:func:`quantize_lazy` and :func:`dequantize_lazy` take a checked call (a
:class:`~nbquant.blocks.BlockSpec`, the blocked axis) and map it over the chunks with
:func:`nbquant._dask.engine.map_layout`: every tensor of the format holds ``per_block``
items per block along the blocked axis, so its chunks follow from the input's. The chunk
call (``per_chunk``) is the caller's: :mod:`nbquant.block_rows` runs the format on the chunk.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ..blocks._format import BlockSpec
from ..layout import resolve_layout
from . import engine

__all__ = ["quantize_lazy", "dequantize_lazy", "params_kwargs"]


def params_kwargs(spec: BlockSpec) -> dict:
    """The spec's parameters as keyword arguments (a dask value among them is computed before the chunks run)."""
    return {f.name: getattr(spec.params, f.name) for f in dataclasses.fields(spec.params)}


@dataclasses.dataclass(frozen=True)
class _Reductions:
    """What a format's :meth:`~nbquant.blocks.BlockFormat.prepare` may ask of a dask input: lazy whole-array
    reductions."""

    backend: str | None

    def amax(self, x):
        """``max |x|`` over the whole of ``x``: a 0-d dask array."""
        return engine.chunk_amax(x, self.backend)


def _only(per_chunk, *args, **kwargs):
    """The one tensor of ``per_chunk(*args, **kwargs)``."""
    (tensor,) = per_chunk(*args, **kwargs)
    return tensor


def quantize_lazy(x, spec: BlockSpec, axis: int, backend, *, per_chunk, align: int | None = None,
                  block_info: bool = False) -> tuple[tuple, BlockSpec]:
    """The format's tensors of a dask ``x`` (blocks along ``axis``) as dask arrays of their public dtypes, and the
    spec with its prepared (possibly dask) parameters.

    ``per_chunk(chunk, axis=..., block_size=..., **params)`` returns a chunk's tensors;
    ``align`` (a multiple of the block) keeps more whole blocks together in a chunk;
    ``block_info`` passes dask's chunk location on.
    """
    spec = dataclasses.replace(spec, params=spec.format.prepare(x, spec.params, _Reductions(backend)))
    b = spec.block_size
    fmt = spec.format
    outputs = [engine.Output("data", t.public_dtype, (b, t.per_block)) for t in spec.tensors]
    n = int(x.shape[axis])
    layout = resolve_layout(tuple(x.shape), axis, min(align, max(n, 1)) if align else b)
    if len(outputs) == 1:  # map_layout's chunk call returns the one array itself
        per_chunk = functools.partial(_only, per_chunk)
    tensors = engine.map_layout(per_chunk, x, layout, outputs, pack_axis=axis, arguments=False,
                                block_info=block_info, token=f"nbquant-{fmt.name}", axis=axis, block_size=b,
                                **params_kwargs(spec))
    return tuple(tensors), spec


def dequantize_lazy(tensors: tuple, spec: BlockSpec, axis: int, n: int, *, per_chunk, **kwargs):
    """The dequantized dask array of block tensors (blocks along ``axis``, unpacked length ``n``).

    The first tensor leads the chunking; the others hold one item per block (a block grid:
    scales). ``per_chunk(first, <other tensors by name>, axis=..., block_size=..., **kwargs)``
    returns a chunk's values.
    """
    declared = spec.tensors
    if any(t.per_block != 1 for t in declared[1:]):
        raise NotImplementedError(f"a lazy {spec.format.name} dequantize needs one item per block in every tensor "
                                  "after the first")
    shape = tuple(tensors[0].shape[:axis]) + (n,) + tuple(tensors[0].shape[axis + 1:])
    layout = resolve_layout(shape, axis, spec.block_size)
    params = {t.name: a for t, a in zip(declared[1:], tensors[1:], strict=True)}
    return engine.map_layout(per_chunk, tensors[0], layout, [engine.Output("data", np.dtype(spec.out_dtype))],
                             params=params, pack=(spec.block_size, declared[0].per_block), pack_axis=axis,
                             token="nbquant-dequantize-blocks", **kwargs)[0]
