"""Float32 bits, rounding and storage: the LLVM intrinsics and their wrappers.

Target-specific instructions sit in ``@intrinsic`` functions that branch on the LLVM
target triple; kernel bodies never call an intrinsic directly (the CUDA simulator
runs kernel bodies as Python and cannot run them), only the wrappers declared with
:func:`element_function`.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = [
    "_to_f32",  # the intrinsics under load_f32/store_float, called directly where one inlined call fewer matters
    "_from_f32",
    "CANONICAL_NAN_BITS",
    "element_function",
    "rint_f32",
    "load_f32",
    "store_float",
    "canonical_f32",
    "max_f32",
    "min_f32",
    "pick",
    "f32_bits",
    "bits_f32",
    "ashr32",
    "shl32",
    "abs_bits",
    "order_key",
    "range_keys",
    "key_f32",
    "absmax_bits",
    "minmax_keys",
]

#: The decorator of every element function. ``inline="always"`` inlines on Numba IR before typing,
#: so the same function compiles inside CPU ``njit`` kernels, ``numba.cuda.jit`` kernels and a GPU-less
#: ``cuda.compile_ptx``; ``error_model="numpy"`` gives IEEE results (``x / 0`` is inf, not an
#: exception) when a function is called on its own, as the CUDA simulator calls them.
element_function = njit(inline="always", error_model="numpy")

#: The bits of the NaN every float output holds where its value is NaN: ``numpy.nan`` in each type.
CANONICAL_NAN_BITS = {"float32": 0x7FC00000, "float16": 0x7E00, "bfloat16": 0x7FC0}

_F32 = ir.FloatType()
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)


def _is_nvptx(builder) -> bool:
    return "nvptx" in builder.module.triple


@intrinsic
def _reinterpret(typingctx, value):
    """Reinterpret IEEE bits: float32 → its bits zero-extended to int64; int64 → the float32 of its low 32 bits."""

    def to_bits(context, builder, signature, args):
        return builder.zext(builder.bitcast(args[0], _I32), ir.IntType(64))

    def to_float(context, builder, signature, args):
        return builder.bitcast(builder.trunc(args[0], _I32), _F32)

    if value == types.float32:
        return types.int64(types.float32), to_bits
    if value == types.int64:
        return types.float32(types.int64), to_float
    return None


def _int32_shift(kind: str):
    """An intrinsic ``(value, amount) -> int32``: ``value`` (any integer, truncated to 32 bits) shifted in int32.

    Numba widens every operation on int32 to int64, and LLVM cannot narrow a shift back by
    a run-time amount; a loop of 64-bit shifts vectorizes half as wide (8 lanes of AVX-512).
    The amount must be in ``[0, 31]``.
    """

    def typer(typingctx, value, amount):
        if not (isinstance(value, types.Integer) and isinstance(amount, types.Integer)):
            return None

        def codegen(context, builder, signature, args):
            v, n = (builder.trunc(a, _I32) if a.type.width > 32 else builder.sext(a, _I32) if a.type.width < 32
                    else a for a in args)
            return getattr(builder, kind)(v, n)

        return types.int32(value, amount), codegen

    return intrinsic(typer)


_ashr32 = _int32_shift("ashr")
_shl32 = _int32_shift("shl")


@intrinsic
def _rint(typingctx, value):
    """Round float32 to the nearest integer, ties to even, staying in float32."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(_F32, [_F32])
        if _is_nvptx(builder):
            asm = ir.InlineAsm(fnty, "cvt.rni.f32.f32 $0, $1;", "=f,f")
            return builder.call(asm, args)
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.rint.f32")
        return builder.call(fn, args)

    return types.float32(types.float32), codegen


@intrinsic
def _to_f32(typingctx, value):
    """Decode one input element to float32 by its storage type.

    float32 passes through, float64 rounds (RNE), uint16 holds float16 bits,
    int16 holds bfloat16 bits.
    """
    if value not in (types.float32, types.float64, types.uint16, types.int16):
        return None

    def codegen(context, builder, signature, args):
        (v,) = args
        if value == types.float32:
            return v
        if value == types.float64:
            return builder.fptrunc(v, _F32)
        if value == types.uint16:
            return builder.fpext(builder.bitcast(v, ir.HalfType()), _F32)
        wide = builder.shl(builder.zext(v, _I32), ir.Constant(_I32, 16))
        return builder.bitcast(wide, _F32)

    return types.float32(value), codegen


