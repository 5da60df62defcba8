"""The reference static quantize and dequantize: plain NumPy, written to be obviously correct.

It works on the per-dimension :class:`~nbquant.layout.BlockLayout` directly (every
scale is expanded to the input's shape by repeating it ``block[d]`` times along each
dimension), not on the canonical layout the compiled backends use, so the two
share no indexing code.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ...layout import BlockLayout


def expand(grid_param: np.ndarray, layout: BlockLayout) -> np.ndarray:
    """Repeat a block-grid array to the full input shape."""
    full = grid_param
    for d, (n, b) in enumerate(zip(layout.shape, layout.block, strict=True)):
        full = np.repeat(full, b, axis=d)[(slice(None),) * d + (slice(0, n),)]
    return full


#: The NumPy type of each ``compute_dtype`` (:attr:`~nbquant.modes.ScaleOp.compute_dtype`).
_PRECISIONS = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
_PACK_GROUPS = {2: (4, 1), 4: (2, 1), 6: (4, 3)}  # bits -> (codes, bytes), a little-endian bit stream


def store_floats(out: np.ndarray, values: np.ndarray) -> None:
    """Write float ``values`` into ``out`` (its dtype, round half to even), every NaN as ``numpy.nan``.

    The canonical NaN of each output type (``CANONICAL_NAN_BITS`` in ``nbquant/element/bits.py``), as
    the kernels' ``store_float`` writes it, whatever the sign and payload of the NaN.
    """
    out[...] = values.reshape(out.shape).astype(out.dtype)
    nan = np.isnan(out)
    if nan.any():
        out[nan] = np.nan


def unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    codes, nbytes = _PACK_GROUPS[bits]
    groups = packed.reshape(packed.shape[:-1] + (packed.shape[-1] // nbytes, nbytes)).astype(np.uint32)
    words = np.bitwise_or.reduce(groups << (np.arange(nbytes, dtype=np.uint32) * 8), axis=-1)
    fields = (words[..., None] >> (np.arange(codes, dtype=np.uint32) * bits)) & np.uint32((1 << bits) - 1)
    return fields.astype(np.uint8).reshape(packed.shape[:-1] + (-1,))


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    ncodes, nbytes = _PACK_GROUPS[bits]
    groups = codes.reshape(codes.shape[:-1] + (codes.shape[-1] // ncodes, ncodes)).astype(np.uint32)
    words = np.bitwise_or.reduce(groups << (np.arange(ncodes, dtype=np.uint32) * bits), axis=-1)
    out = (words[..., None] >> (np.arange(nbytes, dtype=np.uint32) * 8)) & np.uint32(0xFF)
    return out.astype(np.uint8).reshape(codes.shape[:-1] + (-1,))


@np.errstate(over="ignore")  # x / s and float64 -> float32 may overflow to inf, which then clamps
def _float_codes(v: np.ndarray, spec) -> np.ndarray:
    """ml_dtypes' cast of ``v`` (clipped to the largest finite value when saturating), as uint8 codes."""
    fmt = spec.format
    if spec.saturate:
        v = np.clip(v, np.float32(-fmt.max_value), np.float32(fmt.max_value))
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(fmt.dtype).view(np.uint8) & np.uint8(fmt.mask)


class StaticOps:
    """Static quantize and dequantize (:class:`~nbquant.backends.interface.Backend`)."""

    @np.errstate(over="ignore")  # x / s and float64 -> float32 may overflow to inf, which then clamps
    def quantize(self, x, scale, zero_point, spec, out) -> None:
        """Fill ``out`` (the format's unsigned storage, packed or not) with codes of ``x``."""
        fmt, layout = spec.format, spec.layout
        t = _PRECISIONS[spec.scale_op.compute_dtype]  # every operation below is in t (NumPy rounds to it)
        v = np.asarray(x).astype(t)
        s = expand(scale, layout).astype(t)
        v = v * s if spec.scale_op.multiplies else v / s
        if fmt.is_float:
            codes = _float_codes(v.astype(np.float32), spec)
            out[...] = pack(codes, fmt.bits) if spec.packed else codes
            return
        v = np.where(np.isnan(v), t(0), v)
        z = (expand(zero_point, layout) if zero_point is not None else np.zeros((), np.float32)).astype(t)
        r = np.rint(v + z) if spec.zero_point_before else np.rint(v) + z
        code = np.clip(r.astype(np.float32), np.float32(spec.qmin), np.float32(spec.qmax)).astype(np.int64)
        bits = (code & fmt.mask).astype(fmt.storage)
        out[...] = pack(bits, fmt.bits) if spec.packed else bits

    @np.errstate(over="ignore")  # float16 results may overflow to inf
    def dequantize(self, q, scale, zero_point, spec, out) -> None:
        """Fill ``out`` with ``(code - zero_point) * scale`` in the output float dtype."""
        fmt, layout = spec.format, spec.layout
        if fmt.is_float:
            codes = unpack(q, fmt.bits) if spec.packed else q
            values = codes.view(fmt.dtype).astype(np.float32) * expand(scale, layout)
            store_floats(out, values)
            return
        bits = unpack(q, fmt.bits) if spec.packed else q
        code = bits.astype(np.int64) & fmt.mask
        if fmt.signed:
            code = np.where(code > fmt.qmax, code - (1 << fmt.bits), code)
        z = expand(zero_point, layout) if zero_point is not None else np.float32(0)
        v = (code.astype(np.float32) - z) * expand(scale, layout)
        store_floats(out, v)
