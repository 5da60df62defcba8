"""The reference backend: plain NumPy, written to be obviously correct.

It works on the per-dimension :class:`~nbquant.layout.BlockLayout` directly (every
scale is expanded to the input's shape by repeating it ``block[d]`` times along each
dimension), not on the canonical layout the compiled backends use, so the two
share no indexing code. Tests use it as the oracle.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..layout import BlockLayout
from ..spec import SCALE_MULTIPLY

name = "reference"


def _expand(grid_param: np.ndarray, layout: BlockLayout) -> np.ndarray:
    """Repeat a block-grid array to the full input shape."""
    full = grid_param
    for d, (n, b) in enumerate(zip(layout.shape, layout.block, strict=True)):
        full = np.repeat(full, b, axis=d)[(slice(None),) * d + (slice(0, n),)]
    return full


_PACK_GROUPS = {2: (4, 1), 4: (2, 1), 6: (4, 3)}  # bits -> (codes, bytes), a little-endian bit stream


def _unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    codes, nbytes = _PACK_GROUPS[bits]
    groups = packed.reshape(packed.shape[:-1] + (packed.shape[-1] // nbytes, nbytes)).astype(np.uint32)
    words = np.bitwise_or.reduce(groups << (np.arange(nbytes, dtype=np.uint32) * 8), axis=-1)
    fields = (words[..., None] >> (np.arange(codes, dtype=np.uint32) * bits)) & np.uint32((1 << bits) - 1)
    return fields.astype(np.uint8).reshape(packed.shape[:-1] + (-1,))


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    ncodes, nbytes = _PACK_GROUPS[bits]
    groups = codes.reshape(codes.shape[:-1] + (codes.shape[-1] // ncodes, ncodes)).astype(np.uint32)
    words = np.bitwise_or.reduce(groups << (np.arange(ncodes, dtype=np.uint32) * bits), axis=-1)
    out = (words[..., None] >> (np.arange(nbytes, dtype=np.uint32) * 8)) & np.uint32(0xFF)
    return out.astype(np.uint8).reshape(codes.shape[:-1] + (-1,))


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


# --- scaled block formats (OCP MX, NVFP4) -------------------------------------------------------


def _blocks(a: np.ndarray, block: int) -> np.ndarray:
    return a.reshape(a.shape[0], a.shape[1] // block, block)


def _block_amax(x: np.ndarray, block: int) -> np.ndarray:
    return np.max(np.abs(_blocks(np.asarray(x, np.float32), block)), axis=-1)


def _saturating_cast(v: np.ndarray, dtype) -> np.ndarray:
    top = np.float32(float(ml_dtypes.finfo(dtype).max))
    with np.errstate(invalid="ignore"):
        return np.clip(v, -top, top).astype(dtype).view(np.uint8)


def mx_quantize(x, spec, codes, scales) -> None:
    """OCP MX: scale ``2**(floor(log2 amax) - emax)`` (or rounded up), elements saturated."""
    fmt, block = spec.element, spec.block_size
    amax = _block_amax(x, block).astype(np.float64)
    mantissa, exponent = np.frexp(amax)  # amax = mantissa * 2**exponent, mantissa in [0.5, 1)
    code = exponent - 1 - spec.emax + 127  # biased E8M0 exponent
    if spec.round_up:
        code = code + (2 * mantissa > spec.max_value / 2.0 ** spec.emax)
    code = np.where(amax == 0, 0, np.clip(code, 0, 254))
    code = np.where(np.isfinite(amax), code, 255)
    scales[...] = code
    inv_exp = np.where(code == 255, 0, 127 - code)
    with np.errstate(over="ignore"):  # only unscaled NaN/inf blocks can overflow
        v = np.ldexp(_blocks(np.asarray(x, np.float32), block), inv_exp[..., None].astype(np.int32))
        v = v.astype(np.float32).reshape(codes.shape[0], -1)
    if fmt.is_float:
        elements = _saturating_cast(v, fmt.dtype)
    else:
        r = np.rint(np.where(np.isnan(v), np.float32(0), v) * np.float32(64))
        elements = np.clip(r, -127, 127).astype(np.int8).view(np.uint8)
    codes[...] = _pack(elements, 4) if spec.packed else elements


@np.errstate(over="ignore")  # a float16 output may overflow to inf, as the kernels' RNE store does
def mx_dequantize(codes, scales, spec, out) -> None:
    """``element * 2**(scale - 127)`` (NaN for the scale code 0xff)."""
    fmt, block = spec.element, spec.block_size
    elements = _unpack(codes, 4) if spec.packed else codes
    if fmt.is_float:
        values = elements.view(fmt.dtype).astype(np.float32)
    else:
        values = elements.view(np.int8).astype(np.float32) * np.float32(0.015625)
    scale = scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    out[...] = (_blocks(values, block) * scale[..., None]).reshape(out.shape).astype(spec.out_dtype)


def nvfp4_quantize(x, spec, codes, scales) -> None:
    """modelopt NVFP4: e4m3 block scales ``amax / (6 * global)``, e2m1 elements ``x / (scale * global)``."""
    block, g = spec.block_size, np.float32(spec.global_scale)
    amax = _block_amax(x, block)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = amax / (np.float32(6) * g)
    s = np.where(s == 0, np.float32(1), s)
    s = np.where(np.isnan(s), s, np.maximum(s, np.float32(2.0 ** -9)))
    scale_codes = _saturating_cast(s, ml_dtypes.float8_e4m3fn)
    scales[...] = scale_codes
    denom = scale_codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * g
    with np.errstate(invalid="ignore", divide="ignore"):
        v = (_blocks(np.asarray(x, np.float32), block) / denom[..., None]).reshape(x.shape[0], -1)
    codes[...] = _pack(_saturating_cast(v, ml_dtypes.float4_e2m1fn), 4)


@np.errstate(over="ignore")
def nvfp4_dequantize(codes, scales, spec, out) -> None:
    """``e2m1 * (e4m3 scale * global)``."""
    block, g = spec.block_size, np.float32(spec.global_scale)
    values = _unpack(codes, 4).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    scale = scales.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * g
    out[...] = (_blocks(values, block) * scale[..., None]).reshape(out.shape).astype(spec.out_dtype)


#: modelopt's NF4 table (bfloat16 values).
_NF4 = np.array([-1.0, -0.6962, -0.5251, -0.3949, -0.2844, -0.1848, -0.0911, 0.0, 0.0796, 0.1609, 0.2461, 0.3379,
                 0.4407, 0.5626, 0.7230, 1.0]).astype(ml_dtypes.bfloat16).astype(np.float32)


@np.errstate(invalid="ignore", divide="ignore")
def nf4_quantize(x, spec, codes, scales) -> None:
    """NF4: ``argmin |x / amax - table|`` per element, packed high nibble first; amax per block."""
    blocks = _blocks(np.asarray(x, np.float32), spec.block_size)
    amax = np.max(np.abs(blocks), axis=-1)
    scales[...] = amax
    index = np.argmin(np.abs((blocks / amax[..., None])[..., None] - _NF4), axis=-1).astype(np.uint8)
    index = index.reshape(codes.shape[0], -1)
    codes[...] = (index[:, 0::2] << 4) | index[:, 1::2]


@np.errstate(over="ignore", invalid="ignore")
def nf4_dequantize(codes, scales, spec, out) -> None:
    index = np.stack([codes >> 4, codes & 15], axis=-1).reshape(codes.shape[0], -1)
    values = _blocks(_NF4[index], spec.block_size) * scales[..., None].astype(np.float32)
    out[...] = values.reshape(out.shape).astype(spec.out_dtype)


def amax(x) -> float:
    """``max |x|`` as float32 (NaN if any element is NaN)."""
    return np.float32(np.max(np.abs(np.asarray(x, np.float32)))) if np.size(x) else np.float32(0)
