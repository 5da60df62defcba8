"""The public quantize / dequantize entry points: validate, normalise the layout, dispatch."""

from __future__ import annotations

import functools
from typing import Literal

import ml_dtypes
import numpy as np
import numpy.typing as npt

from . import modes
from ._memory import host_empty
from .backends import resolve_backend
from .formats import QuantFormat, get_format
from .layout import resolve_layout
from .placement import packed_format, placement
from .spec import DequantizeSpec, QuantizeSpec
from .validation import (
    check_choice,
    check_float_format_arguments,
    check_half_scale,
    check_out_dtype,
    check_packed,
    check_quant_range,
    check_scale,
    check_zero_point,
)

__all__ = ["quantize", "dequantize"]

ScaleOp = Literal["divide", "reciprocal", "multiply"]
ComputeDtype = Literal["float32", "float16", "bfloat16"]
ZeroPointOrder = Literal["after_rounding", "before_rounding"]
_SCALE_OPS = ("divide", "reciprocal", "multiply")
_COMPUTE_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
_ZP_ORDERS = ("after_rounding", "before_rounding")


def quantize(
    x: npt.ArrayLike,
    scale: npt.ArrayLike,
    dtype: str | npt.DTypeLike,
    *,
    zero_point: npt.ArrayLike | None = None,
    axis: int | None = None,
    block_size: int | tuple[int, ...] | None = None,
    quant_min: int | None = None,
    quant_max: int | None = None,
    packed: bool = False,
    scale_op: ScaleOp = "divide",
    zero_point_order: ZeroPointOrder = "after_rounding",
    saturate: bool = True,
    compute_dtype: ComputeDtype = "float32",
    out: np.ndarray | None = None,
    backend: str | None = None,
) -> np.ndarray:
    """Quantize a float array to integer codes: ``q = clamp(rne(x / scale) + zero_point, qmin, qmax)``.

    Parameters
    ----------
    x : array_like
        float32, float16, bfloat16 (ml_dtypes) or float64 input, any shape and
        strides (a non-contiguous input is copied once). float64 and the half types
        are converted to float32 first; the arithmetic is float32 (see ``compute_dtype``).
        A dask array (or a dask ``scale``/``zero_point``) makes the call lazy: the result
        is a dask array, each chunk quantized by this function (docs/dask.md).
    scale : array_like
        Positive finite scales: one value (per-tensor), one per channel along
        ``axis``, or one per block (see ``block_size``). Converted to float32.
    dtype : str or dtype
        The quantized format: ``"int8"``, ``"uint8"``, ``"int16"``, ``"uint16"``, ``"int32"``,
        ``"int4"``, ``"uint4"``, ``"int2"``, ``"uint2"`` or the numpy/ml_dtypes dtype.
        int32 codes (biases) come from float32 arithmetic: integers above ``2**24``
        are float32's, and the largest code is ``2**31 - 128`` (+inf saturates there).
    zero_point : array_like, optional
        Same shape as ``scale``. Integers within the format's range when added after
        rounding (the default); any finite float with ``zero_point_order="before_rounding"``.
    axis : int, optional
        Per-channel: ``scale`` has one value per index of ``axis`` (the kept
        dimension, as in TensorRT and ONNX). With an int ``block_size``: the blocked axis.
    block_size : int or tuple of int, optional
        An int ``B`` with ``axis``: ONNX blocked quantization; ``scale`` has the input's
        rank with ``ceil(n / B)`` along ``axis``. A tuple with one entry per dimension:
        torchao blocks, each entry dividing its dimension; ``scale`` has the block-grid
        shape (size-1 dims may be dropped).
    quant_min, quant_max : int, optional
        Clamp bounds inside the format's range (default: the full range).
    packed : bool
        For sub-byte formats, return uint8 with ``8 // bits`` codes per byte along the
        last axis, the first element in the lowest bits (``byte = q[2j] | q[2j+1] << 4``
        for 4-bit). The last axis must be a multiple of ``8 // bits``. The result is a
        :class:`~nbquant.PackedCodes`, a uint8 array that records the format, so
        ``dequantize(q, scale)`` decodes it without ``dtype=``.
    scale_op : {"divide", "reciprocal", "multiply"}
        ``x / scale`` (ONNX, TensorRT); ``x * fl(1 / scale)`` (torchao, fbgemm);
        ``x * scale`` where ``scale`` is a multiplier (pypto, modelopt).
    zero_point_order : {"after_rounding", "before_rounding"}
        ``rne(v) + zp`` (ONNX, torchao) or ``rne(v + zp)`` (pypto, torch.quantize_per_tensor).
    saturate : bool
        Floating-point formats only. True (default, as ONNX, TensorRT, torchao and
        modelopt do): values beyond the largest finite value become it. False:
        ml_dtypes' cast (e4m3fn overflow and inf → NaN, e5m2 → inf; fp6 and fp4
        have no NaN/inf and always saturate).
    compute_dtype : {"float32", "float16", "bfloat16"}
        The precision of the arithmetic. ``"float32"`` (default): one float32 operation,
        then rounding to an integer. A half type reproduces libraries that compute on
        half-precision tensors (torchao and compressed-tensors on bfloat16 weights, ONNX
        ``precision``): ``x``, ``scale`` (``fl(1 / scale)`` for ``"reciprocal"``) and
        ``zero_point`` are rounded to it (RNE), and so are the quotient (or product) and
        its sum with the zero point. ``x`` must not be float64 then, and every scale
        must stay finite and nonzero in that type.
    out : numpy.ndarray, optional
        Preallocated result of the exact shape and dtype this call returns (not with
        dask arrays).
    backend : str, optional
        ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``; default: the selected backend.
        CUDA device arrays (numba, CuPy, PyTorch: ``__cuda_array_interface__`` or
        DLPack) are quantized on their own device by ``"cuda"``, zero-copy, and
        the result (or ``out``) is a numba device array.

    Returns
    -------
    numpy.ndarray
        Codes of ``dtype`` (ml_dtypes for sub-byte formats), or packed ``uint8`` as a
        :class:`~nbquant.PackedCodes` (``out`` itself when given; a device array on CUDA).

    Notes
    -----
    Rounding is half to even. NaN inputs are quantized as if they were 0.0, so they
    become the zero point (clamped); ``+inf`` and ``-inf`` become ``qmax`` and
    ``qmin``. Every backend gives the same bits.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> nbquant.quantize(np.array([-1.0, 0.25, 0.5, 300.0], np.float32), 0.5, "int8")
    array([ -2,   0,   1, 127], dtype=int8)
    >>> nbquant.quantize(np.array([[1.0, -1.0]], np.float32), 0.5, "int4", packed=True)
    PackedCodes([[226]], dtype=uint8, format='int4')

    Half-precision arithmetic: ``1000 / 3`` is 333.25 in bfloat16 steps of 2, so 334:

    >>> import ml_dtypes
    >>> x = np.array([1000.0], ml_dtypes.bfloat16)
    >>> nbquant.quantize(x, 3.0, "int16"), nbquant.quantize(x, 3.0, "int16", compute_dtype="bfloat16")
    (array([333], dtype=int16), array([334], dtype=int16))
    """
    if (zero_point is None and axis is None and block_size is None and quant_min is None and quant_max is None
            and packed is False and scale_op == "divide" and compute_dtype == "float32" and out is None
            and zero_point_order in _ZP_ORDERS and (saturate is True or saturate is False)):
        codes = _per_tensor(x, scale, dtype, backend)
        if codes is not None:
            return codes
    fmt = get_format(dtype)
    passed = {"x": x, "scale": scale, "zero_point": zero_point}
    p = placement(x, scale, zero_point, out=out)  # host, CUDA (stays on its device) or dask (lazy)
    lazy = p.lazy
    x = p.float_input(x)
    layout = resolve_layout(x.shape, axis, block_size)
    op = check_choice("scale_op", scale_op, _SCALE_OPS)
    order = check_choice("zero_point_order", zero_point_order, _ZP_ORDERS)
    s = check_scale(scale, layout, lazy=lazy)
    precision = check_choice("compute_dtype", compute_dtype, _COMPUTE_DTYPES)
    if precision != "float32":
        s = check_half_scale(s, precision, x.dtype, scale)
    if op == "reciprocal":
        s = np.float32(1) / s
        if precision != "float32":
            s = s.astype(_COMPUTE_DTYPES[precision]).astype(np.float32)
    if fmt.is_float:
        check_float_format_arguments(fmt, zero_point=zero_point, quant_min=quant_min, quant_max=quant_max)
    if not isinstance(saturate, (bool, np.bool_)):
        raise TypeError(f"saturate={saturate!r} must be True or False")
    zp = check_zero_point(zero_point, layout, fmt, integral=order == "after_rounding", lazy=lazy)
    if zp is not None and precision != "float32":
        zp = zp.astype(_COMPUTE_DTYPES[precision]).astype(np.float32)
    qmin, qmax = check_quant_range(fmt, quant_min, quant_max)
    packed = check_packed(packed, fmt, layout.shape[-1])
    shape = x.shape[:-1] + (fmt.packed_length(x.shape[-1]),) if packed else x.shape
    out_dtype = np.dtype(np.uint8) if packed else fmt.dtype
    if lazy:  # a dask argument: this function on every chunk, with the chunk's part of scale and zero_point
        per_chunk = functools.partial(quantize, dtype=dtype, quant_min=quant_min, quant_max=quant_max, packed=packed,
                                      scale_op=scale_op, zero_point_order=zero_point_order, saturate=saturate,
                                      compute_dtype=compute_dtype, backend=backend)
        output = p.engine.Output("data", out_dtype, fmt.pack_group if packed else p.engine.NO_PACK,
                                 fmt.name if packed else None)
        return p.map(per_chunk, x, layout, [output], params={"scale": scale, "zero_point": zero_point},
                     token="nbquant-quantize")[0]
    result = p.result(shape, out_dtype, out, passed)
    spec = QuantizeSpec(fmt, layout, qmin, qmax, modes.ScaleOp.of(op != "divide", precision),
                        order == "before_rounding", packed, bool(saturate))
    impl = resolve_backend(backend, p)
    if x.size:
        impl.quantize(x, s, zp, spec, result.view(np.uint8 if packed else fmt.storage))
    return p.packed(result, fmt.name) if packed and out is None else result


