"""CPU kernels of the floating-point formats (fp8, fp6, fp4) with block-grid scales: quantize and dequantize.

The same canonical ``(P, R, C)`` layout and work units as :mod:`.elementwise`. Packed
codes go through a byte buffer in L1, one contiguous (vectorizing) loop per scale
block: 4-bit codes two per byte, 6-bit codes four in three bytes. All numerics live in
:mod:`nbquant.element`.
"""

from __future__ import annotations

from ...element import (
    element_function,
    float_value,
    pack_byte_codes,
    pack_six_bit_codes,
    quantize_float_value,
    store_float,
    unpack_byte_codes,
    unpack_six_bit_codes,
)
from ...modes import ScaleOp
from ._kernel import cpu_kernel
from .elementwise import block_frame, chunk_frame


@cpu_kernel
def quantize_float_kernel(part, parts, x, scale, scale_op, fp, saturate, bp, br, bc, tile, out):
    """Encode ``x / scale`` (P, R, C) as floating-point codes ``out`` (P, R, C), one per byte."""
    _QUANTIZE_FLOAT(part, parts, x.shape, tile, bp, br, bc, (x, scale, scale_op, fp, saturate, out))


@element_function
def _quantize_float_one_block(args, p, r, sp, sr, g, c, stop):
    x, scale, scale_op, fp, saturate, out = args
    quantize_float_block(x[p, r, c:stop], out[p, r, c:stop], scale[sp, sr, g], scale_op, fp, saturate)


@element_function
def _quantize_float_block(xs, os, s, scale_op, fp, saturate):
    """Float codes of one scale block ``xs`` into ``os``."""
    for i in range(xs.size):
        os[i] = quantize_float_value(xs[i], s, scale_op, fp, saturate)


@element_function
def quantize_float_block(xs, os, s, scale_op, fp, saturate):
    """:func:`_quantize_float_block` compiled per float32 scale op (a literal: no precision test per element)."""
    if scale_op == ScaleOp.MULTIPLY:
        _quantize_float_block(xs, os, s, ScaleOp.MULTIPLY, fp, saturate)
    elif scale_op == ScaleOp.DIVIDE:
        _quantize_float_block(xs, os, s, ScaleOp.DIVIDE, fp, saturate)
    else:  # half precision (compute_dtype)
        _quantize_float_block(xs, os, s, scale_op, fp, saturate)


_QUANTIZE_FLOAT = block_frame(_quantize_float_one_block)


@cpu_kernel
def quantize_float_divide_kernel(part, parts, x, scale, fp, saturate, bp, br, bc, tile, out):
    """:func:`quantize_float_kernel` in the default mode, ``x / scale``: one inlined loop to compile, not three."""
    _QUANTIZE_FLOAT_DIVIDE(part, parts, x.shape, tile, bp, br, bc, (x, scale, fp, saturate, out))


@element_function
def _quantize_float_divide_one_block(args, p, r, sp, sr, g, c, stop):
    x, scale, fp, saturate, out = args
    _quantize_float_block(x[p, r, c:stop], out[p, r, c:stop], scale[sp, sr, g], ScaleOp.DIVIDE, fp, saturate)


_QUANTIZE_FLOAT_DIVIDE = block_frame(_quantize_float_divide_one_block)


@cpu_kernel
def quantize_float_packed_kernel(part, parts, x, scale, scale_op, fp, saturate, bp, br, bc, tile, out):
    """Encode ``x / scale`` (P, R, C) as packed 4-bit (2 per byte) or 6-bit (4 in 3 bytes) floating-point codes.

    Codes fill a little-endian bit stream, the first element in the lowest bits. They are
    encoded a chunk of :data:`~.elementwise.PACK_CHUNK` at a time into a byte buffer, one
    contiguous loop per scale block, then packed with
    :func:`~nbquant.element.pack_byte_codes` or :func:`~nbquant.element.pack_six_bit_codes`,
    as the integer kernel does (encoding group by group does not vectorize: 10x slower).
    """
    _QUANTIZE_FLOAT_PACKED(part, parts, x.shape, tile, bp, br, bc,
                           (x, scale, scale_op, fp, saturate, fp[0] + fp[1] == 5, bc, out))


