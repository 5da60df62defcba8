"""modelopt 0.47's 4-bit table formats (``NF4QTensor``, ``NVFP4QTensor``, ``MXFP4QTensor``) on NumPy arrays.

Import them from :mod:`nbquant.compat.modelopt_qtensor`, which documents the numerics.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import numpy.typing as npt

from .. import api
from .._docstrings import fill_doc
from ..block_formats import quantize_nvfp4
from ..element import NF4_VALUES
from ..nf4 import double_quantize_scales, quantize_nf4
from ..validation import as_real_array, check_int
from ._qtensor_base import (
    DOCS,
    F32,
    BaseQuantizedTensor,
    axis_amax,
    block_amax,
    flat_blocks,
    input_array,
    pack_high_first,
    pack_low_first,
    pad,
    promote,
    scale_array,
    unpack_high_first,
    unpack_low_first,
)

__all__ = ["NF4QTensor", "NVFP4QTensor", "MXFP4QTensor"]

_E2M1_BOUNDS = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], np.float32)
_E2M1_VALUES = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)
_NVFP4_TABLE = np.concatenate([_E2M1_VALUES, np.float32(0), -_E2M1_VALUES[1:]], axis=None)  # code 8 is +0 there


@fill_doc(**DOCS)
class NF4QTensor(BaseQuantizedTensor):
    """NF4 codes with amax block scales, packed first element high (modelopt ``NF4QTensor``).

    {constructor}

    Examples
    --------
    >>> import numpy as np
    >>> qt, scales = NF4QTensor.quantize(np.array([0.5, -1.0, 2.0, 0.1], np.float32), 4, 1)
    >>> qt.quantized_data, scales
    (array([162, 248], dtype=uint8), array([2.], dtype=float32))
    """

    @classmethod
    def quantize(cls, input: npt.ArrayLike, block_size: int,
                 scale_block_size: int | None = None) -> tuple[NF4QTensor, np.ndarray]:
        """``(NF4QTensor, scales)``: the nearest NF4 entry to ``x / amax`` per block of the flattened input.

        Parameters
        ----------
        input : numpy.ndarray
            float32 (half inputs: see the compat page), zero-padded to whole blocks.
        block_size : int
            Elements per block (even).
        scale_block_size : int, optional
            The scales are zero-padded to a multiple of it (for :meth:`double_quantization`).

        Returns
        -------
        tuple
            The quantized tensor (uint8, ``x.size / 2`` bytes) and the flat block scales.
        """
        x = input_array(input)
        blocks, b = flat_blocks(x, block_size)
        if x.dtype == F32 and np.isfinite(blocks).all():
            nq = quantize_nf4(blocks.reshape(-1), block_size=b)
            data, scales = nq.data, nq.scales
        else:  # half: |q - table| in the half type (rounded), then argmin, as modelopt (N x 16 there too); NaN data
            scales = block_amax(blocks, {1: b})
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                q = (blocks.astype(F32) / scales.astype(F32)).astype(x.dtype).astype(F32).reshape(-1, 1)
                d = np.abs((q - NF4_VALUES.astype(x.dtype).astype(F32)).astype(x.dtype).astype(F32))
            data = pack_high_first(np.argmin(np.where(np.isnan(d), -np.inf, d), axis=1))
        scales = scales.reshape(-1).astype(x.dtype)
        if scale_block_size is not None:
            scales = pad(scales, {0: check_int("scale_block_size", scale_block_size, low=1)})
        return cls(x.shape, x.dtype, data), scales

    @classmethod
    def double_quantization(cls, scales: npt.ArrayLike, scale_block_size: int,
                            num_scale_bits: int) -> tuple[np.ndarray, np.ndarray, np.float32]:
        """``(int8 codes, double scales, mean)``: the scales centred on their mean and quantized per group.

        Parameters
        ----------
        scales : numpy.ndarray
            The block scales of :meth:`quantize`; the arithmetic is in their dtype.
        scale_block_size : int
            Scales per group; it must divide the number of scales.
        num_scale_bits : int
            Bits of the codes (2 to 8).

        Returns
        -------
        tuple
            The codes shaped ``(groups, scale_block_size)``, one double scale per group and the mean.
        """
        s = scale_array(scales).reshape(-1)
        g = check_int("scale_block_size", scale_block_size, low=1)
        bits = check_int("num_scale_bits", num_scale_bits, low=2, high=8)
        if s.size % g:
            raise ValueError(f"{s.size} scales do not divide into groups of scale_block_size={g}")
        q, double, mean = double_quantize_scales(s, g, bits, empty_group_scale=np.inf)
        return q.reshape(-1, g), double, mean

    @fill_doc(**DOCS)
    def dequantize(self, dtype=None, **kwarg) -> np.ndarray:
        """``table[code] * (scale / double_scale + scale_zeros)`` per block, in ``dtype`` (default the original).

        {dequantize_dtype}
        **kwarg
            ``scale`` (the int8 codes of :meth:`double_quantization`), ``block_sizes``
            (``{-1: block_size}``), ``double_scale`` and ``scale_zeros`` (the mean), all required.

        {dequantize_returns}
        """
        out, b = self._dtype_and_block(dtype, kwarg, 2)
        codes = unpack_high_first(self._quantized_data).reshape(-1, b)
        s = np.asarray(kwarg["scale"]).reshape(-1)[:codes.shape[0]]
        ds = np.asarray(kwarg["double_scale"])
        if ds.size != 1:
            raise ValueError(f"double_scale has {ds.size} values: modelopt's NF4 dequantize divides the flat scales "
                             "by double_scale[:, None], which only fits one scale group (one double scale)")
        ds = ds.astype(F32).reshape(-1, 1)
        s = (s.astype(F32) / ds).astype(out)
        s = (s.astype(F32) + np.float32(kwarg["scale_zeros"])).astype(out).reshape(-1, 1)
        y = (NF4_VALUES[codes] * s.astype(F32)).astype(promote(np.dtype(ml_dtypes.bfloat16), out))
        return self._crop_flat(y, out)


@fill_doc(**DOCS)
class NVFP4QTensor(BaseQuantizedTensor):
    """NVFP4: e2m1 codes (first element low), E4M3 block scales, a float32 per-tensor scale (``NVFP4QTensor``).

    {constructor}

    Examples
    --------
    >>> import numpy as np
    >>> qt, wsf, wsf2 = NVFP4QTensor.quantize(np.array([[0.5, -1.0, 2.0, 6.0]], np.float32), 4)
    >>> qt.quantized_data, wsf.astype(np.float32), wsf2
    (array([[161, 116]], dtype=uint8), array([[448.]], dtype=float32), np.float32(0.002232143))
    """

    @classmethod
    def get_weights_scaling_factor_2(cls, input: npt.ArrayLike) -> np.float32:
        """Return the per-tensor scale ``float32(amax) / 2688``.

        Parameters
        ----------
        input : numpy.ndarray
            float32, float16 or bfloat16.

        Returns
        -------
        numpy.float32
            ``amax / (6 * 448)``.
        """
        x = input_array(input)
        return np.float32(axis_amax(x, None).astype(F32) / np.float32(2688))

    @classmethod
    def quantize(cls, input: npt.ArrayLike, block_size: int, weights_scaling_factor: npt.ArrayLike | None = None,
                 weights_scaling_factor_2: npt.ArrayLike | None = None, keep_high_precision: bool = False,
                 try_tensorrt: bool = False):
        """``(NVFP4QTensor, weights_scaling_factor, weights_scaling_factor_2)`` of the last-dim-padded input.

        Parameters
        ----------
        input : numpy.ndarray
            float32, float16 or bfloat16; the last dimension is zero-padded to whole blocks.
        block_size : int
            Elements per block along the last dimension (16).
        weights_scaling_factor : numpy.ndarray, optional
            float8_e4m3fn block scales; default ``e4m3(clip(amax / (6 * wsf2), 2**-9, 448))``, 0 read as 1.
        weights_scaling_factor_2 : float, optional
            The per-tensor scale; default :meth:`get_weights_scaling_factor_2`.
        keep_high_precision : bool
            Return only the float32 scaled input ``x / (wsf * wsf2)``, as modelopt does.
        try_tensorrt : bool
            Ignored (a CUDA TensorRT-LLM path in modelopt).

        Returns
        -------
        tuple or numpy.ndarray
        """
        x = original = input_array(input)
        b = check_int("block_size", block_size, low=1)
        x = pad(x, {x.ndim - 1: b})
        wsf2 = (cls.get_weights_scaling_factor_2(x) if weights_scaling_factor_2 is None
                else np.asarray(as_real_array("weights_scaling_factor_2", weights_scaling_factor_2), F32))
        if weights_scaling_factor is None and np.isfinite(wsf2) and wsf2 > 0 and not keep_high_precision and \
                np.isfinite(axis_amax(x, None).astype(F32)):
            bq = quantize_nvfp4(x, global_scale=np.float32(wsf2), block_size=b)  # the fused pass
            wsf, codes = bq.scales, unpack_low_first(bq.data)
            neg_zero = codes == 8  # modelopt's sign bit is v < 0: a quotient of -0.0 is code 0
            if neg_zero.any():
                codes[neg_zero & (x == 0)] = 0
        else:  # a given block scale, a zero or non-finite global scale, NaN or inf data: IEEE quotients
            if weights_scaling_factor is None:
                amax = block_amax(x, {x.ndim - 1: b}).astype(F32)
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    per_block = amax / (np.float32(6) * np.float32(wsf2))
                wsf = np.clip(np.where(per_block == 0, np.float32(1), per_block), np.float32(2 ** -9),
                              np.float32(448)).astype(ml_dtypes.float8_e4m3fn)
            else:
                wsf = np.asarray(weights_scaling_factor)
                if wsf.dtype != np.dtype(ml_dtypes.float8_e4m3fn):
                    wsf = np.asarray(as_real_array("weights_scaling_factor", wsf), F32)
            divisor = (wsf.astype(F32) * np.float32(wsf2)).reshape(*x.shape[:-1], -1)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                v = x.astype(F32) / np.repeat(divisor, b, axis=-1)
            if keep_high_precision:
                return v
            codes = api.quantize(np.where(np.isnan(v), np.float32(0), v), np.float32(1), "float4_e2m1fn").view(np.uint8)
            codes[np.isnan(v)] = 7  # searchsorted puts NaN past the last bound
            codes[(codes == 8) & (v == 0)] = 0
        return cls(original.shape, original.dtype, pack_low_first(codes)), wsf, wsf2

    @fill_doc(**DOCS)
    def dequantize(self, dtype=None, **kwarg) -> np.ndarray:
        """``e2m1[code] * (scale * double_scale)`` per block (float32), then ``dtype`` (default the original).

        {dequantize_dtype}
        **kwarg
            ``scale`` (float8_e4m3fn or float), ``double_scale`` and ``block_sizes`` (``{-1: 16}``).

        {dequantize_returns}
        """
        out, b = self._dtype_and_block(dtype, kwarg, 1)
        per_block = np.asarray(kwarg["scale"]).astype(F32) * np.asarray(kwarg["double_scale"], F32)
        codes = unpack_low_first(self._quantized_data)
        values = _NVFP4_TABLE[codes]
        y = values.reshape(*codes.shape[:-1], -1, b) * per_block[..., None]
        return y.reshape(self.metadata["shape"]).astype(out)


@fill_doc(**DOCS)
class MXFP4QTensor(BaseQuantizedTensor):
    """MXFP4 with modelopt's encoding: E8M0 ``ceil(log2(amax / 6))`` scales, ties toward zero (``MXFP4QTensor``).

    {constructor}

    Examples
    --------
    >>> import numpy as np
    >>> qt, e8m0 = MXFP4QTensor.quantize(np.array([0.0, 0.75, -1.75, 6.0], np.float32), 4)
    >>> qt.quantized_data, e8m0
    (array([ 24, 123], dtype=uint8), array([[127]], dtype=uint8))
    """

    E2M1_max = 6.0

    @classmethod
    def quantize(cls, input: npt.ArrayLike, block_size: int | None) -> tuple[MXFP4QTensor, np.ndarray]:
        """``(MXFP4QTensor, e8m0 scale codes)`` over blocks of the flattened input (``numel`` a multiple).

        Parameters
        ----------
        input : numpy.ndarray
            float32, float16 or bfloat16.
        block_size : int or None
            Elements per block (default 32).

        Returns
        -------
        tuple
            The quantized tensor (uint8, first element low; zero and NaN are encoded -0) and the
            ``(n_blocks, 1)`` uint8 E8M0 codes ``e + 127``.
        """
        x = input_array(input)
        b = 32 if block_size is None else check_int("block_size", block_size, low=1)
        if x.size % b or x.shape[-1] % 2:
            raise ValueError(f"input of shape {x.shape} must have a multiple of block_size={b} elements and an even "
                             "last dimension (modelopt's view(-1, block_size) and packing)")
        blocks = x.astype(F32).reshape(-1, b)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            e = np.ceil(np.maximum(np.log2(np.abs(blocks).max(axis=1, keepdims=True) / np.float32(6)),
                                   np.float32(-127)))
            v = (blocks / np.exp2(e)).reshape(-1)
        ordinal = (np.abs(v)[:, None] > _E2M1_BOUNDS).sum(axis=1)  # ties toward zero, NaN 0, inf 7
        codes = (np.where(v > 0, 0, 8) + ordinal).reshape(x.shape)  # torch.sign is 0 for ±0 and NaN: sign bit 1
        with np.errstate(invalid="ignore"):
            scale = np.where(np.isfinite(e), e + 127, 0).astype(np.uint8)
        return cls(x.shape, x.dtype, pack_low_first(codes)), scale

    @fill_doc(**DOCS)
    def dequantize(self, dtype=None, **kwarg) -> np.ndarray:
        """``±e2m1[code] * 2**(scale - 127)`` per block (float32), then ``dtype`` (default the original).

        {dequantize_dtype}
        **kwarg
            ``scale`` (the uint8 E8M0 codes) and ``block_sizes`` (``{-1: block_size}``).

        {dequantize_returns}
        """
        out, b = self._dtype_and_block(dtype, kwarg, 1)
        codes = unpack_low_first(self._quantized_data)
        values = np.where(codes & 8, np.float32(-1), np.float32(1)) * _E2M1_VALUES[codes & 7]
        scale = np.exp2(np.asarray(kwarg["scale"]).astype(F32) - np.float32(127)).reshape(-1, 1)
        return (values.reshape(-1, b) * scale).reshape(codes.shape).astype(out)