#: Integer formats by the ``dtype`` strings :func:`_per_tensor` has seen: ``(format, qmin, qmax, storage)``,
#: the bounds as float32.
_PER_TENSOR_FORMATS: dict[str, tuple[QuantFormat, np.float32, np.float32, np.dtype]] = {}
#: The types of a scale the short path takes, and the dtypes of a 0-d array scale it takes.
_SCALAR_SCALES = (float, int, np.float32, np.float64)
_ARRAY_SCALES = (np.dtype(np.float32), np.dtype(np.float64))
#: The largest finite float32 (FLT_MAX): a scale up to it converts to float32 without overflow.
_F32_MAX = float(np.finfo(np.float32).max)


def _per_tensor(x, scale, dtype, backend: str | None) -> np.ndarray | None:
    """The short path of :func:`quantize`: its codes when the call is a plain per-tensor one, else ``None``.

    A plain call (the caller checked the keyword arguments are the defaults) quantizes an
    aligned, writeable, C-contiguous float32 NumPy array to an integer format named by a
    string, with one Python or NumPy scalar scale (or 0-d float32/float64 array) in
    ``(0, FLT_MAX]`` that float32 keeps nonzero, on a backend that has a per-tensor kernel
    (``cpu``). It skips the layout, the placement and the spec, which cost most of a small
    call (4096 elements: 25 µs before this path, against 4.6 µs for onnxruntime's
    ``QuantizeLinear``; docs/performance.md), and gives the same codes. Anything else is
    ``None``: the general path checks and runs it.
    """
    if (type(x) is not np.ndarray or x.dtype != np.float32 or not x.size or not x.flags.carray  # aligned, writeable
            or not isinstance(dtype, str)):
        return None
    if type(scale) not in _SCALAR_SCALES:
        if type(scale) is not np.ndarray or scale.shape != () or scale.dtype not in _ARRAY_SCALES:
            return None
        scale = scale[()]  # a 0-d float32 or float64 array: its scalar
    known = _PER_TENSOR_FORMATS.get(dtype)
    if known is None:
        try:
            fmt = get_format(dtype)
        except ValueError:
            return None
        if fmt.is_float:
            return None
        qmin, qmax = check_quant_range(fmt, None, None)
        known = _PER_TENSOR_FORMATS[dtype] = (fmt, np.float32(qmin), np.float32(qmax), fmt.storage)
    fmt, qmin, qmax, storage = known
    if type(scale) is np.float32:
        s = scale
        if not 0.0 < s <= _F32_MAX:  # NaN fails too
            return None
    else:
        value = float(scale) if type(scale) is not int or abs(scale) < 1 << 128 else -1.0  # no OverflowError here
        if not 0.0 < value <= _F32_MAX:
            return None
        s = np.float32(value)
        if not s:  # below float32's smallest subnormal
            return None
    kernel = getattr(resolve_backend(backend, ()), "quantize_per_tensor", None)
    if kernel is None:
        return None
    codes = host_empty(x.shape, fmt.dtype)  # the general path's allocation: the pool, its checks
    kernel(x, s, fmt, qmin, qmax, codes.view(storage))
    return codes


