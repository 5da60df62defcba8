"""CPU element-wise kernels: static quantize/dequantize, modelopt fake quantization and its gradient.

Kernels loop over the canonical ``(P, R, C)`` layout from
:func:`nbquant.layout.canonical_views`: parallel over work units of one row tile,
rows outer, a contiguous inner loop per scale block so the element functions
vectorize. The scale of a block is read once per block; no index is divided per
element. All numerics live in :mod:`nbquant.element`.
"""

from __future__ import annotations

import numpy as np

from ...element import (
    affine_fake_value,
    amax_code,
    amax_scales,
    code_bits,
    code_value,
    dequantize_value,
    e4m3_scales,
    element_function,
    pack_byte_codes,
    quantize_value,
    scaled_minifloat_fake,
    ste_value,
    store_float,
    unpack_byte_codes,
    unpack_field,
)
from ...modes import ScaleOp
from ._kernel import cpu_kernel, part_range, quotient, work_unit

# Inner loops index slices from 0: a loop index that starts elsewhere keeps Numba's
# negative-index wraparound check alive and stops vectorization (5x slower).


def block_frame(block):
    """The walk of a kernel over (P, R, C) work units, one call of ``block`` per scale block.

    ``block(args, p, r, sp, sr, g, c, stop)`` is an :func:`~nbquant.element.element_function`
    that does columns ``[c, stop)`` of canonical row ``(p, r)``, in scale block ``g`` of scale
    row ``(sp, sr)``; ``args`` is the kernel's parameters it reads. Returns
    ``walk(part, parts, shape, tile, bp, br, bc, args)`` for the kernel to call (numba
    freezes the closure's ``block`` as a constant and inlines it).
    """

    @element_function
    def walk(part, parts, shape, tile, bp, br, bc, args):
        P, R, C = shape
        ntiles = (C + tile - 1) // tile
        first, last = part_range(P * R * ntiles, part, parts)
        for unit in range(first, last):
            p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
            g = quotient(c, bc)
            while c < end:
                stop = min((g + 1) * bc, end)
                block(args, p, r, sp, sr, g, c, stop)
                c = stop
                g += 1

    return walk


def chunk_frame(chunk):
    """The walk of a packing kernel over (P, R, C) work units, a byte buffer of :data:`PACK_CHUNK` codes at a time.

    ``chunk(args, p, r, sp, sr, g, c, stop, codes, words16, words32) -> g`` is an
    :func:`~nbquant.element.element_function` that does columns ``[c, stop)`` of canonical
    row ``(p, r)`` through the buffer ``codes`` (and its ``uint16``/``uint32`` views),
    starting in scale block ``g``, and returns the scale block of column ``stop``. Returns
    ``walk(part, parts, shape, tile, bp, br, bc, args)``, as :func:`block_frame`.
    """

    @element_function
    def walk(part, parts, shape, tile, bp, br, bc, args):
        P, R, C = shape
        ntiles = (C + tile - 1) // tile
        first, last = part_range(P * R * ntiles, part, parts)
        codes = np.empty(PACK_CHUNK, np.uint8)
        words16, words32 = codes.view(np.uint16), codes.view(np.uint32)
        for unit in range(first, last):
            p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
            g = quotient(c, bc)
            while c < end:
                stop = min(c + PACK_CHUNK, end)
                g = chunk(args, p, r, sp, sr, g, c, stop, codes, words16, words32)
                c = stop

    return walk


@cpu_kernel
def quantize_blocks_kernel(part, parts, x, scale, qmin, qmax, mask, bp, br, bc, tile, out):
    """Quantize ``x`` (P, R, C) into unsigned code storage ``out`` (P, R, C): ``x / scale``, no zero point.

    The default mode, and the only loop this kernel holds, so a first call compiles one
    inlined :func:`~nbquant.element.quantize_value` (:func:`quantize_modes_kernel` holds the
    other modes: six loops). The zero point is ``-0.0`` as a constant: its add is compiled away.
    Scale blocks of one column (``bc == 1``) work but go one element per block.
    """
    P, R, C = x.shape
    ntiles = (C + tile - 1) // tile
    first, last = part_range(P * R * ntiles, part, parts)
    for unit in range(first, last):
        p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
        g = quotient(c, bc)
        while c < end:
            stop = min((g + 1) * bc, end)
            xs, os = x[p, r, c:stop], out[p, r, c:stop]
            s = scale[sp, sr, g]
            for i in range(xs.size):
                os[i] = code_bits(quantize_value(xs[i], s, NO_ZERO_POINT, ScaleOp.DIVIDE, False, qmin, qmax), mask)
            c = stop
            g += 1


