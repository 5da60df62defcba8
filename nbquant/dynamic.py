"""Dynamic quantization: choose the scale and zero point from the data, and quantize in one fused pass.

:func:`choose_qparams` reproduces torchao's ``choose_qparams_affine`` (0.18) or
modelopt's amax scale for any nbquant granularity; :func:`quantize_dynamic` computes
the same qparams and the codes in one pass over the input where every block lies in
one row (per-row, per-group, ONNX blocked along the last axis), or a reduction pass
then a quantize pass (per-tensor, per-channel, 2-D blocks). The result is bit for bit
``quantize(x, scale, dtype, zero_point=zp, scale_op=...)`` with the returned qparams.
"""

from __future__ import annotations

import functools
from typing import Literal

import numpy as np
import numpy.typing as npt

from ._docstrings import DOCS, fill_doc
from .backends import resolve_backend
from .formats import get_format
from .layout import BlockLayout, resolve_layout
from .modes import Mapping, ScaleOp
from .placement import HOST, Host, Lazy, placement
from .spec import DynamicSpec
from .validation import check_bool, check_choice, check_float_scalar, check_packed, check_quant_range

__all__ = ["choose_qparams", "quantize_dynamic", "MappingName"]

MappingName = Literal["symmetric", "asymmetric", "symmetric_no_clipping_err", "modelopt"]
#: The public names of :class:`~nbquant.modes.Mapping`.
_MAPPINGS = {"symmetric": Mapping.SYMMETRIC, "asymmetric": Mapping.ASYMMETRIC,
             "symmetric_no_clipping_err": Mapping.SYMMETRIC_NO_CLIPPING_ERR, "modelopt": Mapping.MODELOPT}
#: torchao 0.18's default eps: float32's smallest normal.
DEFAULT_EPS = float(np.finfo(np.float32).smallest_normal)


def _check_eps(eps) -> float:
    """The scale floor: finite and > 0 as a float32 (default: torchao's, float32's smallest normal)."""
    return DEFAULT_EPS if eps is None else float(check_float_scalar("eps", eps, positive=True))


def make_spec(x_shape, dtype, axis, block_size, mapping, quant_min, quant_max, eps, scale_op, narrow_range,
              packed) -> DynamicSpec:
    """Validate the dynamic-quantization arguments (shared by :func:`choose_qparams` and :func:`quantize_dynamic`)."""
    fmt = get_format(dtype)
    if fmt.is_float:
        raise ValueError(f"dtype={fmt.name!r} is a floating-point format; choose_qparams and quantize_dynamic "
                         "compute integer qparams (int8, uint8, int16, uint16, int4, uint4, int2, uint2). For "
                         "scaled fp8 use nbquant.scaled_e4m3 or nbquant.quantize_mx")
    layout = resolve_layout(x_shape, axis, block_size)
    code = _MAPPINGS[check_choice("mapping", mapping, tuple(_MAPPINGS))]
    if narrow_range is None:
        narrow_range = code == Mapping.MODELOPT
    else:
        narrow_range = check_bool("narrow_range", narrow_range, none=True)
    if narrow_range and (quant_min is not None):
        raise ValueError(f"narrow_range=True sets quant_min=-quant_max; do not also pass quant_min={quant_min!r}")
    qmin, qmax = check_quant_range(fmt, quant_min, quant_max)
    if narrow_range and fmt.signed:
        qmin = -qmax
    if code == Mapping.SYMMETRIC_NO_CLIPPING_ERR and not (qmin < 0 < qmax):
        raise ValueError(f"mapping='symmetric_no_clipping_err' needs quant_min < 0 < quant_max; got "
                         f"[{qmin}, {qmax}] for {fmt.name}: use a signed format or mapping='symmetric'")
    if code == Mapping.MODELOPT:
        if quant_max is not None or (quant_min is not None):
            raise ValueError("mapping='modelopt' takes its range from the format and narrow_range; "
                             f"leave quant_min/quant_max unset (got {quant_min!r}, {quant_max!r})")
        if not (scale_op is None or isinstance(scale_op, str) and scale_op == "multiply"):
            raise ValueError(f"scale_op={scale_op!r} is not allowed with mapping='modelopt', whose scale is a "
                             "multiplier (maxbound / amax); use scale_op='multiply' or leave it unset")
        op, reciprocal = ScaleOp.MULTIPLY, False
    else:
        op_name = check_choice("scale_op", "reciprocal" if scale_op is None else scale_op, ("reciprocal", "divide"))
        op, reciprocal = ScaleOp.DIVIDE, op_name == "reciprocal"
    packed = check_packed(check_bool("packed", packed), fmt, layout.shape[-1])
    return DynamicSpec(fmt, layout, code, qmin, qmax, (qmax - qmin) / 2, _check_eps(eps),
                       int((qmax + qmin + 1) / 2), float(qmax), op, reciprocal, packed)


