"""CUDA element-wise kernels: static quantize/dequantize, modelopt fake quantization and its gradient.

Eight static kernels, one launch each per canonical block layout (one launch per call
for every layout of at most three canonical dimensions, which is every granularity
nbquant offers except ``block_size`` tuples that leave four or more unmergeable
dimensions): :func:`quantize_kernel` / :func:`dequantize_kernel` take one code per
element, the ``_packed`` ones one byte (``8 // bits`` codes) per work item, and the
``float`` ones the same for fp8/fp6/fp4. :func:`fake_amax_kernel`, :func:`ste_kernel`
and :func:`fake_affine_kernel` are modelopt's fake quantization, straight-through
gradient and legacy FakeAffine. The launch shape is described in :mod:`._loops`; the
layout comes from :func:`nbquant.layout.canonical_views`, exactly as in the CPU backend.
All numerics are :mod:`nbquant.element` calls.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from ... import element
from ._loops import U0, U1, column_walk, next_block, row_coords, rows_of, thread_start
from .runtime import (
    B1,
    CODE_DTYPES,
    F32,
    FP_TUPLE,
    I64,
    INPUT_DTYPES,
    OUTPUT_DTYPES,
    array_type,
    cuda_kernel,
    scalar_type,
)

_PARAM = array_type(np.float32, 3)


def _quantize_signature(data, out):
    return types.void(array_type(data, 3), _PARAM, _PARAM, B1, I64, B1, F32, F32, I64, I64, I64, I64,
                      array_type(out, 3))


def _dequantize_signature(data, out):
    return types.void(array_type(data, 3), _PARAM, _PARAM, B1, I64, B1, I64, I64, I64, scalar_type(out),
                      array_type(out, 3))


def _quantize_float_signature(data, out):
    return types.void(array_type(data, 3), _PARAM, I64, FP_TUPLE, B1, I64, I64, I64, array_type(out, 3))


def _dequantize_float_signature(data, out):
    return types.void(array_type(data, 3), _PARAM, FP_TUPLE, I64, I64, I64, scalar_type(out), array_type(out, 3))


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
            os[c] = element.code_bits(element.quantize_value(xs[c], ss[g], z, scale_op, zp_before, qmin, qmax), mask)
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
                value = element.quantize_value(xs[j * k + np.uint64(t)], ss[gt], z, scale_op, zp_before, qmin, qmax)
                code = element.code_bits(value, mask)
                byte = element.pack_field(byte, code, t, nbits)
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
            value = element.dequantize_value(element.code_value(qs[c], nbits, signed), ss[g], z)
            os[c] = element.store_float(value, like)
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
                code = element.code_value(element.unpack_field(byte, t, nbits), nbits, signed)
                os[j * k + np.uint64(t)] = element.store_float(element.dequantize_value(code, ss[gt], z), like)
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
            os[c] = element.quantize_float_value(xs[c], ss[g], scale_op, fp, saturate)
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
                code = element.quantize_float_value(xs[j * k + np.uint64(t)], ss[gt], scale_op, fp, saturate)
                word = element.pack_field(word, code, t, bits)
                gt, ot = next_block(gt, ot, U0, U1, ubc)
            for b in range(m):
                os[j * m + np.uint64(b)] = element.unpack_field(word, b, 8)
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
            os[c] = element.store_float(element.float_value(qs[c], ss[g], fp), like)
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
                word = element.pack_field(word, qs[j * m + np.uint64(b)], b, 8)
            gt, ot = g, off
            for t in range(k):
                value = element.float_value(element.unpack_field(word, t, bits), ss[gt], fp)
                os[j * k + np.uint64(t)] = element.store_float(value, like)
                gt, ot = next_block(gt, ot, U0, U1, ubc)
            j += stride
            g, off = next_block(g, off, g_step, o_step, ubc)
        row += np.uint64(cuda.gridDim.y)


def _out_of(dtype) -> np.dtype:
    """The kernel-side output of a kernel-side input: float64 inputs give float32 results."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float64 else np.dtype(dtype)


