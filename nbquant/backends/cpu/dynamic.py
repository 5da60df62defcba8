"""CPU dynamic quantization: the fused one-pass kernel, the block reductions and the qparams pass.

* :func:`dynamic_rows_kernel` is the fused one-pass kernel for blocks that lie
  inside one row (per-row, per-group, ONNX blocked along the last axis): it takes a
  row in L1-sized chunks of whole blocks, reduces each block (an int32 max over the
  float bits, or min/max over :func:`~nbquant.element.range_keys` keys — both
  vectorize), computes the chunk's scales and zero points with
  :func:`~nbquant.element.block_qparams` in one loop, then quantizes the chunk
  while it is still in L1.
* Other granularities (per-tensor, per-channel, 2-D blocks) take a reduction pass
  (:func:`block_reduce_kernel`, :func:`flat_reduce_kernel`), a small qparams pass
  over the block grid, then the static quantize kernels of :mod:`.elementwise`.

All numerics live in :mod:`nbquant.element`.
"""

from __future__ import annotations

import numpy as np

from ...element import (
    abs_bits,
    absmax_bits,
    block_qparams,
    code_bits,
    element_function,
    minmax_keys,
    pack_byte_codes,
    quantize_value,
    range_keys,
)
from ...layout import canonical_dims, canonical_views
from ...modes import Mapping, ScaleOp
from ...threads import get_num_threads
from .._views import kernel_float_view
from ._codec import OP_NAMES, RUNTIME_OP
from ._kernel import ROW_TILE, CpuKernel, cpu_kernel, part_range, row_tile, template_kernel

#: Elements of a row the fused kernel reduces, then quantizes, while they are in L1 (whole blocks).
_CHUNK = 4096
#: Parallel units of the fused kernel per thread.
UNITS_PER_THREAD = 4
_KEY_HI = np.int64(1 << 62)


@element_function
def _block_keys(xs, use_minmax):
    """The reduced keys of one block: its min/max :func:`range_keys` keys, or ``(0, absmax bits)``."""
    if use_minmax:
        return minmax_keys(xs)
    return np.int32(0), absmax_bits(xs)


@element_function
def _chunk_qparams(mapping, lo, hi, use_minmax, qmin, qmax, half_range, eps, zp_sym, maxbound, reciprocal, ss, zz, ms,
                   zs):
    """Scales ``ss`` and zero points ``zz`` of a chunk's blocks from their keys ``lo``/``hi``.

    ``ms``/``zs`` get the float32 factor (``fl(1 / s)`` when ``reciprocal``) and zero point the codes use.
    """
    for b in range(ss.size):
        s, z = block_qparams(lo[b], hi[b], use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound)
        ss[b] = s
        zz[b] = np.int32(z)
        ms[b] = np.float32(1.0) / s if reciprocal else s
        zs[b] = z


@element_function
def _quantize_block(xs, os, s, z, op, scale_op, qmin, qmax, mask):
    """Codes of one block ``xs`` into ``os`` with scale op ``op`` (``scale_op`` if :data:`~._codec.RUNTIME_OP`)."""
    for i in range(xs.size):
        os[i] = code_bits(quantize_value(xs[i], s, z, scale_op if op == RUNTIME_OP else op, False, qmin, qmax), mask)


def dynamic_rows_kernel(mapping: Mapping, op: int, packed: bool) -> CpuKernel:
    """The fused dynamic quantize kernel of one mode, made on first use: a kernel per mapping, float32 scale op (or
    :data:`~._codec.RUNTIME_OP`) and packing, so that a first call compiles its mode's loops alone (a kernel that
    took every mode held twelve quantize loops).

    ``kernel(x, qmin, qmax, half_range, eps, zp_sym, maxbound, reciprocal, scale_op, mask, nbits, bc, chunk_blocks,
    units, out, scale, zp)`` quantizes ``x`` (rows, C) in blocks of ``bc`` along C: see :func:`_rows_template`.
    """
    name = f"dynamic_rows_{mapping.name.lower()}{OP_NAMES[op]}{'_packed' if packed else ''}_kernel"
    doc = (f"The fused dynamic quantize kernel of {mapping.name}, scale op {op}{', packed' if packed else ''} "
           "(:func:`dynamic_rows_kernel`).")
    return template_kernel(ROWS_KERNELS, name, _rows_template, doc, _MAPPING=int(mapping),
                           _MINMAX=mapping.uses_min_and_max, _OP=op, _PACKED=packed)


