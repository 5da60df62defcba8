"""The reference backend: plain NumPy, written to be obviously correct.

It works on the per-dimension :class:`~nbquant.layout.BlockLayout` directly (every
scale is expanded to the input's shape by repeating it ``block[d]`` times along each
dimension), not on the canonical layout the compiled backends use, so the two
share no indexing code. Tests use it as the oracle.
"""

from __future__ import annotations

import numpy as np

from ..layout import BlockLayout
from ..spec import SCALE_MULTIPLY

name = "reference"


def _expand(grid_param: np.ndarray, layout: BlockLayout) -> np.ndarray:
    """Repeat a block-grid array to the full input shape."""
    full = grid_param
    for d, (n, b) in enumerate(zip(layout.shape, layout.block)):
        full = np.repeat(full, b, axis=d)[(slice(None),) * d + (slice(0, n),)]
    return full


def _unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    k = 8 // bits
    shifts = (np.arange(k, dtype=np.uint8) * bits).astype(np.uint8)
    codes = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return codes.reshape(packed.shape[:-1] + (packed.shape[-1] * k,))


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    k = 8 // bits
    groups = codes.astype(np.uint8).reshape(codes.shape[:-1] + (codes.shape[-1] // k, k))
    shifts = (np.arange(k, dtype=np.uint8) * bits).astype(np.uint8)
    return np.bitwise_or.reduce(groups << shifts, axis=-1).astype(np.uint8)


@np.errstate(over="ignore")  # x / s and float64 -> float32 may overflow to inf, which then clamps
def _float_codes(v: np.ndarray, spec) -> np.ndarray:
    """ml_dtypes' cast of ``v`` (clipped to the largest finite value when saturating), as uint8 codes."""
    fmt = spec.format
    if spec.saturate:
        v = np.clip(v, np.float32(-fmt.max_value), np.float32(fmt.max_value))
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(fmt.dtype).view(np.uint8) & np.uint8(fmt.mask)


@np.errstate(over="ignore")  # x / s and float64 -> float32 may overflow to inf, which then clamps
def quantize(x, scale, zero_point, spec, out) -> None:
    """Fill ``out`` (the format's unsigned storage, packed or not) with codes of ``x``."""
    fmt, layout = spec.format, spec.layout
    v = np.asarray(x, dtype=np.float32)
    s = _expand(scale, layout)
    v = v * s if spec.scale_op == SCALE_MULTIPLY else v / s
    if fmt.is_float:
        codes = _float_codes(v, spec)
        out[...] = _pack(codes, fmt.bits) if spec.packed else codes
        return
    v = np.where(np.isnan(v), np.float32(0), v)
    z = _expand(zero_point, layout) if zero_point is not None else np.float32(0)
    r = np.rint(v + z) if spec.zero_point_before else np.rint(v) + z
    code = np.clip(r, np.float32(spec.qmin), np.float32(spec.qmax)).astype(np.int32)
    bits = code & np.int32(fmt.mask)
    out[...] = _pack(bits, fmt.bits) if spec.packed else bits


@np.errstate(over="ignore")  # float16 results may overflow to inf
def dequantize(q, scale, zero_point, spec, out) -> None:
    """Fill ``out`` with ``(code - zero_point) * scale`` in the output float dtype."""
    fmt, layout = spec.format, spec.layout
    if fmt.is_float:
        codes = _unpack(q, fmt.bits) if spec.packed else q
        values = codes.view(fmt.dtype).astype(np.float32) * _expand(scale, layout)
        out[...] = values.astype(spec.out_dtype)
        return
    bits = _unpack(q, fmt.bits) if spec.packed else q.astype(np.int32)
    code = bits.astype(np.int32) & np.int32(fmt.mask)
    if fmt.signed:
        code = np.where(code > fmt.qmax, code - (1 << fmt.bits), code)
    z = _expand(zero_point, layout) if zero_point is not None else np.float32(0)
    v = (code.astype(np.float32) - z) * _expand(scale, layout)
    out[...] = v.astype(spec.out_dtype)