@intrinsic
def _from_f32(typingctx, value, like):
    """Encode float32 into the storage type of ``like`` (RNE for the narrow types).

    ``like`` float32 → float32; uint16 → float16 bits; int16 → bfloat16 bits. Every
    NaN becomes the type's canonical quiet NaN (:data:`CANONICAL_NAN_BITS`: what
    ``numpy.nan`` converts to), whatever its sign and payload: x86 keeps an operand's
    NaN bits and a GPU writes 0x7fffffff, so only a canonical NaN is the same everywhere.
    """
    if value != types.float32 or like not in (types.float32, types.uint16, types.int16):
        return None

    def codegen(context, builder, signature, args):
        v = args[0]
        is_nan = builder.fcmp_unordered("uno", v, v)
        if like == types.float32:
            nan = builder.bitcast(ir.Constant(_I32, CANONICAL_NAN_BITS["float32"]), ir.FloatType())
            return builder.select(is_nan, nan, v)
        if like == types.uint16:
            half = builder.bitcast(builder.fptrunc(v, ir.HalfType()), _I16)
            return builder.select(is_nan, ir.Constant(_I16, CANONICAL_NAN_BITS["float16"]), half)
        bits = builder.bitcast(v, _I32)
        upper = builder.lshr(bits, ir.Constant(_I32, 16))
        lsb = builder.and_(upper, ir.Constant(_I32, 1))
        rounded = builder.add(bits, builder.add(lsb, ir.Constant(_I32, 0x7FFF)))
        rounded = builder.lshr(rounded, ir.Constant(_I32, 16))
        return builder.trunc(builder.select(is_nan, ir.Constant(_I32, CANONICAL_NAN_BITS["bfloat16"]), rounded), _I16)

    return like(types.float32, like), codegen


@element_function
def rint_f32(v):
    """Round half to even in float32 (``cvt.rni.f32.f32`` on CUDA, ``llvm.rint`` on CPU)."""
    return _rint(np.float32(v))


@element_function
def load_f32(v):
    """Decode a float32/float64/float16-bits/bfloat16-bits element to float32."""
    return _to_f32(v)


@element_function
def store_float(v, like):
    """Encode a float32 value into the element type of ``like`` (see :func:`_from_f32`)."""
    return _from_f32(np.float32(v), like)


@element_function
def canonical_f32(v):
    """``v`` as float32, a NaN as the canonical one (what every float output holds: see :func:`_from_f32`)."""
    return _from_f32(np.float32(v), np.float32(0.0))


