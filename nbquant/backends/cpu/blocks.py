"""CPU kernels for the scaled block formats (OCP MX, NVFP4, NF4) and ``amax``: one fused pass per block.

Every kernel comes from one of two templates, a kernel per format and mode
(:func:`block_quantize_kernel`, :func:`block_dequantize_kernel`), so that a first call
compiles one encoding (or decoding) loop. A work unit takes a tile of blocks, reduces
each block's ``amax`` over the float bits (an integer max, which vectorizes where a
float max with NaN semantics does not), writes the blocks' scales, then encodes and
writes their codes. Numerics live in
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
from ._kernel import CpuKernel, part_range, quotient, row_tile, template_kernel
from .dynamic import flat_reduce_kernel


@element_function
def _block_range(unit, ntiles, tile, nblocks):
    """Row and block range ``[b0, b1)`` of one work unit."""
    row = quotient(unit, ntiles)
    b0 = (unit - row * ntiles) * tile
    return row, b0, min(b0 + tile, nblocks)


@element_function
def _fill(vs, v):
    for i in range(vs.size):
        vs[i] = v


# Placeholders: each kernel has its own (block_quantize_kernel's and block_dequantize_kernel's globals).
_SCALE = _ENCODE = _PACK = _FACTOR = _DECODE = None
_PACKED = False


def _quantize_template(part, parts, x, block, params, tile, codes, scales):
    """Quantize rows of ``x`` (rows, n) in blocks of ``block``: block ``scales`` (rows, n / block) and ``codes``.

    ``codes`` is (rows, n), or (rows, n / 2) with 4-bit codes packed. A work unit takes a
    tile of blocks in loops that vectorize: the block amaxes (an integer max over the float
    bits), the scales across blocks, each block's factor spread over its elements, one long
    encoding loop (into a byte buffer when packed: a 16-element block loop with strided
    pairs does not vectorize), and the packing.
    """
    rows, n = x.shape
    nblocks = n // block
    ntiles = (nblocks + tile - 1) // tile
    first, last = part_range(rows * ntiles, part, parts)
    amaxes = np.empty(tile, np.int64)
    per_block = np.empty(tile, np.float32)
    factors = np.empty(tile * block, np.float32)
    buffer = np.empty(tile * block if _PACKED else 0, np.uint8)  # a multiple of 4 bytes: tile is 512
    words16, words32 = buffer.view(np.uint16), buffer.view(np.uint32)
    for unit in range(first, last):
        r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
        xs = x[r, b0 * block:b1 * block]
        m = b1 - b0
        for b in range(m):
            amaxes[b] = absmax_bits(xs[b * block:(b + 1) * block])
        ss = scales[r, b0:b1]
        for b in range(m):
            ss[b], per_block[b] = _SCALE(amaxes[b], params)
        for b in range(m):
            _fill(factors[b * block:(b + 1) * block], per_block[b])
        fs = factors[:xs.size]
        os = buffer[:xs.size] if _PACKED else codes[r, b0 * block:b1 * block]
        for i in range(os.size):
            os[i] = _ENCODE(xs[i], fs[i], params)
        if _PACKED:
            _PACK(codes[r, b0 * block // 2:b1 * block // 2], words16, words32)


def _dequantize_template(part, parts, codes, scales, block, params, tile, like, out):
    """Dequantize block ``codes`` (rows, n or n / 2 packed) with their ``scales`` into ``out`` (rows, n).

    A work unit takes a tile of blocks: each block's factor spread over its elements, packed
    codes spread into a byte buffer, then one long decoding loop (two strided stores per
    packed byte do not vectorize).
    """
    rows, n = out.shape
    nblocks = n // block
    ntiles = (nblocks + tile - 1) // tile
    first, last = part_range(rows * ntiles, part, parts)
    factors = np.empty(tile * block, np.float32)
    buffer = np.empty(tile * block if _PACKED else 0, np.uint8)  # a multiple of 4 bytes: tile is 512
    words16, words32 = buffer.view(np.uint16), buffer.view(np.uint32)
    for unit in range(first, last):
        r, b0, b1 = _block_range(unit, ntiles, tile, nblocks)
        for b in range(b1 - b0):
            _fill(factors[b * block:(b + 1) * block], _FACTOR(scales[r, b0 + b], params))
        os = out[r, b0 * block:b1 * block]
        fs = factors[:os.size]
        if _PACKED:
            _PACK(codes[r, b0 * block // 2:b1 * block // 2], words16, words32)
        qs = buffer if _PACKED else codes[r, b0 * block:b1 * block]
        for i in range(os.size):
            os[i] = store_float(_DECODE(qs[i], params) * fs[i], like)


#: Every block-format kernel made so far, by name.
BLOCK_KERNELS: dict[str, CpuKernel] = {}


def block_quantize_kernel(name: str, scale, encode, pack=None) -> CpuKernel:
    """The quantize kernel ``{name}_quantize_kernel`` (made on first use) of :func:`_quantize_template` with its
    steps, each an :func:`~nbquant.element.element_function` of the kernel's ``params`` tuple:
    ``scale(amax_bits, params) -> (scale code, factor)``, ``encode(x, factor, params) -> code`` and, for packed
    codes, ``pack(out, words16, words32)`` from the byte buffer. One encoding loop each: a first call compiles it
    alone."""
    return template_kernel(BLOCK_KERNELS, f"{name}_quantize_kernel", _quantize_template,
                           f"{name} quantize (:func:`block_quantize_kernel`).", _SCALE=scale, _ENCODE=encode,
                           _PACK=pack, _PACKED=pack is not None)


def block_dequantize_kernel(name: str, factor, decode, unpack=None) -> CpuKernel:
    """The dequantize kernel ``{name}_dequantize_kernel`` (made on first use) of :func:`_dequantize_template`:
    ``factor(scale, params)``, ``decode(code, params)`` and, for packed codes, ``unpack(packed, words16,
    words32)`` into the byte buffer."""
    return template_kernel(BLOCK_KERNELS, f"{name}_dequantize_kernel", _dequantize_template,
                           f"{name} dequantize (:func:`block_dequantize_kernel`).", _FACTOR=factor, _DECODE=decode,
                           _PACK=unpack, _PACKED=unpack is not None)


@element_function
def _mx_scale(amax, params):
    emax, max_mantissa, round_up, fp = params
    code = mx_scale_code(amax, emax, max_mantissa, round_up)
    return code, mx_inverse_scale(code)


@element_function
def _mx_encode(x, factor, params):
    return encode_product(x, factor, params[3])


@element_function
def _mx_int8(x, factor, params):
    return mx_int8(load_f32(x) * factor)


@element_function
def _mx_factor(code, params):
    return decode_e8m0(code)


@element_function
def _mx_decode(code, params):
    return decode_fp(code, params[0])


@element_function
def _mx_int8_value(code, params):
    return code_value(code, 8, True) * MXINT8_STEP


@element_function
def _pack_four_bits(out, words16, words32):
    pack_byte_codes(words16, words32, out, 4)


@element_function
def _unpack_four_bits(packed, words16, words32):
    unpack_byte_codes(packed, words16, words32, 4)


@element_function
def _nvfp4_scale(amax, params):
    global_scale, six_global = params
    code = nvfp4_block_scale(bits_f32(amax), six_global)
    return code, decode_fp(code, E4M3) * global_scale


@element_function
def _nvfp4_encode(x, divisor, params):
    return encode_quotient(x, divisor, E2M1)


@element_function
def _nvfp4_factor(code, params):
    return decode_fp(code, E4M3) * params[0]


@element_function
def _e2m1_value(code, params):
    return decode_fp(code, E2M1)


@element_function
def _nf4_scale(amax, params):
    a = bits_f32(amax)
    return a, a


@element_function
def _nf4_encode(x, amax, params):
    return nf4_code(load_f32(x) / amax)


@element_function
def _pack_nf4(out, words16, words32):
    pack_nf4_codes(words16, out)


@element_function
def _nf4_factor(scale, params):
    return np.float32(scale)


@element_function
def _unpack_nf4(packed, words16, words32):
    unpack_nf4_codes(packed, words16)


@element_function
def _nf4_value(code, params):
    return NF4_VALUES[code]


def _mx_kernels(fmt, packed: bool) -> tuple[CpuKernel, CpuKernel]:
    """The MX quantize and dequantize kernels of ``fmt``: integer elements, packed or one per byte."""
    if fmt.is_int:
        return block_quantize_kernel("mxint8", _mx_scale, _mx_int8), block_dequantize_kernel("mxint8", _mx_factor,
                                                                                             _mx_int8_value)
    if packed:
        return (block_quantize_kernel("mx_packed", _mx_scale, _mx_encode, _pack_four_bits),
                block_dequantize_kernel("mx_packed", _mx_factor, _mx_decode, _unpack_four_bits))
    return block_quantize_kernel("mx", _mx_scale, _mx_encode), block_dequantize_kernel("mx", _mx_factor, _mx_decode)


#: Blocks per parallel work unit.
_TILE_BLOCKS = 512


@block_kernel("cpu", "mx", "quantize")
def _mx_quantize(x, spec, outputs) -> None:
    """Fused MX quantize of ``x`` (rows, n) into the codes and E8M0 scales (uint8)."""
    fmt = spec.format
    _mx_kernels(fmt, spec.params.packed)[0](kernel_float_view(x), spec.block_size,
                                            (fmt.emax, fmt.max_mantissa, spec.params.round_up, fmt.fp),
                                            _TILE_BLOCKS, *outputs)


@block_kernel("cpu", "mx", "dequantize")
def _mx_dequantize(inputs, spec, out) -> None:
    """MX dequantize of the codes with E8M0 scales (uint8) into ``out`` (rows, n)."""
    fmt = spec.format
    _mx_kernels(fmt, spec.params.packed)[1](*inputs, spec.block_size, (fmt.fp,), _TILE_BLOCKS,
                                            output_float_like(spec.out_dtype), kernel_float_view(out))


@block_kernel("cpu", "nvfp4", "quantize")
def _nvfp4_quantize(x, spec, outputs) -> None:
    """Fused NVFP4 quantize of ``x`` (rows, n) with the spec's global scale."""
    g = np.float32(spec.params.global_scale)
    kernel = block_quantize_kernel("nvfp4", _nvfp4_scale, _nvfp4_encode, _pack_four_bits)
    kernel(kernel_float_view(x), spec.block_size, (g, np.float32(6) * g), _TILE_BLOCKS, *outputs)


