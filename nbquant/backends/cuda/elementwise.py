"""CUDA element-wise kernels: static quantize/dequantize, modelopt fake quantization and its gradient.

Eight static kernels, one launch each per canonical block layout (one launch per call
for every layout of at most three canonical dimensions, which is every granularity
nbquant offers except ``block_size`` tuples that leave four or more unmergeable
dimensions): :func:`quantize_kernel` / :func:`dequantize_kernel` take one code per
element, the ``_packed`` ones one byte (``8 // bits`` codes) per work item, and the
``float`` ones the same for fp8/fp6/fp4. :func:`fake_amax_kernel`, :func:`ste_kernel`
and :func:`fake_affine_kernel` are modelopt's fake quantization, straight-through
gradient and legacy FakeAffine. The launch shape is described in :mod:`._loops`, whose
:func:`~._loops.column_frame` walks it for every kernel here but FakeAffine: an operation is
its row views and what one work item does, and its kernel is its signature and one call.
The layout comes from :func:`nbquant.layout.canonical_views`, exactly as in the CPU
backend. All numerics are :mod:`nbquant.element` calls.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from ... import element
from ._loops import U0, U1, column_frame, next_block, thread_start
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


# Each operation: its frame functions (:func:`~._loops.column_frame`: the rows it walks, the row
# views it reads once per row, what one work item does), the walk the frame builds around them,
# and the kernel: its signature and one call. ``args`` is the kernel's parameters less the blocks.


@cuda.jit(device=True, inline="always")
def _per_element(args):
    """Walk the first array (P, R, C): one work item per column."""
    a = args[0]
    return a, np.uint64(a.shape[2]), U1


@cuda.jit(device=True, inline="always")
def _zp_views(args, p, r, sp, sr):
    """``(data, scale, zero point, out)`` rows of ``args = (data, scale, zp, ..., out)``."""
    out = args[-1]
    return args[0][p, r], args[1][sp, sr], args[2][sp, sr], out[p, r]


@cuda.jit(device=True, inline="always")
def _scale_views(args, p, r, sp, sr):
    """``(data, scale, out)`` rows of ``args = (data, scale, ..., out)``."""
    out = args[-1]
    return args[0][p, r], args[1][sp, sr], out[p, r]


@cuda.jit(device=True, inline="always")
def _quantize_item(args, views, c, k, g, off, bc):
    has_zp, scale_op, zp_before, qmin, qmax, mask = args[3:9]
    xs, ss, zs, os = views
    z = zs[g] if has_zp else np.float32(0)
    os[c] = element.code_bits(element.quantize_value(xs[c], ss[g], z, scale_op, zp_before, qmin, qmax), mask)


_QUANTIZE = column_frame(_per_element, _zp_views, _quantize_item)


@cuda_kernel(_quantize_signature, _TO_CODES)
def quantize_kernel(x, scale, zp, has_zp, scale_op, zp_before, qmin, qmax, mask, bp, br, bc, out):
    """Quantize ``x`` (P, R, C) into unsigned code storage ``out`` (P, R, C)."""
    _QUANTIZE(bp, br, bc, (x, scale, zp, has_zp, scale_op, zp_before, qmin, qmax, mask, out))


@cuda.jit(device=True, inline="always")
def _packed_out(args):
    """Walk ``x`` by the bytes of ``out`` (P, R, C / k): ``k = 8 // nbits`` codes per work item."""
    out = args[-1]
    return args[0], np.uint64(out.shape[2]), np.uint64(8 // args[8])


@cuda.jit(device=True, inline="always")
def _quantize_packed_item(args, views, j, k, g, off, bc):
    has_zp, scale_op, zp_before, qmin, qmax, nbits = args[3:9]
    xs, ss, zs, os = views
    mask = np.int32((1 << nbits) - 1)
    byte = np.int64(0)
    for t in range(k):
        z = zs[g] if has_zp else np.float32(0)
        value = element.quantize_value(xs[j * k + np.uint64(t)], ss[g], z, scale_op, zp_before, qmin, qmax)
        byte = element.pack_field(byte, element.code_bits(value, mask), t, nbits)
        g, off = next_block(g, off, U0, U1, bc)
    os[j] = byte


_QUANTIZE_PACKED = column_frame(_packed_out, _zp_views, _quantize_packed_item)


@cuda_kernel(_quantize_signature, _TO_BYTES)
def quantize_packed_kernel(x, scale, zp, has_zp, scale_op, zp_before, qmin, qmax, nbits, bp, br, bc, out):
    """Quantize ``x`` (P, R, C) into packed bytes ``out`` (P, R, C / k), first code in the low bits."""
    _QUANTIZE_PACKED(bp, br, bc, (x, scale, zp, has_zp, scale_op, zp_before, qmin, qmax, nbits, out))


@cuda.jit(device=True, inline="always")
def _dequantize_item(args, views, c, k, g, off, bc):
    has_zp, nbits, signed, like = args[3:7]
    qs, ss, zs, os = views
    z = zs[g] if has_zp else np.float32(0)
    os[c] = element.store_float(element.dequantize_value(element.code_value(qs[c], nbits, signed), ss[g], z), like)


_DEQUANTIZE = column_frame(_per_element, _zp_views, _dequantize_item)


@cuda_kernel(_dequantize_signature, _FROM_CODES)
def dequantize_kernel(q, scale, zp, has_zp, nbits, signed, bp, br, bc, like, out):
    """Dequantize unsigned code storage ``q`` (P, R, C) into ``out`` (float storage like ``like``)."""
    _DEQUANTIZE(bp, br, bc, (q, scale, zp, has_zp, nbits, signed, like, out))


@cuda.jit(device=True, inline="always")
def _packed_in(args):
    """Walk the bytes of ``q`` (P, R, C / k): ``k = 8 // nbits`` codes per work item."""
    q = args[0]
    return q, np.uint64(q.shape[2]), np.uint64(8 // args[4])


@cuda.jit(device=True, inline="always")
def _dequantize_packed_item(args, views, j, k, g, off, bc):
    has_zp, nbits, signed, like = args[3:7]
    qs, ss, zs, os = views
    byte = np.int32(qs[j])
    for t in range(k):
        z = zs[g] if has_zp else np.float32(0)
        code = element.code_value(element.unpack_field(byte, t, nbits), nbits, signed)
        os[j * k + np.uint64(t)] = element.store_float(element.dequantize_value(code, ss[g], z), like)
        g, off = next_block(g, off, U0, U1, bc)


_DEQUANTIZE_PACKED = column_frame(_packed_in, _zp_views, _dequantize_packed_item)


@cuda_kernel(_dequantize_signature, _FROM_BYTES)
def dequantize_packed_kernel(q, scale, zp, has_zp, nbits, signed, bp, br, bc, like, out):
    """Dequantize packed bytes ``q`` (P, R, C / k) into ``out`` (P, R, C)."""
    _DEQUANTIZE_PACKED(bp, br, bc, (q, scale, zp, has_zp, nbits, signed, like, out))


@cuda.jit(device=True, inline="always")
def _quantize_float_item(args, views, c, k, g, off, bc):
    scale_op, fp, saturate = args[2:5]
    xs, ss, os = views
    os[c] = element.quantize_float_value(xs[c], ss[g], scale_op, fp, saturate)


_QUANTIZE_FLOAT = column_frame(_per_element, _scale_views, _quantize_float_item)


@cuda_kernel(_quantize_float_signature, _TO_BYTES)
def quantize_float_kernel(x, scale, scale_op, fp, saturate, bp, br, bc, out):
    """Encode ``x / scale`` (P, R, C) as floating-point codes ``out`` (P, R, C), one per byte."""
    _QUANTIZE_FLOAT(bp, br, bc, (x, scale, scale_op, fp, saturate, out))


@cuda.jit(device=True, inline="always")
def _float_group(fp):
    """``(bits, k, m)`` of a packed float format: ``k`` codes in ``m`` bytes (4-bit 2 in 1, 6-bit 4 in 3)."""
    bits = np.int64(fp[0] + fp[1] + 1)
    return bits, np.uint64(4) if bits == 6 else np.uint64(2), np.uint64(3) if bits == 6 else U1


@cuda.jit(device=True, inline="always")
def _float_groups(args):
    """Walk ``x`` (P, R, C) by packed groups of the bytes of ``out`` (the last argument), format ``args[3]``."""
    out = args[-1]
    _, k, m = _float_group(args[3])
    return args[0], np.uint64(out.shape[2]) // m, k


@cuda.jit(device=True, inline="always")
def _quantize_float_packed_item(args, views, j, k, g, off, bc):
    scale_op, fp, saturate = args[2:5]
    xs, ss, os = views
    bits, _, m = _float_group(fp)
    word = np.int64(0)
    for t in range(k):
        code = element.quantize_float_value(xs[j * k + np.uint64(t)], ss[g], scale_op, fp, saturate)
        word = element.pack_field(word, code, t, bits)
        g, off = next_block(g, off, U0, U1, bc)
    for b in range(m):
        os[j * m + np.uint64(b)] = element.unpack_field(word, b, 8)


_QUANTIZE_FLOAT_PACKED = column_frame(_float_groups, _scale_views, _quantize_float_packed_item)


@cuda_kernel(_quantize_float_signature, _TO_BYTES)
def quantize_float_packed_kernel(x, scale, scale_op, fp, saturate, bp, br, bc, out):
    """Encode ``x / scale`` (P, R, C) as packed float codes: 4-bit two per byte, 6-bit four in three bytes.

    One work item is one packed group; codes fill a little-endian bit stream, the first
    element in the lowest bits.
    """
    _QUANTIZE_FLOAT_PACKED(bp, br, bc, (x, scale, scale_op, fp, saturate, out))


@cuda.jit(device=True, inline="always")
def _dequantize_float_item(args, views, c, k, g, off, bc):
    fp, like = args[2], args[3]
    qs, ss, os = views
    os[c] = element.store_float(element.float_value(qs[c], ss[g], fp), like)


_DEQUANTIZE_FLOAT = column_frame(_per_element, _scale_views, _dequantize_float_item)


@cuda_kernel(_dequantize_float_signature, _FROM_BYTES)
def dequantize_float_kernel(q, scale, fp, bp, br, bc, like, out):
    """Decode floating-point codes ``q`` (P, R, C) times their scale into ``out``."""
    _DEQUANTIZE_FLOAT(bp, br, bc, (q, scale, fp, like, out))


@cuda.jit(device=True, inline="always")
def _float_groups_in(args):
    """Walk ``q`` (P, R, C / k) by its packed groups, format ``args[2]``."""
    q = args[0]
    _, k, m = _float_group(args[2])
    return q, np.uint64(q.shape[2]) // m, k


@cuda.jit(device=True, inline="always")
def _dequantize_float_packed_item(args, views, j, k, g, off, bc):
    fp, like = args[2], args[3]
    qs, ss, os = views
    bits, _, m = _float_group(fp)
    word = np.int64(0)
    for b in range(m):
        word = element.pack_field(word, qs[j * m + np.uint64(b)], b, 8)
    for t in range(k):
        value = element.float_value(element.unpack_field(word, t, bits), ss[g], fp)
        os[j * k + np.uint64(t)] = element.store_float(value, like)
        g, off = next_block(g, off, U0, U1, bc)


_DEQUANTIZE_FLOAT_PACKED = column_frame(_float_groups_in, _scale_views, _dequantize_float_packed_item)


@cuda_kernel(_dequantize_float_signature, _FROM_BYTES)
def dequantize_float_packed_kernel(q, scale, fp, bp, br, bc, like, out):
    """Decode packed float codes ``q`` (4-bit two per byte, 6-bit four in three bytes) into ``out`` (P, R, C)."""
    _DEQUANTIZE_FLOAT_PACKED(bp, br, bc, (q, scale, fp, like, out))


def _out_of(dtype) -> np.dtype:
    """The kernel-side output of a kernel-side input: float64 inputs give float32 results."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float64 else np.dtype(dtype)


_SAME_OUT = [(d, _out_of(d)) for d in INPUT_DTYPES]


@cuda.jit(device=True, inline="always")
def _amax_views(args, p, r, sp, sr):
    """``(x, amax, out, codes)`` rows (``codes[0, 0]`` when the codes are not stored)."""
    x, amax, out, store_codes, codes = args[0], args[1], args[8], args[9], args[10]
    return x[p, r], amax[sp, sr], out[p, r], codes[p, r] if store_codes else codes[0, 0]


@cuda.jit(device=True, inline="always")
def _fake_amax_item(args, views, c, k, g, off, bc):
    is_float, maxbound, qmin, qmax, fp, like, _, store_codes = args[2:10]
    xs, am, os, cs = views
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


_FAKE_AMAX = column_frame(_per_element, _amax_views, _fake_amax_item)


@cuda_kernel(lambda d, o: types.void(array_type(d, 3), _PARAM, B1, F32, F32, F32, FP_TUPLE, I64,
                                     I64, I64, scalar_type(o), array_type(o, 3), B1, _PARAM), _SAME_OUT)
def fake_amax_kernel(x, amax, is_float, maxbound, qmin, qmax, fp, bp, br, bc, like, out, store_codes, codes):
    """modelopt fake quant of ``x`` (P, R, C) with a block-grid ``amax`` (GP, GR, GC) into ``out``.

    Integer path ``element.amax_code(x, S) / S`` (codes to ``codes`` with ``store_codes``); float
    path ``element.scaled_minifloat_fake`` with the ``element.e4m3_scales`` of the block's amax.
    """
    _FAKE_AMAX(bp, br, bc, (x, amax, is_float, maxbound, qmin, qmax, fp, like, out, store_codes, codes))


@cuda.jit(device=True, inline="always")
def _ste_views(args, p, r, sp, sr):
    x, grad, lo, hi, _, out = args
    return grad[p, r], x[p, r], lo[sp, sr], hi[sp, sr], out[p, r]


@cuda.jit(device=True, inline="always")
def _ste_item(args, views, c, k, g, off, bc):
    gs, xs, ls, hs, os = views
    os[c] = element.store_float(element.ste_value(gs[c], xs[c], ls[g], hs[g]), args[4])


_STE = column_frame(_per_element, _ste_views, _ste_item)


@cuda_kernel(lambda g, xd, o: types.void(array_type(g, 3), array_type(xd, 3), _PARAM, _PARAM, I64, I64, I64,
                                         scalar_type(o), array_type(o, 3)),
             [(d, xd, _out_of(d)) for d in INPUT_DTYPES for xd in INPUT_DTYPES])
def ste_kernel(grad, x, lo, hi, bp, br, bc, like, out):
    """``out = grad where lo <= x <= hi else 0`` over (P, R, C) with block-grid bounds ``lo``/``hi``."""
    _STE(bp, br, bc, (x, grad, lo, hi, like, out))


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
