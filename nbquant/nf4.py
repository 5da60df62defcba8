"""NF4 with double quantization of its block scales: modelopt's ``NF4QTensor`` numerics.

Each block of ``block_size`` elements of the flattened input gets its ``amax`` and
each element the index of the nearest NF4 table entry to ``x / amax`` (one fused
kernel pass of the registered block format :mod:`nbquant.blocks.nf4`); the block
scales may then be centred and quantized to ``scale_bits``-bit integers per group.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ._dask import any_dask_array, check_known_chunks, is_dask_array
from ._docstrings import DOCS, fill_doc
from .backends import device_copy, device_float_input, host_array, is_device_array
from .block_rows import check_blocking, run_dequantize, run_quantize
from .blocks import BlockSpec, get_block_format
from .layout import resolve_layout
from .validation import check_int, check_out_dtype

__all__ = ["NF4Quantized", "quantize_nf4"]

_NF4 = get_block_format("nf4")


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
        if any_dask_array(self.scales, self.double_scales, self.scale_mean):
            from ._dask import engine

            check_known_chunks(self.scales, "scales")
            check_known_chunks(self.double_scales, "double_scales")
            layout = resolve_layout(tuple(self.scales.shape), 0, int(self.scales.size) // int(self.double_scales.size))
            return engine.map_layout(_scale_values, self.scales, layout, [engine.Output("data", np.dtype(np.float32))],
                                     params={"double_scales": self.double_scales}, arguments=False,
                                     token="nbquant-nf4-scales", mean=self.scale_mean)[0]
        return _scale_values(host_array(self.scales), host_array(self.double_scales), self.scale_mean)

    @fill_doc(**DOCS)
    def dequantize(self, out_dtype: npt.DTypeLike = np.float32, backend: str | None = None) -> np.ndarray:
        """Decode back to floats: ``table[code] * scale`` per block, in the input's shape.

        {decode_parameters}

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
        spec = BlockSpec(_NF4, self.block_size, _NF4.default_params(), check_out_dtype(out_dtype))
        n = int(np.prod(self.shape, dtype=np.int64))
        if any_dask_array(self.data, self.scales, self.double_scales, self.scale_mean):
            check_known_chunks(self.data, "data")
            check_known_chunks(self.scales, "scales")
        data, scales = self.data, self.block_scales()
        data, scales = data.reshape((int(data.size),)), scales.reshape((int(scales.size),))
        return run_dequantize((data, scales), spec, 0, n, backend).reshape(self.shape)


def _scale_values(scales: np.ndarray, double_scales: np.ndarray, mean) -> np.ndarray:
    """Double-quantized block scales decoded: ``q / double_scale + mean`` per group of scales."""
    groups = scales.reshape(double_scales.size, -1).astype(np.float32)
    return (groups / double_scales[:, None] + mean).reshape(-1)


def _scale_mean(scales: np.ndarray):
    """The mean of double quantization: the float64 mean rounded to the scales' dtype (torch sums in float32, so its
    mean may differ in the last bit)."""
    return np.float32(np.mean(scales, dtype=np.float64)).astype(scales.dtype)


def _double_quantize(scales: np.ndarray, mean, scale_block_size: int, scale_bits: int,
                     empty_group_scale: float = 1.0):
    """modelopt ``NF4QTensor.double_quantization`` on block scales (small: 1/block of the data), given the mean.

    The arithmetic is in the scales' dtype (float32 in the core; a half type in the modelopt
    compat), each operation rounded to it: ``double_scale = fl(fl(1 / amax) * maxbound)`` per
    scale block as torch evaluates ``maxbound / amax``; a scale block whose centred scales
    are all zero gets ``empty_group_scale`` (modelopt divides by zero there: ``inf``
    reproduces it). NaN codes become 0. Returns the int8 scales and the double scales.
    """
    dtype = scales.dtype
    f32 = np.float32
    maxbound = f32(2 ** (scale_bits - 1) - 1)
    centred = (scales.astype(f32) - np.asarray(mean).astype(dtype).astype(f32)).astype(dtype)
    centred = centred.reshape(-1, scale_block_size)
    amax = np.max(np.abs(centred.astype(f32)), axis=1)
    with np.errstate(divide="ignore"):
        recip = (f32(1) / amax).astype(dtype).astype(f32)
    double = np.where(amax == 0, f32(empty_group_scale), (recip * maxbound).astype(dtype).astype(f32)).astype(dtype)
    with np.errstate(invalid="ignore"):
        q = np.clip(np.rint((centred.astype(f32) * double[:, None].astype(f32)).astype(dtype).astype(f32)),
                    -maxbound, maxbound)
    return np.where(np.isnan(q), 0, q).astype(np.int8).reshape(-1), double


