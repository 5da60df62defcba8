"""Scaled block formats: OCP Microscaling (MXFP8, MXFP6, MXFP4, MXINT8) and NVFP4.

Each block of ``block_size`` consecutive elements along ``axis`` shares one scale
that a fused kernel computes from the block's ``amax`` while it encodes the block:

* **MX** (OCP MX v1.0): E8M0 scale ``X = 2**(floor(log2(amax)) - emax)`` where
  ``emax`` is the exponent of the element format's largest normal; elements are
  ``x / X`` encoded with saturation. ``scale_rounding="ceil"`` instead picks the
  smallest power of two with ``amax / X <= max`` (nothing clips). A block holding
  NaN or ±inf gets the NaN scale 0xff (its elements are encoded unscaled and
  dequantize to NaN); an all-zero block gets code 0 (``2**-127``).
* **NVFP4** (modelopt/TensorRT): float32 global scale ``g = amax(x) / (6 * 448)``
  (``1.0`` for an all-zero input), E4M3 block scales ``e4m3(max(amax_b / (6 * g),
  2**-9))`` (an exact zero becomes 1.0), e2m1 elements ``x / (scale_b * g)``
  saturated at 6, packed two per byte, block 16.

4-bit elements are packed two per byte along ``axis``, the first element in the
low nibble. Blocks along an axis other than the last are computed on a transposed
copy.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Literal

import ml_dtypes
import numpy as np
import numpy.typing as npt

from ._dask import any_dask_array, is_dask_array
from ._docstrings import DOCS, fill_doc
from .backends import device_code_input, device_float_input, is_device_array
from .block_rows import check_blocking, run_dequantize, run_quantize
from .blocks import BlockSpec, block_format_names, get_block_format
from .blocks.mx import MXParams
from .blocks.nvfp4 import NVFP4Params
from .formats import QuantFormat, get_format
from .validation import check_bool, check_choice, check_float_scalar, check_int, check_out_dtype

__all__ = ["MX_FORMATS", "BlockQuantized", "quantize_mx", "dequantize_mx", "quantize_nvfp4", "dequantize_nvfp4"]

#: The OCP MX formats (the registered block formats of the ``mx`` family, :mod:`nbquant.blocks.mx`):
#: name -> (element format, emax of the element format).
MX_FORMATS: dict[str, tuple[str, int]] = {
    fmt.name: (fmt.element_name, fmt.emax)
    for fmt in map(get_block_format, block_format_names()) if fmt.family == "mx"
}
_NVFP4 = get_block_format("nvfp4")
_E2M1 = get_format("float4_e2m1fn")
#: The docstring pieces of this module's functions (:func:`nbquant._docstrings.fill_doc`).
_DOCS = DOCS | {"decoded_returns": """
    Returns
    -------
    numpy.ndarray
        The values, of ``out_dtype``, in the shape of the quantized input.
    """}


@dataclass(frozen=True)
class BlockQuantized:
    """A thin container of a block-quantized array: codes, block scales, and how to read them.

    :func:`quantize_mx` and :func:`quantize_nvfp4` return it; the fields below are the
    constructor's parameters and the attributes.

    Parameters
    ----------
    data : numpy.ndarray
        Element codes: ml_dtypes arrays, int8 (MXINT8), or uint8 with two 4-bit codes per
        byte along ``axis`` when ``packed``.
    scales : numpy.ndarray
        ``float8_e8m0fnu`` (MX) or ``float8_e4m3fn`` (NVFP4), the input's shape with
        ``n / block_size`` along ``axis``.
    format : str
        ``"mxfp8_e4m3"``, ..., ``"mxint8"`` or ``"nvfp4"``.
    axis, block_size : int
        The blocked axis and the block length.
    packed : bool
        Whether ``data`` holds two 4-bit codes per byte.
    global_scale : numpy.float32 or None, optional
        NVFP4's per-tensor scale.
    """

    data: np.ndarray
    scales: np.ndarray
    format: str
    axis: int
    block_size: int
    packed: bool
    global_scale: np.float32 | None = None

    @fill_doc(**_DOCS)
    def dequantize(self, out_dtype: npt.DTypeLike = np.float32, backend: str | None = None) -> np.ndarray:
        """Decode back to floats (see :func:`dequantize_mx` and :func:`dequantize_nvfp4`).

        {decode_parameters}

        Returns
        -------
        numpy.ndarray
            The values, in the shape of the quantized input.

        Examples
        --------
        >>> import numpy as np, nbquant
        >>> x = np.linspace(-1, 1, 32, dtype=np.float32)
        >>> bq = nbquant.quantize_mx(x, "mxfp8_e4m3")
        >>> float(np.abs(bq.dequantize() - x).max()) < 0.04
        True
        """
        if self.format == "nvfp4":
            g = self.global_scale if is_dask_array(self.global_scale) else np.float32(self.global_scale)
            return _dequantize_nvfp4(self.data, self.scales, g, self.axis, self.block_size, out_dtype, backend)
        return dequantize_mx(self.data, self.scales, self.format, axis=self.axis, block_size=self.block_size,
                             packed=self.packed, out_dtype=out_dtype, backend=backend)


def _mx_spec(format: str, block_size: int, packed, round_up: bool = False, out_dtype=np.float32) -> BlockSpec:
    fmt = get_block_format(check_choice("format", format, tuple(MX_FORMATS)))
    packed = check_bool("packed", packed)
    if packed and fmt.element.bits != 4:
        raise ValueError(f"packed=True applies to mxfp4 only; {fmt.name} has {fmt.element.bits}-bit elements")
    return BlockSpec(fmt, block_size, MXParams(packed, round_up), np.dtype(out_dtype))


def quantize_mx(
    x: npt.ArrayLike,
    format: Literal["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8"] = "mxfp8_e4m3",
    *,
    axis: int = -1,
    block_size: int = 32,
    scale_rounding: Literal["floor", "ceil"] = "floor",
    packed: bool | None = None,
    backend: str | None = None,
) -> BlockQuantized:
    """Quantize to an OCP Microscaling format in one fused pass per block.

    Parameters
    ----------
    x : array_like
        float32, float16, bfloat16 or float64 input. A CUDA device array stays on its
        device (blocks along its last axis); the result then holds device arrays. A
        dask array gives a result of dask arrays (docs/dask.md).
    format : str
        ``"mxfp8_e4m3"``, ``"mxfp8_e5m2"``, ``"mxfp6_e2m3"``, ``"mxfp6_e3m2"``,
        ``"mxfp4"`` or ``"mxint8"``.
    axis : int
        The axis the blocks run along (default: the last). Its length must be a
        multiple of ``block_size``.
    block_size : int
        Elements per shared scale (32 in the MX specification).
    scale_rounding : {"floor", "ceil"}
        ``"floor"``: the specification's ``floor(log2(amax)) - emax`` (the block's
        largest values may saturate). ``"ceil"``: round the scale up so none clip.
    packed : bool, optional
        MXFP4 only: two codes per byte (default True for mxfp4).
    backend : str, optional
        ``"cpu"`` or ``"reference"`` (``"auto"`` picks cpu).

    Returns
    -------
    BlockQuantized
        Element codes (``data``: the ml_dtypes element type, int8 for MXINT8, or uint8
        holding two codes per byte when ``packed``), E8M0 ``scales`` with one per block,
        and the format, axis and block size :meth:`BlockQuantized.dequantize` needs.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> bq = nbquant.quantize_mx(np.array([1.0, -3.0, 0.5, 6.0], np.float32), "mxfp4", block_size=4)
    >>> bq.scales.astype(np.float32), bq.data
    (array([1.], dtype=float32), array([210, 113], dtype=uint8))
    """
    x = device_float_input(x, lazy=is_dask_array(x))
    rounding = check_choice("scale_rounding", scale_rounding, ("floor", "ceil"))
    name = check_choice("format", format, tuple(MX_FORMATS))
    if packed is None:
        packed = name == "mxfp4"
    spec = _mx_spec(name, block_size, packed, rounding == "ceil")
    k, b = check_blocking(tuple(x.shape), axis, block_size, spec.params.packed)
    (data, scales), _ = run_quantize(x, replace(spec, block_size=b), k, backend)
    return BlockQuantized(data, scales, name, k, b, spec.params.packed)


def _check_codes(data, scales, element: QuantFormat, packed: bool, axis, block_size, scale_dtype,
                 lazy: bool = False) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    if is_device_array(data) != is_device_array(scales):
        raise TypeError("data and scales must both be CUDA device arrays or both host arrays")
    data, scales = device_code_input(data, "data", lazy=lazy), device_code_input(scales, "scales", lazy=lazy)
    expected = np.dtype(np.uint8) if packed else element.dtype
    if data.dtype != expected:
        raise TypeError(f"data has dtype {data.dtype}; {element.name} codes need {expected}")
    if scales.dtype != np.dtype(scale_dtype) and scales.dtype != np.uint8:
        raise TypeError(f"scales has dtype {scales.dtype}; expected {np.dtype(scale_dtype)} (or its uint8 bits)")
    k, b = check_blocking(tuple(data.shape), axis, 1, False)
    n = data.shape[k] * (2 if packed else 1)
    b = check_int("block_size", block_size)
    if b < 1 or n % b:
        raise ValueError(f"block_size={b} does not divide the unpacked length {n} of axis {k}")
    want = data.shape[:k] + (n // b,) + data.shape[k + 1:]
    if tuple(scales.shape) != want:
        raise ValueError(f"scales has shape {tuple(scales.shape)}; data of shape {tuple(data.shape)} with "
                         f"block_size={b} along axis {k} needs scales of shape {want}")
    return data, scales, k, b, n


@fill_doc(**_DOCS)
def dequantize_mx(
    data: npt.ArrayLike,
    scales: npt.ArrayLike,
    format: str,
    *,
    axis: int = -1,
    block_size: int = 32,
    packed: bool | None = None,
    out_dtype: npt.DTypeLike = np.float32,
    backend: str | None = None,
) -> np.ndarray:
    """Dequantize MX codes: ``element * 2**(scale - 127)`` per block.

    Parameters
    ----------
    data, scales : array_like
        As returned in :class:`BlockQuantized` (scales may be their uint8 bits); dask
        arrays give a lazy dask result.
    format : str
        As given to :func:`quantize_mx`.
    axis : int, optional
        As given to :func:`quantize_mx` (default: the last).
    block_size : int, optional
        As given to :func:`quantize_mx` (default 32).
    packed : bool, optional
        As given to :func:`quantize_mx` (default True for mxfp4).
    {out_dtype}
    {backend}

    {decoded_returns}

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> nbquant.dequantize_mx(np.array([210, 113], np.uint8), np.array([127], np.uint8), "mxfp4", block_size=4)
    array([ 1. , -3. ,  0.5,  6. ], dtype=float32)
    """
    name = check_choice("format", format, tuple(MX_FORMATS))
    spec = _mx_spec(name, 1, name == "mxfp4" if packed is None else packed, out_dtype=check_out_dtype(out_dtype))
    lazy = any_dask_array(data, scales)
    data, scales, k, b, n = _check_codes(data, scales, spec.format.element, spec.params.packed, axis, block_size,
                                         ml_dtypes.float8_e8m0fnu, lazy)
    return run_dequantize((data, scales), replace(spec, block_size=b), k, n, backend)


@fill_doc(**_DOCS)
def quantize_nvfp4(
    x: npt.ArrayLike,
    *,
    global_scale: float | None = None,
    axis: int = -1,
    block_size: int = 16,
    backend: str | None = None,
) -> BlockQuantized:
    """Quantize to NVFP4: packed e2m1 codes, E4M3 block scales and a float32 global scale (modelopt numerics).

    Parameters
    ----------
    x : array_like
        float32, float16, bfloat16 or float64 input, its length along ``axis`` a multiple
        of ``block_size`` (pad it first). A CUDA device array stays on its device
        (blocks along its last axis); the result then holds device arrays. A dask array
        gives a result of dask arrays (the global amax a dask reduction first).
    global_scale : float, optional
        The per-tensor scale; default ``amax(x) / (6 * 448)`` (1.0 for an all-zero
        input), computed by a reduction pass before the fused pass.
    axis, block_size : int, optional
        Blocks of ``block_size`` (16) along ``axis`` (the last by default).
    {backend}

    Returns
    -------
    BlockQuantized
        ``data``: uint8 holding two e2m1 codes per byte along ``axis``; ``scales``:
        float8_e4m3fn, one per block; ``global_scale``: the float32 per-tensor scale.

    Raises
    ------
    ValueError
        If ``global_scale`` is None and ``x`` holds NaN or inf. With an explicit
        ``global_scale``, a block holding inf saturates (its scale to 448, the inf to
        ±6) and a block holding NaN gets the NaN scale code, so it decodes to NaN.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> bq = nbquant.quantize_nvfp4(np.array([0.5, -1.0, 2.0, 6.0], np.float32), block_size=4)
    >>> bq.global_scale, bq.scales.astype(np.float32), bq.data
    (np.float32(0.002232143), array([448.], dtype=float32), array([161,  116], dtype=uint8))
    """
    x = device_float_input(x, lazy=is_dask_array(x))
    k, b = check_blocking(tuple(x.shape), axis, block_size, True)
    g = None if global_scale is None else check_float_scalar("global_scale", global_scale, positive=True)
    # without one, the global scale is computed from amax(x) first (a dask reduction for a dask x): two passes
    (data, scales), spec = run_quantize(x, BlockSpec(_NVFP4, b, NVFP4Params(g)), k, backend)
    return BlockQuantized(data, scales, "nvfp4", k, b, True, spec.params.global_scale)


@fill_doc(**_DOCS)
def dequantize_nvfp4(
    data: npt.ArrayLike,
    scales: npt.ArrayLike,
    global_scale: npt.ArrayLike,
    *,
    axis: int = -1,
    block_size: int = 16,
    out_dtype: npt.DTypeLike = np.float32,
    backend: str | None = None,
) -> np.ndarray:
    """Dequantize NVFP4: ``e2m1 * (e4m3_scale * global_scale)`` per block.

    Parameters
    ----------
    data : array_like
        Packed e2m1 codes, uint8 with two per byte along ``axis`` (``BlockQuantized.data``).
        A dask ``data``, ``scales`` or ``global_scale`` gives a lazy dask result.
    scales : array_like
        E4M3 block scales: ``float8_e4m3fn`` or their uint8 bits.
    global_scale : float or array_like
        One finite value > 0, the float32 per-tensor scale (``BlockQuantized.global_scale``,
        a ``numpy.float32``). The 0 that :func:`quantize_nvfp4` computes for data whose
        ``amax / 2688`` underflows float32 is refused here; ``BlockQuantized.dequantize``
        decodes it (to zeros).
    axis : int, optional
        As in :func:`dequantize_mx`.
    block_size : int, optional
        As in :func:`dequantize_mx`; defaults to NVFP4's 16.
    out_dtype : dtype, optional
        As in :func:`dequantize_mx`.
    backend : str, optional
        As in :func:`dequantize_mx`.

    {decoded_returns}

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> bq = nbquant.quantize_nvfp4(np.array([0.5, -1.0, 2.0, 6.0], np.float32), block_size=4)
    >>> nbquant.dequantize_nvfp4(bq.data, bq.scales, bq.global_scale, block_size=4)
    array([ 0.5, -1. ,  2. ,  6. ], dtype=float32)
    """
    if is_dask_array(global_scale):  # checked when computed, by this function on every chunk
        return _dequantize_nvfp4(data, scales, global_scale, axis, block_size, out_dtype, backend, dequantize_nvfp4)
    g = check_float_scalar("global_scale", global_scale, positive=True)
    return _dequantize_nvfp4(data, scales, g, axis, block_size, out_dtype, backend)


def _dequantize_nvfp4(data, scales, global_scale, axis, block_size, out_dtype, backend, per_chunk=None) -> np.ndarray:
    """:func:`dequantize_nvfp4` with a checked (or :func:`quantize_nvfp4`-computed) float32 ``global_scale``.

    A dask argument makes the call lazy: ``per_chunk`` (default: this function) on every chunk.
    """
    out_dtype = check_out_dtype(out_dtype)
    lazy = any_dask_array(data, scales, global_scale)
    data, scales, k, b, n = _check_codes(data, scales, _E2M1, True, axis, block_size, ml_dtypes.float8_e4m3fn, lazy)
    spec = BlockSpec(_NVFP4, b, NVFP4Params(global_scale), out_dtype)
    if per_chunk is None:
        return run_dequantize((data, scales), spec, k, n, backend)
    chunk = functools.partial(per_chunk, out_dtype=out_dtype, backend=backend)
    return run_dequantize((data, scales), spec, k, n, backend, per_chunk=chunk, global_scale=global_scale)
