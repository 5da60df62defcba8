"""CPU element-wise kernels: static integer quantize/dequantize, modelopt fake quantization and its gradient.

The static quantize and dequantize kernels are :mod:`._codec` kernels of this module's
families (:data:`QUANTIZE`, :data:`DEQUANTIZE`, :data:`DEQUANTIZE_NIBBLES`), one per mode;
:func:`quantize_kernel` is the front door's short path (per tensor, contiguous). The
modelopt kernels loop over the canonical ``(P, R, C)`` layout from
:func:`nbquant.layout.canonical_views` (:func:`block_frame`): parallel over work units of
one row tile, rows outer, a contiguous inner loop per scale block so the element
functions vectorize. All numerics live in :mod:`nbquant.element`.
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
    quantize_value,
    scaled_minifloat_fake,
    ste_value,
    store_float,
)
from ...modes import ScaleOp
from ._codec import MAP, NIBBLES, NO_ZERO_POINT, PACK, RUNTIME_OP, UNPACK, ZERO, Codec
from ._kernel import cpu_kernel, part_range, quotient, work_unit


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


@element_function
def _code(v, s, z, op, has_zp, params):
    """The integer code bits of ``v`` (a :class:`~._codec.Codec` value): ``params`` is ``(scale op, zero point
    before, qmin, qmax, mask)``, the scale op ``op`` unless that is :data:`~._codec.RUNTIME_OP`; without a zero
    point (``has_zp``, a constant) the order is a constant too, so nothing of it is compiled."""
    scale_op, zp_before, qmin, qmax, mask = params
    op = scale_op if op == RUNTIME_OP else op
    return code_bits(quantize_value(v, s, z, op, has_zp and zp_before, qmin, qmax), mask)


@element_function
def _value(q, s, z, op, has_zp, params):
    """The float value of the code bits ``q`` (a :class:`~._codec.Codec` value): ``params`` is ``(nbits, signed,
    like)``."""
    nbits, signed, like = params
    return store_float(dequantize_value(code_value(q, nbits, signed), s, z), like)


#: Integer quantize into code storage (one code per element), by packing: 8 unpacked, 4 and 2 packed.
QUANTIZE = {8: Codec("quantize_blocks", _code, MAP), 4: Codec("quantize_packed", _code, PACK, bits=4),
            2: Codec("quantize_packed2", _code, PACK, bits=2)}
#: Integer dequantize of code storage, by packing (4-bit codes in bytes whose blocks are not whole bytes).
DEQUANTIZE = {8: Codec("dequantize", _value, MAP, no_zero_point=ZERO),
              4: Codec("dequantize_unpack4", _value, UNPACK, bits=4, no_zero_point=ZERO),
              2: Codec("dequantize_packed2", _value, UNPACK, bits=2, no_zero_point=ZERO)}
#: Integer dequantize of 4-bit codes packed in bytes of whole scale blocks: two strided stores per byte.
DEQUANTIZE_NIBBLES = Codec("dequantize_packed", _value, NIBBLES, no_zero_point=ZERO)


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
