"""The block math of the scaled block formats: OCP MX (E8M0 scales), NVFP4 (E4M3 scales) and NF4 (amax)."""

from __future__ import annotations

import numpy as np

from ..formats import get_format
from ..modes import ScaleOp
from .affine import code_bits, quantize_value
from .bits import bits_f32, element_function, f32_bits, max_f32
from .minifloat import decode_e8m0, encode_fp

__all__ = [
    "E4M3",
    "E2M1",
    "mx_scale_code",
    "mx_inverse_scale",
    "mx_int8",
    "MXINT8_STEP",
    "nvfp4_block_scale",
    "NF4_VALUES",
    "nf4_code",
    "NF4_THRESHOLDS",
]

#: float8_e4m3fn encoding tuple (``QuantFormat.fp_params``), for NVFP4 block scales.
E4M3 = get_format("float8_e4m3fn").fp_params
#: float4_e2m1fn encoding tuple, for NVFP4 elements.
E2M1 = get_format("float4_e2m1fn").fp_params
#: The value of one MXINT8 code step, ``2**-6`` (elements are ``code / 64``).
MXINT8_STEP = np.float32(0.015625)


@element_function
def mx_scale_code(amax_bits, emax, max_mantissa, round_up):
    """The E8M0 shared-scale code of an MX block from the bits of its ``amax``.

    OCP MX v1.0: ``2**(floor(log2(amax)) - emax)`` (``round_up=False``); with
    ``round_up`` the smallest power of two that keeps ``amax / scale`` within the
    element format's largest value (mantissa ``max_mantissa``), so nothing clips.
    NaN or inf in the block gives the NaN code 0xff; codes clamp to [0, 254]. A
    subnormal ``amax`` is normalized first, so rounding up compares its true mantissa.
    """
    e = amax_bits >> 23
    mantissa = amax_bits & 0x7FFFFF
    if e == 0 and mantissa != 0:  # subnormal: times 2**24 (exact) gives its exponent and mantissa
        normal = f32_bits(bits_f32(amax_bits) * np.float32(16777216.0))
        e = (normal >> 23) - 24
        mantissa = normal & 0x7FFFFF
    code = e - emax
    if round_up and mantissa > max_mantissa:
        code += 1
    code = min(max(code, np.int64(0)), np.int64(254))
    return np.int64(0xFF) if e == 0xFF else code


@element_function
def mx_inverse_scale(code):
    """``1 / scale`` for an E8M0 code (exact: ``2**(127 - code)``); 1.0 for the NaN code."""
    c = np.int64(code)
    return np.float32(1.0) if c == 0xFF else decode_e8m0(254 - c)


@element_function
def mx_int8(v):
    """MXINT8 element: ``v * 64`` rounded half to even, clamped to ±127 (storage bits)."""
    return code_bits(quantize_value(v, np.float32(64.0), np.float32(0.0), ScaleOp.MULTIPLY, False,
                                    np.float32(-127.0), np.float32(127.0)), 0xFF)


@element_function
def nvfp4_block_scale(amax, six_global):
    """modelopt's NVFP4 block scale code: ``e4m3(max(amax / (6 * global), 2**-9))``, 0 read as 1, NaN kept."""
    s = np.float32(amax) / np.float32(six_global)  # float32 even where a caller passes float64 (the simulator)
    s = np.float32(1.0) if s == 0 else s
    s = s if s != s else max_f32(s, np.float32(0.001953125))
    return encode_fp(s, E4M3, True)


#: modelopt's NF4 table, as stored there: the 4-decimal values rounded to bfloat16. A global
#: array (a constant to Numba, read-only here): the search loop over it unrolls and vectorizes,
#: where indexing a tuple of 16 floats by a loop index compiles to a switch (10x slower).
NF4_VALUES = np.array([
    -1.0, -0.6953125, -0.5234375, -0.39453125, -0.28515625, -0.1845703125, -0.09130859375, 0.0,
    0.07958984375, 0.1611328125, 0.24609375, 0.337890625, 0.44140625, 0.5625, 0.72265625, 1.0,
], np.float32)
NF4_VALUES.flags.writeable = False


def _nf4_thresholds(values: np.ndarray) -> np.ndarray:
    """``t[i]``: the smallest float32 in ``(values[i], values[i+1]]`` nearer to ``values[i+1]`` in float32 arithmetic.

    "Nearer" is ``fl(|x - values[i+1]|) < fl(|x - values[i]|)``, strictly, as argmin keeps the
    first of a tie. Between two neighbours that predicate is monotone (both distances are
    rounded monotonically), so a bisection over the float32s in between finds where it
    turns true; farther entries never win there (their distances are larger by at least
    the gap between entries, far above float32 rounding at magnitudes up to 2).
    """
    def key(x: np.float32) -> int:
        b = int(np.array(x, np.float32).view(np.int32))
        return b if b >= 0 else -(b & 0x7FFFFFFF)

    def value(k: int) -> np.float32:
        return np.array(k if k >= 0 else (-k) | -0x80000000, np.int32).view(np.float32)[()]

    out = np.empty(values.size - 1, np.float32)
    for i in range(values.size - 1):
        lo_v, hi_v = values[i], values[i + 1]
        lo, hi = key(lo_v), key(hi_v)  # the predicate is false at lo_v (distance 0 to it), true at hi_v
        while hi - lo > 1:
            mid = (lo + hi) // 2
            x = value(mid)
            if np.float32(abs(x - hi_v)) < np.float32(abs(x - lo_v)):
                hi = mid
            else:
                lo = mid
        out[i] = value(hi)
    return out


#: Where each next NF4 entry becomes the nearest (see :func:`_nf4_thresholds`); a global constant array.
NF4_THRESHOLDS = _nf4_thresholds(NF4_VALUES)
NF4_THRESHOLDS.flags.writeable = False


@element_function
def nf4_code(v):
    """Index of the NF4 table entry nearest to float32 ``v``, for ``|v| <= 1`` or NaN (0), as argmin does.

    The count of :data:`NF4_THRESHOLDS` at or below ``v``: fifteen compares and adds in
    int32, which vectorize without selects (the nearest-of-16 search took three times as
    long). Equal to ``argmin(fl(|v - table|))`` (first index on a tie) on ``[-1, 1]``,
    which is every input the NF4 kernels make (``x / amax`` of the block); NaN compares
    false everywhere, so it gives 0, as argmin over NaN distances does.
    """
    x = np.float32(v)
    code = np.int32(0)
    for i in range(15):
        code = np.int32(code + np.int32(x >= NF4_THRESHOLDS[i]))
    return code
