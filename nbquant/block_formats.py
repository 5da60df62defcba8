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
from dataclasses import dataclass
from typing import Literal

import ml_dtypes
import numpy as np
import numpy.typing as npt

from ._block_rows import run_block_dequantize, run_block_quantize
from ._dask import any_dask_array, is_dask_array
from .backends import (
    device_code_input,
    device_float_input,
    is_device_array,
    resolve_backend,
)
from .formats import get_format
from .layout import resolve_layout
from .spec import BlockSpec
from .validation import check_bool, check_choice, check_float_scalar, check_int, check_out_dtype

__all__ = ["MX_FORMATS", "BlockQuantized", "quantize_mx", "dequantize_mx", "quantize_nvfp4", "dequantize_nvfp4"]

#: The OCP MX formats: name -> (element format, emax of the element format).
MX_FORMATS: dict[str, tuple[str, int]] = {
    name: (element, get_format(element).emax)
    for name, element in (("mxfp8_e4m3", "float8_e4m3fn"), ("mxfp8_e5m2", "float8_e5m2"),
                          ("mxfp6_e2m3", "float6_e2m3fn"), ("mxfp6_e3m2", "float6_e3m2fn"),
                          ("mxfp4", "float4_e2m1fn"), ("mxint8", "int8"))
}
_MXINT8_MAX = 127 / 64
_NVFP4_GLOBAL_DIVISOR = np.float32(6.0 * 448.0)


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

    def dequantize(self, out_dtype: npt.DTypeLike = np.float32, backend: str | None = None) -> np.ndarray:
        """Decode back to floats (see :func:`dequantize_mx` and :func:`dequantize_nvfp4`).

        Parameters
        ----------
        out_dtype : dtype, optional
            float32 (default), float16 or bfloat16.
        backend : str, optional
            ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``; default: the selected backend.

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


def check_blocking(shape: tuple[int, ...], axis, block_size, packed: bool) -> tuple[int, int]:
    """The normalised blocked ``axis`` and ``block_size`` (positive, even when ``packed``) for ``shape``."""
    k, b = check_int("axis", axis), check_int("block_size", block_size)
    if not shape:
        raise ValueError("block formats need an input with at least one dimension")
    if not -len(shape) <= k < len(shape):
        raise ValueError(f"axis={axis} is out of range for an input of {len(shape)} dimension(s)")
    k %= len(shape)
    if b < 1 or (packed and b % 2):
        raise ValueError(f"block_size={b} must be a positive{' even' if packed else ''} integer")
    if shape[k] % b:
        pad = -shape[k] % b
        raise ValueError(f"axis {k} has length {shape[k]}, not a multiple of block_size={b}; pad it with {pad} "
                         f"zeros first, e.g. numpy.pad(x, [(0, {pad}) if d == {k} else (0, 0) for d in "
                         "range(x.ndim)])")
    return k, b


def _mx_spec(format: str, block_size: int, packed, round_up: bool = False, out_dtype=np.float32) -> BlockSpec:
    name = check_choice("format", format, tuple(MX_FORMATS))
    element_name, emax = MX_FORMATS[name]
    element = get_format(element_name)
    packed = check_bool("packed", packed)
    if packed and element.bits != 4:
        raise ValueError(f"packed=True applies to mxfp4 only; {name} has {element.bits}-bit elements")
    max_value = _MXINT8_MAX if not element.is_float else element.max_value
    return BlockSpec(element, block_size, packed, emax, max_value, round_up, 1.0, np.dtype(out_dtype))


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
    lazy = is_dask_array(x)
    x = device_float_input(x, lazy=lazy)
    rounding = check_choice("scale_rounding", scale_rounding, ("floor", "ceil"))
    name = check_choice("format", format, tuple(MX_FORMATS))
    if packed is None:
        packed = name == "mxfp4"
    spec = _mx_spec(name, block_size, packed, rounding == "ceil")
    k, b = check_blocking(tuple(x.shape), axis, block_size, spec.packed)
    if lazy:
        per_chunk = functools.partial(_parts, quantize_mx, format=name, scale_rounding=rounding, packed=spec.packed,
                                      backend=backend)
        data_dtype = np.dtype(np.uint8) if spec.packed else spec.element.dtype
        return _lazy_quantize(per_chunk, x, name, k, b, spec.packed, data_dtype, ml_dtypes.float8_e8m0fnu, None)
    impl = resolve_backend(backend, (x,))
    data, scales = run_block_quantize(impl.mx_quantize, x, spec, k)
    if not spec.packed:
        data = data.view(spec.element.dtype)
    return BlockQuantized(data, scales.view(ml_dtypes.float8_e8m0fnu), name, k, b, spec.packed)


def _check_codes(data, scales, spec: BlockSpec, axis, block_size, scale_dtype, lazy: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    if is_device_array(data) != is_device_array(scales):
        raise TypeError("data and scales must both be CUDA device arrays or both host arrays")
    data, scales = device_code_input(data, "data", lazy=lazy), device_code_input(scales, "scales", lazy=lazy)
    expected = np.dtype(np.uint8) if spec.packed else spec.element.dtype
    if data.dtype != expected:
        raise TypeError(f"data has dtype {data.dtype}; {spec.element.name} codes need {expected}")
    if scales.dtype != np.dtype(scale_dtype) and scales.dtype != np.uint8:
        raise TypeError(f"scales has dtype {scales.dtype}; expected {np.dtype(scale_dtype)} (or its uint8 bits)")
    k, b = check_blocking(tuple(data.shape), axis, 1, False)
    n = data.shape[k] * (2 if spec.packed else 1)
    b = check_int("block_size", block_size)
    if b < 1 or n % b:
        raise ValueError(f"block_size={b} does not divide the unpacked length {n} of axis {k}")
    want = data.shape[:k] + (n // b,) + data.shape[k + 1:]
    if tuple(scales.shape) != want:
        raise ValueError(f"scales has shape {tuple(scales.shape)}; data of shape {tuple(data.shape)} with "
                         f"block_size={b} along axis {k} needs scales of shape {want}")
    return data, scales, k, b, n


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
    out_dtype : dtype, optional
        float32 (default), float16 or bfloat16.
    backend : str, optional
        ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``; default: the selected backend.

    Returns
    -------
    numpy.ndarray
        The values, of ``out_dtype``, in the shape of the quantized input.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> nbquant.dequantize_mx(np.array([210, 113], np.uint8), np.array([127], np.uint8), "mxfp4", block_size=4)
    array([ 1. , -3. ,  0.5,  6. ], dtype=float32)
    """
    name = check_choice("format", format, tuple(MX_FORMATS))
    spec = _mx_spec(name, 1, name == "mxfp4" if packed is None else packed, out_dtype=check_out_dtype(out_dtype))
    lazy = any_dask_array(data, scales)
    data, scales, k, b, n = _check_codes(data, scales, spec, axis, block_size, ml_dtypes.float8_e8m0fnu, lazy)
    if lazy:
        per_chunk = functools.partial(dequantize_mx, format=name, packed=spec.packed, out_dtype=spec.out_dtype,
                                      backend=backend)
        return _lazy_dequantize(per_chunk, data, scales, k, b, n, spec)
    spec = BlockSpec(spec.element, b, spec.packed, spec.emax, spec.max_value, False, 1.0, spec.out_dtype)
    impl = resolve_backend(backend, (data,))
    return run_block_dequantize(impl.mx_dequantize, data, scales, spec, k, n)


