"""Scalar helpers of the GGUF block formats: ggml's float16 store, ``nearest_int``, an unfused multiply, byte fields.

ggml computes in float32 with no FMA contraction (``ggml-base`` is built without
``-march`` on x86-64). NVVM contracts ``a*b + c`` into an FMA by default, so every
product that is later added goes through :func:`mul_f32`, an inline ``mul.rn.f32`` on
CUDA (which ptxas never fuses) and a plain ``fmul`` on the CPU.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .bits import element_function, f32_bits, store_float

__all__ = ["mul_f32", "ggml_f16", "nearest_int", "put_u16", "put_u32", "get_u16", "get_u32", "trunc_i64",
           "round_away", "sum_squares", "largest_magnitude", "nonnegative_maxima"]

_F32 = ir.FloatType()


@intrinsic
def _mul_rn(typingctx, a, b):
    """``a * b`` in float32, never fused into a later add (CUDA: inline ``mul.rn.f32``)."""
    if a != types.float32 or b != types.float32:
        return None

    def codegen(context, builder, signature, args):
        if "nvptx" in builder.module.triple:
            asm = ir.InlineAsm(ir.FunctionType(_F32, [_F32, _F32]), "mul.rn.f32 $0, $1, $2;", "=f,f,f")
            return builder.call(asm, args)
        return builder.fmul(args[0], args[1])

    return types.float32(types.float32, types.float32), codegen


@element_function
def mul_f32(a, b):
    """``a * b`` rounded to float32 on its own: a later ``+`` is never contracted into an FMA."""
    return _mul_rn(np.float32(a), np.float32(b))


@element_function
def sum_squares(x, c, n):
    """``sum(x[c:c + n]**2)`` in order, in float32, each square rounded on its own (ggml's ``sumx2`` loops)."""
    s = np.float32(0.0)
    for j in range(n):
        v = np.float32(x[c + j])
        s = s + mul_f32(v, v)
    return s


@element_function
def largest_magnitude(x, c, n):
    """``(amax, value)``: the largest ``|x|`` of ``x[c:c + n]`` and the first value holding it, as ggml's
    ``if (amax < fabsf(v))`` loops find them (a NaN never wins; both 0.0 for an all-zero block)."""
    amax = np.float32(0.0)
    mx = np.float32(0.0)
    for j in range(n):
        v = np.float32(x[c + j])
        if abs(v) > amax:
            amax = abs(v)
            mx = v
    return amax, mx


@element_function
def nonnegative_maxima(fs, a, b, n):
    """The largest of ``fs[a:a + n]`` and of ``fs[b:b + n]``, each at least 0.0 (ggml's ``max_scale`` and
    ``max_min`` loops over a K-quant's sub-block scales and minima)."""
    top_a = np.float32(0.0)
    top_b = np.float32(0.0)
    for j in range(n):
        if fs[a + j] > top_a:
            top_a = fs[a + j]
        if fs[b + j] > top_b:
            top_b = fs[b + j]
    return top_a, top_b


@element_function
def ggml_f16(v):
    """ggml's ``GGML_FP32_TO_FP16``: float16 bits of ``v``, round half to even; a NaN is ``0xfe00``.

    A NaN scale comes from an invalid operation (``inf / inf`` where a block's squares overflow),
    and x86 writes its default NaN, ``0xffc00000``, stored as ``0xfe00``. The sign of a NaN is not
    portable: a GPU's arithmetic writes ``0x7fffffff`` (found on an H100), so the sign is not read.
    """
    v = np.float32(v)
    if v != v:
        return np.int64(0xFE00)
    return np.int64(store_float(v, np.uint16(0)))


@element_function
def nearest_int(v):
    """ggml's ``nearest_int``: ``v + 1.5 * 2**23`` in float32, then its low mantissa bits (round half to even).

    A NaN gives 0: the low bits of x86's default NaN (``0xffc00000``), which every NaN an operation
    makes on x86 carries; a GPU's NaN (``0x7fffffff``) would give ``0x3fffff`` (found on an H100).
    """
    w = np.float32(np.float32(v) + np.float32(12582912.0))
    return np.int64(0) if w != w else (f32_bits(w) & 0x7FFFFF) - 0x400000


_INT_RANGE = np.float32(2147483648.0)


@element_function
def trunc_i64(v):
    """C's float-to-``int`` conversion on x86-64 (``cvttss2si``): toward zero; NaN and ``|v| >= 2**31`` give
    ``INT_MIN``, whose low byte (all a narrowing store keeps) is 0, so they return 0."""
    v = np.float32(v)
    return np.int64(np.int32(v if abs(v) < _INT_RANGE else np.float32(0.0)))  # branch-free: loops of it vectorize


@element_function
def round_away(v):
    """C's ``roundf`` then its conversion to an integer (half away from zero; out of range or NaN: 0, as above).

    Branch-free, in 32-bit integers, so that a loop of it vectorizes: the truncation ``t`` is
    exact, the remainder ``v - t`` too, and it moves ``t`` one step away from zero at a half or
    more (a branch on the remainder mispredicted on half of all values: 13 ns a value for Q8_0).
    """
    v = np.float32(v)
    w = v if abs(v) < _INT_RANGE else np.float32(0.0)
    t = np.int32(w)
    r = w - np.float32(t)  # exact
    return np.int64(t + np.int32(r >= np.float32(0.5)) - np.int32(r <= np.float32(-0.5)))


@element_function
def put_u16(rec, o, value):
    """Store the low 16 bits of ``value`` little-endian at ``rec[o:o + 2]``."""
    rec[o] = np.uint8(value & 0xFF)
    rec[o + 1] = np.uint8((value >> 8) & 0xFF)


@element_function
def put_u32(rec, o, value):
    """Store the low 32 bits of ``value`` little-endian at ``rec[o:o + 4]``."""
    for k in range(4):
        rec[o + k] = np.uint8((value >> (8 * k)) & 0xFF)


@element_function
def get_u16(rec, o):
    """The little-endian 16-bit field at ``rec[o:o + 2]``."""
    return np.int64(rec[o]) | (np.int64(rec[o + 1]) << 8)


@element_function
def get_u32(rec, o):
    """The little-endian 32-bit field at ``rec[o:o + 4]``."""
    return get_u16(rec, o) | (get_u16(rec, o + 2) << 16)