@block_kernel("cpu", "nvfp4", "dequantize")
def _nvfp4_dequantize(inputs, spec, out) -> None:
    """NVFP4 dequantize into ``out`` (rows, n)."""
    kernel = block_dequantize_kernel("nvfp4", _nvfp4_factor, _e2m1_value, _unpack_four_bits)
    kernel(*inputs, spec.block_size, (np.float32(spec.params.global_scale),), _TILE_BLOCKS,
           output_float_like(spec.out_dtype), kernel_float_view(out))


@block_kernel("cpu", "nf4", "quantize")
def _nf4_quantize(x, spec, outputs) -> None:
    """NF4 codes and float32 per-block amax scales of ``x`` (rows, n)."""
    kernel = block_quantize_kernel("nf4", _nf4_scale, _nf4_encode, _pack_nf4)
    kernel(kernel_float_view(x), spec.block_size, (), _TILE_BLOCKS, *outputs)


@block_kernel("cpu", "nf4", "dequantize")
def _nf4_dequantize(inputs, spec, out) -> None:
    """NF4 dequantize into ``out`` (rows, n) with float32 block scales."""
    kernel = block_dequantize_kernel("nf4", _nf4_factor, _nf4_value, _unpack_nf4)
    kernel(*inputs, spec.block_size, (), _TILE_BLOCKS, output_float_like(spec.out_dtype), kernel_float_view(out))


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