_SAME_OUT = [(d, _out_of(d)) for d in INPUT_DTYPES]


@cuda_kernel(lambda d, o: types.void(array_type(d, 3), _PARAM, B1, F32, F32, F32, FP_TUPLE, I64,
                                     I64, I64, scalar_type(o), array_type(o, 3), B1, _PARAM), _SAME_OUT)
def fake_amax_kernel(x, amax, is_float, maxbound, qmin, qmax, fp, bp, br, bc, like, out, store_codes, codes):
    """modelopt fake quant of ``x`` (P, R, C) with a block-grid ``amax`` (GP, GR, GC) into ``out``.

    Integer path ``element.amax_code(x, S) / S`` (codes to ``codes`` with ``store_codes``); float
    path ``element.scaled_minifloat_fake`` with the ``element.e4m3_scales`` of the block's amax.
    """
    rows, R = rows_of(x)
    C = np.uint64(x.shape[2])
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    start, stride, g_start, o_start, g_step, o_step = column_walk(U1, ubc)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p, r, sp, sr = row_coords(row, R, ubp, ubr)
        xs, am, os = x[p, r], amax[sp, sr], out[p, r]
        cs = codes[p, r] if store_codes else codes[0, 0]
        c, g, off = start, g_start, o_start
        while c < C:
            if is_float:
                s, inv = element.e4m3_scales(am[g], maxbound)
                os[c] = element.store_float(element.scaled_minifloat_fake(xs[c], s, inv, maxbound, fp), like)
            else:
                sq, sdq = element.amax_scales(am[g], maxbound)
                q = element.amax_code(xs[c], sq, qmin, qmax)
                if store_codes:
                    cs[c] = q
                # float32 casts: no-ops on the GPU; called as Python they keep a 0 divisor inf/NaN, not an error
                os[c] = element.store_float(np.float32(q) / np.float32(sdq), like)
            c += stride
            g, off = next_block(g, off, g_step, o_step, ubc)
        row += np.uint64(cuda.gridDim.y)


@cuda_kernel(lambda g, xd, o: types.void(array_type(g, 3), array_type(xd, 3), _PARAM, _PARAM, I64, I64, I64,
                                         scalar_type(o), array_type(o, 3)),
             [(d, xd, _out_of(d)) for d in INPUT_DTYPES for xd in INPUT_DTYPES])
def ste_kernel(grad, x, lo, hi, bp, br, bc, like, out):
    """``out = grad where lo <= x <= hi else 0`` over (P, R, C) with block-grid bounds ``lo``/``hi``."""
    rows, R = rows_of(x)
    C = np.uint64(x.shape[2])
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    start, stride, g_start, o_start, g_step, o_step = column_walk(U1, ubc)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p, r, sp, sr = row_coords(row, R, ubp, ubr)
        gs, xs, ls, hs, os = grad[p, r], x[p, r], lo[sp, sr], hi[sp, sr], out[p, r]
        c, g, off = start, g_start, o_start
        while c < C:
            os[c] = element.store_float(element.ste_value(gs[c], xs[c], ls[g], hs[g]), like)
            c += stride
            g, off = next_block(g, off, g_step, o_step, ubc)
        row += np.uint64(cuda.gridDim.y)


@cuda_kernel(lambda d, o: types.void(array_type(d, 2), F32, F32, F32, F32, scalar_type(o), array_type(o, 2)),
             _SAME_OUT)
def fake_affine_kernel(x, step, qz, minb, maxb, like, out):
    """Legacy FakeAffine over ``x`` (rows, n): ``element.affine_fake_value`` per element."""
    rows = np.uint64(x.shape[0])
    n = np.uint64(x.shape[1])
    start, stride = thread_start()
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        xs, os = x[row], out[row]
        c = start
        while c < n:
            os[c] = element.store_float(element.affine_fake_value(xs[c], step, qz, minb, maxb), like)
            c += stride
        row += np.uint64(cuda.gridDim.y)
