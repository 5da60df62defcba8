"""modelopt 0.47's real-quantization tensors (``modelopt.torch.quantization.qtensor``) on NumPy arrays.

Each class keeps modelopt's ``quantize(...)`` class method with its arguments, its
packed layout and its ``dequantize(dtype=None, **kwarg)``; inputs are float32,
float16 or bfloat16 (ml_dtypes) arrays. Numerics, as in modelopt on the CPU:

* :class:`INT8QTensor`: ``scales = amax / 127`` (in the input's dtype), codes
  ``clamp(rne(x / scales), -128, 127)`` with the quotient in the input's dtype;
  dequantize ``q * scales`` in ``dtype``.
* :class:`INT4QTensor`: over the flattened input, ``scales = fl(fl(1 / amax) * 7)`` per
  block (a multiplier), ``u = clamp(rne(x * scales), -8, 7) + 8``, packed **first
  element in the high nibble**; dequantize ``(u - 8) / scales``.
* :class:`FP8QTensor`: ``scales = amax / 448``, ``e4m3(x / scales)`` with torch's
  saturating cast (beyond 448, inf included, is ±448); dequantize ``q * scales``.
* :class:`NF4QTensor`: :func:`nbquant.quantize_nf4`, packed first element high.
* :class:`NVFP4QTensor`: :func:`nbquant.quantize_nvfp4` (E4M3 block scales and the
  float32 ``weights_scaling_factor_2 = amax / 2688``), first element low.
* :class:`MXFP4QTensor`: E8M0 scale ``ceil(log2(amax / 6))`` per block of 32 and a
  **ties-toward-zero** e2m1 encoding (``sum(|x| > bounds)``), zero encoded as -0.

Where modelopt divides by a zero scale (an all-zero block) the quotient is IEEE's and
NaN becomes code 0, as torch's float-to-integer cast gives on x86.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .._docstrings import fill_doc
from ._qtensor_base import (
    DOCS,
    F32,
    BaseQuantizedTensor,
    axis_amax,
    block_amax,
    block_of,
    block_sizes_arg,
    codes_of,
    dequantize_product,
    flat_blocks,
    grid_scale,
    input_array,
    pack_high_first,
    pad,
    reshape_packed,
    scale_array,
    unpack_high_first,
)
from .modelopt_qtensor_fp4 import MXFP4QTensor, NF4QTensor, NVFP4QTensor

__all__ = ["BaseQuantizedTensor", "INT8QTensor", "INT4QTensor", "FP8QTensor", "NF4QTensor", "NVFP4QTensor",
           "MXFP4QTensor"]


def _scaled_codes(cls, input, scales, axis, block_sizes, maxval: int, fmt: str, fp8: bool):
    """INT8QTensor's and FP8QTensor's quantize: ``(cls(codes), scales)``, codes of ``x / scales``, ``amax / maxval``.

    Blocks pad the input with zeros; FP8 crops its codes back, reshapes block scales of the
    right size, returns them on the block grid, and casts saturating (torch 2.13); INT8
    keeps the padding in its codes, as modelopt does.
    """
    x = original = input_array(input)
    blocks = block_sizes_arg(block_sizes, x.ndim) if block_sizes else {}
    if blocks:
        x = pad(x, blocks)
    if scales is None:
        amax = block_amax(x, blocks) if blocks else axis_amax(x, axis)
        scales = (amax.astype(F32) / np.float32(maxval)).astype(x.dtype)
    s = scale_array(scales)
    grid = grid_scale(s, x.shape, blocks, reshape=fp8)
    q = codes_of(x, grid, block_of(x.shape, grid.shape), fmt, "divide", **({"saturate": True} if fp8 else {}))
    if fp8:
        q, s = q[tuple(slice(0, n) for n in original.shape)], grid if blocks else s
    return cls(original.shape, original.dtype, q), s


@fill_doc(**DOCS)
class INT8QTensor(BaseQuantizedTensor):
    """INT8 codes per tensor, per kept ``axis`` or per block (modelopt ``INT8QTensor``).

    {constructor}

    Examples
    --------
    >>> import numpy as np
    >>> qt, scales = INT8QTensor.quantize(np.array([[0.5, -1.0], [2.0, 0.1]], np.float32), axis=0)
    >>> qt.quantized_data, scales.ravel()
    (array([[  64, -127],
           [ 127,    6]], dtype=int8), array([0.00787402, 0.01574803], dtype=float32))
    >>> qt.dequantize(scale=scales)
    array([[ 0.503937  , -1.        ],
           [ 2.        ,  0.09448819]], dtype=float32)
    """

    @classmethod
    def quantize(cls, input: npt.ArrayLike, scales: npt.ArrayLike | None = None, axis=None,
                 block_sizes: dict | None = None) -> tuple[INT8QTensor, np.ndarray]:
        """``(INT8QTensor, scales)``: codes ``clamp(rne(x / scales), -128, 127)``; blocks pad with zeros.

        Parameters
        ----------
        input : numpy.ndarray
            float32, float16 or bfloat16.
        scales : numpy.ndarray, optional
            Default ``amax / 127`` in the input's dtype: per tensor, per kept ``axis``, or per block.
        axis : int or tuple of int, optional
            The kept dims (modelopt's quantization axis).
        block_sizes : dict, optional
            ``{dim: block size}``; the input is zero-padded to whole blocks (the codes keep the padding).

        Returns
        -------
        tuple
            The quantized tensor and the scales.
        """
        return _scaled_codes(cls, input, scales, axis, block_sizes, 127, "int8", fp8=False)

    dequantize = dequantize_product


@fill_doc(**DOCS)
class INT4QTensor(BaseQuantizedTensor):
    """Blockwise INT4 (AWQ) codes over the flattened input, offset by 8, two per byte (modelopt ``INT4QTensor``).

    {constructor}

    Examples
    --------
    >>> import numpy as np
    >>> qt, scales = INT4QTensor.quantize(np.array([[0.5, -1.0, 2.0, 0.25]], np.float32), 4)
    >>> qt.quantized_data, scales
    (array([[164, 249]], dtype=uint8), array([[3.5]], dtype=float32))
    >>> qt.dequantize(scale=scales, block_sizes={-1: 4})
    array([[ 0.5714286, -1.1428572,  2.       ,  0.2857143]], dtype=float32)
    """

    @classmethod
    def quantize(cls, input: npt.ArrayLike, block_size: int) -> tuple[INT4QTensor, np.ndarray]:
        """``(INT4QTensor, scales)`` with ``scales = fl(fl(1 / amax) * 7)`` per block, a multiplier.

        Parameters
        ----------
        input : numpy.ndarray
            float32, float16 or bfloat16 with an even last dimension.
        block_size : int
            Elements per block of the flattened (zero-padded) input.

        Returns
        -------
        tuple
            The quantized tensor (uint8, ``(u0 << 4) | u1`` with ``u = q + 8``) and the
            ``(n_blocks, 1)`` scales in the input's dtype.
        """
        x = input_array(input)
        if x.ndim == 0 or x.shape[-1] % 2:
            raise ValueError(f"input of shape {x.shape} must have an even last dimension (modelopt asserts this)")
        blocks, _ = flat_blocks(x, block_size)
        with np.errstate(divide="ignore"):
            recip = (np.float32(1) / np.abs(blocks.astype(F32)).max(axis=-1, keepdims=True)).astype(x.dtype)
        scales = (recip.astype(F32) * np.float32(7)).astype(x.dtype)
        q = codes_of(blocks, scales, (1, blocks.shape[1]), "int4", "multiply").astype(np.int8) + np.int8(8)
        sb = np.broadcast_to(scales, blocks.shape)
        with np.errstate(invalid="ignore"):
            q[np.isnan(blocks.astype(F32) * sb.astype(F32))] = 0  # NaN + 8 cast to uint8 is 0 on x86
        packed = reshape_packed(pack_high_first(q.reshape(-1)), x.shape)
        return cls(x.shape, x.dtype, packed), scales

    @fill_doc(**DOCS)
    def dequantize(self, dtype=None, **kwarg) -> np.ndarray:
        """``(u - 8) / scale`` per block, in the scale's dtype, then ``dtype`` (default the original).

        {dequantize_dtype}
        **kwarg
            ``scale`` and ``block_sizes`` (``{-1: block_size}``), both required.

        {dequantize_returns}
        """
        out, b = self._dtype_and_block(dtype, kwarg, 2)
        s = scale_array(kwarg["scale"]).reshape(-1, 1)
        codes = unpack_high_first(self._quantized_data).reshape(-1, b).astype(F32) - np.float32(8)
        if codes.shape[0] != s.shape[0]:
            raise ValueError(f"scale has {s.shape[0]} values; the codes hold {codes.shape[0]} blocks of {b}")
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            y = (codes / s.astype(F32)).astype(s.dtype)
        return self._crop_flat(y, out)


@fill_doc(**DOCS)
class FP8QTensor(BaseQuantizedTensor):
    """E4M3 codes per tensor, per kept ``axis`` or per block (modelopt ``FP8QTensor``).

    {constructor}

    Examples
    --------
    >>> import numpy as np
    >>> qt, scales = FP8QTensor.quantize(np.array([0.5, -1.0, 2.0, 0.1], np.float32))
    >>> qt.quantized_data.astype(np.float32), scales
    (array([ 112., -224.,  448.,   22.], dtype=float32), array(0.00446429, dtype=float32))
    """

    @classmethod
    def quantize(cls, input: npt.ArrayLike, scales: npt.ArrayLike | None = None, axis=None,
                 block_sizes: dict | None = None) -> tuple[FP8QTensor, np.ndarray]:
        """``(FP8QTensor, scales)``: ``e4m3(x / scales)``, saturating as torch 2.13 casts (inf is 448), cropped.

        Parameters
        ----------
        input : numpy.ndarray
            float32, float16 or bfloat16.
        scales : numpy.ndarray, optional
            Default ``amax / 448`` in the input's dtype: per tensor, per kept ``axis``, or per block
            of the zero-padded input. Block scales of the right size in another shape are reshaped.
        axis : int or tuple of int, optional
            The kept dims of a per-channel amax.
        block_sizes : dict, optional
            ``{dim: block size}``; the input is zero-padded to whole blocks and the codes cropped back.

        Returns
        -------
        tuple
            The quantized tensor (float8_e4m3fn, the input's shape) and the scales.
        """
        return _scaled_codes(cls, input, scales, axis, block_sizes, 448, "float8_e4m3fn", fp8=True)

    dequantize = dequantize_product


