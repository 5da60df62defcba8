"""CPU kernels for the scaled block formats (OCP MX, NVFP4): one fused pass per block.

Each work unit reads a block, reduces its ``amax`` over the float bits (an integer
max, which vectorizes where a float max with NaN semantics does not), writes the
block's scale, then encodes and writes the block's codes. Numerics live in
:mod:`nbquant.element`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..element import (
    NF4_VALUES,
    SCALE_MULTIPLY,
    abs_bits,
    bits_f32,
    code_bits,
    code_value,
    decode_e8m0,
    decode_minifloat,
    encode_minifloat,
    load_f32,
    mx_inverse_scale,
    mx_scale_code,
    nf4_code,
    quantize_value,
    store_float,
)
from ._cache import stamp_cache_with_element_source
from ._views import ROW_TILE, kernel_float_view, output_float_like

_KERNEL_OPTIONS = dict(parallel=True, cache=True, error_model="numpy", nogil=True)

#: float8_e4m3fn encoding tuple (see ``QuantFormat.fp_params``), for NVFP4 block scales.
_E4M3 = (4, 3, 0x7E, 0x7F, 0x7F, 0, 1)
#: float4_e2m1fn encoding tuple, for NVFP4 elements.
_E2M1 = (2, 1, 0x7, 0x7, 0, 1, 0)


@njit(inline="always")
def _block_range(unit, ntiles, tile, nblocks):
    """Row and block range ``[b0, b1)`` of one work unit."""
    row = unit // ntiles
    b0 = (unit - row * ntiles) * tile
    return row, b0, min(b0 + tile, nblocks)


@njit(inline="always")
def absmax_bits(xs):
    """The largest :func:`~nbquant.element.abs_bits` of ``xs`` (0 when empty).

    The accumulator stays int32 so the loop vectorizes 8 lanes wide (an int64 one gets 4).
    """
    amax = np.int32(0)
    for i in range(xs.size):
        amax = np.int32(max(amax, abs_bits(xs[i])))
    return amax


@njit(inline="always")
def _mx_int8(v):
    """MXINT8 element: ``v * 64`` rounded half to even, clamped to ±127 (storage bits)."""
    return code_bits(quantize_value(v, np.float32(64.0), np.float32(0.0), SCALE_MULTIPLY, False,
                                    np.float32(-127.0), np.float32(127.0)), 0xFF)


@njit(**_KERNEL_OPTIONS)
def mx_quantize_kernel(x, block, emax, max_mantissa, round_up, fp, is_int, packed, tile, codes, scales):
    """Quantize rows of ``x`` (rows, n) in blocks of ``block``: E8M0 ``scales`` (rows, n / block) and ``codes``.

    ``codes`` is (rows, n), or (rows, n / 2) with 4-bit codes packed low nibble first.
    """
    rows, n = x.shape
    nblocks = n // block
    ntiles = (nblocks + tile - 1) // tile
    for unit in prange(rows * ntiles):
        r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
        for b in range(b0, b1):
            xs = x[r, b * block:(b + 1) * block]
            code = mx_scale_code(absmax_bits(xs), emax, max_mantissa, round_up)
            scales[r, b] = code
            inv = mx_inverse_scale(code)
            if packed:
                os = codes[r, b * block // 2:(b + 1) * block // 2]
                for j in range(os.size):
                    c0 = encode_minifloat(load_f32(xs[2 * j]) * inv, fp[0], fp[1], fp[2], fp[3], fp[4], fp[5], True)
                    c1 = encode_minifloat(load_f32(xs[2 * j + 1]) * inv, fp[0], fp[1], fp[2], fp[3], fp[4], fp[5],
                                          True)
                    os[j] = (c0 & 15) | ((c1 & 15) << 4)
            elif is_int:
                os = codes[r, b * block:(b + 1) * block]
                for i in range(os.size):
                    os[i] = _mx_int8(load_f32(xs[i]) * inv)
            else:
                os = codes[r, b * block:(b + 1) * block]
                for i in range(os.size):
                    os[i] = encode_minifloat(load_f32(xs[i]) * inv, fp[0], fp[1], fp[2], fp[3], fp[4], fp[5], True)


@njit(**_KERNEL_OPTIONS)
def mx_dequantize_kernel(codes, scales, block, fp, is_int, packed, tile, like, out):
    """Dequantize MX ``codes`` with E8M0 ``scales`` into ``out`` (rows, n): ``element * 2**(scale - 127)``."""
    rows, n = out.shape
    nblocks = n // block
    ntiles = (nblocks + tile - 1) // tile
    for unit in prange(rows * ntiles):
        r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
        for b in range(b0, b1):
            s = decode_e8m0(scales[r, b])
            os = out[r, b * block:(b + 1) * block]
            if packed:
                qs = codes[r, b * block // 2:(b + 1) * block // 2]
                for j in range(qs.size):
                    os[2 * j] = store_float(decode_minifloat(qs[j] & 15, fp[0], fp[1], fp[6]) * s, like)
                    os[2 * j + 1] = store_float(decode_minifloat(qs[j] >> 4, fp[0], fp[1], fp[6]) * s, like)
            elif is_int:
                qs = codes[r, b * block:(b + 1) * block]
                for i in range(qs.size):
                    os[i] = store_float(code_value(qs[i], 8, True) * np.float32(0.015625) * s, like)
            else:
                qs = codes[r, b * block:(b + 1) * block]
                for i in range(qs.size):
                    os[i] = store_float(decode_minifloat(qs[i], fp[0], fp[1], fp[6]) * s, like)


@njit(inline="always")
def nvfp4_block_scale(amax, six_global):
    """modelopt's NVFP4 block scale code: ``e4m3(max(amax / (6 * global), 2**-9))``, 0 read as 1, NaN kept."""
    s = amax / six_global
    s = np.float32(1.0) if s == 0 else s
    s = s if s != s else max(s, np.float32(0.001953125))
    return encode_minifloat(s, _E4M3[0], _E4M3[1], _E4M3[2], _E4M3[3], _E4M3[4], _E4M3[5], True)


