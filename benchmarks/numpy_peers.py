"""NumPy peers of the ratio benchmark (always available): ``make(problem)`` returns the call to time.

A factory raises (NotImplementedError) when NumPy has no counterpart of the case: the
row is then skipped.
"""

from __future__ import annotations

import numpy as np

import nbquant

from .problems import Bench, Problem, grid_shape

#: torchao 0.18's default ``eps`` (float32's smallest normal), as nbquant's.
_EPS = np.finfo(np.float32).smallest_normal


def _expand(p: Problem, a: np.ndarray) -> np.ndarray:
    """Block-grid values ``a`` (scales, zero points) broadcastable against the (rows, groups, group) view."""
    r, c = p.out.shape if p.codes is not None else p.src.shape
    br, bc = p.block
    return a.reshape(r // br, 1, c // bc, 1) if br > 1 else a.reshape(r, c // bc, 1)


def _expand_scale(p: Problem) -> np.ndarray:
    """Scales broadcastable against the (rows, groups, group) view of the input."""
    return _expand(p, p.scale)


def _expand_zero_point(p: Problem) -> np.ndarray | None:
    """float32 zero points as :func:`_expand_scale` (None without)."""
    return None if p.zero_point is None else _expand(p, p.zero_point.astype(np.float32))


def _block_view(a: np.ndarray, p: Problem) -> np.ndarray:
    """``a`` as (row blocks, rows, column blocks, columns), or (rows, groups, group) for one-row blocks."""
    r, c = a.shape
    br, bc = p.block
    return a.reshape(r // br, br, c // bc, bc) if br > 1 else a.reshape(r, c // bc, bc)


def _bits(p: Problem) -> int:
    """Bits per code of the problem's format; packed codes must be 4- or 2-bit integers here."""
    fmt = nbquant.get_format(p.kwargs["dtype"])
    if p.kwargs["packed"] and (fmt.bits not in (2, 4) or fmt.is_float):
        raise NotImplementedError("NumPy peers pack 4- and 2-bit integer codes only")
    return fmt.bits


def _pack_codes(q: np.ndarray, bits: int) -> np.ndarray:
    """``8 // bits`` codes per byte, the first column in the lowest bits (as nbquant)."""
    u = q.view(np.uint8)
    if bits == 4:
        return (u[:, 0::2] & np.uint8(15)) | (u[:, 1::2] << np.uint8(4))
    m = np.uint8(3)
    return ((u[:, 0::4] & m) | ((u[:, 1::4] & m) << np.uint8(2)) | ((u[:, 2::4] & m) << np.uint8(4))
            | (u[:, 3::4] << np.uint8(6)))


def _unpack_codes(q: np.ndarray, bits: int) -> np.ndarray:
    """Signed int8 codes of packed 4- or 2-bit codes (inverse of :func:`_pack_codes` for int4 and int2)."""
    if bits == 4:
        parts = [(q << np.uint8(4)).view(np.int8) >> np.int8(4), q.view(np.int8) >> np.int8(4)]
    else:
        parts = [(q << np.uint8(6 - 2 * i)).view(np.int8) >> np.int8(6) for i in range(4)]
    return np.stack(parts, axis=-1).reshape(q.shape[0], -1)


def numpy_quantize(p: Problem) -> Bench:
    """``clip(rint(x / s) + zp, qmin, qmax)`` in NumPy, packed with shifts for int4 and int2."""
    x, s, z, (lo, hi), packed = p.src, _expand_scale(p), _expand_zero_point(p), p.qrange, p.kwargs["packed"]
    bits, storage = _bits(p), np.uint8 if lo >= 0 else np.int8

    def run():
        v = np.rint(_block_view(x, p) / s)
        if z is not None:
            v += z
        q = np.clip(v, lo, hi).astype(storage).reshape(x.shape)
        return _pack_codes(q, bits) if packed else q

    return run


def numpy_quantize_out(p: Problem) -> Bench:
    """As :func:`numpy_quantize`, storing into the preallocated output."""
    run, out = numpy_quantize(p), p.out
    return lambda: np.copyto(out, run(), casting="unsafe")


def numpy_dequantize(p: Problem) -> Bench:
    """``(codes - zp) * s`` in NumPy (unpacking signed int4 and int2 first)."""
    q, s, z, packed, shape = p.src, _expand_scale(p), _expand_zero_point(p), p.kwargs["packed"], p.out.shape
    bits = _bits(p)
    if packed and p.qrange[0] >= 0:
        raise NotImplementedError("NumPy peers unpack signed codes only")

    def run():
        v = _block_view(_unpack_codes(q, bits) if packed else q, p)
        if z is not None:
            v = np.subtract(v, z, dtype=np.float32)
        return np.multiply(v, s, dtype=np.float32).reshape(shape)

    return run


def numpy_dequantize_out(p: Problem) -> Bench:
    """As :func:`numpy_dequantize`, with ``out=`` (unpacked codes, no zero point)."""
    if p.kwargs["packed"] or p.zero_point is not None:
        raise NotImplementedError("NumPy has no packed or zero-point dequantize into out=")
    q, s, out = p.src, _expand_scale(p), p.out
    return lambda: np.multiply(_block_view(q, p), s, out=_block_view(out, p), dtype=np.float32)


def numpy_fp8_quantize(p: Problem) -> Bench:
    """``clip(x / s, -max, max).astype(float8)`` with ml_dtypes (its cast gives NaN on overflow)."""
    x, s, (lo, hi) = p.src, p.scale.reshape(grid_shape(p)), p.qrange
    dt = nbquant.get_format(p.kwargs["dtype"]).dtype
    return lambda: np.clip(x / s, lo, hi).astype(dt)


def numpy_fp8_dequantize(p: Problem) -> Bench:
    """``q.astype(float32) * s`` with ml_dtypes."""
    q, s = p.src, p.scale.reshape(grid_shape(p))
    return lambda: np.multiply(q.astype(np.float32), s)


def numpy_quantize_dynamic(p: Problem) -> Bench:
    """torchao's ``choose_qparams_affine`` + ``quantize_affine`` in NumPy passes (float32, NEP 50).

    min/max per block (one-row blocks, or per tensor), scale (``amax / ((qmax - qmin) / 2)``
    symmetric, ``(max - min) / (qmax - qmin)`` asymmetric), zero point,
    ``clip(rint(x * (1 / s)) + zp)``, then packing for packed cases; returns (codes,
    scale, zero_point).
    """
    x, (lo, hi), (br, g) = p.src, p.qrange, p.block
    asym, packed, bits = p.kwargs["mapping"] == "asymmetric", p.kwargs["packed"], _bits(p)
    storage = np.uint8 if lo == 0 else np.int8
    r, c = x.shape
    if br == 1:  # blocks in one row: (rows, groups, group), reduced over the last axis
        shape, axes = (r, c // g, g), -1
    else:  # (row blocks, rows, column blocks, columns), reduced over the rows and columns of a block
        shape, axes = (r // br, br, c // g, g), (1, 3)

    def grid(a):
        return a[..., None] if br == 1 else a[:, None, :, None]

    def run():
        v = x.reshape(shape)
        mn, mx = np.minimum(v.min(axis=axes), np.float32(0)), np.maximum(v.max(axis=axes), np.float32(0))
        if asym:
            s = np.maximum((mx - mn) / np.float32(hi - lo), _EPS)
            zp = np.clip(lo - np.rint(mn / s), lo, hi)
        else:
            s = np.maximum(np.maximum(-mn, mx) / np.float32((hi - lo) / 2), _EPS)
            zp = np.full_like(s, int((hi + lo + 1) / 2))
        q = np.rint(v * grid(np.float32(1) / s)) + grid(zp)
        q = np.clip(q, lo, hi).astype(storage).reshape(x.shape)
        return (_pack_codes(q, bits) if packed else q), s, zp.astype(np.int32)

    return run


def numpy_absmax(p: Problem) -> Bench:
    """``np.abs(x).max()``."""
    x = p.src
    return lambda: np.abs(x).max()


def numpy_abs_histogram(p: Problem) -> Bench:
    """``np.histogram(|x|, bins, range=(0, max |x|))`` counts, the amax included.

    NumPy's bins are ``[edge_i, edge_i+1)`` of float32 ``linspace`` edges, not
    torch.histc's ``int(|x| * bins / max)``: values on or next to an edge may land
    one bin apart, which ``same`` shows as ``≠k``.
    """
    x, bins = p.src, p.kwargs["num_bins"]

    def run():
        a = np.abs(x)
        return np.histogram(a, bins, range=(0, a.max()))[0]

    return run
