"""CPU kernels for the scaled block formats (OCP MX, NVFP4, NF4) and ``amax``: one fused pass per block.

Each work unit reads a block, reduces its ``amax`` over the float bits (an integer
max, which vectorizes where a float max with NaN semantics does not), writes the
block's scale, then encodes and writes the block's codes. Numerics live in
:mod:`nbquant.element`. Each format family's host side registers with
:func:`~nbquant.blocks.block_kernel`; a ``blocks_<family>.py`` module beside this one
registers more (imported at the end).
"""

from __future__ import annotations

import numpy as np

from ...blocks._format import BlockKernelOps, block_kernel, import_kernel_modules
from ...element import (
    E2M1,
    E4M3,
    MXINT8_STEP,
    NF4_VALUES,
    absmax_bits,
    bits_f32,
    code_value,
    decode_e8m0,
    decode_fp,
    element_function,
    encode_product,
    encode_quotient,
    load_f32,
    mx_int8,
    mx_inverse_scale,
    mx_scale_code,
    nf4_code,
    nvfp4_block_scale,
    pack_byte_codes,
    pack_nf4_codes,
    store_float,
    unpack_byte_codes,
    unpack_nf4_codes,
)
from .._views import float32_from_bits, kernel_float_view, output_float_like
from ._kernel import cpu_kernel, part_range, quotient, row_tile
from .dynamic import flat_reduce_kernel


@element_function
def _block_range(unit, ntiles, tile, nblocks):
    """Row and block range ``[b0, b1)`` of one work unit."""
    row = quotient(unit, ntiles)
    b0 = (unit - row * ntiles) * tile
    return row, b0, min(b0 + tile, nblocks)