@njit(**_KERNEL_OPTIONS)
def nvfp4_quantize_kernel(x, block, global_scale, six_global, tile, codes, scales):
    """NVFP4: e2m1 codes packed two per byte ``codes`` (rows, n / 2), e4m3 block ``scales`` (rows, n / block).

    Elements are ``e2m1(x / (e4m3_scale * global_scale))``, saturating at 6.
    """
    rows, n = x.shape
    nblocks = n // block
    ntiles = (nblocks + tile - 1) // tile
    for unit in prange(rows * ntiles):
        r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
        for b in range(b0, b1):
            xs = x[r, b * block:(b + 1) * block]
            code = nvfp4_block_scale(bits_f32(absmax_bits(xs)), six_global)
            scales[r, b] = code
            denom = decode_minifloat(code, _E4M3[0], _E4M3[1], _E4M3[6]) * global_scale
            os = codes[r, b * block // 2:(b + 1) * block // 2]
            for j in range(os.size):
                c0 = encode_minifloat(load_f32(xs[2 * j]) / denom, 2, 1, 0x7, 0x7, 0, 1, True)
                c1 = encode_minifloat(load_f32(xs[2 * j + 1]) / denom, 2, 1, 0x7, 0x7, 0, 1, True)
                os[j] = (c0 & 15) | ((c1 & 15) << 4)


@njit(**_KERNEL_OPTIONS)
def nvfp4_dequantize_kernel(codes, scales, block, global_scale, tile, like, out):
    """NVFP4 dequantize: ``e2m1 * (e4m3_scale * global_scale)`` into ``out`` (rows, n)."""
    rows, n = out.shape
    nblocks = n // block
    ntiles = (nblocks + tile - 1) // tile
    for unit in prange(rows * ntiles):
        r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
        for b in range(b0, b1):
            s = decode_minifloat(scales[r, b], _E4M3[0], _E4M3[1], _E4M3[6]) * global_scale
            qs = codes[r, b * block // 2:(b + 1) * block // 2]
            os = out[r, b * block:(b + 1) * block]
            for j in range(qs.size):
                os[2 * j] = store_float(decode_minifloat(qs[j] & 15, 2, 1, 0) * s, like)
                os[2 * j + 1] = store_float(decode_minifloat(qs[j] >> 4, 2, 1, 0) * s, like)


@njit(**_KERNEL_OPTIONS)
def amax_bits_kernel(x, tile):
    """Bits of ``max |x|`` over a 2-D array (NaN bits win over every number)."""
    rows, n = x.shape
    ntiles = (n + tile - 1) // tile
    partial = np.zeros(rows * ntiles, np.int64)
    for unit in prange(rows * ntiles):
        r = unit // ntiles
        c = (unit - r * ntiles) * tile
        partial[unit] = absmax_bits(x[r, c:min(c + tile, n)])
    return partial.max()


@njit(**_KERNEL_OPTIONS)
def nf4_quantize_kernel(x, block, tile, codes, scales):
    """NF4: per-block ``amax`` into ``scales`` (rows, n / block) and table indices of ``x / amax`` packed two per
    byte into ``codes`` (rows, n / 2), the first element in the HIGH nibble (modelopt's layout)."""
    rows, n = x.shape
    nblocks = n // block
    ntiles = (nblocks + tile - 1) // tile
    for unit in prange(rows * ntiles):
        r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
        for b in range(b0, b1):
            xs = x[r, b * block:(b + 1) * block]
            amax = bits_f32(absmax_bits(xs))
            scales[r, b] = amax
            os = codes[r, b * block // 2:(b + 1) * block // 2]
            for j in range(os.size):
                os[j] = (nf4_code(load_f32(xs[2 * j]) / amax) << 4) | nf4_code(load_f32(xs[2 * j + 1]) / amax)


@njit(**_KERNEL_OPTIONS)
def nf4_dequantize_kernel(codes, scales, block, tile, like, out):
    """NF4 dequantize: ``table[code] * scale`` per block into ``out`` (rows, n)."""
    rows, n = out.shape
    nblocks = n // block
    ntiles = (nblocks + tile - 1) // tile
    for unit in prange(rows * ntiles):
        r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
        for b in range(b0, b1):
            s = np.float32(scales[r, b])
            qs = codes[r, b * block // 2:(b + 1) * block // 2]
            os = out[r, b * block:(b + 1) * block]
            for j in range(qs.size):
                os[2 * j] = store_float(NF4_VALUES[qs[j] >> 4] * s, like)
                os[2 * j + 1] = store_float(NF4_VALUES[qs[j] & 15] * s, like)


_KERNELS = (mx_quantize_kernel, mx_dequantize_kernel, nvfp4_quantize_kernel, nvfp4_dequantize_kernel,
            amax_bits_kernel, nf4_quantize_kernel, nf4_dequantize_kernel)
stamp_cache_with_element_source(_KERNELS)

#: Blocks per parallel work unit.
_TILE_BLOCKS = 512


def mx_quantize(x, spec, codes, scales) -> None:
    """Fused MX quantize of ``x`` (rows, n) into ``codes`` and E8M0 ``scales`` (uint8 views)."""
    fmt = spec.element
    fp = fmt.fp_params if fmt.is_float else (0, 0, 0, 0, 0, 0, 0)
    mx_quantize_kernel(kernel_float_view(x), spec.block_size, spec.emax, spec.max_mantissa, spec.round_up, fp,
                       not fmt.is_float, spec.packed, _TILE_BLOCKS, codes, scales)


def mx_dequantize(codes, scales, spec, out) -> None:
    fmt = spec.element
    fp = fmt.fp_params if fmt.is_float else (0, 0, 0, 0, 0, 0, 0)
    mx_dequantize_kernel(codes, scales, spec.block_size, fp, not fmt.is_float, spec.packed, _TILE_BLOCKS,
                         output_float_like(spec.out_dtype), kernel_float_view(out))


def nvfp4_quantize(x, spec, codes, scales) -> None:
    g = np.float32(spec.global_scale)
    nvfp4_quantize_kernel(kernel_float_view(x), spec.block_size, g, np.float32(6) * g, _TILE_BLOCKS, codes, scales)


def nvfp4_dequantize(codes, scales, spec, out) -> None:
    nvfp4_dequantize_kernel(codes, scales, spec.block_size, np.float32(spec.global_scale), _TILE_BLOCKS,
                            output_float_like(spec.out_dtype), kernel_float_view(out))


def nf4_quantize(x, spec, codes, scales) -> None:
    """NF4 codes and float32 per-block amax scales of ``x`` (rows, n)."""
    nf4_quantize_kernel(kernel_float_view(x), spec.block_size, _TILE_BLOCKS, codes, scales)


def nf4_dequantize(codes, scales, spec, out) -> None:
    nf4_dequantize_kernel(codes, scales, spec.block_size, _TILE_BLOCKS, output_float_like(spec.out_dtype),
                          kernel_float_view(out))


def amax(x) -> np.float32:
    """``max |x|`` (NaN if any element is NaN)."""
    if x.size == 0:
        return np.float32(0)
    x2 = kernel_float_view(x).reshape(-1, x.shape[-1] if x.ndim else 1)
    return bits_to_float(amax_bits_kernel(x2, ROW_TILE))


def bits_to_float(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(np.float32)[0]