@cpu_kernel
def quantize_kernel(part, parts, x, s, qmin, qmax, mask, out):
    """Quantize the contiguous ``x`` (n,) with the one float32 scale ``s`` into ``out`` (n,): ``x / s``, no zero point.

    Per-tensor quantization of a contiguous array (the front door's short path): one
    contiguous range per part, and eight arguments for Numba's dispatcher to type.
    """
    first, last = part_range(x.size, part, parts)
    xs, os = x[first:last], out[first:last]
    for i in range(xs.size):
        os[i] = code_bits(quantize_value(xs[i], s, NO_ZERO_POINT, ScaleOp.DIVIDE, False, qmin, qmax), mask)


@cpu_kernel
def quantize_zp_kernel(part, parts, x, scale, zp, zp_before, qmin, qmax, mask, bp, br, bc, tile, out):
    """:func:`quantize_blocks_kernel` with a zero point per scale block (asymmetric quantization): one loop."""
    P, R, C = x.shape
    ntiles = (C + tile - 1) // tile
    first, last = part_range(P * R * ntiles, part, parts)
    for unit in range(first, last):
        p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
        g = quotient(c, bc)
        while c < end:
            stop = min((g + 1) * bc, end)
            _quantize_block(x[p, r, c:stop], out[p, r, c:stop], scale[sp, sr, g], zp[sp, sr, g], ScaleOp.DIVIDE,
                            zp_before, qmin, qmax, mask)
            c = stop
            g += 1


@cpu_kernel
def quantize_modes_kernel(part, parts, x, scale, zp, has_zp, scale_op, zp_before, qmin, qmax, mask, bp, br, bc, tile,
                          out):
    """Quantize ``x`` (P, R, C) into unsigned code storage ``out`` (P, R, C) in any mode, any scale blocks.

    ``bc == 1`` needs ``zp`` of the scale's shape (zeros when absent).
    """
    P, R, C = x.shape
    ntiles = (C + tile - 1) // tile
    first, last = part_range(P * R * ntiles, part, parts)
    for unit in range(first, last):
        p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
        if bc == 1:
            quantize_columns(x[p, r, c:end], scale[sp, sr, c:end], zp[sp, sr, c:end], out[p, r, c:end],
                             scale_op, zp_before, qmin, qmax, mask)
            continue
        g = quotient(c, bc)
        while c < end:
            stop = min((g + 1) * bc, end)
            z = zp[sp, sr, g] if has_zp else NO_ZERO_POINT
            quantize_block(x[p, r, c:stop], out[p, r, c:stop], scale[sp, sr, g], z, scale_op, zp_before, qmin, qmax,
                           mask)
            c = stop
            g += 1


# The general kernels call the helpers below with ``scale_op`` as a literal constant for the float32
# ops, one call per value, so each inner loop is compiled for one scale op: the multiply path
# never divides (a float32 divide costs more than the memory traffic on two cores). Divide mode
# without a zero point (the default) has kernels of its own (:func:`quantize_blocks_kernel`,
# :func:`quantize_packed_kernel`): a first call compiles only the loops its kernel holds, and each
# inlined loop costs about a second of compile time on 2 cores (the int8 kernel that held all seven
# loops took 12 s of cpu to compile, 14 s wall on an idle machine).

#: The zero point of a call without one: ``rne(v) + (-0.0)`` is ``rne(v)``, so the add is compiled away.
NO_ZERO_POINT = np.float32(-0.0)