def _amax_global_scale(amax) -> np.float32:
    """NVFP4's global scale ``amax / (6 * 448)`` (1.0 for an all-zero input) of the input's ``amax``."""
    amax = np.float32(amax)
    if not np.isfinite(amax):
        raise ValueError(f"x holds {'NaN' if np.isnan(amax) else 'inf'}: the global scale amax / (6 * 448) would "
                         "make every value NaN. Pass finite data, or an explicit global_scale (then a block with "
                         "inf saturates and a block with NaN decodes to NaN)")
    return np.float32(1.0) if amax == 0 else np.float32(amax / _NVFP4_GLOBAL_DIVISOR)


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
    backend : str, optional
        ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``; default: the selected backend.

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
    lazy = is_dask_array(x)
    x = device_float_input(x, lazy=lazy)
    k, b = check_blocking(tuple(x.shape), axis, block_size, True)
    given = None if global_scale is None else check_float_scalar("global_scale", global_scale, positive=True)
    if lazy:  # the global amax is a dask reduction first: two passes over x
        from ._dask import engine

        g = engine.chunk_amax(x, backend).map_blocks(_amax_global_scale, dtype=np.float32) if given is None else given
        per_chunk = functools.partial(_parts, _quantize_nvfp4, backend=backend)
        return _lazy_quantize(per_chunk, x, "nvfp4", k, b, True, np.dtype(np.uint8), ml_dtypes.float8_e4m3fn, g,
                              global_scale=g)
    impl = resolve_backend(backend, (x,))
    return _quantize_nvfp4(x, given if given is not None else _amax_global_scale(impl.amax(x)), k, b, backend)


