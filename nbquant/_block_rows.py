"""Block-format calls laid out as rows: the blocked axis moved last, the result arrays, the kernel runs.

Shared by :mod:`nbquant.block_formats` (MX, NVFP4) and :mod:`nbquant.nf4`.
"""

from __future__ import annotations

import numpy as np

from ._memory import host_empty
from .backends import device_result, is_device_array
from .spec import BlockSpec

__all__ = ["to_rows", "from_rows", "moved_shape", "empty_result", "run_block_quantize", "run_block_dequantize"]


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


def run_block_quantize(kernel, x, spec: BlockSpec, axis: int):
    """Run a fused block-quantize ``kernel`` with blocks along ``axis``; return (codes, scale codes) as uint8."""
    shape = tuple(x.shape)
    n, b = shape[axis], spec.block_size
    rows = to_rows(x, axis)
    device = is_device_array(x)
    codes = empty_result((rows.shape[0], n // 2 if spec.packed else n), np.uint8, device)
    scales = empty_result((rows.shape[0], n // b), np.uint8, device)
    if rows.size:
        kernel(rows, spec, codes, scales)
    return (from_rows(codes, moved_shape(shape, axis, codes.shape[1]), axis),
            from_rows(scales, moved_shape(shape, axis, n // b), axis))


def run_block_dequantize(kernel, data, scales, spec: BlockSpec, axis: int, n: int):
    """Run a block-dequantize ``kernel`` with blocks along ``axis`` (unpacked length ``n``)."""
    codes = to_rows(data.view(np.uint8), axis)
    out = empty_result((codes.shape[0], n), spec.out_dtype, is_device_array(data))
    if out.size:
        kernel(codes, to_rows(scales.view(np.uint8), axis), spec, out)
    return from_rows(out, moved_shape(tuple(data.shape), axis, n), axis)


