"""NF4 with double quantization of its block scales: modelopt's ``NF4QTensor`` numerics.

Each block of ``block_size`` elements of the flattened input gets its ``amax`` and
each element the index of the nearest NF4 table entry to ``x / amax`` (one fused
kernel pass, :meth:`~nbquant.backends.interface.Backend.nf4_quantize`); the block
scales may then be centred and quantized to ``scale_bits``-bit integers per group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .backends import device_copy, device_float_input, host_array, is_device_array, resolve_backend
from .block_formats import check_blocking, empty_result
from .formats import get_format
from .spec import BlockSpec
from .validation import check_int, check_out_dtype

__all__ = ["NF4Quantized", "quantize_nf4"]


@dataclass(frozen=True)
class NF4Quantized:
    """NF4 codes with per-block scales, optionally double-quantized (modelopt ``NF4QTensor``).

    :func:`quantize_nf4` returns it; the fields below are the constructor's parameters
    and the attributes.

    Parameters
    ----------
    data : numpy.ndarray
        uint8, two 4-bit table indices per byte over the flattened input, the first
        element in the HIGH nibble (modelopt's layout).
    scales : numpy.ndarray
        float32 per-block ``amax``; int8 when double-quantized.
    shape : tuple of int
        The input's shape.
    block_size : int
        Elements per scale (over the flattened input).
    double_scales : numpy.ndarray or None, optional
        float32, one per ``scale_block_size`` scales: ``q_scale = rne((s - mean) * double_scale)``.
    scale_mean : numpy.float32 or None, optional
        The mean subtracted from every scale before its int8 quantization.
    """

    data: np.ndarray
    scales: np.ndarray
    shape: tuple[int, ...]
    block_size: int
    double_scales: np.ndarray | None = None
    scale_mean: np.float32 | None = None

    def block_scales(self) -> np.ndarray:
        """Return the float32 per-block scales, dequantized when double-quantized.

        Returns
        -------
        numpy.ndarray
            ``scales`` itself, or ``q / double_scale + mean`` per group when double-quantized.
        """
        if self.double_scales is None:
            return self.scales
        groups = host_array(self.scales).reshape(host_array(self.double_scales).size, -1).astype(np.float32)
        return (groups / host_array(self.double_scales)[:, None] + self.scale_mean).reshape(-1)

    def dequantize(self, out_dtype: npt.DTypeLike = np.float32, backend: str | None = None) -> np.ndarray:
        """Decode back to floats: ``table[code] * scale`` per block, in the input's shape.

        Parameters
        ----------
        out_dtype : dtype, optional
            float32 (default), float16 or bfloat16.
        backend : str, optional
            ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``; default: the selected backend.

        Returns
        -------
        numpy.ndarray
            The values, of ``out_dtype``, in the input's shape.

        Examples
        --------
        >>> import numpy as np, nbquant
        >>> nq = nbquant.quantize_nf4(np.array([1.0, -0.5, 0.25, 0.0], np.float32), block_size=4)
        >>> nq.data, nq.dequantize()
        (array([242, 167], dtype=uint8), array([ 1.        , -0.5234375 ,  0.24609375,  0.        ], dtype=float32))
        """
        spec = BlockSpec(get_format("uint4"), self.block_size, True, out_dtype=check_out_dtype(out_dtype))
        impl = resolve_backend(backend, (self.data,))
        n = int(np.prod(self.shape, dtype=np.int64))
        out = empty_result((1, n), spec.out_dtype, is_device_array(self.data))
        if n:
            scales = self.block_scales()
            impl.nf4_dequantize(self.data.reshape((1, n // 2)), scales.reshape((1, int(scales.size))), spec, out)
        return out.reshape(self.shape)


def double_quantize_scales(scales: np.ndarray, scale_block_size: int, scale_bits: int,
                           empty_group_scale: float = 1.0):
    """modelopt ``NF4QTensor.double_quantization`` on block scales (small: 1/block of the data).

    The arithmetic is in the scales' dtype (float32 here; a half type in the modelopt
    compat), each operation rounded to it. ``mean`` is the float64 mean rounded to that
    dtype (torch sums in float32, so the mean may differ in its last bit);
    ``double_scale = fl(fl(1 / amax) * maxbound)`` per scale block as torch evaluates
    ``maxbound / amax``; a scale block whose centred scales are all zero gets
    ``empty_group_scale`` (modelopt divides by zero there: pass ``inf`` to reproduce it).
    NaN codes become 0.
    """
    dtype = scales.dtype
    f32 = np.float32
    maxbound = f32(2 ** (scale_bits - 1) - 1)
    mean = f32(np.mean(scales, dtype=np.float64)).astype(dtype)
    centred = (scales.astype(f32) - mean.astype(f32)).astype(dtype).reshape(-1, scale_block_size)
    amax = np.max(np.abs(centred.astype(f32)), axis=1)
    with np.errstate(divide="ignore"):
        recip = (f32(1) / amax).astype(dtype).astype(f32)
    double = np.where(amax == 0, f32(empty_group_scale), (recip * maxbound).astype(dtype).astype(f32)).astype(dtype)
    with np.errstate(invalid="ignore"):
        q = np.clip(np.rint((centred.astype(f32) * double[:, None].astype(f32)).astype(dtype).astype(f32)),
                    -maxbound, maxbound)
    return np.where(np.isnan(q), 0, q).astype(np.int8).reshape(-1), double, mean


def _check_finite_blocks(amax: np.ndarray, block_size: int) -> None:
    """Refuse NaN or inf data, found from the block amax (no extra pass): NF4 scales are ``max |x|``."""
    bad = ~np.isfinite(amax)
    if bad.any():
        block = int(np.argmax(bad))
        raise ValueError(f"x holds NaN or inf (in elements {block * block_size} to {(block + 1) * block_size - 1} "
                         f"of the flattened input); NF4 quantizes finite data only: a NaN or inf block scale would "
                         f"decode the whole block (and, with double quantization, every scale) to NaN")


def quantize_nf4(
    x: npt.ArrayLike,
    *,
    block_size: int = 64,
    scale_block_size: int | None = None,
    scale_bits: int = 8,
    backend: str | None = None,
) -> NF4Quantized:
    """NF4 quantization with optional double quantization of the scales (modelopt ``NF4QTensor``).

    Over the flattened input, each block of ``block_size`` elements gets ``amax``
    (max ``|x|``) and each element the index of the NF4 table entry nearest to
    ``x / amax`` (the first on a tie); one fused pass. With ``scale_block_size``, the
    block scales are then centred on their mean and quantized to ``scale_bits``-bit
    integers per group of ``scale_block_size`` (``QuantDescriptor(num_bits=4,
    block_sizes={-1: 64, "scale_bits": 8, "scale_block_sizes": {-1: 256}})``).

    Parameters
    ----------
    x : array_like
        float32, float16, bfloat16 or float64; ``x.size`` a multiple of ``block_size``.
        A CUDA device array stays on its device; the result then holds device arrays.
    block_size : int
        Elements per scale (even).
    scale_block_size : int, optional
        Scales per double-quantization group; the number of blocks must be a multiple.
    scale_bits : int
        Bits of the quantized scales (2..8).
    backend : str, optional
        ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``; default: the selected backend.

    Returns
    -------
    NF4Quantized
        uint8 codes (two per byte, the first element in the high nibble) and float32
        block scales; with ``scale_block_size``, int8 scales with their float32
        ``double_scales`` and ``scale_mean``.

    Raises
    ------
    ValueError
        If ``x`` holds NaN or inf (found from the block scales, after the kernel).

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> x = np.linspace(-1, 1, 256, dtype=np.float32)
    >>> nq = nbquant.quantize_nf4(x, block_size=16, scale_block_size=4)
    >>> nq.scales.dtype, nq.double_scales.shape
    (dtype('int8'), (4,))
    """
    x = device_float_input(x)
    _, b = check_blocking((int(x.size),), 0, block_size, True)
    scale_bits = check_int("scale_bits", scale_bits, low=2, high=8)
    if scale_block_size is not None:
        nblocks = x.size // b
        sb = check_int("scale_block_size", scale_block_size)
        if sb < 1 or nblocks % sb:
            raise ValueError(f"scale_block_size={scale_block_size!r} must be a positive int dividing the number of "
                             f"blocks, {nblocks} (x.size={x.size} / block_size={b})")
    impl = resolve_backend(backend, (x,))
    spec = BlockSpec(get_format("uint4"), b, True)
    device = is_device_array(x)
    n = int(x.size)
    codes = empty_result((1, n // 2), np.uint8, device)
    scales = empty_result((1, n // b), np.float32, device)
    if n:
        impl.nf4_quantize(x.reshape((1, n)), spec, codes, scales)
        _check_finite_blocks(host_array(scales).reshape(-1), b)
    if scale_block_size is None:
        return NF4Quantized(codes.reshape(n // 2), scales.reshape(n // b), tuple(x.shape), b)
    # Double quantization works on the scales (1/block_size of the data) on the host.
    q, double, mean = double_quantize_scales(host_array(scales).reshape(-1), sb, scale_bits)
    if device:
        q, double = device_copy(q), device_copy(double)
    return NF4Quantized(codes.reshape(n // 2), q, tuple(x.shape), b, double, mean)