@element_function
def _quantize_block(xs, os, s, z, scale_op, zp_before, qmin, qmax, mask):
    """Codes of one scale block ``xs`` into ``os``."""
    for i in range(xs.size):
        os[i] = code_bits(quantize_value(xs[i], s, z, scale_op, zp_before, qmin, qmax), mask)


@element_function
def _quantize_columns(xs, ss, zs, os, scale_op, zp_before, qmin, qmax, mask):
    """Codes of ``xs`` with one scale and zero point per element (``ss``, ``zs``) into ``os``."""
    for i in range(xs.size):
        os[i] = code_bits(quantize_value(xs[i], ss[i], zs[i], scale_op, zp_before, qmin, qmax), mask)


@element_function
def quantize_block(xs, os, s, z, scale_op, zp_before, qmin, qmax, mask):
    """:func:`_quantize_block` compiled per float32 scale op (three loops), with the zero point ``z``."""
    if scale_op == ScaleOp.DIVIDE:
        _quantize_block(xs, os, s, z, ScaleOp.DIVIDE, zp_before, qmin, qmax, mask)
    elif scale_op == ScaleOp.MULTIPLY:
        _quantize_block(xs, os, s, z, ScaleOp.MULTIPLY, zp_before, qmin, qmax, mask)
    else:  # half precision (compute_dtype): one loop for the four ops
        _quantize_block(xs, os, s, z, scale_op, zp_before, qmin, qmax, mask)


@element_function
def quantize_columns(xs, ss, zs, os, scale_op, zp_before, qmin, qmax, mask):
    """:func:`_quantize_columns` compiled per float32 scale op (``zs``: zeros when there is no zero point)."""
    if scale_op == ScaleOp.DIVIDE:
        _quantize_columns(xs, ss, zs, os, ScaleOp.DIVIDE, zp_before, qmin, qmax, mask)
    elif scale_op == ScaleOp.MULTIPLY:
        _quantize_columns(xs, ss, zs, os, ScaleOp.MULTIPLY, zp_before, qmin, qmax, mask)
    else:  # half precision (compute_dtype): one loop for the four ops
        _quantize_columns(xs, ss, zs, os, scale_op, zp_before, qmin, qmax, mask)


#: Codes a packing kernel quantizes into a byte buffer (in L1) before packing them in one loop.
PACK_CHUNK = 4096


@cpu_kernel
def quantize_packed_kernel(part, parts, x, scale, qmin, qmax, nbits, bp, br, bc, tile, out):
    """Quantize ``x`` (P, R, C) into packed bytes ``out`` (P, R, C / k): ``x / scale``, no zero point.

    The default mode alone, as :func:`quantize_blocks_kernel`; :func:`quantize_packed_modes_kernel`
    holds the others. A work unit quantizes its tile in chunks of :data:`PACK_CHUNK` codes
    into a byte buffer, per scale block (blocks need not cover whole bytes), then packs each
    chunk with :func:`~nbquant.element.pack_byte_codes`, the first code in the low bits.
    """
    P, R, C = x.shape
    kshift = 1 if nbits == 4 else 2  # byte index = code index >> kshift (tiles and chunks hold whole bytes)
    mask = (1 << nbits) - 1
    ntiles = (C + tile - 1) // tile
    first, last = part_range(P * R * ntiles, part, parts)
    for unit in range(first, last):
        p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
        codes = np.empty(PACK_CHUNK, np.uint8)
        words16 = codes.view(np.uint16)
        words32 = codes.view(np.uint32)
        g = quotient(c, bc)
        while c < end:
            stop = min(c + PACK_CHUNK, end)
            b = c
            while b < stop:
                b_end = min((g + 1) * bc, stop)
                xs, cs = x[p, r, b:b_end], codes[b - c:b_end - c]
                s = scale[sp, sr, g]
                for i in range(xs.size):
                    cs[i] = code_bits(quantize_value(xs[i], s, NO_ZERO_POINT, ScaleOp.DIVIDE, False, qmin, qmax), mask)
                if b_end == (g + 1) * bc:
                    g += 1
                b = b_end
            pack_byte_codes(words16, words32, out[p, r, c >> kshift:stop >> kshift], nbits)
            c = stop


