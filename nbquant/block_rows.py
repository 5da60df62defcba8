"""Block-format calls for every registered format: validation, rows, the backend call, host/device/dask.

A call moves the blocked axis last and views the input as (rows, n) rows; the backend's
:meth:`~nbquant.backends.interface.Backend.block_quantize` fills one (rows, items) array
per :class:`~nbquant.blocks.Tensor` of the format; the results go back to the caller's
layout. A dask input takes the one lazy path of :mod:`nbquant._dask.blocks`. The named
front doors (:mod:`nbquant.block_formats`, :mod:`nbquant.nf4`) validate their own
arguments and call :func:`run_quantize` / :func:`run_dequantize`; :func:`quantize_blocks`
and :func:`dequantize_blocks` do the same for any format from its declaration.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from ._dask import any_dask_array, is_dask_array
from ._memory import host_empty
from .backends import device_code_input, device_float_input, device_result, is_device_array, resolve_backend
from .blocks import BlockFormat, BlockSpec, get_block_format
from .validation import check_int, check_out_dtype

__all__ = ["check_blocking", "to_rows", "from_rows", "moved_shape", "empty_result", "quantize_rows",
           "dequantize_rows", "run_quantize", "run_dequantize", "quantize_blocks", "dequantize_blocks"]


def check_blocking(shape: tuple[int, ...], axis, block_size, packed: bool) -> tuple[int, int]:
    """The normalised blocked ``axis`` and ``block_size`` (positive, even when ``packed``) for ``shape``."""
    k, b = check_int("axis", axis), check_int("block_size", block_size)
    if not shape:
        raise ValueError("block formats need an input with at least one dimension")
    if not -len(shape) <= k < len(shape):
        raise ValueError(f"axis={axis} is out of range for an input of {len(shape)} dimension(s)")
    k %= len(shape)
    if b < 1 or (packed and b % 2):
        raise ValueError(f"block_size={b} must be a positive{' even' if packed else ''} integer")
    _check_divides(shape, k, b)
    return k, b


def _check_divides(shape: tuple[int, ...], k: int, b: int) -> None:
    if shape[k] % b:
        pad = -shape[k] % b
        raise ValueError(f"axis {k} has length {shape[k]}, not a multiple of block_size={b}; pad it with {pad} "
                         f"zeros first, e.g. numpy.pad(x, [(0, {pad}) if d == {k} else (0, 0) for d in "
                         "range(x.ndim)])")


def to_rows(a, axis: int):
    """``a`` with ``axis`` last, C-contiguous, as (rows, n); a device array must be blocked along its last axis."""
    if is_device_array(a):
        shape = tuple(a.shape)  # the CUDA simulator's shapes refuse negative indices
        if axis != len(shape) - 1:
            raise ValueError(f"CUDA device arrays are blocked along their last axis only (axis={axis} of a "
                             f"{len(shape)}-d array); nbquant does not transpose on the device, so move the axis "
                             "last first (e.g. tensor.movedim(axis, -1).contiguous())")
        n = shape[-1]
        return a.reshape((int(a.size) // n if n else 0, n))
    moved = np.ascontiguousarray(np.moveaxis(a, axis, -1))
    return moved.reshape(-1, moved.shape[-1]) if moved.size else moved.reshape(0, moved.shape[-1])


def from_rows(rows, moved: tuple[int, ...], axis: int):
    """Rows back to the caller's layout: ``moved`` reshaped and its last axis moved to ``axis``."""
    if is_device_array(rows):  # blocked along the last axis: nothing moved
        return rows.reshape(moved)
    return np.ascontiguousarray(np.moveaxis(rows.reshape(moved), -1, axis))


def moved_shape(shape: tuple[int, ...], axis: int, last: int) -> tuple[int, ...]:
    """``shape`` with ``axis`` removed and ``last`` appended."""
    return tuple(n for d, n in enumerate(shape) if d != axis) + (last,)


def empty_result(shape: tuple[int, ...], dtype, device: bool):
    """A new result: a device array for a device call, else a (pooled) host array."""
    return device_result(None, shape, dtype) if device else host_empty(shape, dtype)