@cpu_kernel
def mx_quantize_kernel(part, parts, x, block, emax, max_mantissa, round_up, fp, is_int, packed, tile, codes, scales):
    """Quantize rows of ``x`` (rows, n) in blocks of ``block``: E8M0 ``scales`` (rows, n / block) and ``codes``.

    ``codes`` is (rows, n), or (rows, n / 2) with 4-bit codes packed low nibble first. A
    work unit takes a tile of blocks in loops that vectorize (as the NVFP4 kernel does):
    block amaxes, scale codes across blocks, each block's multiplier spread over its
    elements, one long encoding loop, and the packing.
    """
    rows, n = x.shape
    nblocks = n // block
    ntiles = (nblocks + tile - 1) // tile
    first, last = part_range(rows * ntiles, part, parts)
    amaxes = np.empty(tile, np.int64)
    per_block = np.empty(tile, np.float32)
    factors = np.empty(tile * block, np.float32)
    buffer = np.empty(tile * block if packed else 0, np.uint8)  # a multiple of 4 bytes: tile is 512
    words16, words32 = buffer.view(np.uint16), buffer.view(np.uint32)
    for unit in range(first, last):
        r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
        xs = x[r, b0 * block:b1 * block]
        m = b1 - b0
        for b in range(m):
            amaxes[b] = absmax_bits(xs[b * block:(b + 1) * block])
        ss = scales[r, b0:b1]
        for b in range(m):
            code = mx_scale_code(amaxes[b], emax, max_mantissa, round_up)
            ss[b] = code
            per_block[b] = mx_inverse_scale(code)
        for b in range(m):
            _fill(factors[b * block:(b + 1) * block], per_block[b])
        fs = factors[:xs.size]
        if packed:
            bs = buffer[:xs.size]
            for i in range(bs.size):
                bs[i] = encode_product(xs[i], fs[i], fp)
            pack_byte_codes(words16, words32, codes[r, b0 * block // 2:b1 * block // 2], 4)
        elif is_int:
            os = codes[r, b0 * block:b1 * block]
            for i in range(os.size):
                os[i] = mx_int8(load_f32(xs[i]) * fs[i])
        else:
            os = codes[r, b0 * block:b1 * block]
            for i in range(os.size):
                os[i] = encode_product(xs[i], fs[i], fp)


@cpu_kernel
def mx_dequantize_kernel(part, parts, codes, scales, block, fp, is_int, packed, tile, like, out):
    """Dequantize MX ``codes`` with E8M0 ``scales`` into ``out`` (rows, n): ``element * 2**(scale - 127)``.

    A work unit takes a tile of blocks: each block's scale spread over its elements, packed
    codes spread into a byte buffer (:func:`~nbquant.element.unpack_byte_codes`), then one
    long decoding loop (two strided stores per packed byte do not vectorize).
    """
    rows, n = out.shape
    nblocks = n // block
    ntiles = (nblocks + tile - 1) // tile
    first, last = part_range(rows * ntiles, part, parts)
    factors = np.empty(tile * block, np.float32)
    buffer = np.empty(tile * block if packed else 0, np.uint8)  # a multiple of 4 bytes: tile is 512
    words16, words32 = buffer.view(np.uint16), buffer.view(np.uint32)
    for unit in range(first, last):
        r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
        for b in range(b1 - b0):
            _fill(factors[b * block:(b + 1) * block], decode_e8m0(scales[r, b0 + b]))
        os = out[r, b0 * block:b1 * block]
        fs = factors[:os.size]
        if packed:
            unpack_byte_codes(codes[r, b0 * block // 2:b1 * block // 2], words16, words32, 4)
            for i in range(os.size):
                os[i] = store_float(decode_fp(buffer[i], fp) * fs[i], like)
        elif is_int:
            qs = codes[r, b0 * block:b1 * block]
            for i in range(os.size):
                os[i] = store_float(code_value(qs[i], 8, True) * MXINT8_STEP * fs[i], like)
        else:
            qs = codes[r, b0 * block:b1 * block]
            for i in range(os.size):
                os[i] = store_float(decode_fp(qs[i], fp) * fs[i], like)


@cpu_kernel
def nvfp4_quantize_kernel(part, parts, x, block, global_scale, six_global, tile, codes, scales):
    """NVFP4: e2m1 codes packed two per byte ``codes`` (rows, n / 2), e4m3 block ``scales`` (rows, n / block).

    Elements are ``e2m1(x / (e4m3_scale * global_scale))``, saturating at 6. A work unit
    takes a tile of blocks in loops that vectorize: the block amaxes, the block scales
    (across blocks), each block's divisor spread over its elements, one long loop of
    divisions and encodings into a byte buffer (a 16-element block loop with strided pairs
    does not vectorize), and the packing.
    """
    rows, n = x.shape
    nblocks = n // block
    ntiles = (nblocks + tile - 1) // tile
    first, last = part_range(rows * ntiles, part, parts)
    amaxes = np.empty(tile, np.float32)
    per_block = np.empty(tile, np.float32)
    divisors = np.empty(tile * block, np.float32)
    buffer = np.empty(tile * block, np.uint8)
    words16, words32 = buffer.view(np.uint16), buffer.view(np.uint32)
    for unit in range(first, last):
        r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
        xs = x[r, b0 * block:b1 * block]
        m = b1 - b0
        for b in range(m):
            amaxes[b] = bits_f32(absmax_bits(xs[b * block:(b + 1) * block]))
        ss = scales[r, b0:b1]
        for b in range(m):  # the block scales, vectorized across blocks
            code = nvfp4_block_scale(amaxes[b], six_global)
            ss[b] = code
            per_block[b] = decode_fp(code, E4M3) * global_scale
        for b in range(m):
            _fill(divisors[b * block:(b + 1) * block], per_block[b])
        ds = divisors[:xs.size]
        bs = buffer[:xs.size]
        for i in range(bs.size):
            bs[i] = encode_quotient(xs[i], ds[i], E2M1)
        pack_byte_codes(words16, words32, codes[r, b0 * block // 2:b1 * block // 2], 4)


@element_function
def _fill(vs, v):
    for i in range(vs.size):
        vs[i] = v


def _dequantize_frame(block_scale, unpack, value):
    """The walk of a packed 4-bit block dequantize kernel over (rows, n), around the format's three steps.

    A work unit takes a tile of blocks: each block's scale ``block_scale(code, args)``
    spread over its elements, the tile's packed codes spread into a byte buffer by
    ``unpack(packed, words16, words32)``, then one long loop of ``value(code) * scale``
    (each an :func:`~nbquant.element.element_function`). Returns
    ``walk(part, parts, codes, scales, block, args, tile, like, out)`` for the kernel to call.
    """

    @element_function
    def walk(part, parts, codes, scales, block, args, tile, like, out):
        rows, n = out.shape
        nblocks = n // block
        ntiles = (nblocks + tile - 1) // tile
        first, last = part_range(rows * ntiles, part, parts)
        factors = np.empty(tile * block, np.float32)
        buffer = np.empty(tile * block, np.uint8)
        words16, words32 = buffer.view(np.uint16), buffer.view(np.uint32)
        for unit in range(first, last):
            r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
            for b in range(b1 - b0):
                _fill(factors[b * block:(b + 1) * block], block_scale(scales[r, b0 + b], args))
            os = out[r, b0 * block:b1 * block]
            fs = factors[:os.size]
            unpack(codes[r, b0 * block // 2:b1 * block // 2], words16, words32)
            for i in range(os.size):
                os[i] = store_float(value(buffer[i]) * fs[i], like)

    return walk


@element_function
def _nvfp4_scale(code, global_scale):
    return decode_fp(code, E4M3) * global_scale


@element_function
def _unpack_e2m1(packed, words16, words32):
    unpack_byte_codes(packed, words16, words32, 4)


@element_function
def _e2m1_value(code):
    return decode_fp(code, E2M1)


_NVFP4_DEQUANTIZE = _dequantize_frame(_nvfp4_scale, _unpack_e2m1, _e2m1_value)


@cpu_kernel
def nvfp4_dequantize_kernel(part, parts, codes, scales, block, global_scale, tile, like, out):
    """NVFP4 dequantize: ``e2m1 * (e4m3_scale * global_scale)`` into ``out`` (rows, n), a tile of blocks at a time."""
    _NVFP4_DEQUANTIZE(part, parts, codes, scales, block, global_scale, tile, like, out)


@cpu_kernel
def nf4_quantize_kernel(part, parts, x, block, tile, codes, scales):
    """NF4: per-block ``amax`` into ``scales`` (rows, n / block) and table indices of ``x / amax`` packed two per
    byte into ``codes`` (rows, n / 2), the first element in the HIGH nibble (modelopt's layout).

    A work unit takes a tile of blocks as the NVFP4 kernel does: amaxes, the divisors
    spread over the elements, one long loop of table searches, the packing.
    """
    rows, n = x.shape
    nblocks = n // block
    ntiles = (nblocks + tile - 1) // tile
    first, last = part_range(rows * ntiles, part, parts)
    divisors = np.empty(tile * block, np.float32)
    buffer = np.empty(tile * block, np.uint8)
    words16 = buffer.view(np.uint16)
    for unit in range(first, last):
        r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
        xs = x[r, b0 * block:b1 * block]
        ss = scales[r, b0:b1]
        for b in range(b1 - b0):
            amax = bits_f32(absmax_bits(xs[b * block:(b + 1) * block]))
            ss[b] = amax
            _fill(divisors[b * block:(b + 1) * block], amax)
        ds = divisors[:xs.size]
        bs = buffer[:xs.size]
        for i in range(bs.size):
            bs[i] = nf4_code(load_f32(xs[i]) / ds[i])
        pack_nf4_codes(words16, codes[r, b0 * block // 2:b1 * block // 2])


@element_function
def _nf4_scale(scale, args):
    return np.float32(scale)


@element_function
def _unpack_nf4(packed, words16, words32):
    unpack_nf4_codes(packed, words16)


@element_function
def _nf4_value(code):
    return NF4_VALUES[code]


_NF4_DEQUANTIZE = _dequantize_frame(_nf4_scale, _unpack_nf4, _nf4_value)


@cpu_kernel
def nf4_dequantize_kernel(part, parts, codes, scales, block, tile, like, out):
    """NF4 dequantize: ``table[code] * scale`` per block into ``out`` (rows, n), a tile of blocks at a time."""
    _NF4_DEQUANTIZE(part, parts, codes, scales, block, (), tile, like, out)


#: Blocks per parallel work unit.
_TILE_BLOCKS = 512


@block_kernel("cpu", "mx", "quantize")
def _mx_quantize(x, spec, outputs) -> None:
    """Fused MX quantize of ``x`` (rows, n) into the codes and E8M0 scales (uint8)."""
    fmt = spec.format
    mx_quantize_kernel(kernel_float_view(x), spec.block_size, fmt.emax, fmt.max_mantissa, spec.params.round_up,
                       fmt.fp, fmt.is_int, spec.params.packed, _TILE_BLOCKS, *outputs)


@block_kernel("cpu", "mx", "dequantize")
def _mx_dequantize(inputs, spec, out) -> None:
    """MX dequantize of the codes with E8M0 scales (uint8) into ``out`` (rows, n)."""
    fmt = spec.format
    mx_dequantize_kernel(*inputs, spec.block_size, fmt.fp, fmt.is_int, spec.params.packed, _TILE_BLOCKS,
                         output_float_like(spec.out_dtype), kernel_float_view(out))


@block_kernel("cpu", "nvfp4", "quantize")
def _nvfp4_quantize(x, spec, outputs) -> None:
    """Fused NVFP4 quantize of ``x`` (rows, n) with the spec's global scale."""
    g = np.float32(spec.params.global_scale)
    nvfp4_quantize_kernel(kernel_float_view(x), spec.block_size, g, np.float32(6) * g, _TILE_BLOCKS, *outputs)


@block_kernel("cpu", "nvfp4", "dequantize")
def _nvfp4_dequantize(inputs, spec, out) -> None:
    """NVFP4 dequantize into ``out`` (rows, n)."""
    nvfp4_dequantize_kernel(*inputs, spec.block_size, np.float32(spec.params.global_scale), _TILE_BLOCKS,
                            output_float_like(spec.out_dtype), kernel_float_view(out))


@block_kernel("cpu", "nf4", "quantize")
def _nf4_quantize(x, spec, outputs) -> None:
    """NF4 codes and float32 per-block amax scales of ``x`` (rows, n)."""
    nf4_quantize_kernel(kernel_float_view(x), spec.block_size, _TILE_BLOCKS, *outputs)


@block_kernel("cpu", "nf4", "dequantize")
def _nf4_dequantize(inputs, spec, out) -> None:
    """NF4 dequantize into ``out`` (rows, n) with float32 block scales."""
    nf4_dequantize_kernel(*inputs, spec.block_size, _TILE_BLOCKS, output_float_like(spec.out_dtype),
                          kernel_float_view(out))


class BlockOps(BlockKernelOps):
    """Every registered block format, and amax (:class:`~nbquant.backends.interface.Backend`)."""

    target = "cpu"

    def amax(self, x) -> np.float32:
        """``max |x|`` (NaN if any element is NaN)."""
        if x.size == 0:
            return np.float32(0)
        x2 = kernel_float_view(x).reshape(-1, x.shape[-1] if x.ndim else 1)
        tile = row_tile(x2.shape[1])
        partial = np.empty(x2.shape[0] * -(-x2.shape[1] // tile), np.int64)
        flat_reduce_kernel(x2, False, tile, np.empty(0, np.int64), partial)  # absmax bits per (row, tile)
        return float32_from_bits(partial.max())


import_kernel_modules(__package__)