@intrinsic
def _select_kept(typingctx, take, new, old):
    """``select(take, new, old)``, ``old`` through LLVM's ``freeze`` on the CPU (which no pass looks through)."""
    if not isinstance(take, types.Boolean) or new != old or not isinstance(new, (types.Float, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        take_bit, new_value, old_value = args
        if not _is_nvptx(builder):  # NVVM IR has no freeze, and no masked stores to avoid
            old_value = ir.instructions.Instruction(builder.block, old_value.type, "freeze", [old_value])
            builder._insert(old_value)
        return builder.select(take_bit, new_value, old_value)

    return new(take, new, old), codegen


@element_function
def pick(take, new, old):
    """``new if take else old``, where ``old`` was loaded from the place the result is stored to.

    A loop over lanes that keeps or replaces each lane's value (``st[i, lane] = pick(better,
    new, st[i, lane])``) then vectorizes as a blend and a plain store. As ``new if take else
    old`` (a branch), LLVM stores under a mask (``vmaskmovps``), and its x86 back end turns even
    ``store(select(take, new, load p), p)`` into a masked store: slow on AMD Zen 3 (64 lanes of
    ``largest_magnitude_lanes``: 0.89 µs against 0.11 µs as a blend), and a later load cannot be
    forwarded from it. Here the select is one instruction from the start, and ``old`` is frozen.

    Examples
    --------
    >>> from numba import njit
    >>> njit(lambda a, b: pick(a > b, a, b))(2.0, 1.0)
    2.0
    """
    return _select_kept(take, new, old)


@element_function
def max_f32(a, b):
    """``max(a, b)`` as Numba's cpu ``max`` has it, on every target: ``b`` only when ``b > a``.

    A NaN ``b`` never wins, a NaN ``a`` stays, and ``max(-0.0, 0.0)`` is ``-0.0``. Found on a
    GPU: numba-cuda lowers the builtin ``max`` of floats to ``fmaxf``, which drops a NaN and
    returns ``+0.0`` there (a negative value clamped at 0 lost its sign).
    """
    return b if b > a else a


@element_function
def min_f32(a, b):
    """``min(a, b)`` as Numba's cpu ``min`` has it, on every target: ``b`` only when ``b < a`` (see
    :func:`max_f32`)."""
    return b if b < a else a


@element_function
def f32_bits(v):
    """The IEEE bits of ``v`` as float32, as a non-negative int64."""
    return _reinterpret(np.float32(v))


@element_function
def bits_f32(bits):
    """The float32 with IEEE bits ``bits`` (an integer below 2**32)."""
    return _reinterpret(np.int64(bits))


@element_function
def ashr32(value, amount):
    """``value >> amount`` in int32 (arithmetic; ``amount`` in ``[0, 31]``), without Numba's widening to int64."""
    return _ashr32(value, amount)


@element_function
def shl32(value, amount):
    """``value << amount`` in int32 (wrapping; ``amount`` in ``[0, 31]``), without Numba's widening to int64."""
    return _shl32(value, amount)


@element_function
def abs_bits(v):
    """``|v|`` as float32 bits (an int32): orders finite values, inf (0x7f800000) and NaN (above) as integers."""
    return np.int32(f32_bits(load_f32(v)) & 0x7FFFFFFF)


@element_function
def order_key(v):
    """An int32 key whose integer order is the float order of ``v`` (-0.0 below +0.0; NaN beyond ±inf).

    Integer min/max reductions over these keys vectorize where float ones do not
    (keep the accumulator int32 too: 8 lanes per AVX2 vector instead of 4). The keys
    span the whole int32 range: -2**31 is the largest negative NaN, 2**31 - 1 the largest NaN.
    """
    b = np.int32(f32_bits(load_f32(v)))  # the bits, wrapped to a signed int32
    return np.int32((b & 0x7FFFFFFF) ^ (b >> 31))


@element_function
def range_keys(v):
    """The keys of ``v`` for a block's minimum and for its maximum: ``(low, high)``, both :func:`order_key` ones.

    Both are ``order_key(v)`` unless ``v`` is NaN, whatever its sign and payload: then ``low``
    is the key of ``-|v|`` (below every non-NaN key) and ``high`` that of ``|v|`` (above), so the
    min of the lows and the max of the highs of a block holding a NaN are both NaN, as
    ``numpy.min`` and ``numpy.max`` give (with ``order_key`` alone the NaN's sign bit picks one side).
    """
    k = order_key(v)
    a = abs_bits(v)
    nan = a > np.int32(0x7F800000)
    return (np.int32(~a) if nan else k), (a if nan else k)


@element_function
def key_f32(key):
    """The float32 of an :func:`order_key` (exact inverse)."""
    k = np.int64(key)
    return bits_f32(k if k >= 0 else ((-k - 1) | 0x80000000))


@element_function
def absmax_bits(xs):
    """The largest :func:`abs_bits` of the slice ``xs`` (0 when empty).

    The accumulator stays int32 so the loop vectorizes 8 lanes wide (an int64 one gets 4).
    """
    amax = np.int32(0)
    for i in range(xs.size):
        amax = np.int32(max(amax, abs_bits(xs[i])))
    return amax


@element_function
def minmax_keys(xs):
    """The smallest low and largest high :func:`range_keys` of the slice ``xs`` (not empty), in int32 accumulators.

    A NaN anywhere in ``xs`` makes both keys NaN keys.
    """
    lo = np.int32(0x7FFFFFFF)
    hi = np.int32(-0x80000000)
    for i in range(xs.size):
        low, high = range_keys(xs[i])
        lo = np.int32(min(lo, low))
        hi = np.int32(max(hi, high))
    return lo, hi
