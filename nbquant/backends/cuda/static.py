"""CUDA static quantize and dequantize: ``numba.cuda.jit`` kernels over the same element functions as the CPU.

Eight kernels, one launch each per canonical block layout (one launch per call for
every layout of at most three canonical dimensions, which is every granularity
nbquant offers except ``block_size`` tuples that leave four or more unmergeable
dimensions): :func:`quantize_kernel` / :func:`dequantize_kernel` take one code per
element, the ``_packed`` ones one byte (``8 // bits`` codes) per work item, and the
``float`` ones the same for fp8/fp6/fp4. The launch shape is described in
:mod:`._loops`; the layout comes from :func:`nbquant.layout.canonical_views`,
exactly as in the CPU backend.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from ...element import (
    code_bits,
    code_value,
    dequantize_value,
    float_value,
    pack_field,
    quantize_float_value,
    quantize_value,
    store_float,
    unpack_field,
)
from ...layout import canonical_views
from .._views import kernel_float_view, output_float_like
from . import runtime
from ._loops import U0, U1, column_walk, next_block, row_coords, rows_of
from .runtime import CODE_DTYPES, INPUT_DTYPES, OUTPUT_DTYPES, array_type, cuda_kernel, scalar_type

_F32, _I64, _B1 = types.float32, types.int64, types.boolean
_FP = types.UniTuple(_I64, 7)
_PARAM = array_type(np.float32, 3)


def _quantize_signature(data, out):
    return types.void(array_type(data, 3), _PARAM, _PARAM, _B1, _I64, _B1, _F32, _F32, _I64, _I64, _I64, _I64,
                      array_type(out, 3))


def _dequantize_signature(data, out):
    return types.void(array_type(data, 3), _PARAM, _PARAM, _B1, _I64, _B1, _I64, _I64, _I64, scalar_type(out),
                      array_type(out, 3))


def _quantize_float_signature(data, out):
    return types.void(array_type(data, 3), _PARAM, _I64, _FP, _B1, _I64, _I64, _I64, array_type(out, 3))


def _dequantize_float_signature(data, out):
    return types.void(array_type(data, 3), _PARAM, _FP, _I64, _I64, _I64, scalar_type(out), array_type(out, 3))


_TO_CODES = [(d, c) for d in INPUT_DTYPES for c in CODE_DTYPES]
_TO_BYTES = [(d, np.dtype(np.uint8)) for d in INPUT_DTYPES]
_FROM_CODES = [(c, o) for o in OUTPUT_DTYPES for c in CODE_DTYPES]
_FROM_BYTES = [(np.dtype(np.uint8), o) for o in OUTPUT_DTYPES]


@cuda_kernel(_quantize_signature, _TO_CODES)
def quantize_kernel(x, scale, zp, has_zp, scale_op, zp_before, qmin, qmax, mask, bp, br, bc, out):
    """Quantize ``x`` (P, R, C) into unsigned code storage ``out`` (P, R, C)."""
    rows, R = rows_of(x)
    C = np.uint64(x.shape[2])
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    start, stride, g_start, o_start, g_step, o_step = column_walk(U1, ubc)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p, r, sp, sr = row_coords(row, R, ubp, ubr)
        xs, ss, zs, os = x[p, r], scale[sp, sr], zp[sp, sr], out[p, r]
        c, g, off = start, g_start, o_start
        while c < C:
            z = zs[g] if has_zp else np.float32(0)
            os[c] = code_bits(quantize_value(xs[c], ss[g], z, scale_op, zp_before, qmin, qmax), mask)
            c += stride
            g, off = next_block(g, off, g_step, o_step, ubc)
        row += np.uint64(cuda.gridDim.y)


@cuda_kernel(_quantize_signature, _TO_BYTES)
def quantize_packed_kernel(x, scale, zp, has_zp, scale_op, zp_before, qmin, qmax, nbits, bp, br, bc, out):
    """Quantize ``x`` (P, R, C) into packed bytes ``out`` (P, R, C / k), first code in the low bits."""
    rows, R = rows_of(x)
    nbytes = np.uint64(out.shape[2])
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    k = np.uint64(8 // nbits)
    mask = np.int32((1 << nbits) - 1)
    start, stride, g_start, o_start, g_step, o_step = column_walk(k, ubc)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p, r, sp, sr = row_coords(row, R, ubp, ubr)
        xs, ss, zs, os = x[p, r], scale[sp, sr], zp[sp, sr], out[p, r]
        j, g, off = start, g_start, o_start
        while j < nbytes:
            byte = np.int64(0)
            gt, ot = g, off
            for t in range(k):
                z = zs[gt] if has_zp else np.float32(0)
                code = code_bits(quantize_value(xs[j * k + np.uint64(t)], ss[gt], z, scale_op, zp_before, qmin, qmax),
                                 mask)
                byte = pack_field(byte, code, t, nbits)
                gt, ot = next_block(gt, ot, U0, U1, ubc)
            os[j] = byte
            j += stride
            g, off = next_block(g, off, g_step, o_step, ubc)
        row += np.uint64(cuda.gridDim.y)


@cuda_kernel(_dequantize_signature, _FROM_CODES)
def dequantize_kernel(q, scale, zp, has_zp, nbits, signed, bp, br, bc, like, out):
    """Dequantize unsigned code storage ``q`` (P, R, C) into ``out`` (float storage like ``like``)."""
    rows, R = rows_of(q)
    C = np.uint64(q.shape[2])
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    start, stride, g_start, o_start, g_step, o_step = column_walk(U1, ubc)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p, r, sp, sr = row_coords(row, R, ubp, ubr)
        qs, ss, zs, os = q[p, r], scale[sp, sr], zp[sp, sr], out[p, r]
        c, g, off = start, g_start, o_start
        while c < C:
            z = zs[g] if has_zp else np.float32(0)
            os[c] = store_float(dequantize_value(code_value(qs[c], nbits, signed), ss[g], z), like)
            c += stride
            g, off = next_block(g, off, g_step, o_step, ubc)
        row += np.uint64(cuda.gridDim.y)


@cuda_kernel(_dequantize_signature, _FROM_BYTES)
def dequantize_packed_kernel(q, scale, zp, has_zp, nbits, signed, bp, br, bc, like, out):
    """Dequantize packed bytes ``q`` (P, R, C / k) into ``out`` (P, R, C)."""
    rows, R = rows_of(q)
    nbytes = np.uint64(q.shape[2])
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    k = np.uint64(8 // nbits)
    start, stride, g_start, o_start, g_step, o_step = column_walk(k, ubc)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p, r, sp, sr = row_coords(row, R, ubp, ubr)
        qs, ss, zs, os = q[p, r], scale[sp, sr], zp[sp, sr], out[p, r]
        j, g, off = start, g_start, o_start
        while j < nbytes:
            byte = np.int32(qs[j])
            gt, ot = g, off
            for t in range(k):
                z = zs[gt] if has_zp else np.float32(0)
                code = code_value(unpack_field(byte, t, nbits), nbits, signed)
                os[j * k + np.uint64(t)] = store_float(dequantize_value(code, ss[gt], z), like)
                gt, ot = next_block(gt, ot, U0, U1, ubc)
            j += stride
            g, off = next_block(g, off, g_step, o_step, ubc)
        row += np.uint64(cuda.gridDim.y)


@cuda_kernel(_quantize_float_signature, _TO_BYTES)
def quantize_float_kernel(x, scale, scale_op, fp, saturate, bp, br, bc, out):
    """Encode ``x / scale`` (P, R, C) as floating-point codes ``out`` (P, R, C), one per byte."""
    rows, R = rows_of(x)
    C = np.uint64(x.shape[2])
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    start, stride, g_start, o_start, g_step, o_step = column_walk(U1, ubc)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p, r, sp, sr = row_coords(row, R, ubp, ubr)
        xs, ss, os = x[p, r], scale[sp, sr], out[p, r]
        c, g, off = start, g_start, o_start
        while c < C:
            os[c] = quantize_float_value(xs[c], ss[g], scale_op, fp, saturate)
            c += stride
            g, off = next_block(g, off, g_step, o_step, ubc)
        row += np.uint64(cuda.gridDim.y)


@cuda_kernel(_quantize_float_signature, _TO_BYTES)
def quantize_float_packed_kernel(x, scale, scale_op, fp, saturate, bp, br, bc, out):
    """Encode ``x / scale`` (P, R, C) as packed float codes: 4-bit two per byte, 6-bit four in three bytes.

    One work item is one packed group; codes fill a little-endian bit stream, the first
    element in the lowest bits.
    """
    rows, R = rows_of(x)
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    bits = np.int64(fp[0] + fp[1] + 1)
    k = np.uint64(4) if bits == 6 else np.uint64(2)
    m = np.uint64(3) if bits == 6 else U1
    groups = np.uint64(out.shape[2]) // m
    start, stride, g_start, o_start, g_step, o_step = column_walk(k, ubc)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p, r, sp, sr = row_coords(row, R, ubp, ubr)
        xs, ss, os = x[p, r], scale[sp, sr], out[p, r]
        j, g, off = start, g_start, o_start
        while j < groups:
            word = np.int64(0)
            gt, ot = g, off
            for t in range(k):
                code = quantize_float_value(xs[j * k + np.uint64(t)], ss[gt], scale_op, fp, saturate)
                word = pack_field(word, code, t, bits)
                gt, ot = next_block(gt, ot, U0, U1, ubc)
            for b in range(m):
                os[j * m + np.uint64(b)] = unpack_field(word, b, 8)
            j += stride
            g, off = next_block(g, off, g_step, o_step, ubc)
        row += np.uint64(cuda.gridDim.y)


@cuda_kernel(_dequantize_float_signature, _FROM_BYTES)
def dequantize_float_kernel(q, scale, fp, bp, br, bc, like, out):
    """Decode floating-point codes ``q`` (P, R, C) times their scale into ``out``."""
    rows, R = rows_of(q)
    C = np.uint64(q.shape[2])
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    start, stride, g_start, o_start, g_step, o_step = column_walk(U1, ubc)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p, r, sp, sr = row_coords(row, R, ubp, ubr)
        qs, ss, os = q[p, r], scale[sp, sr], out[p, r]
        c, g, off = start, g_start, o_start
        while c < C:
            os[c] = store_float(float_value(qs[c], ss[g], fp), like)
            c += stride
            g, off = next_block(g, off, g_step, o_step, ubc)
        row += np.uint64(cuda.gridDim.y)


@cuda_kernel(_dequantize_float_signature, _FROM_BYTES)
def dequantize_float_packed_kernel(q, scale, fp, bp, br, bc, like, out):
    """Decode packed float codes ``q`` (4-bit two per byte, 6-bit four in three bytes) into ``out`` (P, R, C)."""
    rows, R = rows_of(q)
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    bits = np.int64(fp[0] + fp[1] + 1)
    k = np.uint64(4) if bits == 6 else np.uint64(2)
    m = np.uint64(3) if bits == 6 else U1
    groups = np.uint64(q.shape[2]) // m
    start, stride, g_start, o_start, g_step, o_step = column_walk(k, ubc)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p, r, sp, sr = row_coords(row, R, ubp, ubr)
        qs, ss, os = q[p, r], scale[sp, sr], out[p, r]
        j, g, off = start, g_start, o_start
        while j < groups:
            word = np.int64(0)
            for b in range(m):
                word = pack_field(word, qs[j * m + np.uint64(b)], b, 8)
            gt, ot = g, off
            for t in range(k):
                os[j * k + np.uint64(t)] = store_float(float_value(unpack_field(word, t, bits), ss[gt], fp), like)
                gt, ot = next_block(gt, ot, U0, U1, ubc)
            j += stride
            g, off = next_block(g, off, g_step, o_step, ubc)
        row += np.uint64(cuda.gridDim.y)


def _run(kernel, data, params, out, spec, last_divisors, make_args) -> None:
    """Copy host operands in, launch ``kernel`` once per canonical view, copy a host ``out`` back."""
    stream = runtime.current_stream()
    d_data = runtime.to_device(data, stream)
    d_out = runtime.result_on_device(out, stream)
    d_params = [runtime.to_device(p, stream) for p in params]
    group_bytes = max(g[1] if isinstance(g, tuple) else 1 for g in last_divisors)
    for (a3, o3), (s3, *z3), blocks in canonical_views(spec.layout, [d_data, kernel_float_view(d_out)], d_params,
                                                       last_divisors):
        has_zp = bool(z3)
        zp3 = z3[0] if has_zp else s3
        items = min(a3.shape[2], o3.shape[2]) // group_bytes  # columns, or packed groups
        grid, threads = runtime.grid_for_rows(a3.shape[0] * a3.shape[1], items)
        kernel.launch(grid, threads, stream, make_args(a3, s3, zp3, has_zp, blocks, o3), a3.dtype, o3.dtype)
    runtime.copy_back([(out, d_out)], stream)


class StaticOps:
    """Static quantize and dequantize (:class:`~nbquant.backends.interface.Backend`)."""

    def quantize(self, x, scale, zero_point, spec, out) -> None:
        """Quantize ``x`` (NumPy or device) into ``out`` (code storage, NumPy or device) on the GPU."""
        fmt = spec.format
        group = fmt.pack_group if spec.packed else (1, 1)
        params = [scale] if zero_point is None else [scale, zero_point]
        lo, hi = np.float32(spec.qmin), np.float32(spec.qmax)
        last = np.int64(fmt.bits if spec.packed else fmt.mask)
        op = int(spec.scale_op)

        def make_args(x3, s3, zp3, has_zp, blocks, o3):
            if fmt.is_float:
                return (x3, s3, op, fmt.fp_params, spec.saturate, *blocks, o3)
            return (x3, s3, zp3, has_zp, op, spec.zero_point_before, lo, hi, last, *blocks, o3)

        kernel = (quantize_float_packed_kernel if spec.packed else quantize_float_kernel) if fmt.is_float else (
            quantize_packed_kernel if spec.packed else quantize_kernel)
        _run(kernel, kernel_float_view(runtime.device_or_host(x)), params, out, spec, [1, group], make_args)

    def dequantize(self, q, scale, zero_point, spec, out) -> None:
        """Dequantize ``q`` (code storage, NumPy or device) into ``out`` (NumPy or device) on the GPU."""
        fmt = spec.format
        group = fmt.pack_group if spec.packed else (1, 1)
        params = [scale] if zero_point is None else [scale, zero_point]
        like = output_float_like(spec.out_dtype)

        def make_args(q3, s3, zp3, has_zp, blocks, o3):
            if fmt.is_float:
                return (q3, s3, fmt.fp_params, *blocks, like, o3)
            return (q3, s3, zp3, has_zp, fmt.bits, fmt.signed, *blocks, like, o3)

        kernel = (dequantize_float_packed_kernel if spec.packed else dequantize_float_kernel) if fmt.is_float else (
            dequantize_packed_kernel if spec.packed else dequantize_kernel)
        _run(kernel, runtime.device_or_host(q), params, out, spec, [group, 1], make_args)
