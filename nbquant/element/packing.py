"""The packed-code bit layout, in one place.

Codes fill a little-endian bit stream: code ``t`` of a group occupies bits
``[bits * t, bits * (t + 1))`` of the group's word, and byte ``b`` of the group holds
bits ``[8b, 8b + 8)``. So 4-bit codes pack two per byte (the first in the low
nibble), 2-bit codes four per byte, 6-bit codes four in three bytes. NF4 is the one
exception, modelopt's layout: the first code in the HIGH nibble.
"""

from __future__ import annotations

import numpy as np

from .bits import element_function

__all__ = ["pack_field", "unpack_field", "pack_pair", "pack_nf4_pair", "pack_byte_codes", "unpack_byte_codes",
           "pack_six_bit_codes", "unpack_six_bit_codes", "pack_nf4_codes", "unpack_nf4_codes"]


@element_function
def pack_field(word, code, t, bits):
    """``word`` with ``code`` (its low ``bits`` bits) placed as field ``t`` of the group.

    With ``bits=8`` the fields are the group's bytes, so the same function joins bytes into a word.
    """
    return np.int64(word) | ((np.int64(code) & ((1 << bits) - 1)) << (np.int64(t) * bits))


@element_function
def unpack_field(word, t, bits):
    """Field ``t`` of ``bits`` bits of a group's ``word``: a code, or with ``bits=8`` byte ``t``.

    ``t`` is cast to int64 (an unsigned loop index times a signed width would be float64).
    """
    return (word >> (np.int64(t) * bits)) & ((1 << bits) - 1)


@element_function
def pack_pair(first, second):
    """Two 4-bit codes in one byte, ``first`` in the low nibble."""
    return (first & 15) | ((second & 15) << 4)


@element_function
def pack_nf4_pair(first, second):
    """Two NF4 indices in one byte, ``first`` in the HIGH nibble (modelopt's NF4QTensor layout)."""
    return pack_pair(second, first)


@element_function
def pack_byte_codes(words16, words32, out, bits):
    """Pack byte codes, read as little-endian words of one buffer, into ``out``: one word per output byte.

    4-bit: ``words16[j]`` holds codes ``2j`` and ``2j + 1``; 2-bit: ``words32[j]`` holds
    codes ``4j`` .. ``4j + 3``. The loop is contiguous and vectorizes (packing straight
    from the floats needs strided reads that do not).
    """
    if bits == 4:
        for j in range(out.size):
            w = words16[j]
            out[j] = (w & 0x0F) | ((w >> 4) & 0xF0)
    else:
        for j in range(out.size):
            w = words32[j]
            out[j] = (w & 0x03) | ((w >> 6) & 0x0C) | ((w >> 12) & 0x30) | ((w >> 18) & 0xC0)


@element_function
def unpack_byte_codes(packed, words16, words32, bits):
    """Spread the packed bytes ``packed`` into one code per byte of a buffer, seen as ``words16``/``words32``.

    The inverse of :func:`pack_byte_codes`: 4-bit codes of byte ``j`` go to ``words16[j]``
    (codes ``2j``, ``2j + 1``), 2-bit codes to ``words32[j]``. Contiguous and vectorizes;
    a dequantize loop then reads the buffer contiguously (writing two or four outputs per
    packed byte with strided stores does not vectorize for 2-bit codes).
    """
    if bits == 4:
        for j in range(packed.size):
            b = np.uint16(packed[j])
            words16[j] = (b & 0x0F) | ((b & 0xF0) << 4)
    else:
        for j in range(packed.size):
            b = np.uint32(packed[j])
            words32[j] = (b & 0x03) | ((b & 0x0C) << 6) | ((b & 0x30) << 12) | ((b & 0xC0) << 18)


@element_function
def pack_six_bit_codes(words32, out):
    """Pack 6-bit byte codes, read four at a time as little-endian ``words32``, into ``out``: 3 bytes per word.

    Codes ``4j`` .. ``4j + 3`` fill bits ``[0, 24)`` of group ``j``, the first in the low bits
    (the layout of :func:`pack_field` with ``bits=6``).
    """
    for j in range(out.size // 3):
        w = np.uint32(words32[j])
        v = (w & 0x3F) | ((w >> 2) & 0xFC0) | ((w >> 4) & 0x3F000) | ((w >> 6) & 0xFC0000)
        out[3 * j] = v & 0xFF
        out[3 * j + 1] = (v >> 8) & 0xFF
        out[3 * j + 2] = v >> 16


@element_function
def unpack_six_bit_codes(packed, words32):
    """The inverse of :func:`pack_six_bit_codes`: each 3 bytes of ``packed`` to four byte codes in ``words32``."""
    for j in range(packed.size // 3):
        v = np.uint32(packed[3 * j]) | (np.uint32(packed[3 * j + 1]) << 8) | (np.uint32(packed[3 * j + 2]) << 16)
        words32[j] = (v & 0x3F) | ((v & 0xFC0) << 2) | ((v & 0x3F000) << 4) | ((v & 0xFC0000) << 6)


@element_function
def unpack_nf4_codes(packed, words16):
    """:func:`unpack_byte_codes` for NF4's layout (:func:`pack_nf4_pair`): the HIGH nibble is the first code."""
    for j in range(packed.size):
        b = np.uint16(packed[j])
        words16[j] = ((b & 0xF0) >> 4) | ((b & 0x0F) << 8)


@element_function
def pack_nf4_codes(words16, out):
    """:func:`pack_byte_codes` for NF4's layout (:func:`pack_nf4_pair`): code ``2j`` in byte ``j``'s HIGH nibble."""
    for j in range(out.size):
        w = words16[j]
        out[j] = ((w & 0x0F) << 4) | ((w >> 8) & 0x0F)