@element_function
def _quantize_float_chunk(args, p, r, sp, sr, g, c, stop, codes, words16, words32):
    x, scale, scale_op, fp, saturate, six, bc, out = args
    if bc == 1:
        xs, ss, cs = x[p, r, c:stop], scale[sp, sr, c:stop], codes[:stop - c]
        for i in range(xs.size):
            cs[i] = quantize_float_value(xs[i], ss[i], scale_op, fp, saturate)
    else:
        b = c
        while b < stop:
            b_end = min((g + 1) * bc, stop)
            quantize_float_block(x[p, r, b:b_end], codes[b - c:b_end - c], scale[sp, sr, g], scale_op, fp, saturate)
            if b_end == (g + 1) * bc:
                g += 1
            b = b_end
    if six:  # tiles and chunks start on whole groups of four codes
        pack_six_bit_codes(words32, out[p, r, (c >> 2) * 3:(stop >> 2) * 3])
    else:
        pack_byte_codes(words16, words32, out[p, r, c >> 1:stop >> 1], 4)
    return g


_QUANTIZE_FLOAT_PACKED = chunk_frame(_quantize_float_chunk)


@cpu_kernel
def dequantize_float_kernel(part, parts, q, scale, fp, bp, br, bc, tile, like, out):
    """Decode floating-point codes ``q`` (P, R, C) times their scale into ``out``."""
    _DEQUANTIZE_FLOAT(part, parts, q.shape, tile, bp, br, bc, (q, scale, fp, like, out))


@element_function
def _decode_one_block(args, p, r, sp, sr, g, c, stop):
    q, scale, fp, like, out = args
    _decode_block(q[p, r, c:stop], out[p, r, c:stop], scale[sp, sr, g], fp, like)


@element_function
def _decode_block(qs, os, s, fp, like):
    """Decode the floating-point codes ``qs`` of one scale block times ``s`` into ``os``."""
    for i in range(qs.size):
        os[i] = store_float(float_value(qs[i], s, fp), like)


_DEQUANTIZE_FLOAT = block_frame(_decode_one_block)


@cpu_kernel
def dequantize_float_packed_kernel(part, parts, q, scale, fp, bp, br, bc, tile, like, out):
    """Decode packed 4-bit or 6-bit floating-point codes ``q`` (see the packed quantize) into ``out`` (P, R, C).

    The codes of a chunk are spread into a byte buffer (:func:`~nbquant.element.unpack_byte_codes`,
    :func:`~nbquant.element.unpack_six_bit_codes`) and decoded one contiguous loop per scale block.
    """
    _DEQUANTIZE_FLOAT_PACKED(part, parts, out.shape, tile, bp, br, bc,
                             (q, scale, fp, fp[0] + fp[1] == 5, bc, like, out))


@element_function
def _decode_chunk(args, p, r, sp, sr, g, c, stop, codes, words16, words32):
    q, scale, fp, six, bc, like, out = args
    if six:
        unpack_six_bit_codes(q[p, r, (c >> 2) * 3:(stop >> 2) * 3], words32)
    else:
        unpack_byte_codes(q[p, r, c >> 1:stop >> 1], words16, words32, 4)
    b = c
    while b < stop:
        b_end = min((g + 1) * bc, stop)
        _decode_block(codes[b - c:b_end - c], out[p, r, b:b_end], scale[sp, sr, g], fp, like)
        if b_end == (g + 1) * bc:
            g += 1
        b = b_end
    return g


_DEQUANTIZE_FLOAT_PACKED = chunk_frame(_decode_chunk)