def _param_shape(layout: BlockLayout, block_size) -> tuple[int, ...]:
    """Per-tensor → (); per-channel → (n,); ONNX blocked → the grid; torchao tuple → the squeezed grid."""
    if layout.kind == "per-tensor":
        return ()
    if layout.kind == "per-channel":
        return (layout.grid[layout.axis],)
    if layout.kind == "blocked":
        return layout.grid
    return tuple(g for g in layout.grid if g != 1)


def _prepare(x, dtype, axis, block_size, mapping, quant_min, quant_max, eps, narrow_range, scale_op, packed, backend):
    """``x`` read where it lives, its placement, its spec, and the keywords a lazy call passes on to each chunk."""
    p = placement(x)
    x = p.float_input(x)
    spec = make_spec(x.shape, dtype, axis, block_size, mapping, quant_min, quant_max, eps, scale_op, narrow_range,
                     packed)
    arguments = {"dtype": dtype, "mapping": mapping, "quant_min": quant_min, "quant_max": quant_max, "eps": eps,
                 "narrow_range": narrow_range, "scale_op": scale_op, "backend": backend}
    return p, x, spec, arguments


@fill_doc(**DOCS)
def choose_qparams(
    x: npt.ArrayLike,
    dtype: str | npt.DTypeLike,
    *,
    axis: int | None = None,
    block_size: int | tuple[int, ...] | None = None,
    mapping: MappingName = "symmetric",
    quant_min: int | None = None,
    quant_max: int | None = None,
    eps: float | None = None,
    narrow_range: bool | None = None,
    scale_op: Literal["reciprocal", "divide", "multiply"] | None = None,
    backend: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Choose float32 scales and int32 zero points from the data, one per block.

    Parameters
    ----------
    x : array_like
        float32, float16, bfloat16 or float64 input (computed in float32). A CUDA
        device array (numba, ``__cuda_array_interface__``, DLPack) is processed on its
        device by the ``"cuda"`` backend and the results are numba device arrays. A dask
        array gives lazy dask results (two passes where a block spans chunks: docs/dask.md).
    dtype : str or dtype
        Integer format: ``"int8"``, ``"uint8"``, ``"int16"``, ``"uint16"``, ``"int4"``,
        ``"uint4"``, ``"int2"``, ``"uint2"``.
    axis : int, optional
        Per-channel (the kept axis) or, with an int ``block_size``, the blocked axis;
        as in :func:`nbquant.quantize`.
    block_size : int or tuple of int, optional
        ONNX blocks along ``axis`` (an int) or torchao blocks (a tuple), as in
        :func:`nbquant.quantize`; neither ``axis`` nor ``block_size``: per-tensor.
    mapping : {"symmetric", "asymmetric", "symmetric_no_clipping_err", "modelopt"}
        torchao's mappings (``min_neg = min(min, 0)``, ``max_pos = max(max, 0)``):
        symmetric ``s = max(-min_neg, max_pos) / ((qmax - qmin) / 2)`` (amax / 127.5
        for int8), zero point ``int((qmax + qmin + 1) / 2)``; asymmetric
        ``s = (max_pos - min_neg) / (qmax - qmin)``, ``zp = clamp(qmin - rne(min_neg / s))``;
        symmetric_no_clipping_err ``s = max(min_neg / qmin, max_pos / qmax)``. Then
        ``s = max(s, eps)``. ``"modelopt"``: the multiplier ``s = maxbound / amax``
        (1.0 where ``amax <= 2**-24``), zero point 0, narrow range by default.
    quant_min, quant_max : int, optional
        Range inside the format (torchao's ``quant_min``/``quant_max``).
    eps : float, optional
        Scale floor; default float32's smallest normal (torchao 0.18; torchao <= 0.17
        used ``float32 eps`` = 1.1920929e-07).
    narrow_range : bool, optional
        Signed range ``[-qmax, qmax]``; default True for ``"modelopt"``, else False.
    scale_op : {"reciprocal", "divide", "multiply"}, optional
        How :func:`quantize_dynamic` applies the scale and what to pass to
        :func:`nbquant.quantize`: ``"reciprocal"`` (torchao's ``x * fl(1 / s)``, the
        default), ``"divide"``; ``"multiply"`` (the only choice for ``"modelopt"``).
    {backend}

    Returns
    -------
    scale : numpy.ndarray
        float32: 0-d per-tensor, ``(n,)`` per-channel, the block grid for an int
        ``block_size``, the squeezed grid for a tuple ``block_size`` (torchao).
    zero_point : numpy.ndarray
        int32, same shape.

    Notes
    -----
    A block holding NaN gets a NaN scale (torchao propagates NaN) and zero point
    ``qmin`` (asymmetric) or the symmetric zero point; a block holding ±inf gets an
    inf scale. Such scales are not accepted by :func:`nbquant.quantize`;
    :func:`quantize_dynamic` maps those blocks to their zero point.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> x = np.array([[-1.0, 0.5], [2.0, 4.0]], np.float32)
    >>> s, zp = nbquant.choose_qparams(x, "int8", axis=0)
    >>> s, zp
    (array([0.00784314, 0.03137255], dtype=float32), array([0, 0], dtype=int32))
    >>> s, zp = nbquant.choose_qparams(x, "uint8", mapping="asymmetric")
    >>> float(s), int(zp)
    (0.019607843831181526, 51)
    """
    p, x, spec, arguments = _prepare(x, dtype, axis, block_size, mapping, quant_min, quant_max, eps, narrow_range,
                                     scale_op, False, backend)
    if p.lazy:
        return _lazy(p, x, spec, block_size, functools.partial(choose_qparams, **arguments), arguments, codes=False)
    if x.size == 0:
        scale, zp = _empty_input_qparams(spec, p)
    else:
        scale, zp = _qparams_arrays(spec.layout.grid, p)
        resolve_backend(backend, p).choose_qparams(x, spec, scale, zp)
    shape = _param_shape(spec.layout, block_size)
    return scale.reshape(shape), zp.reshape(shape)


def _codes(x, spec: DynamicSpec, p: Host):
    """The new codes array of ``x`` (packed: uint8 bytes) and its storage view, which the kernels write."""
    fmt = spec.format
    shape = tuple(x.shape[:-1]) + (x.shape[-1] // fmt.codes_per_byte,) if spec.packed else tuple(x.shape)
    codes = p.result(shape, np.uint8 if spec.packed else fmt.dtype)
    return codes, codes.view(np.uint8 if spec.packed else fmt.storage)


def _quantize_with_qparams(impl, x, spec: DynamicSpec, out, scale: np.ndarray, zp: np.ndarray) -> None:
    """Quantize ``x`` with host block-grid qparams through the backend's static quantize (the second pass)."""
    grid = spec.layout.grid
    s = scale.reshape(grid).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if spec.reciprocal:
            s = np.float32(1) / s
        impl.quantize(x, s, zp.reshape(grid).astype(np.float32), spec.quantize_spec, out)


def _qparams_arrays(grid: tuple[int, ...], p: Host):
    """Empty float32 scale and int32 zero-point grids, where ``p`` places results."""
    return p.result(grid, np.float32), p.result(grid, np.int32)


def _empty_input_qparams(spec: DynamicSpec, p: Host):
    """The block-grid qparams of an empty input (no data to reduce, no kernel to run).

    Every block gets the scale floor ``eps`` (1.0 for ``"modelopt"``) and its
    mapping's zero point: ``qmin`` (asymmetric), 0 (modelopt) or the symmetric one.
    """
    modelopt = spec.mapping == Mapping.MODELOPT
    scale = np.full(spec.layout.grid, np.float32(1) if modelopt else np.float32(spec.eps))
    zp = np.full(spec.layout.grid, spec.qmin if spec.mapping == Mapping.ASYMMETRIC else (0 if modelopt else
                                                                                         spec.zp_sym), np.int32)
    return p.like_input(scale), p.like_input(zp)


def quantize_dynamic(
    x: npt.ArrayLike,
    dtype: str | npt.DTypeLike,
    *,
    axis: int | None = None,
    block_size: int | tuple[int, ...] | None = None,
    mapping: MappingName = "symmetric",
    quant_min: int | None = None,
    quant_max: int | None = None,
    eps: float | None = None,
    narrow_range: bool | None = None,
    scale_op: Literal["reciprocal", "divide", "multiply"] | None = None,
    packed: bool = False,
    backend: str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantize with qparams chosen from the data: one fused pass where blocks lie in one row.

    Parameters
    ----------
    x : array_like
        As in :func:`choose_qparams`.
    dtype : str or dtype
        As in :func:`choose_qparams`.
    axis : int, optional
        As in :func:`choose_qparams`.
    block_size : int or tuple of int, optional
        As in :func:`choose_qparams`.
    mapping : {"symmetric", "asymmetric", "symmetric_no_clipping_err", "modelopt"}
        As in :func:`choose_qparams`.
    quant_min, quant_max : int, optional
        As in :func:`choose_qparams`.
    eps : float, optional
        As in :func:`choose_qparams`.
    narrow_range : bool, optional
        As in :func:`choose_qparams`.
    scale_op : {"reciprocal", "divide", "multiply"}, optional
        As in :func:`choose_qparams`.
    packed : bool
        Sub-byte formats: codes packed along the last axis as in :func:`nbquant.quantize`.
    backend : str, optional
        As in :func:`choose_qparams`.

    Returns
    -------
    codes : numpy.ndarray
        As :func:`nbquant.quantize` returns them (packed: a :class:`~nbquant.PackedCodes`).
    scale, zero_point : numpy.ndarray
        As :func:`choose_qparams` returns them. ``nbquant.quantize(x, scale, dtype,
        zero_point=zero_point, axis=axis, block_size=block_size, quant_min=...,
        scale_op=...)`` gives the same codes bit for bit (finite inputs).

    Notes
    -----
    Blocks holding NaN or ±inf quantize to their zero point (their scale is NaN or
    inf, see :func:`choose_qparams`). Elsewhere NaN → zero point and ±inf → the
    bounds, as in :func:`nbquant.quantize`.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> x = np.array([[0.1, -0.4, 0.2, 0.3], [1.0, 2.0, -3.0, 7.5]], np.float32)
    >>> q, s, zp = nbquant.quantize_dynamic(x, "int4", axis=1, block_size=4, packed=True)
    >>> q, s.ravel()
    (PackedCodes([[130, 100],
                 [ 33, 125]], dtype=uint8, format='int4'), array([0.05333333, 1.        ], dtype=float32))
    """
    p, x, spec, arguments = _prepare(x, dtype, axis, block_size, mapping, quant_min, quant_max, eps, narrow_range,
                                     scale_op, packed, backend)
    if p.lazy:
        per_chunk = functools.partial(quantize_dynamic, packed=packed, **arguments)
        return _lazy(p, x, spec, block_size, per_chunk, arguments, codes=True)
    impl = resolve_backend(backend, p) if x.size else None  # an empty input runs no kernel
    codes, store = _codes(x, spec, p)
    if impl is None:
        scale, zp = _empty_input_qparams(spec, p)
    else:
        scale, zp = _qparams_arrays(spec.layout.grid, p)
        if spec.fused_rows() is None or not impl.quantize_dynamic(x, spec, store, scale, zp):
            # Two passes: the block-grid qparams (on the host, small), then the backend's static quantize kernel.
            s_host, z_host = _qparams_arrays(spec.layout.grid, HOST)
            impl.choose_qparams(x, spec, s_host, z_host)
            _quantize_with_qparams(impl, x, spec, store, s_host, z_host)
            scale, zp = p.like_input(s_host), p.like_input(z_host)
    pshape = _param_shape(spec.layout, block_size)
    if spec.packed:
        codes = p.packed(codes, spec.format.name)
    return codes, scale.reshape(pshape), zp.reshape(pshape)


def _quantize_given(x, scale, zero_point, dtype, *, axis=None, block_size=None, mapping="symmetric", quant_min=None,
                    quant_max=None, eps=None, narrow_range=None, scale_op=None, packed=False, backend=None):
    """The codes :func:`quantize_dynamic` gives ``x`` with the block-grid qparams ``scale``/``zero_point``.

    The second pass of a chunked (dask) :func:`quantize_dynamic` whose qparams span
    several chunks: NaN and inf scales are allowed (their blocks become the zero point).
    """
    x = HOST.float_input(x)
    spec = make_spec(x.shape, dtype, axis, block_size, mapping, quant_min, quant_max, eps, scale_op, narrow_range,
                     packed)
    codes, store = _codes(x, spec, HOST)
    if x.size:
        impl = resolve_backend(backend, HOST)
        _quantize_with_qparams(impl, x, spec, store, np.asarray(scale), np.asarray(zero_point))
    return HOST.packed(codes, spec.format.name) if spec.packed else codes


def _lazy(p: Lazy, x, spec: DynamicSpec, block_size, per_chunk, arguments: dict, codes: bool):
    """:func:`choose_qparams` or (``codes``) :func:`quantize_dynamic` of a dask array; ``per_chunk`` is the call.

    One pass (``per_chunk`` on every chunk, aligned to the blocks) when each block lies in
    one chunk; two passes when the chunks split a block (per-tensor, per-channel across
    chunks): the block keys reduced over the chunks, the qparams from them, then
    :func:`_quantize_given` on every chunk.
    """
    engine = p.engine
    fmt = spec.format
    outputs = [engine.Output("grid", np.dtype(np.float32)), engine.Output("grid", np.dtype(np.int32))]
    code_output = engine.Output("data", np.dtype(np.uint8) if spec.packed else fmt.dtype,
                                (fmt.codes_per_byte, 1) if spec.packed else engine.NO_PACK,
                                fmt.name if spec.packed else None)
    token = "nbquant-quantize-dynamic" if codes else "nbquant-choose-qparams"
    if not engine.split_dims(x, spec.layout):
        results = p.map(per_chunk, x, spec.layout, [code_output] * codes + outputs, token=token)
    else:
        lo, hi = engine.block_keys(x, spec.layout, spec.use_minmax, arguments["backend"])
        choose = functools.partial(choose_qparams, **arguments)
        qparams = [engine.Output("data", o.dtype) for o in outputs]
        results = engine.map_grids(engine.qparams_from_keys, [lo, hi], qparams, token=f"{token}-qparams",
                                   choose=choose, use_minmax=spec.use_minmax)
        if codes:
            given = functools.partial(_quantize_given, packed=spec.packed, **arguments)
            results = p.map(given, x, spec.layout, [code_output], token=token,
                                        params={"scale": results[0], "zero_point": results[1]}) + results
    pshape = _param_shape(spec.layout, block_size)
    return (*results[:-2], results[-2].reshape(pshape), results[-1].reshape(pshape))
