"""CUDA dynamic quantization: the fused ``quantize_dynamic`` kernel, block reductions and the qparams kernel.

* :func:`dynamic_rows_kernel`: fused, for blocks that lie inside one row (per-row, per-group,
  ONNX blocked along the last axis). A *team* of :func:`~.runtime.team_size` threads (a power
  of two, at most a warp) takes one block: the lanes reduce it with coalesced strided reads
  (min/max :func:`~nbquant.element.range_keys` keys or the absmax bits), combine their keys
  through shared memory (:func:`team_keys`), compute the scale and zero point
  (:func:`~nbquant.element.block_qparams`), then quantize the block (packed sub-byte codes low
  bits first), a byte or an element per lane at a time.
* :func:`block_reduce_kernel`: a team per block-grid cell of a canonical (P, R, C) view,
  reducing its (bp, br, bc) block to keys (the lanes stride along C).
* :func:`flat_reduce_kernel`: per-tensor keys: a grid-stride reduction per thread, a
  shared-memory tree per thread block, one ``atomic.min``/``atomic.max`` per block.
* :func:`qparams_kernel`: scale and zero point of every cell from its keys.

Team kernels walk a flat list of blocks (or cells), a team per item, in rounds that every
thread of a thread block takes together (the shared-memory combine has barriers). Indices
are unsigned 64-bit. All numerics are :mod:`nbquant.element` calls.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from ...element import abs_bits, block_qparams, code_bits, pack_field, quantize_value, range_keys
from ...layout import canonical_dims, canonical_views
from . import runtime
from ._loops import U0, U1, team_coords, team_item, team_keys, thread_start
from .runtime import (
    B1,
    CODE_DTYPES,
    F32,
    I64,
    INPUT_DTYPES,
    REDUCE_THREADS,
    TEAM_THREADS,
    array_type,
    cuda_kernel,
)

#: use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound: ``DynamicSpec.qparams_arguments()``.
_QPARAMS = (B1, I64, F32, F32, F32, F32, F32, F32)
_KEYS_1D = array_type(np.int64, 1)
KEY_HI = np.int64(1 << 62)
KEY_LO = np.int64(-(1 << 62))
_ZERO_KEY = np.int64(0)


def _rows_signature(data, codes):
    return types.void(array_type(data, 2), *_QPARAMS, B1, I64, I64, I64, B1, I64, I64, array_type(codes, 2),
                      array_type(np.float32, 2), array_type(np.int32, 2))


@cuda.jit(device=True, inline="always")
def fold_keys(xs, c, end, step, use_minmax, lo, hi):
    """``lo``/``hi`` folded with the keys of ``xs[c], xs[c + step], ...`` below ``end`` (min/max keys or absmax)."""
    if use_minmax:
        while c < end:
            low, high = range_keys(xs[c])
            lo = min(lo, low)
            hi = max(hi, high)
            c += step
    else:
        while c < end:
            hi = max(hi, abs_bits(xs[c]))
            c += step
    return lo, hi


@cuda_kernel(_rows_signature, [(d, c) for d in INPUT_DTYPES for c in CODE_DTYPES])
def dynamic_rows_kernel(x, use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound, reciprocal, scale_op,
                        mask, nbits, packed, bc, team, out, scale, zp):
    """Fused dynamic quantize of ``x`` (rows, C), blocks of ``bc``: ``scale``/``zp`` (rows, nblocks) and ``out``.

    A team of ``team`` threads per block; ``out`` holds (rows, C / k) bytes when ``packed``
    (``k = 8 // nbits`` codes per byte, whole bytes per block).
    """
    slo = cuda.shared.array(TEAM_THREADS, np.int64)
    shi = cuda.shared.array(TEAM_THREADS, np.int64)
    C = np.uint64(x.shape[1])
    nblocks = np.uint64(scale.shape[1])
    total = np.uint64(x.shape[0]) * nblocks
    ub = np.uint64(bc)
    ut = np.uint64(team)
    k = np.uint64(8 // nbits)
    tid, lane, first, teams = team_coords(ut)
    base = np.uint64(cuda.blockIdx.x) * teams
    while base < total:  # the same rounds for every thread of the block (barriers inside)
        row, b, active = team_item(base, tid, ut, total, nblocks)
        c0 = b * ub
        c1 = min(c0 + ub, C)
        xs = x[row]
        lo, hi = fold_keys(xs, c0 + lane, c1 if active else U0, ut, use_minmax, KEY_HI,
                            KEY_LO if use_minmax else _ZERO_KEY)
        lo, hi = team_keys(lo, hi, tid, first, ut, slo, shi)
        if active:
            s, z = block_qparams(lo, hi, use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound)
            if lane == U0:
                scale[row, b] = s
                zp[row, b] = np.int32(z)
            m = np.float32(1.0) / s if reciprocal else s
            os = out[row]
            if packed:
                j = c0 // k + lane
                while j * k < c1:
                    byte = np.int64(0)
                    for t in range(k):
                        code = code_bits(quantize_value(xs[j * k + np.uint64(t)], m, z, scale_op, False, qmin, qmax),
                                         mask)
                        byte = pack_field(byte, code, t, nbits)
                    os[j] = byte
                    j += ut
            else:
                c = c0 + lane
                while c < c1:
                    os[c] = code_bits(quantize_value(xs[c], m, z, scale_op, False, qmin, qmax), mask)
                    c += ut
        base += np.uint64(cuda.gridDim.x) * teams


@cuda_kernel(lambda d: types.void(array_type(d, 3), B1, I64, I64, I64, I64, array_type(np.int64, 3),
                                  array_type(np.int64, 3)), [(d,) for d in INPUT_DTYPES])
def block_reduce_kernel(x, use_minmax, bp, br, bc, team, lo, hi):
    """Reduce ``x`` (P, R, C) over blocks (bp, br, bc) into key grids ``lo``/``hi`` (GP, GR, GC), a team per cell."""
    slo = cuda.shared.array(TEAM_THREADS, np.int64)
    shi = cuda.shared.array(TEAM_THREADS, np.int64)
    P = np.uint64(x.shape[0])
    R = np.uint64(x.shape[1])
    C = np.uint64(x.shape[2])
    GR = np.uint64(hi.shape[1])
    GC = np.uint64(hi.shape[2])
    total = np.uint64(hi.shape[0]) * GR * GC
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    ut = np.uint64(team)
    tid, lane, first, teams = team_coords(ut)
    base = np.uint64(cuda.blockIdx.x) * teams
    while base < total:  # the same rounds for every thread of the block (barriers inside)
        rest, g, active = team_item(base, tid, ut, total, GC)
        sp = rest // GR
        sr = rest - sp * GR
        c0 = g * ubc
        c1 = min(c0 + ubc, C)
        a = KEY_HI
        b = KEY_LO if use_minmax else _ZERO_KEY
        p = sp * ubp if active else P
        p1 = min(sp * ubp + ubp, P)
        while p < p1:
            r = sr * ubr
            r1 = min(r + ubr, R)
            while r < r1:
                a, b = fold_keys(x[p, r], c0 + lane, c1, ut, use_minmax, a, b)
                r += U1
            p += U1
        a, b = team_keys(a, b, tid, first, ut, slo, shi)
        if active and lane == U0:
            lo[sp, sr, g] = a
            hi[sp, sr, g] = b
        base += np.uint64(cuda.gridDim.x) * teams


@cuda_kernel(lambda d: types.void(array_type(d, 1), B1, _KEYS_1D, _KEYS_1D), [(d,) for d in INPUT_DTYPES])
def flat_reduce_kernel(x, use_minmax, lo, hi):
    """``lo[0] = min(lo[0], min key)``, ``hi[0] = max(hi[0], max key (or absmax bits))`` over a 1-D ``x``."""
    slo = cuda.shared.array(REDUCE_THREADS, np.int64)
    shi = cuda.shared.array(REDUCE_THREADS, np.int64)
    n = np.uint64(x.shape[0])
    tid = cuda.threadIdx.x
    i, stride = thread_start()
    a, b = fold_keys(x, i, n, stride, use_minmax, KEY_HI, KEY_LO if use_minmax else _ZERO_KEY)
    slo[tid] = a
    shi[tid] = b
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if tid < half:
            slo[tid] = min(slo[tid], slo[tid + half])
            shi[tid] = max(shi[tid], shi[tid + half])
        cuda.syncthreads()
        half //= 2
    if tid == 0:
        cuda.atomic.min(lo, 0, slo[0])
        cuda.atomic.max(hi, 0, shi[0])


@cuda_kernel(lambda: types.void(_KEYS_1D, _KEYS_1D, *_QPARAMS, array_type(np.float32, 1), array_type(np.int32, 1)),
             [()])
def qparams_kernel(lo, hi, use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound, scale, zp):
    """``scale``/``zp`` (flat) from reduced keys ``lo``/``hi`` (flat)."""
    n = np.uint64(hi.shape[0])
    i, stride = thread_start()
    while i < n:
        s, z = block_qparams(lo[i], hi[i], use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound)
        scale[i] = s
        zp[i] = np.int32(z)
        i += stride


def _reduce_device(x, spec, stream):
    """Reduced keys ``(lo, hi)`` as flat device arrays over the block grid (row-major)."""
    layout = spec.layout
    xd = runtime.device_float(x, stream)
    if layout.num_blocks == 1:
        flat = xd.reshape(int(xd.size))
        lo = runtime.to_device(np.array([KEY_HI]), stream)
        hi = runtime.to_device(np.array([KEY_LO if spec.use_minmax else 0], np.int64), stream)
        blocks, threads = runtime.reduction_grid(int(flat.size))
        flat_reduce_kernel.launch(blocks, threads, stream, (flat, spec.use_minmax, lo, hi), flat.dtype)
        return lo, hi
    dims = canonical_dims(layout.shape, layout.block)
    if len(dims) > 3:  # rare: more than three unmergeable block dims: a 3-D reduction per leading index, folded
        grid = tuple(-(-n // b) for n, b in dims)
        lo = np.full(grid, KEY_HI)
        hi = np.full(grid, KEY_LO if spec.use_minmax else _ZERO_KEY)
        for (x3,), (lo3, hi3), blocks in canonical_views(layout, [xd], [lo, hi], [1]):
            part_lo, part_hi = _reduce_3d(x3, blocks, spec.use_minmax, stream)
            np.minimum(lo3, runtime.to_host(part_lo), out=lo3)
            np.maximum(hi3, runtime.to_host(part_hi), out=hi3)
        return runtime.to_device(lo.reshape(-1), stream), runtime.to_device(hi.reshape(-1), stream)
    dims = [(1, 1)] * (3 - len(dims)) + dims
    lo, hi = _reduce_3d(xd.reshape(tuple(n for n, _ in dims)), tuple(b for _, b in dims), spec.use_minmax, stream)
    return lo.reshape(lo.size), hi.reshape(hi.size)


def _reduce_3d(x3, blocks: tuple[int, int, int], use_minmax: bool, stream):
    """Reduced keys ``(lo, hi)`` of the 3-D device view ``x3`` over its block grid (device arrays of the grid)."""
    grid = tuple(-(-n // b) for n, b in zip(x3.shape, blocks, strict=True))
    lo = runtime.device_empty(grid, np.int64)
    hi = runtime.device_empty(grid, np.int64)
    team = runtime.team_size(blocks[2])
    cells, threads = runtime.team_grid(int(np.prod(grid)), team)
    block_reduce_kernel.launch(cells, threads, stream, (x3, use_minmax, *blocks, team, lo, hi), x3.dtype)
    return lo, hi


class DynamicOps:
    """Dynamic quantization (:class:`~nbquant.backends.interface.Backend`); NumPy or CUDA device arrays."""

    def reduce_keys(self, x, spec):
        """Reduced keys ``(lo, hi)`` as flat host arrays over the block grid."""
        stream = runtime.current_stream()
        lo, hi = _reduce_device(x, spec, stream)
        return runtime.to_host(lo), runtime.to_host(hi)

    def choose_qparams(self, x, spec, scale, zp) -> None:
        """Fill the flat block-grid ``scale`` (float32) and ``zp`` (int32): a reduction, then the qparams kernel."""
        stream = runtime.current_stream()
        lo, hi = _reduce_device(x, spec, stream)
        n = int(hi.size)
        ds, dz = runtime.result_on_device(scale, stream), runtime.result_on_device(zp, stream)
        (grid, _), threads = runtime.grid_for_rows(1, n)
        qparams_kernel.launch(grid, threads, stream, (lo, hi, *spec.qparams_arguments(), ds.reshape(n),
                                                      dz.reshape(n)))
        runtime.copy_back([(scale, ds), (zp, dz)], stream)

    def quantize_dynamic(self, x, spec, out, scale, zp) -> bool:
        """The fused one-pass dynamic quantize (called where ``spec.fused_rows()`` is not None)."""
        rows, C, bc, k = spec.fused_rows()
        fmt = spec.format
        stream = runtime.current_stream()
        x2 = runtime.device_float(x, stream).reshape((rows, C))
        do, ds, dz = (runtime.result_on_device(a, stream) for a in (out, scale, zp))
        nblocks = int(ds.size) // rows
        o2, s2, z2 = do.reshape((rows, C // k)), ds.reshape((rows, nblocks)), dz.reshape((rows, nblocks))
        team = runtime.team_size(bc)
        args = (x2, *spec.qparams_arguments(), bool(spec.reciprocal), int(spec.kernel_scale_op), int(fmt.mask),
                int(fmt.bits), bool(spec.packed), int(bc), team, o2, s2, z2)
        blocks, threads = runtime.team_grid(rows * nblocks, team)
        dynamic_rows_kernel.launch(blocks, threads, stream, args, x2.dtype, o2.dtype)
        runtime.copy_back([(out, do), (scale, ds), (zp, dz)], stream)
        return True
