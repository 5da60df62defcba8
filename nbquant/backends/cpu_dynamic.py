"""CPU kernels for dynamic quantization and the amax-based (modelopt) quantizers.

* :func:`dynamic_rows_kernel` is the fused one-pass kernel for blocks that lie
  inside one row (per-row, per-group, ONNX blocked along the last axis): it takes a
  row in L1-sized chunks of whole blocks, reduces each block (an int32 max over the
  float bits, or min/max over :func:`~nbquant.element.order_key` keys — both
  vectorize), computes the chunk's scales and zero points with
  :func:`~nbquant.element.affine_qparams` in one loop, then quantizes the chunk
  while it is still in L1.
* Other granularities (per-tensor, per-channel, 2-D blocks) take a reduction pass
  (:func:`block_reduce_kernel`, :func:`flat_reduce_kernel`), a small qparams pass
  over the block grid, then the static quantize kernels of :mod:`.cpu`.
* :func:`fake_amax_kernel` / :func:`fake_minifloat_kernel` fake-quantize from a
  block-grid amax (modelopt), :func:`ste_kernel` is their backward, and
  :func:`histogram_kernel` feeds the histogram calibrator.

All numerics live in :mod:`nbquant.element`.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from ..element import (
    SCALE_DIVIDE,
    SCALE_MULTIPLY,
    abs_bits,
    affine_qparams,
    amax_code,
    amax_scales,
    bits_f32,
    e4m3_scales,
    key_f32,
    load_f32,
    order_key,
    rint_f32,
    scaled_minifloat_fake,
    store_float,
)
from ..layout import canonical_dims
from . import cpu, cpu_blocks
from ._cache import stamp_cache_with_element_source
from ._views import ROW_TILE, kernel_float_view, output_float_like
from .cpu_blocks import absmax_bits

_KERNEL_OPTIONS = dict(parallel=True, cache=True, error_model="numpy", nogil=True)

#: Elements of a row the fused kernel reduces, then quantizes, while they are in L1 (whole blocks).
_CHUNK = 4096
#: Parallel units of the fused kernel per thread.
_UNITS_PER_THREAD = 4
_KEY_HI = np.int64(1 << 62)
MAPPING_MODELOPT = 3


@njit(inline="always")
def _minmax_keys(xs):
    """The smallest and largest :func:`order_key` of ``xs`` (not empty), in int32 accumulators (they vectorize)."""
    lo = np.int32(0x7FFFFFFF)
    hi = np.int32(-0x80000000)
    for i in range(xs.size):
        k = order_key(xs[i])
        lo = np.int32(min(lo, k))
        hi = np.int32(max(hi, k))
    return lo, hi


@njit(inline="always")
def block_qparams(lo, hi, use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound):
    """``(scale, zero_point)`` of a block from its reduced keys (min/max keys, or absmax bits in ``hi``)."""
    if use_minmax:
        mn = key_f32(lo)
        mx = key_f32(hi)
    else:
        mx = bits_f32(hi)
        mn = -mx
    if mapping == MAPPING_MODELOPT:
        return amax_scales(mx, maxbound)[1], np.float32(0.0)
    return affine_qparams(mn, mx, mapping, qmin, qmax, half_range, eps, zp_sym)


@njit(inline="always")
def _block_keys(xs, use_minmax):
    """The reduced keys of one block: its min/max :func:`order_key` keys, or ``(0, absmax bits)``."""
    if use_minmax:
        return _minmax_keys(xs)
    return np.int32(0), absmax_bits(xs)


@njit(inline="always")
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


@njit(**_KERNEL_OPTIONS)
def dynamic_rows_kernel(x, use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound, reciprocal, scale_op,
                        mask, nbits, packed, bc, chunk_blocks, units, out, scale, zp):
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
    for u in prange(units):
        lo = np.empty(chunk_blocks, np.int64)
        hi = np.empty(chunk_blocks, np.int64)
        ms = np.empty(chunk_blocks, np.float32)
        zs = np.empty(chunk_blocks, np.float32)
        # packed: a chunk's byte codes, packed in one loop over the chunk (per block, 16-byte loops do not vectorize)
        codes = np.empty((min(chunk_blocks * bc, C) + 3) // 4 * 4 if packed else 0, np.uint8)
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
                lo[b], hi[b] = _block_keys(xw[b], use_minmax)
            if cw < c1:
                lo[nw], hi[nw] = _block_keys(xt, use_minmax)
            ss = scale[r, b0:b1]
            zz = zp[r, b0:b1]
            if mapping == 0:  # one loop per mapping: no branches left inside, so it vectorizes
                _chunk_qparams(0, lo, hi, use_minmax, qmin, qmax, half_range, eps, zp_sym, maxbound, reciprocal, ss,
                               zz, ms, zs)
            elif mapping == 1:
                _chunk_qparams(1, lo, hi, use_minmax, qmin, qmax, half_range, eps, zp_sym, maxbound, reciprocal, ss,
                               zz, ms, zs)
            elif mapping == 2:
                _chunk_qparams(2, lo, hi, use_minmax, qmin, qmax, half_range, eps, zp_sym, maxbound, reciprocal, ss,
                               zz, ms, zs)
            else:
                _chunk_qparams(MAPPING_MODELOPT, lo, hi, use_minmax, qmin, qmax, half_range, eps, zp_sym, maxbound,
                               reciprocal, ss, zz, ms, zs)
            if packed:
                cws = codes[:nw * bc].reshape(nw, bc)
                for b in range(nw):
                    cpu.quantize_block(xw[b], cws[b], ms[b], zs[b], scale_op, False, qlo, qhi, mask)
                if cw < c1:
                    cpu.quantize_block(xt, codes[cw - c0:c1 - c0], ms[nw], zs[nw], scale_op, False, qlo, qhi, mask)
                cpu.pack_codes(words16, words32, out[r, c0 >> kshift:c1 >> kshift], nbits)
            else:
                ow = out[r, c0:cw].reshape(nw, bc)
                for b in range(nw):
                    cpu.quantize_block(xw[b], ow[b], ms[b], zs[b], scale_op, False, qlo, qhi, mask)
                if cw < c1:
                    cpu.quantize_block(xt, out[r, cw:c1], ms[nw], zs[nw], scale_op, False, qlo, qhi, mask)


@njit(**_KERNEL_OPTIONS)
def block_reduce_kernel(x, use_minmax, bp, br, bc, chunk, lo, hi):
    """Reduce ``x`` (P, R, C) over blocks (bp, br, bc) into key grids ``lo``/``hi`` (GP, GR, GC).

    ``use_minmax``: min/max :func:`order_key` keys; else the absmax bits into ``hi``.
    Work units own a block row and a chunk of ``chunk`` columns (a multiple of ``bc``).
    """
    P, R, C = x.shape
    GP, GR, GC = hi.shape
    nchunks = (C + chunk - 1) // chunk
    for unit in prange(GP * GR * nchunks):
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
                            key = order_key(xs[j])
                            los[j] = min(los[j], key)
                            his[j] = max(his[j], key)
                    else:
                        for j in range(xs.size):
                            his[j] = max(his[j], abs_bits(xs[j]))
                    continue
                for g in range(his.size):
                    blk = xs[g * bc:min(g * bc + bc, xs.size)]
                    if use_minmax:
                        a, b = _minmax_keys(blk)
                        los[g] = min(los[g], a)
                        his[g] = max(his[g], b)
                    else:
                        his[g] = max(his[g], absmax_bits(blk))


@njit(**_KERNEL_OPTIONS)
def flat_reduce_kernel(x, use_minmax, tile, lo, hi):
    """Per-tensor reduction of ``x`` (rows, n): partial keys per (row, tile) into ``lo``/``hi``."""
    rows, n = x.shape
    ntiles = (n + tile - 1) // tile
    for unit in prange(rows * ntiles):
        r = unit // ntiles
        c = (unit - r * ntiles) * tile
        xs = x[r, c:min(c + tile, n)]
        if use_minmax:
            lo[unit], hi[unit] = _minmax_keys(xs)
        else:
            hi[unit] = absmax_bits(xs)


@njit(**_KERNEL_OPTIONS)
def qparams_kernel(lo, hi, use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound, scale, zp):
    """``scale``/``zp`` (flat) from reduced keys ``lo``/``hi`` (flat)."""
    for i in prange(hi.size):
        s, z = block_qparams(lo[i], hi[i], use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound)
        scale[i] = s
        zp[i] = np.int32(z)


@njit(**_KERNEL_OPTIONS)
def fake_amax_kernel(x, amax, is_float, maxbound, qmin, qmax, fp, bp, br, bc, tile, like, out, store_codes, codes):
    """modelopt fake quant of ``x`` (P, R, C) with a block-grid ``amax`` (GP, GR, GC) into ``out``.

    Integer path: ``clamp(rne(x * S)) / S`` (:func:`~nbquant.element.amax_scales`); with
    ``store_codes`` the float32 code values go to ``codes`` (x's shape) too.
    Float path (``is_float``): ``decode(encode(clamp(x * S))) * fl(1 / S)`` with
    ``S = fl(fl(1 / amax) * maxbound)``.
    """
    P, R, C = x.shape
    ntiles = (C + tile - 1) // tile
    for unit in prange(P * R * ntiles):
        p, r, sp, sr, c, end = cpu._unit(unit, ntiles, tile, R, C, bp, br)
        g = c // bc
        while c < end:
            stop = min((g + 1) * bc, end)
            a = amax[sp, sr, g]
            xs, os = x[p, r, c:stop], out[p, r, c:stop]
            if is_float:
                s, inv = e4m3_scales(a, maxbound)
                for i in range(xs.size):
                    os[i] = store_float(scaled_minifloat_fake(xs[i], s, inv, maxbound, fp), like)
            else:
                sq, sdq = amax_scales(a, maxbound)
                if store_codes:
                    cs = codes[p, r, c:stop]
                    for i in range(xs.size):
                        q = amax_code(xs[i], sq, qmin, qmax)
                        cs[i] = q
                        os[i] = store_float(q / sdq, like)
                else:
                    for i in range(xs.size):
                        os[i] = store_float(amax_code(xs[i], sq, qmin, qmax) / sdq, like)
            c = stop
            g += 1


@njit(inline="always")
def rint_div(x, step):
    """``rne(x / step)`` in float32."""
    return rint_f32(load_f32(x) / np.float32(step))


@njit(inline="always")
def affine_fake_value(x, step, qz, lo, hi):
    """FakeAffine of one value: ``(clamp(rne(x / step) - qz, lo, hi) + qz) * step`` (NaN propagates)."""
    v = rint_div(x, step) - qz
    q = min(max(v, lo), hi)
    q = v if v != v else q
    return (q + qz) * step


@njit(inline="always")
def ste_value(g, x, lo, hi):
    """The straight-through gradient of one value: ``g`` where ``lo <= x <= hi`` (NaN x gives 0), else 0."""
    v = load_f32(x)
    return load_f32(g) if (v >= lo and v <= hi) else np.float32(0.0)


@njit(inline="always")
def histogram_bin(x, fn, top, nbins):
    """The bin of ``|x|`` over ``[0, top]`` in ``nbins`` bins (torch.histc's rule), or -1 (NaN, above ``top``).

    ``int(|x| * nbins / top)`` in float32, the right edge in the last bin. The quotient is
    selected before the int32 conversion, so NaN and values above ``top`` never reach it, and
    a loop of this function vectorizes (AVX2 has no packed float → int64 conversion).
    """
    v = abs(load_f32(x))
    q = (v * fn) / top if v <= top else np.float32(-1.0)
    return min(np.int32(q), np.int32(nbins - 1))


@njit(**_KERNEL_OPTIONS)
def fake_affine_kernel(x, step, qz, minb, maxb, tile, like, out):
    """Legacy FakeAffine: ``(clamp(rne(x / step) - qz, minb, maxb) + qz) * step`` over ``x`` (rows, n)."""
    rows, n = x.shape
    ntiles = (n + tile - 1) // tile
    lo = np.float32(minb)
    hi = np.float32(maxb)
    for unit in prange(rows * ntiles):
        r = unit // ntiles
        c = (unit - r * ntiles) * tile
        xs, os = x[r, c:min(c + tile, n)], out[r, c:min(c + tile, n)]
        for i in range(xs.size):
            os[i] = store_float(affine_fake_value(xs[i], step, qz, lo, hi), like)


@njit(**_KERNEL_OPTIONS)
def ste_kernel(grad, x, lo, hi, bp, br, bc, tile, like, out):
    """``out = grad where lo <= x <= hi else 0`` over (P, R, C) with block-grid bounds ``lo``/``hi``."""
    P, R, C = x.shape
    ntiles = (C + tile - 1) // tile
    for unit in prange(P * R * ntiles):
        p, r, sp, sr, c, end = cpu._unit(unit, ntiles, tile, R, C, bp, br)
        g = c // bc
        while c < end:
            stop = min((g + 1) * bc, end)
            a = lo[sp, sr, g]
            b = hi[sp, sr, g]
            xs, gs, os = x[p, r, c:stop], grad[p, r, c:stop], out[p, r, c:stop]
            for i in range(xs.size):
                os[i] = store_float(ste_value(gs[i], xs[i], a, b), like)
            c = stop
            g += 1


#: Elements whose bins :func:`histogram_kernel` computes in one vectorized loop before counting them.
_HIST_CHUNK = 2048
#: Count rows per work unit of :func:`histogram_kernel`; element ``i`` of a chunk increments row ``i % 4``.
HIST_LANES = 4


@njit(**_KERNEL_OPTIONS)
def histogram_kernel(x, nbins, top, counts):
    """Histogram of ``|x|`` (flat) over ``[0, top]`` in ``nbins`` bins (:func:`histogram_bin`).

    ``counts`` is (units * HIST_LANES, nbins + 1), zeroed: unit ``u`` counts its
    contiguous share of ``x`` into its own HIST_LANES rows, a chunk at a time: the
    chunk's bins in one vectorized loop (NaN and values above ``top`` to the spare
    last column), then the increments, spread over the rows so that a run of equal
    bins (zeros of a ReLU output) is not one serial chain of increments. The caller
    sums the rows and drops the spare column.
    """
    n = x.size
    units = counts.shape[0] // HIST_LANES
    fn = np.float32(nbins)
    t = np.float32(top)
    for u in prange(units):
        c0, c1, c2, c3 = (counts[HIST_LANES * u], counts[HIST_LANES * u + 1], counts[HIST_LANES * u + 2],
                          counts[HIST_LANES * u + 3])
        bins = np.empty(_HIST_CHUNK, np.int32)
        end = (u + 1) * n // units
        for c in range(u * n // units, end, _HIST_CHUNK):
            xs = x[c:min(c + _HIST_CHUNK, end)]
            m = xs.size
            for i in range(m):
                b = histogram_bin(xs[i], fn, t, nbins)
                bins[i] = b if b >= 0 else nbins
            whole = m - m % HIST_LANES
            for i in range(0, whole, HIST_LANES):
                c0[bins[i]] += 1
                c1[bins[i + 1]] += 1
                c2[bins[i + 2]] += 1
                c3[bins[i + 3]] += 1
            for i in range(whole, m):
                c0[bins[i]] += 1


_KERNELS = (dynamic_rows_kernel, block_reduce_kernel, flat_reduce_kernel, qparams_kernel, fake_amax_kernel,
            fake_affine_kernel, ste_kernel, histogram_kernel)
stamp_cache_with_element_source(_KERNELS, helpers=(cpu, cpu_blocks))


# --- host side -------------------------------------------------------------------------------------


def _rows_view(layout):
    """``(rows, C, bc)`` when every block lies inside one row of the last canonical dim, else None."""
    dims = canonical_dims(layout.shape, layout.block)
    if not dims:
        return None
    *outer, (C, bc) = dims
    if any(b != 1 for _, b in outer):
        return None
    return int(np.prod([n for n, _ in outer], dtype=np.int64)), C, bc


def _kernel_args(spec):
    return (spec.use_minmax, spec.mapping, np.float32(spec.qmin), np.float32(spec.qmax), np.float32(spec.half_range),
            np.float32(spec.eps), np.float32(spec.zp_sym), np.float32(spec.maxbound))


def _reduce_grid(x, spec):
    """Reduced keys ``(lo, hi)`` as flat arrays over the block grid (row-major)."""
    layout = spec.layout
    xk = kernel_float_view(x)
    if layout.num_blocks == 1:
        x2 = xk.reshape(-1, xk.shape[-1] if xk.ndim else 1)
        tile = min(max(x2.shape[1], 1), ROW_TILE)
        units = x2.shape[0] * ((x2.shape[1] + tile - 1) // tile)
        lo = np.full(units, 1 << 62, np.int64)
        hi = np.full(units, -(1 << 62) if spec.use_minmax else 0, np.int64)
        flat_reduce_kernel(x2, spec.use_minmax, tile, lo, hi)
        return np.array([lo.min()]), np.array([hi.max()])
    dims = canonical_dims(layout.shape, layout.block)
    if len(dims) > 3:  # rare: more than three unmergeable block dims; reduce with the NumPy oracle
        from .reference_dynamic import reduce_keys

        return reduce_keys(x, spec)
    dims = [(1, 1)] * (3 - len(dims)) + dims
    x3 = xk.reshape([n for n, _ in dims])
    grid = [-(-n // b) for n, b in dims]
    lo = np.empty(grid, np.int64)
    hi = np.empty(grid, np.int64)
    bc = dims[2][1]
    chunk = max(bc, (ROW_TILE // bc) * bc) if bc > 1 else ROW_TILE
    block_reduce_kernel(x3, spec.use_minmax, dims[0][1], dims[1][1], bc, chunk, lo, hi)
    return lo.reshape(-1), hi.reshape(-1)


def choose_qparams(x, spec, scale, zp) -> None:
    """Fill the flat block-grid ``scale`` (float32) and ``zp`` (int32)."""
    lo, hi = _reduce_grid(x, spec)
    qparams_kernel(lo, hi, *_kernel_args(spec), scale.reshape(-1), zp.reshape(-1))


def quantize_dynamic(x, spec, out, scale, zp) -> bool:
    """Fused one-pass dynamic quantize when the layout allows it; returns False if the caller must use two passes."""
    fmt = spec.format
    rv = _rows_view(spec.layout)
    if rv is None or spec.layout.num_blocks == 1:
        return False
    rows, C, bc = rv
    k = fmt.codes_per_byte if spec.packed else 1
    if spec.packed and bc % k and bc < C:
        return False
    x2 = kernel_float_view(x).reshape(rows, C)
    o2 = out.reshape(rows, C // k)
    s2 = scale.reshape(rows, -1)
    z2 = zp.reshape(rows, -1)
    op = SCALE_DIVIDE if spec.scale_op == SCALE_DIVIDE and not spec.reciprocal else SCALE_MULTIPLY
    chunk_blocks = max(1, _CHUNK // bc)
    items = rows * -(-s2.shape[1] // chunk_blocks)
    units = max(1, min(items, _UNITS_PER_THREAD * numba.get_num_threads()))
    dynamic_rows_kernel(x2, *_kernel_args(spec), spec.reciprocal, op, fmt.mask, fmt.bits, spec.packed, bc,
                        chunk_blocks, units, o2, s2, z2)
    return True


def fake_quant_amax(x, amax_grid, mspec, out, codes=None) -> None:
    """modelopt fake quant (integer or minifloat) with ``amax_grid`` over ``mspec.layout``."""
    from ..layout import canonical_views

    xk = kernel_float_view(x)
    ok = kernel_float_view(out)
    like = output_float_like(out.dtype)
    data = [xk, ok] + ([codes] if codes is not None else [])
    for views, (a3,), (bp, br, bc) in canonical_views(mspec.layout, data, [amax_grid], [1] * len(data)):
        x3, o3 = views[0], views[1]
        c3 = views[2] if codes is not None else np.zeros((1, 1, 1), np.float32)
        tile = min(max(x3.shape[2], 1), ROW_TILE)
        fake_amax_kernel(x3, a3, mspec.is_float, np.float32(mspec.maxbound), np.float32(mspec.qmin),
                         np.float32(mspec.qmax), mspec.fp, bp, br, bc, tile, like, o3, codes is not None, c3)


def fake_affine(x, step, qz, minb, maxb, out) -> None:
    xk = kernel_float_view(x).reshape(-1, x.shape[-1] if x.ndim else 1)
    ok = kernel_float_view(out).reshape(xk.shape)
    tile = min(max(xk.shape[1], 1), ROW_TILE)
    fake_affine_kernel(xk, np.float32(step), np.float32(qz), np.float32(minb), np.float32(maxb), tile,
                       output_float_like(out.dtype), ok)


def ste_backward(grad, x, lo_grid, hi_grid, layout, out) -> None:
    from ..layout import canonical_views

    data = [kernel_float_view(grad), kernel_float_view(x), kernel_float_view(out)]
    like = output_float_like(out.dtype)
    for (g3, x3, o3), (l3, h3), (bp, br, bc) in canonical_views(layout, data, [lo_grid, hi_grid], [1, 1, 1]):
        tile = min(max(x3.shape[2], 1), ROW_TILE)
        ste_kernel(g3, x3, l3, h3, bp, br, bc, tile, like, o3)


def abs_histogram(x, nbins: int, top) -> np.ndarray:
    """int64 counts of ``|x|`` in ``nbins`` bins over ``[0, top]``."""
    flat = kernel_float_view(x).reshape(-1)
    units = max(1, min(_UNITS_PER_THREAD * numba.get_num_threads(), -(-flat.size // _HIST_CHUNK)))
    counts = np.zeros((units * HIST_LANES, nbins + 1), np.int64)
    histogram_kernel(flat, nbins, np.float32(top), counts)
    return counts[:, :nbins].sum(axis=0)