def double_quantize_scales(scales: np.ndarray, scale_block_size: int, scale_bits: int,
                           empty_group_scale: float = 1.0):
    """:func:`_double_quantize` with the mean of ``scales``: returns ``(int8 scales, double scales, mean)``."""
    mean = _scale_mean(scales)
    q, double = _double_quantize(scales, mean, scale_block_size, scale_bits, empty_group_scale)
    return q, double, mean


def _check_finite_blocks(amax: np.ndarray, block_size: int, first: int = 0) -> None:
    """Refuse NaN or inf data, found from the block amax (no extra pass): NF4 scales are ``max |x|``.

    ``amax`` holds the scales of blocks ``first, first + 1, ...`` of the flattened input.
    """
    bad = ~np.isfinite(amax)
    if bad.any():
        block = first + int(np.argmax(bad))
        raise ValueError(f"x holds NaN or inf (in elements {block * block_size} to {(block + 1) * block_size - 1} "
                         f"of the flattened input); NF4 quantizes finite data only: a NaN or inf block scale would "
                         f"decode the whole block (and, with double quantization, every scale) to NaN")


@fill_doc(**DOCS)
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
        A CUDA device array stays on its device; the result then holds device arrays. A
        dask array gives a result of dask arrays (docs/dask.md).
    block_size : int
        Elements per scale (even).
    scale_block_size : int, optional
        Scales per double-quantization group; the number of blocks must be a multiple.
    scale_bits : int
        Bits of the quantized scales (2..8).
    {backend}

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
    lazy = is_dask_array(x)
    x = device_float_input(x, lazy=lazy)
    _, b = check_blocking((int(x.size),), 0, block_size, True)
    scale_bits = check_int("scale_bits", scale_bits, low=2, high=8)
    sb = None
    if scale_block_size is not None:
        nblocks = x.size // b
        sb = check_int("scale_block_size", scale_block_size)
        if sb < 1 or nblocks % sb:
            raise ValueError(f"scale_block_size={scale_block_size!r} must be a positive int dividing the number of "
                             f"blocks, {nblocks} (x.size={x.size} / block_size={b})")
    if lazy:
        return _lazy(x, b, sb, scale_bits, backend)
    codes, scales = _blocks(x, block_size=b, backend=backend)
    if sb is None:
        return NF4Quantized(codes, scales, tuple(x.shape), b)
    # Double quantization works on the scales (1/block_size of the data) on the host.
    host = host_array(scales)
    mean = _scale_mean(host)
    q, double = _double_quantize(host, mean, sb, scale_bits)
    if is_device_array(x):
        q, double = device_copy(q), device_copy(double)
    return NF4Quantized(codes, q, tuple(x.shape), b, double, mean)


def _blocks(x, *, block_size: int, backend, axis: int = 0, block_info=None) -> tuple[np.ndarray, np.ndarray]:
    """The packed codes and float32 block scales of the flattened ``x`` (one fused kernel pass).

    NaN or inf is refused naming its elements; ``block_info`` (dask's, for a chunk of the
    flattened input) says where the chunk starts.
    """
    x = device_float_input(x)
    n = int(x.size)
    (codes, scales), _ = run_quantize(x.reshape((n,)), BlockSpec(_NF4, block_size, _NF4.default_params()), 0,
                                      backend)
    if n:
        first = block_info[0]["array-location"][0][0] // block_size if block_info else 0
        _check_finite_blocks(host_array(scales).reshape(-1), block_size, first)
    return codes, scales


def _lazy(x, block_size: int, scale_block_size: int | None, scale_bits: int, backend) -> NF4Quantized:
    """:func:`quantize_nf4` of a dask array: one pass over chunks of whole blocks (and whole scale groups).

    The double-quantization mean is NumPy's mean of all the block scales (its bits depend on
    the summation order): one task over the scales, 1/``block_size`` of the data.
    """
    from ._dask import engine

    flat = engine.as_dask(x).reshape(-1)
    spec = BlockSpec(_NF4, block_size, _NF4.default_params())
    codes, scales = run_quantize(flat, spec, 0, backend, per_chunk=functools.partial(_blocks, backend=backend),
                                 align=block_size * (scale_block_size or 1), block_info=True)[0]
    if scale_block_size is None:
        return NF4Quantized(codes, scales, tuple(x.shape), block_size)
    mean = scales.rechunk(-1).map_blocks(_scale_mean, drop_axis=0, dtype=np.float32, token="nbquant-nf4-mean")
    q, double = engine.map_layout(
        functools.partial(_double_quantize, scale_block_size=scale_block_size, scale_bits=scale_bits), scales,
        resolve_layout(tuple(scales.shape), 0, scale_block_size),
        [engine.Output("data", np.dtype(np.int8)), engine.Output("data", np.dtype(np.float32), (scale_block_size, 1))],
        arguments=False, token="nbquant-nf4-double", mean=mean)
    return NF4Quantized(codes, q, tuple(x.shape), block_size, double, mean)
