"""The cpu codec kernels: every static quantize and dequantize kernel, one template, one loop per kernel.

A codec kernel maps each element of a canonical ``(P, R, C)`` view to one element of the
other: ``out = value(src, scale, zero point)`` with the scale (and zero point) of the
element's block. Work units are row tiles (:func:`~._kernel.work_unit`), taken a scale
block at a time (one contiguous loop per block, so the element functions vectorize; the
scale is read once per block, no index is divided per element), or an element at a time
with a scale per element when blocks are one column wide. Packed codes go through a byte
buffer of :data:`PACK_CHUNK` codes in L1: quantized into it, then packed in one loop, or
unpacked into it, then dequantized; 4-bit integer codes dequantize straight from their
bytes (:data:`NIBBLES`: two strided stores per byte beat the buffer).

Each kernel of a first call should compile one inlined loop: each costs about a second of
compile time on 2 cores (the int8 quantize kernel that held all seven took 12 s of cpu).
So :func:`codec_kernel` makes a kernel per mode from one template, each a function of its
own (:func:`~nbquant.backends._format_kernel.format_kernel`) whose globals fix the mode:
Numba prunes the branches on them before it inlines, and LLVM folds the constant scale op
and zero point (``-0.0`` for a quantize without one: its add is compiled away).
"""

from __future__ import annotations

import numpy as np

from ...element import (
    element_function,
    pack_byte_codes,
    pack_six_bit_codes,
    unpack_byte_codes,
    unpack_field,
    unpack_six_bit_codes,
)
from ._kernel import CpuKernel, part_range, quotient, template_kernel, work_unit

__all__ = ["codec_kernel", "CODEC_KERNELS", "Codec", "PACK_CHUNK", "MAP", "PACK", "UNPACK", "NIBBLES", "RUNTIME_OP",
           "NO_ZERO_POINT", "ZERO", "OP_NAMES"]

#: Codes a packing kernel quantizes into (or unpacks into) a byte buffer in L1 at a time.
PACK_CHUNK = 4096
#: How a codec kernel moves its codes: one per element; packed through the buffer; unpacked through it; 4-bit
#: codes read two per byte.
MAP, PACK, UNPACK, NIBBLES = 0, 1, 2, 3
#: The scale op of a kernel that reads it from its parameters at run time (``params[0]``): the half precision ops.
RUNTIME_OP = -1
#: The zero point of a quantize without one: ``rne(v) + (-0.0)`` is ``rne(v)``, so the add is compiled away.
NO_ZERO_POINT = np.float32(-0.0)
#: The zero point of a dequantize without one: ``code - (+0.0)`` is ``code``, so the subtraction is compiled away.
ZERO = np.float32(0.0)


class Codec:
    """One family of codec kernels: its element function, how it moves codes, and its name.

    Parameters
    ----------
    name : str
        The kernels' names start with it.
    value : callable
        ``value(v, s, z, op, has_zp, params)``: an :func:`~nbquant.element.element_function` of
        one source element ``v``, its scale ``s`` and zero point ``z``, the kernel's scale op
        ``op`` (a constant, or :data:`RUNTIME_OP`), whether it has a zero point (a constant)
        and the call's ``params`` tuple.
    codec : int
        :data:`MAP`, :data:`PACK`, :data:`UNPACK` or :data:`NIBBLES`.
    bits : int
        The bits of a packed code (:data:`PACK`, :data:`UNPACK`): 2, 4 or 6.
    no_zero_point : numpy.float32
        The constant zero point of a kernel without one.
    """

    def __init__(self, name: str, value, codec: int = MAP, bits: int = 8,
                 no_zero_point: np.float32 = NO_ZERO_POINT) -> None:
        self.name, self.value, self.codec, self.no_zero_point = name, value, codec, no_zero_point
        #: ``pack(row, c, stop, words16, words32)``: codes ``[c, stop)`` of the packed ``row`` from or into the buffer
        self.pack = {PACK: PACKERS, UNPACK: UNPACKERS}.get(codec, {}).get(bits)


#: Every codec kernel made so far, by name.
CODEC_KERNELS: dict[str, CpuKernel] = {}
#: What a kernel's name says of its scale op.
OP_NAMES = {0: "", 1: "_multiply", RUNTIME_OP: "_half"}


def codec_kernel(family: Codec, op: int = 0, zero_point: bool = False, columns: bool = False) -> CpuKernel:
    """The kernel of ``family`` for one mode, made on first use.

    ``kernel(src, scale, zp, params, bp, br, bc, tile, out)`` over canonical views: ``src``
    and ``out`` (P, R, C) or packed (P, R, C / k), ``scale`` and ``zp`` block grids (``zp``
    any float32 3-d array when ``zero_point`` is false), blocks ``(bp, br, bc)``.

    Parameters
    ----------
    family : Codec
        What the kernel computes and how it moves codes.
    op : int
        The float32 :class:`~nbquant.modes.ScaleOp` (0 divide, 1 multiply), or :data:`RUNTIME_OP`.
    zero_point : bool
        Whether it reads a zero point per block (else :attr:`Codec.no_zero_point`).
    columns : bool
        Blocks one column wide: a scale (and zero point) per element of a scale row.

    Returns
    -------
    CpuKernel
        Named ``{family}[_multiply|_half][_zp][_columns]_kernel``.
    """
    name = f"{family.name}{OP_NAMES[op]}{'_zp' if zero_point else ''}{'_columns' if columns else ''}_kernel"
    doc = (f"The {family.name} codec kernel (:mod:`{__name__}`): scale op {op}, {'a' if zero_point else 'no'} zero "
           f"point, {'columns' if columns else 'blocks'}.")
    return template_kernel(CODEC_KERNELS, name, _codec_template, doc, _VALUE=family.value, _CODEC=family.codec,
                           _PACK=family.pack, _NO_ZP=family.no_zero_point, _OP=op, _ZP=zero_point, _COLUMNS=columns)