def _unpacked_length(fmt: QuantFormat, nbytes: int) -> int:
    codes, group_bytes = fmt.pack_group
    if nbytes % group_bytes:
        raise ValueError(f"q holds packed {fmt.name} codes in groups of {group_bytes} bytes, but its last axis has "
                         f"{nbytes} bytes, not a multiple of {group_bytes}")
    return nbytes // group_bytes * codes


def _code_format(q: np.ndarray, dtype, tag: str | None) -> tuple[QuantFormat, bool]:
    """The format of ``q`` and whether it is packed; ``tag`` is the format a :class:`PackedCodes` ``q`` holds."""
    if tag is not None:
        fmt = get_format(tag)
        if dtype is not None and get_format(dtype) is not fmt:
            raise ValueError(f"q holds packed {fmt.name} codes (q.format), but dtype={dtype!r}; leave dtype out, or "
                             f"pass q.view(numpy.ndarray) to read its bytes as {dtype!r} codes")
        return fmt, True
    if dtype is None:
        try:
            return get_format(q.dtype), False
        except ValueError:
            raise TypeError(f"q has dtype {q.dtype}, which holds no quantized codes; pass int8, uint8, int16, "
                            "uint16, int32 or ml_dtypes int4/uint4/int2/uint2 codes, or packed uint8 with "
                            "dtype=") from None
    fmt = get_format(dtype)
    if q.dtype == fmt.dtype:
        return fmt, False
    if fmt.packable and q.dtype == np.uint8:
        return fmt, True
    allowed = f"{fmt.dtype}" + (" or packed uint8" if fmt.packable else "")
    raise TypeError(f"q has dtype {q.dtype}, which does not hold {fmt.name} codes; expected {allowed}")


