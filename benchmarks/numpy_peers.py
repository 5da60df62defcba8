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


def _expand_scale(p: Problem) -> np.ndarray:
    """Scales broadcastable against the (rows, groups, group) view of the input."""
    r, c = p.out.shape if p.codes is not None else p.src.shape
    br, bc = p.block
    return p.scale.reshape(r // br, 1, c // bc, 1) if br > 1 else p.scale.reshape(r, c // bc, 1)


def _block_view(a: np.ndarray, p: Problem) -> np.ndarray:
    """``a`` as (row blocks, rows, column blocks, columns), or (rows, groups, group) for one-row blocks."""
    r, c = a.shape
    br, bc = p.block
    return a.reshape(r // br, br, c // bc, bc) if br > 1 else a.reshape(r, c // bc, bc)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """Two 4-bit codes per byte, the even column in the low nibble (as nbquant)."""
    u = q.view(np.uint8)
    return (u[:, 0::2] & np.uint8(15)) | (u[:, 1::2] << np.uint8(4))


def _unpack_nibbles(q: np.ndarray) -> np.ndarray:
    """Signed int8 codes of packed nibbles (inverse of :func:`_pack_nibbles` for int4)."""
    lo = (q << np.uint8(4)).view(np.int8) >> np.int8(4)
    hi = q.view(np.int8) >> np.int8(4)
    return np.stack([lo, hi], axis=-1).reshape(q.shape[0], -1)


def numpy_quantize(p: Problem) -> Bench:
    """``clip(rint(x / s))`` in NumPy, packed with shifts for int4."""
    x, s, (lo, hi), packed = p.src, _expand_scale(p), p.qrange, p.kwargs["packed"]

    def run():
        q = np.clip(np.rint(_block_view(x, p) / s), lo, hi).astype(np.int8).reshape(x.shape)
        return _pack_nibbles(q) if packed else q

    return run


def numpy_quantize_out(p: Problem) -> Bench:
    """As :func:`numpy_quantize`, storing into the preallocated output."""
    run, out = numpy_quantize(p), p.out
    return lambda: np.copyto(out, run(), casting="unsafe")


def numpy_dequantize(p: Problem) -> Bench:
    """``codes * s`` in NumPy (unpacking int4 first)."""
    q, s, packed, shape = p.src, _expand_scale(p), p.kwargs["packed"], p.out.shape

    def run():
        codes = _unpack_nibbles(q) if packed else q
        return np.multiply(_block_view(codes, p), s, dtype=np.float32).reshape(shape)

    return run


def numpy_dequantize_out(p: Problem) -> Bench:
    """As :func:`numpy_dequantize`, with ``out=`` (int8 only)."""
    if p.kwargs["packed"]:
        raise NotImplementedError("NumPy has no packed dequantize into out=")
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

    min/max per block, scale (``amax / ((qmax - qmin) / 2)`` symmetric, ``(max - min) /
    (qmax - qmin)`` asymmetric), zero point, ``clip(rint(x * (1 / s)) + zp)``, then
    packing for packed cases; returns (codes, scale, zero_point).
    """
    x, (lo, hi), g = p.src, p.qrange, p.block[1]
    asym, packed = p.kwargs["mapping"] == "asymmetric", p.kwargs["packed"]
    storage = np.uint8 if lo == 0 else np.int8
    r, c = x.shape

    def run():
        v = x.reshape(r, c // g, g)
        mn, mx = np.minimum(v.min(axis=-1), np.float32(0)), np.maximum(v.max(axis=-1), np.float32(0))
        if asym:
            s = np.maximum((mx - mn) / np.float32(hi - lo), _EPS)
            zp = np.clip(lo - np.rint(mn / s), lo, hi)
        else:
            s = np.maximum(np.maximum(-mn, mx) / np.float32((hi - lo) / 2), _EPS)
            zp = np.full_like(s, int((hi + lo + 1) / 2))
        q = np.rint(v * (np.float32(1) / s)[..., None]) + zp[..., None]
        q = np.clip(q, lo, hi).astype(storage).reshape(x.shape)
        return (_pack_nibbles(q) if packed else q), s, zp.astype(np.int32)

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