@cpu_kernel
def quantize_packed_modes_kernel(part, parts, x, scale, zp, has_zp, scale_op, zp_before, qmin, qmax, nbits, bp, br, bc,
                                 tile, out):
    """:func:`quantize_packed_kernel` in any mode, any scale blocks (per column when ``bc == 1``).

    ``bc == 1`` needs ``zp`` of the scale's shape (zeros when absent).
    """
    P, R, C = x.shape
    kshift = 1 if nbits == 4 else 2
    mask = (1 << nbits) - 1
    ntiles = (C + tile - 1) // tile
    first, last = part_range(P * R * ntiles, part, parts)
    for unit in range(first, last):
        p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
        codes = np.empty(PACK_CHUNK, np.uint8)
        words16 = codes.view(np.uint16)
        words32 = codes.view(np.uint32)
        g = quotient(c, bc)
        while c < end:
            stop = min(c + PACK_CHUNK, end)
            if bc == 1:
                quantize_columns(x[p, r, c:stop], scale[sp, sr, c:stop], zp[sp, sr, c:stop],
                                 codes[:stop - c], scale_op, zp_before, qmin, qmax, mask)
            else:
                b = c
                while b < stop:
                    b_end = min((g + 1) * bc, stop)
                    z = zp[sp, sr, g] if has_zp else NO_ZERO_POINT
                    quantize_block(x[p, r, b:b_end], codes[b - c:b_end - c], scale[sp, sr, g], z, scale_op,
                                   zp_before, qmin, qmax, mask)
                    if b_end == (g + 1) * bc:
                        g += 1
                    b = b_end
            pack_byte_codes(words16, words32, out[p, r, c >> kshift:stop >> kshift], nbits)
            c = stop


@cpu_kernel
def dequantize_kernel(part, parts, q, scale, nbits, signed, bp, br, bc, tile, like, out):
    """Dequantize unsigned code storage ``q`` (P, R, C) into ``out`` (float storage like ``like``), no zero point.

    The default mode alone (one loop to compile); :func:`dequantize_zp_kernel` adds a zero point and
    :func:`dequantize_columns_kernel` takes scale blocks of one column.
    """
    P, R, C = q.shape
    ntiles = (C + tile - 1) // tile
    first, last = part_range(P * R * ntiles, part, parts)
    for unit in range(first, last):
        p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
        g = quotient(c, bc)
        while c < end:
            stop = min((g + 1) * bc, end)
            qs, os = q[p, r, c:stop], out[p, r, c:stop]
            s = scale[sp, sr, g]
            for i in range(qs.size):
                os[i] = store_float(dequantize_value(code_value(qs[i], nbits, signed), s, ZERO), like)
            c = stop
            g += 1


@cpu_kernel
def dequantize_zp_kernel(part, parts, q, scale, zp, nbits, signed, bp, br, bc, tile, like, out):
    """:func:`dequantize_kernel` with a zero point per scale block: one loop."""
    P, R, C = q.shape
    ntiles = (C + tile - 1) // tile
    first, last = part_range(P * R * ntiles, part, parts)
    for unit in range(first, last):
        p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
        g = quotient(c, bc)
        while c < end:
            stop = min((g + 1) * bc, end)
            _dequantize_block(q[p, r, c:stop], out[p, r, c:stop], scale[sp, sr, g], zp[sp, sr, g], nbits, signed, like)
            c = stop
            g += 1


@cpu_kernel
def dequantize_columns_kernel(part, parts, q, scale, zp, has_zp, nbits, signed, bp, br, tile, like, out):
    """:func:`dequantize_kernel` with scale blocks of one column (``bc == 1``): a scale and zero point (zeros when
    absent) per element of a scale row."""
    P, R, C = q.shape
    ntiles = (C + tile - 1) // tile
    first, last = part_range(P * R * ntiles, part, parts)
    for unit in range(first, last):
        p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
        qs, ss, zs, os = q[p, r, c:end], scale[sp, sr, c:end], zp[sp, sr, c:end], out[p, r, c:end]
        if has_zp:
            for i in range(qs.size):
                os[i] = store_float(dequantize_value(code_value(qs[i], nbits, signed), ss[i], zs[i]), like)
        else:
            for i in range(qs.size):
                os[i] = store_float(dequantize_value(code_value(qs[i], nbits, signed), ss[i], ZERO), like)