def dequantize(
    q: npt.ArrayLike,
    scale: npt.ArrayLike,
    *,
    zero_point: npt.ArrayLike | None = None,
    axis: int | None = None,
    block_size: int | tuple[int, ...] | None = None,
    dtype: str | npt.DTypeLike | None = None,
    out_dtype: npt.DTypeLike = np.float32,
    out: np.ndarray | None = None,
    backend: str | None = None,
) -> np.ndarray:
    """Dequantize codes: ``x = (q - zero_point) * scale``, computed in float32.

    The inverse of :func:`quantize` up to its rounding and clamping: pass the same
    ``scale``, ``zero_point``, ``axis`` and ``block_size``; packed uint8 codes are
    unpacked along the last axis first.

    Parameters
    ----------
    q : array_like
        Codes: int8, uint8, int16, uint16, int32 or ml_dtypes int4/uint4/int2/uint2, or
        packed uint8 (then ``dtype`` names the sub-byte format). A dask array (or a dask
        ``scale``/``zero_point``) gives a lazy dask result (docs/dask.md).
    scale : array_like
        As in :func:`quantize`, describing the unpacked shape.
    zero_point : array_like, optional
        As in :func:`quantize`; here it may be any finite float (pypto) or integer.
    axis : int, optional
        As in :func:`quantize`.
    block_size : int or tuple of int, optional
        As in :func:`quantize`.
    dtype : str or dtype, optional
        The quantized format; needed when ``q`` is a plain uint8 array of packed codes
        (without it, plain uint8 is read as ``"uint8"`` codes). A
        :class:`~nbquant.PackedCodes` ``q`` (what ``quantize(..., packed=True)`` returns)
        carries its format: leave ``dtype`` out, or pass the same format.
    out_dtype : dtype
        float32 (default), float16 or bfloat16 (rounded to nearest even from float32).
    out : numpy.ndarray, optional
        Preallocated result of the exact shape and ``out_dtype``.
    backend : str, optional
        As in :func:`quantize`.

    Returns
    -------
    numpy.ndarray
        The values, of ``out_dtype`` and the unpacked shape (``out`` itself when given; a device array on
        CUDA).

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> nbquant.dequantize(np.array([-2, 0, 1, 127], np.int8), 0.5)
    array([-1. ,  0. ,  0.5, 63.5], dtype=float32)
    >>> nbquant.dequantize(np.array([[226]], np.uint8), 0.5, dtype="int4")
    array([[ 1., -1.]], dtype=float32)
    """
    passed = {"q": q, "scale": scale, "zero_point": zero_point}
    p = placement(q, scale, zero_point, out=out)  # host, CUDA (stays on its device) or dask (lazy)
    lazy = p.lazy
    tag = packed_format(q)
    q = p.code_input(q)
    fmt, packed = _code_format(q, dtype, tag)
    out_dt = check_out_dtype(out_dtype)
    shape = q.shape[:-1] + (_unpacked_length(fmt, q.shape[-1]),) if packed else q.shape
    layout = resolve_layout(shape, axis, block_size)
    s = check_scale(scale, layout, lazy=lazy)
    if fmt.is_float:
        check_float_format_arguments(fmt, zero_point=zero_point)
    zp = check_zero_point(zero_point, layout, fmt, integral=False, lazy=lazy)
    if lazy:  # a dask argument: this function on every chunk, with the chunk's part of scale and zero_point
        per_chunk = functools.partial(dequantize, dtype=fmt.name if packed else dtype, out_dtype=out_dt,
                                      backend=backend)
        return p.map(per_chunk, q, layout, [p.engine.Output("data", out_dt)],
                     params={"scale": scale, "zero_point": zero_point},
                     pack=fmt.pack_group if packed else p.engine.NO_PACK, token="nbquant-dequantize")[0]
    result = p.result(shape, out_dt, out, passed)
    spec = DequantizeSpec(fmt, layout, packed, out_dt)
    impl = resolve_backend(backend, p)
    if result.size:
        impl.dequantize(q.view(np.uint8 if packed else fmt.storage), s, zp, spec, result)
    return result