def _quantize_nvfp4(x, global_scale, axis: int, block_size: int, backend) -> BlockQuantized:
    """:func:`quantize_nvfp4` with a checked (or computed) float32 ``global_scale``, blocks along ``axis``."""
    x = device_float_input(x)
    g = np.float32(global_scale)
    spec = BlockSpec(get_format("float4_e2m1fn"), block_size, True, global_scale=g)
    data, scales = run_block_quantize(resolve_backend(backend, (x,)).nvfp4_quantize, x, spec, axis)
    return BlockQuantized(data, scales.view(ml_dtypes.float8_e4m3fn), "nvfp4", axis, block_size, True, g)


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

    Returns
    -------
    numpy.ndarray
        The values, of ``out_dtype``, in the shape of the quantized input.

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
    spec = BlockSpec(get_format("float4_e2m1fn"), 1, True, out_dtype=check_out_dtype(out_dtype))
    lazy = any_dask_array(data, scales, global_scale)
    data, scales, k, b, n = _check_codes(data, scales, spec, axis, block_size, ml_dtypes.float8_e4m3fn, lazy)
    if lazy:
        per_chunk = functools.partial(per_chunk or _dequantize_nvfp4, out_dtype=spec.out_dtype, backend=backend)
        return _lazy_dequantize(per_chunk, data, scales, k, b, n, spec, global_scale=global_scale)
    impl = resolve_backend(backend, (data,))
    spec = BlockSpec(spec.element, b, True, global_scale=np.float32(global_scale), out_dtype=spec.out_dtype)
    return run_block_dequantize(impl.nvfp4_dequantize, data, scales, spec, k, n)


def _parts(quantize, x, **arguments) -> tuple:
    """The ``data`` and ``scales`` of ``quantize(x, **arguments)`` (a :class:`BlockQuantized`): one chunk's."""
    bq = quantize(x, **arguments)
    return bq.data, bq.scales


def _lazy_quantize(per_chunk, x, name: str, axis: int, block_size: int, packed: bool, data_dtype, scale_dtype,
                   g, **kwargs) -> BlockQuantized:
    """The :class:`BlockQuantized` of a dask ``x``: ``per_chunk(chunk, **kwargs)`` on every chunk (whole blocks along
    ``axis``); a dask array in ``kwargs`` is computed first."""
    from ._dask import engine

    outputs = [engine.Output("data", data_dtype, (2, 1) if packed else engine.NO_PACK),
               engine.Output("grid", np.dtype(scale_dtype))]
    layout = resolve_layout(tuple(x.shape), axis, block_size)
    data, scales = engine.map_layout(per_chunk, x, layout, outputs, pack_axis=axis, token=f"nbquant-{name}", **kwargs)
    return BlockQuantized(data, scales, name, axis, block_size, packed, g)


def _lazy_dequantize(per_chunk, data, scales, axis: int, block_size: int, n: int, spec: BlockSpec, **kwargs):
    """The dequantized dask array of block codes: ``per_chunk(chunk, scales=..., **kwargs)`` on every chunk (whole
    blocks along ``axis``); a dask array in ``kwargs`` is computed first."""
    from ._dask import engine

    layout = resolve_layout(tuple(data.shape[:axis]) + (n,) + tuple(data.shape[axis + 1:]), axis, block_size)
    return engine.map_layout(per_chunk, data, layout, [engine.Output("data", spec.out_dtype)],
                             params={"scales": scales}, pack=(2, 1) if spec.packed else engine.NO_PACK,
                             pack_axis=axis, token="nbquant-dequantize-blocks", **kwargs)[0]