#: The zero point of a dequantize without one: ``code - (+0.0)`` is ``code``, so the subtraction is compiled away.
ZERO = np.float32(0.0)


@element_function
def _dequantize_block(qs, os, s, z, nbits, signed, like):
    """Dequantize the codes ``qs`` (one per byte or word) of one scale block into ``os``."""
    for i in range(qs.size):
        os[i] = store_float(dequantize_value(code_value(qs[i], nbits, signed), s, z), like)


@element_function
def _dequantize_bytes(qs, os, s, z, signed, like):
    """Unpack and dequantize the bytes ``qs`` (4-bit codes) of one scale block into ``os``."""
    for j in range(qs.size):
        byte = qs[j]
        os[2 * j] = store_float(dequantize_value(code_value(unpack_field(byte, 0, 4), 4, signed), s, z), like)
        os[2 * j + 1] = store_float(dequantize_value(code_value(unpack_field(byte, 1, 4), 4, signed), s, z), like)


@cpu_kernel
def dequantize_packed_kernel(part, parts, q, scale, signed, bp, br, bc, tile, like, out):
    """Dequantize packed 4-bit codes ``q`` (P, R, C / 2) into ``out`` (P, R, C), no zero point.

    The default case alone: scale blocks of whole bytes (or one block per row), two strided
    stores per byte; :func:`dequantize_packed_modes_kernel` holds the others.
    """
    P, R, C = out.shape
    ntiles = (C + tile - 1) // tile
    first, last = part_range(P * R * ntiles, part, parts)
    for unit in range(first, last):
        p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
        g = quotient(c, bc)
        while c < end:
            stop = min((g + 1) * bc, end)
            _dequantize_bytes(q[p, r, c >> 1:stop >> 1], out[p, r, c:stop], scale[sp, sr, g], ZERO, signed, like)
            c = stop
            g += 1


