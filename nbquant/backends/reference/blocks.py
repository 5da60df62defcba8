"""The reference block formats (OCP MX, NVFP4, NF4) and ``amax``: plain NumPy from the formulas.

Each format family's pair of functions registers with :func:`~nbquant.blocks.block_kernel`;
a ``blocks_<family>.py`` module beside this one registers more (imported at the end).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ...blocks._format import BlockKernelOps, block_kernel, import_kernel_modules
from .static import pack, store_floats, unpack


def _blocks(a: np.ndarray, block: int) -> np.ndarray:
    return a.reshape(a.shape[0], a.shape[1] // block, block)


def _block_amax(x: np.ndarray, block: int) -> np.ndarray:
    return np.max(np.abs(_blocks(np.asarray(x, np.float32), block)), axis=-1)


def _saturating_cast(v: np.ndarray, dtype) -> np.ndarray:
    top = np.float32(float(ml_dtypes.finfo(dtype).max))
    with np.errstate(invalid="ignore"):
        return np.clip(v, -top, top).astype(dtype).view(np.uint8)


#: modelopt's NF4 table (bfloat16 values).
_NF4 = np.array([-1.0, -0.6962, -0.5251, -0.3949, -0.2844, -0.1848, -0.0911, 0.0, 0.0796, 0.1609, 0.2461, 0.3379,
                 0.4407, 0.5626, 0.7230, 1.0]).astype(ml_dtypes.bfloat16).astype(np.float32)


@block_kernel("reference", "mx", "quantize")
def mx_quantize(x, spec, outputs) -> None:
    """OCP MX: scale ``2**(floor(log2 amax) - emax)`` (or rounded up), elements saturated."""
    codes, scales = outputs
    fmt, block, emax = spec.format, spec.block_size, spec.format.emax
    amax = _block_amax(x, block).astype(np.float64)
    mantissa, exponent = np.frexp(amax)  # amax = mantissa * 2**exponent, mantissa in [0.5, 1)
    code = exponent - 1 - emax + 127  # biased E8M0 exponent
    if spec.params.round_up:
        code = code + (2 * mantissa > fmt.max_value / 2.0 ** emax)
    code = np.where(amax == 0, 0, np.clip(code, 0, 254))
    code = np.where(np.isfinite(amax), code, 255)
    scales[...] = code
    inv_exp = np.where(code == 255, 0, 127 - code)
    with np.errstate(over="ignore"):  # only unscaled NaN/inf blocks can overflow
        v = np.ldexp(_blocks(np.asarray(x, np.float32), block), inv_exp[..., None].astype(np.int32))
        v = v.astype(np.float32).reshape(codes.shape[0], -1)
    if not fmt.is_int:
        elements = _saturating_cast(v, fmt.element.dtype)
    else:
        r = np.rint(np.where(np.isnan(v), np.float32(0), v) * np.float32(64))
        elements = np.clip(r, -127, 127).astype(np.int8).view(np.uint8)
    codes[...] = pack(elements, 4) if spec.params.packed else elements


@block_kernel("reference", "mx", "dequantize")
@np.errstate(over="ignore")  # a float16 output may overflow to inf, as the kernels' RNE store does
def mx_dequantize(inputs, spec, out) -> None:
    """``element * 2**(scale - 127)`` (NaN for the scale code 0xff)."""
    codes, scales = inputs
    fmt, block = spec.format, spec.block_size
    elements = unpack(codes, 4) if spec.params.packed else codes
    if not fmt.is_int:
        values = elements.view(fmt.element.dtype).astype(np.float32)
    else:
        values = elements.view(np.int8).astype(np.float32) * np.float32(0.015625)
    scale = scales.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    store_floats(out, _blocks(values, block) * scale[..., None])


@block_kernel("reference", "nvfp4", "quantize")
def nvfp4_quantize(x, spec, outputs) -> None:
    """modelopt NVFP4: e4m3 block scales ``amax / (6 * global)``, e2m1 elements ``x / (scale * global)``."""
    codes, scales = outputs
    block, g = spec.block_size, np.float32(spec.params.global_scale)
    amax = _block_amax(x, block)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = amax / (np.float32(6) * g)
    s = np.where(s == 0, np.float32(1), s)
    s = np.where(np.isnan(s), s, np.maximum(s, np.float32(2.0 ** -9)))
    scale_codes = _saturating_cast(s, ml_dtypes.float8_e4m3fn)
    scales[...] = scale_codes
    denom = scale_codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * g
    with np.errstate(invalid="ignore", divide="ignore"):
        v = (_blocks(np.asarray(x, np.float32), block) / denom[..., None]).reshape(x.shape[0], -1)
    codes[...] = pack(_saturating_cast(v, ml_dtypes.float4_e2m1fn), 4)


@block_kernel("reference", "nvfp4", "dequantize")
@np.errstate(over="ignore")
def nvfp4_dequantize(inputs, spec, out) -> None:
    """``e2m1 * (e4m3 scale * global)``."""
    codes, scales = inputs
    block, g = spec.block_size, np.float32(spec.params.global_scale)
    values = unpack(codes, 4).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    scale = scales.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * g
    store_floats(out, _blocks(values, block) * scale[..., None])


@block_kernel("reference", "nf4", "quantize")
@np.errstate(invalid="ignore", divide="ignore")
def nf4_quantize(x, spec, outputs) -> None:
    """NF4: ``argmin |x / amax - table|`` per element, packed high nibble first; amax per block."""
    codes, scales = outputs
    blocks = _blocks(np.asarray(x, np.float32), spec.block_size)
    amax = np.max(np.abs(blocks), axis=-1)
    scales[...] = amax
    index = np.argmin(np.abs((blocks / amax[..., None])[..., None] - _NF4), axis=-1).astype(np.uint8)
    index = index.reshape(codes.shape[0], -1)
    codes[...] = (index[:, 0::2] << 4) | index[:, 1::2]


@block_kernel("reference", "nf4", "dequantize")
@np.errstate(over="ignore", invalid="ignore")
def nf4_dequantize(inputs, spec, out) -> None:
    """``table[index] * scale``."""
    codes, scales = inputs
    index = np.stack([codes >> 4, codes & 15], axis=-1).reshape(codes.shape[0], -1)
    values = _blocks(_NF4[index], spec.block_size) * scales[..., None].astype(np.float32)
    store_floats(out, values)


class BlockOps(BlockKernelOps):
    """Every registered block format, and amax (:class:`~nbquant.backends.interface.Backend`)."""

    target = "reference"

    def amax(self, x) -> float:
        """``max |x|`` as float32 (NaN if any element is NaN)."""
        return np.float32(np.max(np.abs(np.asarray(x, np.float32)))) if np.size(x) else np.float32(0)


import_kernel_modules(__package__)