def quantize_rows(impl, x, spec: BlockSpec, axis: int) -> tuple:
    """Run ``impl``'s block quantize with blocks along ``axis``: the format's tensors (kernel dtypes), in layout."""
    shape = tuple(x.shape)
    n, b = shape[axis], spec.block_size
    rows = to_rows(x, axis)
    device = is_device_array(x)
    tensors = tuple(empty_result((rows.shape[0], n // b * t.per_block), t.dtype, device) for t in spec.tensors)
    if rows.size:
        impl.block_quantize(rows, spec, tensors)
    return tuple(from_rows(t, moved_shape(shape, axis, t.shape[1]), axis) for t in tensors)


def dequantize_rows(impl, tensors: tuple, spec: BlockSpec, axis: int, n: int):
    """Run ``impl``'s block dequantize of ``tensors`` (blocks along ``axis``, unpacked length ``n``)."""
    rows = tuple(to_rows(a.view(t.dtype), axis) for a, t in zip(tensors, spec.tensors, strict=True))
    out = empty_result((rows[0].shape[0], n), spec.out_dtype, is_device_array(tensors[0]))
    if out.size:
        impl.block_dequantize(rows, spec, out)
    return from_rows(out, moved_shape(tuple(tensors[0].shape), axis, n), axis)


def run_quantize(x, spec: BlockSpec, axis: int, backend, **lazy_options) -> tuple[tuple, BlockSpec]:
    """Quantize a checked input (host, device or dask): the tensors in their public dtypes, and the spec used.

    The spec's parameters are the format's :meth:`~nbquant.blocks.BlockFormat.prepare`\\ d
    ones; ``lazy_options`` go to :func:`nbquant._dask.blocks.quantize_lazy` (a chunk call,
    an alignment) when ``x`` is a dask array.
    """
    if is_dask_array(x):
        from ._dask.blocks import quantize_lazy

        lazy_options.setdefault("per_chunk", functools.partial(_chunk_quantize, name=spec.format.name,
                                                               backend=backend))
        return quantize_lazy(x, spec, axis, backend, **lazy_options)
    impl = resolve_backend(backend, (x,))
    spec = replace(spec, params=spec.format.prepare(x, spec.params, impl))
    tensors = quantize_rows(impl, x, spec, axis)
    return tuple(a.view(t.public_dtype) for a, t in zip(tensors, spec.tensors, strict=True)), spec


def run_dequantize(tensors: tuple, spec: BlockSpec, axis: int, n: int, backend, *, per_chunk=None, **lazy_kwargs):
    """Dequantize checked tensors (host, device or dask) with blocks along ``axis`` of unpacked length ``n``.

    A dask tensor (or a dask value in ``lazy_kwargs``) makes the call lazy: ``per_chunk``
    (default: this function's chunk call) on every chunk, ``lazy_kwargs`` passed to it.
    """
    if any_dask_array(*tensors, *lazy_kwargs.values()):
        from ._dask.blocks import dequantize_lazy, params_kwargs

        if per_chunk is None:
            names = tuple(t.name for t in spec.tensors)
            per_chunk = functools.partial(_chunk_dequantize, name=spec.format.name, names=names,
                                          out_dtype=spec.out_dtype, backend=backend)
            lazy_kwargs = params_kwargs(spec) | lazy_kwargs
        return dequantize_lazy(tensors, spec, axis, n, per_chunk=per_chunk, **lazy_kwargs)
    return dequantize_rows(resolve_backend(backend, (tensors[0],)), tensors, spec, axis, n)


def _chunk_quantize(x, *, name: str, backend, axis: int, block_size: int, **params) -> tuple:
    """One chunk of a lazy call quantized: the format's tensors (public dtypes)."""
    fmt = get_block_format(name)
    return run_quantize(x, BlockSpec(fmt, block_size, fmt.Params(**params)), axis, backend)[0]


def _chunk_dequantize(first, *, name: str, names: tuple[str, ...], out_dtype, backend, axis: int, block_size: int,
                      **values):
    """One chunk of a lazy call dequantized: ``first`` and the other tensors (by name; the rest of ``values`` are
    the parameters)."""
    fmt = get_block_format(name)
    rest = tuple(values.pop(n) for n in names[1:])
    spec = BlockSpec(fmt, block_size, fmt.Params(**values), out_dtype)
    n = first.shape[axis] // spec.tensors[0].per_block * block_size
    return run_dequantize((first, *rest), spec, axis, n, backend)


def quantize_blocks(fmt: BlockFormat, x: npt.ArrayLike, *, axis: int = -1, block_size: int | None = None,
                    params=None, backend: str | None = None) -> tuple[tuple, object]:
    """Quantize ``x`` to the registered block format ``fmt``.

    Parameters
    ----------
    fmt : BlockFormat
        A registered format (:func:`~nbquant.blocks.get_block_format`).
    x : array_like
        float32, float16, bfloat16 or float64; a CUDA device array (blocked along its last
        axis) stays on its device; a dask array gives dask tensors.
    axis : int, optional
        The blocked axis (default: the last); its length a multiple of ``block_size``.
    block_size : int, optional
        Values per block (default: the format's).
    params : optional
        The format's ``Params`` (default: :meth:`~nbquant.blocks.BlockFormat.default_params`).
    backend : str, optional
        ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``; default: the selected backend.

    Returns
    -------
    tuple
        The tensors (one per :meth:`~nbquant.blocks.BlockFormat.tensors`, in their public
        dtypes) and the parameters used (e.g. NVFP4's computed global scale).

    Examples
    --------
    >>> import numpy as np
    >>> from nbquant.blocks import get_block_format
    >>> from nbquant.block_rows import quantize_blocks
    >>> (data, scales), params = quantize_blocks(get_block_format("nvfp4"), np.array([6.0, 0.5], np.float32),
    ...                                          block_size=2)
    >>> data, params.global_scale
    (array([23], dtype=uint8), np.float32(0.002232143))
    """
    lazy = is_dask_array(x)
    x = device_float_input(x, lazy=lazy)
    params = fmt.default_params() if params is None else params
    if not isinstance(params, fmt.Params):
        raise TypeError(f"params is a {type(params).__name__}; {fmt.name} takes {fmt.Params.__name__}")
    b = fmt.check_block_size(fmt.block_size if block_size is None else block_size, params)
    k, b = check_blocking(tuple(x.shape), axis, b, False)
    tensors, spec = run_quantize(x, BlockSpec(fmt, b, params), k, backend)
    return tensors, spec.params


def dequantize_blocks(fmt: BlockFormat, tensors, *, axis: int = -1, block_size: int | None = None, params=None,
                      out_dtype: npt.DTypeLike = np.float32, backend: str | None = None):
    """Dequantize the tensors of the registered block format ``fmt`` (as :func:`quantize_blocks` returns them).

    Parameters
    ----------
    fmt : BlockFormat
        The format.
    tensors : sequence of array_like
        One per :meth:`~nbquant.blocks.BlockFormat.tensors`, each in its public dtype or its
        kernel dtype (the same bits); all host, all CUDA device arrays, or dask arrays.
    axis, block_size, params :
        As given to (or returned by) :func:`quantize_blocks`.
    out_dtype : dtype, optional
        float32 (default), float16 or bfloat16.
    backend : str, optional
        As in :func:`quantize_blocks`.

    Returns
    -------
    array
        The values, in the shape of the quantized input.

    Examples
    --------
    >>> import numpy as np
    >>> from nbquant.blocks import get_block_format
    >>> from nbquant.block_rows import dequantize_blocks
    >>> dequantize_blocks(get_block_format("nf4"), (np.array([0xF2], np.uint8), np.array([2.0], np.float32)),
    ...                   block_size=2)
    array([ 2.      , -1.046875], dtype=float32)
    """
    params = fmt.default_params() if params is None else params
    if not isinstance(params, fmt.Params):
        raise TypeError(f"params is a {type(params).__name__}; {fmt.name} takes {fmt.Params.__name__}")
    b = fmt.check_block_size(fmt.block_size if block_size is None else block_size, params)
    spec = BlockSpec(fmt, b, params, check_out_dtype(out_dtype))
    declared = spec.tensors
    tensors = tuple(tensors)
    if len(tensors) != len(declared):
        raise ValueError(f"tensors holds {len(tensors)} arrays; {fmt.name} stores {len(declared)} "
                         f"({', '.join(t.name for t in declared)})")
    if len({is_device_array(a) for a in tensors}) > 1:
        raise TypeError(f"the {fmt.name} tensors must all be CUDA device arrays or all host arrays")
    lazy = any_dask_array(*tensors)
    tensors = tuple(device_code_input(a, t.name, lazy=lazy) for a, t in zip(tensors, declared, strict=True))
    for a, t in zip(tensors, declared, strict=True):
        if a.dtype not in (t.public_dtype, np.dtype(t.dtype)):
            raise TypeError(f"{t.name} has dtype {a.dtype}; {fmt.name} stores it as {t.public_dtype}")
    first = tuple(tensors[0].shape)
    k, _ = check_blocking(first, axis, 1, False)
    per_block = declared[0].per_block
    _check_divides(first, k, per_block)
    n = first[k] // per_block * b
    shape = first[:k] + (n,) + first[k + 1:]
    for a, t in zip(tensors, declared, strict=True):
        if tuple(a.shape) != t.shape(shape, k, b):
            raise ValueError(f"{t.name} has shape {tuple(a.shape)}; {fmt.name} with block_size={b} along axis {k} "
                             f"of length {n} needs {t.shape(shape, k, b)}")
    return run_dequantize(tensors, spec, k, n, backend)