@cpu_kernel
def dequantize_packed_modes_kernel(part, parts, q, scale, zp, has_zp, nbits, signed, bp, br, bc, tile, like, out):
    """Dequantize packed bytes ``q`` (P, R, C / k) into ``out`` (P, R, C); blocks as in the packed quantize.

    4-bit codes: two strided stores per byte, per scale block. 2-bit codes go through a byte
    buffer (:func:`_dequantize_two_bit_chunk`): four strided stores per byte do not vectorize.
    """
    P, R, C = out.shape
    if nbits == 2:
        _DEQUANTIZE_TWO_BIT(part, parts, out.shape, tile, bp, br, bc, (q, scale, zp, has_zp, signed, bc, like, out))
        return
    k = 8 // nbits
    kshift = 1 if k == 2 else 2  # byte index = code index >> kshift (a per-block division costs ~2 cycles/code)
    aligned = bc % k == 0 or bc >= C
    ntiles = (C + tile - 1) // tile
    first, last = part_range(P * R * ntiles, part, parts)
    for unit in range(first, last):
        p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
        g = quotient(c, bc)
        if aligned:
            while c < end:
                stop = min((g + 1) * bc, end)
                qs, os = q[p, r, c >> kshift:stop >> kshift], out[p, r, c:stop]
                if has_zp:
                    _dequantize_bytes(qs, os, scale[sp, sr, g], zp[sp, sr, g], signed, like)
                else:
                    _dequantize_bytes(qs, os, scale[sp, sr, g], ZERO, signed, like)
                c = stop
                g += 1
            continue
        left = (g + 1) * bc - c
        qs, os = q[p, r, c // k:end // k], out[p, r, c:end]
        for j in range(qs.size):
            byte = qs[j]
            for t in range(k):
                if left == 0:
                    g += 1
                    left = bc
                z = zp[sp, sr, g] if has_zp else np.float32(0)
                v = dequantize_value(code_value(unpack_field(byte, t, nbits), nbits, signed), scale[sp, sr, g], z)
                os[j * k + t] = store_float(v, like)
                left -= 1


@element_function
def _dequantize_two_bit_chunk(args, p, r, sp, sr, g, c, stop, codes, words16, words32):
    """2-bit codes: a chunk spread into the byte buffer with :func:`~nbquant.element.unpack_byte_codes`, then one
    contiguous loop per scale block."""
    q, scale, zp, has_zp, signed, bc, like, out = args
    unpack_byte_codes(q[p, r, c >> 2:(stop + 3) >> 2], words16, words32, 2)
    b = c
    while b < stop:
        b_end = min((g + 1) * bc, stop)
        cs, os = codes[b - c:b_end - c], out[p, r, b:b_end]
        if has_zp:
            _dequantize_block(cs, os, scale[sp, sr, g], zp[sp, sr, g], 2, signed, like)
        else:
            _dequantize_block(cs, os, scale[sp, sr, g], ZERO, 2, signed, like)
        if b_end == (g + 1) * bc:
            g += 1
        b = b_end
    return g


_DEQUANTIZE_TWO_BIT = chunk_frame(_dequantize_two_bit_chunk)


@cpu_kernel
def fake_amax_kernel(part, parts, x, amax, is_float, maxbound, qmin, qmax, fp, bp, br, bc, tile, like, out, store_codes,
                     codes):
    """modelopt fake quant of ``x`` (P, R, C) with a block-grid ``amax`` (GP, GR, GC) into ``out``.

    Integer path: ``clamp(rne(x * S)) / S`` (:func:`~nbquant.element.amax_scales`); with
    ``store_codes`` the float32 code values go to ``codes`` (x's shape) too.
    Float path (``is_float``): ``decode(encode(clamp(x * S))) * fl(1 / S)`` with
    ``S = fl(fl(1 / amax) * maxbound)``.
    """
    _FAKE_AMAX(part, parts, x.shape, tile, bp, br, bc,
               (x, amax, is_float, maxbound, qmin, qmax, fp, like, out, store_codes, codes))


@element_function
def _fake_amax_block(args, p, r, sp, sr, g, c, stop):
    x, amax, is_float, maxbound, qmin, qmax, fp, like, out, store_codes, codes = args
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


_FAKE_AMAX = block_frame(_fake_amax_block)


@cpu_kernel
def fake_affine_kernel(part, parts, x, step, qz, minb, maxb, tile, like, out):
    """Legacy FakeAffine: ``(clamp(rne(x / step) - qz, minb, maxb) + qz) * step`` over ``x`` (rows, n)."""
    rows, n = x.shape
    ntiles = (n + tile - 1) // tile
    lo = np.float32(minb)
    hi = np.float32(maxb)
    first, last = part_range(rows * ntiles, part, parts)
    for unit in range(first, last):
        r = quotient(unit, ntiles)
        c = (unit - r * ntiles) * tile
        xs, os = x[r, c:min(c + tile, n)], out[r, c:min(c + tile, n)]
        for i in range(xs.size):
            os[i] = store_float(affine_fake_value(xs[i], step, qz, lo, hi), like)


@cpu_kernel
def ste_kernel(part, parts, grad, x, lo, hi, bp, br, bc, tile, like, out):
    """``out = grad where lo <= x <= hi else 0`` over (P, R, C) with block-grid bounds ``lo``/``hi``."""
    _STE(part, parts, x.shape, tile, bp, br, bc, (grad, x, lo, hi, like, out))


@element_function
def _ste_block(args, p, r, sp, sr, g, c, stop):
    grad, x, lo, hi, like, out = args
    a = lo[sp, sr, g]
    b = hi[sp, sr, g]
    xs, gs, os = x[p, r, c:stop], grad[p, r, c:stop], out[p, r, c:stop]
    for i in range(xs.size):
        os[i] = store_float(ste_value(gs[i], xs[i], a, b), like)


_STE = block_frame(_ste_block)