# Placeholders: each kernel has its own (codec_kernel's globals).
_VALUE = _PACK = None
_CODEC = _OP = 0
_NO_ZP = NO_ZERO_POINT
_ZP = _COLUMNS = False


def _codec_template(part, parts, src, scale, zp, params, bp, br, bc, tile, out):
    # Inner loops index slices from 0: a loop index that starts elsewhere keeps Numba's
    # negative-index wraparound check alive and stops vectorization (5x slower).
    P, R, C = out.shape if _CODEC == UNPACK or _CODEC == NIBBLES else src.shape
    ntiles = (C + tile - 1) // tile
    first, last = part_range(P * R * ntiles, part, parts)
    if _CODEC == PACK or _CODEC == UNPACK:
        codes = np.empty(PACK_CHUNK, np.uint8)
        words16, words32 = codes.view(np.uint16), codes.view(np.uint32)
    for unit in range(first, last):
        p, r, sp, sr, c, end = work_unit(unit, ntiles, tile, R, C, bp, br)
        g = quotient(c, bc)
        while c < end:
            stop = min(c + PACK_CHUNK, end) if _CODEC == PACK or _CODEC == UNPACK else end
            if _CODEC == UNPACK:
                _PACK(src[p, r], c, stop, words16, words32)
            b = c
            while b < stop:
                b_end = stop if _COLUMNS else min((g + 1) * bc, stop)
                if _CODEC == PACK:
                    xs, os = src[p, r, b:b_end], codes[b - c:b_end - c]
                elif _CODEC == UNPACK:
                    xs, os = codes[b - c:b_end - c], out[p, r, b:b_end]
                elif _CODEC == NIBBLES:
                    xs, os = src[p, r, b >> 1:b_end >> 1], out[p, r, b:b_end]
                else:
                    xs, os = src[p, r, b:b_end], out[p, r, b:b_end]
                if _COLUMNS:
                    ss, zs = scale[sp, sr, b:b_end], zp[sp, sr, b:b_end]
                    for i in range(xs.size):
                        os[i] = _VALUE(xs[i], ss[i], zs[i] if _ZP else _NO_ZP, _OP, _ZP, params)
                else:
                    s, z = scale[sp, sr, g], zp[sp, sr, g] if _ZP else _NO_ZP
                    if _CODEC == NIBBLES:
                        for j in range(xs.size):
                            byte = xs[j]
                            os[2 * j] = _VALUE(unpack_field(byte, 0, 4), s, z, _OP, _ZP, params)
                            os[2 * j + 1] = _VALUE(unpack_field(byte, 1, 4), s, z, _OP, _ZP, params)
                    else:
                        for i in range(xs.size):
                            os[i] = _VALUE(xs[i], s, z, _OP, _ZP, params)
                    if b_end == (g + 1) * bc:
                        g += 1
                b = b_end
            if _CODEC == PACK:
                _PACK(out[p, r], c, stop, words16, words32)
            c = stop


@element_function
def _pack_four_bits(row, c, stop, words16, words32):
    """Pack buffered 4-bit codes ``[c, stop)`` into ``row``, two per byte (the first in the low bits)."""
    pack_byte_codes(words16, words32, row[c >> 1:stop >> 1], 4)


@element_function
def _pack_two_bits(row, c, stop, words16, words32):
    """Pack buffered 2-bit codes ``[c, stop)`` into ``row``, four per byte."""
    pack_byte_codes(words16, words32, row[c >> 2:stop >> 2], 2)


@element_function
def _pack_six_bits(row, c, stop, words16, words32):
    """Pack buffered 6-bit codes ``[c, stop)`` into ``row``, four in three bytes (chunks start on whole groups)."""
    pack_six_bit_codes(words32, row[(c >> 2) * 3:(stop >> 2) * 3])


@element_function
def _unpack_four_bits(row, c, stop, words16, words32):
    """Spread the 4-bit codes ``[c, stop)`` of ``row`` into the buffer, one per byte."""
    unpack_byte_codes(row[c >> 1:stop >> 1], words16, words32, 4)


@element_function
def _unpack_two_bits(row, c, stop, words16, words32):
    """Spread the 2-bit codes ``[c, stop)`` of ``row`` into the buffer, one per byte."""
    unpack_byte_codes(row[c >> 2:(stop + 3) >> 2], words16, words32, 2)


@element_function
def _unpack_six_bits(row, c, stop, words16, words32):
    """Spread the 6-bit codes ``[c, stop)`` of ``row`` into the buffer, one per byte."""
    unpack_six_bit_codes(row[(c >> 2) * 3:(stop >> 2) * 3], words32)


#: How a :data:`PACK` codec packs its codes into a row, by their bits.
PACKERS = {4: _pack_four_bits, 2: _pack_two_bits, 6: _pack_six_bits}
#: How an :data:`UNPACK` codec spreads a row's codes into its buffer, by their bits.
UNPACKERS = {4: _unpack_four_bits, 2: _unpack_two_bits, 6: _unpack_six_bits}