#: Every fused dynamic quantize kernel made so far, by name.
ROWS_KERNELS: dict[str, CpuKernel] = {}
# Placeholders: each kernel has its own (dynamic_rows_kernel's globals).
_MAPPING = _OP = 0
_MINMAX = _PACKED = False


def _rows_template(part, parts, x, qmin, qmax, half_range, eps, zp_sym, maxbound, reciprocal, scale_op, mask, nbits,
                   bc, chunk_blocks, units, out, scale, zp):
    """Fused dynamic quantize of ``x`` (rows, C) in blocks of ``bc`` along C.

    Writes ``scale`` and ``zp`` (rows, ceil(C / bc)) and the codes ``out`` (rows, C),
    or (rows, C / k) packed with ``k = 8 // nbits`` codes per byte (``bc % k == 0``
    or one block per row). ``reciprocal``: quantize with ``x * fl(1 / s)``.

    Work items are chunks of ``chunk_blocks`` blocks of one row, split over ``units``
    parallel units that reuse their scratch arrays. A chunk is reduced block by block,
    its qparams are computed in one loop over its blocks (vectorized divisions), then it
    is quantized while it is still in L1. Whole blocks are rows of a 2-D view (indexing
    one is cheaper than slicing it); only a row's last block can be partial.
    """
    rows, C = x.shape
    nblocks = (C + bc - 1) // bc
    whole = C // bc
    nchunks = (nblocks + chunk_blocks - 1) // chunk_blocks
    items = rows * nchunks
    kshift = 1 if nbits == 4 else 2  # packed: 8 // nbits codes per byte
    qlo = np.float32(qmin)
    qhi = np.float32(qmax)
    first, last = part_range(units, part, parts)
    for u in range(first, last):
        lo = np.empty(chunk_blocks, np.int64)
        hi = np.empty(chunk_blocks, np.int64)
        ms = np.empty(chunk_blocks, np.float32)
        zs = np.empty(chunk_blocks, np.float32)
        # packed: a chunk's byte codes, packed in one loop over the chunk (per block, 16-byte loops do not vectorize)
        codes = np.empty((min(chunk_blocks * bc, C) + 3) // 4 * 4 if _PACKED else 0, np.uint8)
        words16 = codes.view(np.uint16)
        words32 = codes.view(np.uint32)
        for item in range(u * items // units, (u + 1) * items // units):
            r = item // nchunks
            b0 = (item - r * nchunks) * chunk_blocks
            b1 = min(b0 + chunk_blocks, nblocks)
            nw = min(b1, whole) - b0  # whole blocks in the chunk
            c0 = b0 * bc
            cw = c0 + nw * bc
            c1 = min(b1 * bc, C)
            xw = x[r, c0:cw].reshape(nw, bc)
            xt = x[r, cw:c1]  # the row's partial last block, or empty
            for b in range(nw):
                lo[b], hi[b] = _block_keys(xw[b], _MINMAX)
            if cw < c1:
                lo[nw], hi[nw] = _block_keys(xt, _MINMAX)
            _chunk_qparams(_MAPPING, lo, hi, _MINMAX, qmin, qmax, half_range, eps, zp_sym, maxbound, reciprocal,
                           scale[r, b0:b1], zp[r, b0:b1], ms, zs)
            if _PACKED:
                ow, ot = codes[:nw * bc].reshape(nw, bc), codes[cw - c0:c1 - c0]
            else:
                ow, ot = out[r, c0:cw].reshape(nw, bc), out[r, cw:c1]
            for b in range(nw):
                _quantize_block(xw[b], ow[b], ms[b], zs[b], _OP, scale_op, qlo, qhi, mask)
            if cw < c1:
                _quantize_block(xt, ot, ms[nw], zs[nw], _OP, scale_op, qlo, qhi, mask)
            if _PACKED:
                pack_byte_codes(words16, words32, out[r, c0 >> kshift:c1 >> kshift], nbits)


@cpu_kernel
def block_reduce_kernel(part, parts, x, use_minmax, bp, br, bc, chunk, lo, hi):
    """Reduce ``x`` (P, R, C) over blocks (bp, br, bc) into key grids ``lo``/``hi`` (GP, GR, GC).

    ``use_minmax``: min/max :func:`range_keys` keys; else the absmax bits into ``hi``.
    Work units own a block row and a chunk of ``chunk`` columns (a multiple of ``bc``).
    """
    P, R, C = x.shape
    GP, GR, GC = hi.shape
    nchunks = (C + chunk - 1) // chunk
    first, last = part_range(GP * GR * nchunks, part, parts)
    for unit in range(first, last):
        g2 = unit // nchunks
        c0 = (unit - g2 * nchunks) * chunk
        c1 = min(c0 + chunk, C)
        sp = g2 // GR
        sr = g2 - sp * GR
        gb0 = c0 // bc
        gb1 = (c1 + bc - 1) // bc
        los = lo[sp, sr, gb0:gb1]
        his = hi[sp, sr, gb0:gb1]
        for g in range(his.size):
            los[g] = _KEY_HI
            his[g] = -_KEY_HI if use_minmax else 0
        for p in range(sp * bp, min(sp * bp + bp, P)):
            for r in range(sr * br, min(sr * br + br, R)):
                xs = x[p, r, c0:c1]
                if bc == 1:
                    if use_minmax:
                        for j in range(xs.size):
                            low, high = range_keys(xs[j])
                            los[j] = min(los[j], low)
                            his[j] = max(his[j], high)
                    else:
                        for j in range(xs.size):
                            his[j] = max(his[j], abs_bits(xs[j]))
                    continue
                for g in range(his.size):
                    blk = xs[g * bc:min(g * bc + bc, xs.size)]
                    if use_minmax:
                        a, b = minmax_keys(blk)
                        los[g] = min(los[g], a)
                        his[g] = max(his[g], b)
                    else:
                        his[g] = max(his[g], absmax_bits(blk))


@cpu_kernel
def flat_reduce_kernel(part, parts, x, use_minmax, tile, lo, hi):
    """Per-tensor reduction of ``x`` (rows, n): partial keys per (row, tile) into ``lo``/``hi``."""
    rows, n = x.shape
    ntiles = (n + tile - 1) // tile
    first, last = part_range(rows * ntiles, part, parts)
    for unit in range(first, last):
        r = unit // ntiles
        c = (unit - r * ntiles) * tile
        xs = x[r, c:min(c + tile, n)]
        if use_minmax:
            lo[unit], hi[unit] = minmax_keys(xs)
        else:
            hi[unit] = absmax_bits(xs)


@cpu_kernel
def qparams_kernel(part, parts, lo, hi, use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound, scale, zp):
    """``scale``/``zp`` (flat) from reduced keys ``lo``/``hi`` (flat)."""
    first, last = part_range(hi.size, part, parts)
    for i in range(first, last):
        s, z = block_qparams(lo[i], hi[i], use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound)
        scale[i] = s
        zp[i] = np.int32(z)


def _reduce_3d(x3, blocks: tuple[int, int, int], use_minmax: bool) -> tuple[np.ndarray, np.ndarray]:
    """Reduced keys ``(lo, hi)`` of the 3-D view ``x3`` over its block grid (arrays of the grid's shape)."""
    grid = [-(-n // b) for n, b in zip(x3.shape, blocks, strict=True)]
    lo = np.empty(grid, np.int64)
    hi = np.empty(grid, np.int64)
    bc = blocks[2]
    chunk = max(bc, (ROW_TILE // bc) * bc) if bc > 1 else ROW_TILE
    block_reduce_kernel(x3, use_minmax, blocks[0], blocks[1], bc, chunk, lo, hi)
    return lo, hi


class DynamicOps:
    """Dynamic quantization (:class:`~nbquant.backends.interface.Backend`)."""

    def reduce_keys(self, x, spec):
        """Reduced keys ``(lo, hi)`` as flat arrays over the block grid (row-major)."""
        layout = spec.layout
        xk = kernel_float_view(x)
        if layout.num_blocks == 1:
            x2 = xk.reshape(-1, xk.shape[-1] if xk.ndim else 1)
            tile = row_tile(x2.shape[1])
            units = x2.shape[0] * ((x2.shape[1] + tile - 1) // tile)
            lo = np.full(units, 1 << 62, np.int64)
            hi = np.full(units, -(1 << 62) if spec.use_minmax else 0, np.int64)
            flat_reduce_kernel(x2, spec.use_minmax, tile, lo, hi)
            return np.array([lo.min()]), np.array([hi.max()])
        dims = canonical_dims(layout.shape, layout.block)
        if len(dims) > 3:  # rare: more than three unmergeable block dims: a 3-D reduction per leading index, folded
            grid = [-(-n // b) for n, b in dims]
            lo = np.full(grid, 1 << 62, np.int64)
            hi = np.full(grid, -(1 << 62) if spec.use_minmax else 0, np.int64)
            for (x3,), (lo3, hi3), blocks in canonical_views(layout, [xk], [lo, hi], [1]):
                part_lo, part_hi = _reduce_3d(x3, blocks, spec.use_minmax)
                np.minimum(lo3, part_lo, out=lo3)
                np.maximum(hi3, part_hi, out=hi3)
            return lo.reshape(-1), hi.reshape(-1)
        dims = [(1, 1)] * (3 - len(dims)) + dims
        lo, hi = _reduce_3d(xk.reshape([n for n, _ in dims]), tuple(b for _, b in dims), spec.use_minmax)
        return lo.reshape(-1), hi.reshape(-1)

    def choose_qparams(self, x, spec, scale, zp) -> None:
        """Fill the flat block-grid ``scale`` (float32) and ``zp`` (int32): a reduction pass, then the qparams."""
        lo, hi = self.reduce_keys(x, spec)
        qparams_kernel(lo, hi, *spec.qparams_arguments(), scale.reshape(-1), zp.reshape(-1))

    def quantize_dynamic(self, x, spec, out, scale, zp) -> bool:
        """The fused one-pass dynamic quantize (called where ``spec.fused_rows()`` is not None)."""
        rows, C, bc, k = spec.fused_rows()
        fmt = spec.format
        x2 = kernel_float_view(x).reshape(rows, C)
        o2 = out.reshape(rows, C // k)
        s2 = scale.reshape(rows, -1)
        z2 = zp.reshape(rows, -1)
        chunk_blocks = max(1, _CHUNK // bc)
        items = rows * -(-s2.shape[1] // chunk_blocks)
        units = max(1, min(items, UNITS_PER_THREAD * get_num_threads()))
        scale_op = spec.kernel_scale_op
        op = int(scale_op) if scale_op in (ScaleOp.DIVIDE, ScaleOp.MULTIPLY) else RUNTIME_OP
        kernel = dynamic_rows_kernel(spec.mapping, op, spec.packed)
        kernel(x2, *spec.qparams_arguments()[2:], spec.reciprocal, int(scale_op), fmt.mask, fmt.bits, bc, chunk_blocks,
               units, o2, s2, z2)
        return True
