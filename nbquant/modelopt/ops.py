"""NVIDIA modelopt ``tensor_quant`` capabilities: amax-based quantization and fake quantization.

Numerics follow modelopt (semantics.md §6): integer path ``S = maxbound / amax``,
``q = clamp(rne(x * S), minbound, maxbound)``, fake output ``q / S``; where
``amax <= 2**-24`` the quantizing ``S`` is 0 and the dequantizing one 1 (finite
values give 0, ±inf and NaN give NaN). Float path (``num_bits=(4, 3)``):
``S = fl(fl(1 / amax) * 448)`` (amax <= 2**-24 read as 1), output
``e4m3(clamp(x * S, ±448)) * fl(1 / S)``. NaN in ``x`` propagates; ±inf clamps.
Everything is computed in float32 and returned in the input's float dtype (float64
inputs return float32).

Granularity: ``axis`` (the kept dimension, as modelopt's ``axis``), ``block_size``
(nbquant conventions), or an ``amax`` array whose shape broadcasts against ``x``
(modelopt's rule: each dimension 1 or equal). ``amax=None`` computes it from ``x``
per block (modelopt's dynamic quantization, ``reduce_amax``). The straight-through
gradients of these fake quantizers are in :mod:`nbquant.modelopt.grad`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .._docstrings import BACKEND, fill_doc
from ..backends import resolve_backend
from ..formats import get_format
from ..layout import BlockLayout, as_int, param_grid, resolve_layout
from ..placement import Host, host_array, is_device_array, placement
from ..reductions import block_amax, block_min_max
from ..spec import NO_FLOAT_FORMAT, AmaxSpec
from ..validation import check_affine_range, check_amax, check_bool, check_int

__all__ = [
    "tensor_quant",
    "fake_tensor_quant",
    "scaled_e4m3",
    "fake_affine_tensor_quant",
    "dynamic_block_quant",
    "block_sizes_to_layout",
]

_FLOAT_BITS = {(4, 3): "float8_e4m3fn", (5, 2): "float8_e5m2", (2, 1): "float4_e2m1fn"}

#: The docstring pieces these functions and :mod:`.grad`'s share (:func:`nbquant._docstrings.fill_doc`).
DOCS = {
    "backend": BACKEND,
    "granularity": """
        axis, block_size : int or tuple of int, optional
            Granularity of ``amax``, as in :func:`fake_tensor_quant`.
        """,
    "x_amax": """
        x, amax : array_like
            The input and its clipping range(s), as in :func:`fake_tensor_quant`.
        """,
    "fake_returns": """
        Returns
        -------
        numpy.ndarray
            Same shape and float dtype as ``x`` (float32 for float64).
        """,
}


def result_dtype(x) -> np.dtype:
    """The float dtype a fake quantizer returns for ``x``: ``x``'s own, float32 for float64."""
    return np.dtype(np.float32) if x.dtype == np.float64 else np.dtype(x.dtype)


def _negative_min(x, p: Host, backend) -> bool:
    """modelopt's unsigned check ``x.min() < 0``: False when ``x`` holds a NaN (the min propagates it)."""
    if not p.device:
        with np.errstate(invalid="ignore"):  # bfloat16 and float16 warn on comparing their NaN; the answer is defined
            return bool(x.min() < 0)
    lo, hi = block_min_max(x, resolve_layout(tuple(x.shape)), p, backend)
    return not (np.isnan(lo).any() or np.isnan(hi).any()) and bool(lo.min() < 0)


def _int_spec(num_bits, unsigned, narrow_range, layout) -> AmaxSpec:
    n = as_int("num_bits", num_bits, "an integer (integer quantization) or an (E, M) tuple")
    if not 2 <= n <= 16:
        raise ValueError(f"num_bits={n} is not supported; use 2 <= num_bits <= 16 or (E, M) = (4, 3)")
    unsigned, narrow_range = check_bool("unsigned", unsigned), check_bool("narrow_range", narrow_range)
    maxbound = (1 << (n - 1 + int(unsigned))) - 1
    minbound = 0 if unsigned else (-maxbound if narrow_range else -maxbound - 1)
    return AmaxSpec(None, layout, False, float(maxbound), minbound, maxbound, NO_FLOAT_FORMAT)


def _float_spec(num_bits, layout) -> AmaxSpec:
    key = tuple(num_bits)
    if key not in _FLOAT_BITS:
        raise ValueError(f"num_bits={num_bits!r}: the floating-point formats are (E, M) = (4, 3) (modelopt's "
                         f"E4M3), (5, 2) and (2, 1)")
    fmt = get_format(_FLOAT_BITS[key])
    return AmaxSpec(fmt, layout, True, fmt.max_value, 0, 0, fmt.fp_params)


def block_sizes_to_layout(shape: tuple[int, ...], block_sizes: dict) -> BlockLayout:
    """modelopt ``block_sizes`` (``{-1: 32}``, ``{-2: 4, -1: 16}``, ``{-1: None}``) as a :class:`BlockLayout`.

    String keys (``"type"``, ``"scale_bits"``, ``"scale_block_sizes"``) are ignored
    here. One blocked axis maps to ONNX blocking (a partial last block stands for
    modelopt's zero padding, which cannot change an amax); several map to tiles
    (``block_size=(b0, b1, ...)``) and need blocks that divide their dimensions
    (:func:`dynamic_block_quant` zero-pads to whole tiles first).

    Examples
    --------
    >>> block_sizes_to_layout((4, 64), {-1: 32}).grid
    (4, 2)
    >>> block_sizes_to_layout((4, 64), {-1: None}).grid
    (4, 1)
    """
    axes = _block_axes(shape, block_sizes)
    if len(axes) == 1:
        (k, b), = axes.items()
        return resolve_layout(shape, k, min(b, max(shape[k], 1)))
    return resolve_layout(shape, None, tuple(axes.get(d, 1) for d in range(len(shape))))


def _block_axes(shape: tuple[int, ...], block_sizes: dict) -> dict[int, int]:
    """``{dim: block}`` of modelopt ``block_sizes``: dims non-negative, None the whole dim, string keys left out."""
    if not isinstance(block_sizes, dict):
        raise TypeError(f"block_sizes={block_sizes!r} must be a dict such as {{-1: 32}}")
    ndim = len(shape)
    axes = {}
    for k, v in block_sizes.items():
        if isinstance(k, str):
            continue
        kk = as_int("block_sizes key", k)
        if not -ndim <= kk < ndim:
            raise ValueError(f"block_sizes key {k} is out of range for an input of {ndim} dimension(s)")
        axes[kk % ndim] = shape[kk % ndim] if v is None else check_int(f"block_sizes[{k}]", v, low=1)
    if not axes:
        raise ValueError(f"block_sizes={block_sizes!r} names no axis; use e.g. {{-1: 32}}")
    return axes


def amax_layout(x: np.ndarray, amax, axis, block_size) -> BlockLayout:
    """The block layout from ``axis``/``block_size``, or from a broadcastable ``amax`` shape."""
    if axis is not None or block_size is not None or amax is None:
        return resolve_layout(x.shape, axis, block_size)
    a = host_array(amax)
    if a.size == 1:
        return resolve_layout(x.shape)
    if a.ndim == x.ndim and all(m in (1, n) for m, n in zip(a.shape, x.shape, strict=True)):
        return resolve_layout(x.shape, None, tuple(n if m == 1 else 1 for m, n in zip(a.shape, x.shape,
                                                                                      strict=True)))
    raise ValueError(f"amax has shape {a.shape}, which does not broadcast against x of shape {x.shape}; give each "
                     "dimension 1 or the input's size, or pass axis=/block_size=")


def amax_grid(x, amax, layout, p: Host, backend) -> np.ndarray:
    """The float32 amax block grid on the host: ``amax`` checked and laid on the grid, or reduced from ``x``."""
    if amax is None:
        return block_amax(x, layout, p, backend)
    a = check_amax(host_array(amax) if is_device_array(amax) else amax)
    try:
        grid = param_grid("amax", a, layout) if a.shape != tuple(layout.shape) or layout.num_blocks == a.size \
            else None
    except ValueError:
        grid = None
    if grid is None:  # a broadcast shape with size-1 dims: squeeze onto the grid
        grid = a.reshape(layout.grid) if a.size == layout.num_blocks else param_grid("amax", a, layout)
    return np.ascontiguousarray(grid, np.float32)


def _fake(x, amax, num_bits, unsigned, narrow_range, axis, block_size, backend, codes: bool):
    p = placement(x)
    x = p.float_input(x)
    layout = amax_layout(x, amax, axis, block_size)
    if isinstance(num_bits, (tuple, list)):
        if codes:
            raise ValueError("tensor_quant returns integer codes; for num_bits=(E, M) use fake_tensor_quant")
        spec = _float_spec(num_bits, layout)
    else:
        spec = _int_spec(num_bits, unsigned, narrow_range, layout)
    if not spec.is_float and unsigned and x.size and _negative_min(x, p, backend):
        raise TypeError("unsigned=True but x holds negative values (modelopt: 'Negative values encountered in "
                        "unsigned quantization')")
    grid = amax_grid(x, amax, layout, p, backend)
    out = p.result(tuple(x.shape), result_dtype(x))
    code_arr = p.result(tuple(x.shape), np.float32) if codes else None
    if x.size:
        resolve_backend(backend, p).fake_quant_amax(x, grid, spec, out, code_arr)
    return out, code_arr, grid, spec, p


@fill_doc(**DOCS)
def fake_tensor_quant(
    x: npt.ArrayLike,
    amax: npt.ArrayLike | None = None,
    num_bits: int | tuple[int, int] = 8,
    unsigned: bool = False,
    narrow_range: bool = True,
    *,
    axis: int | None = None,
    block_size: int | tuple[int, ...] | None = None,
    backend: str | None = None,
) -> np.ndarray:
    """Fake-quantize (quantize and dequantize in one kernel) as modelopt's ``fake_tensor_quant``.

    Parameters
    ----------
    x : array_like
        float32, float16, bfloat16 or float64 input. A CUDA device array is processed on
        its device (``"cuda"``) and the result is a numba device array.
    amax : array_like, optional
        Non-negative clipping range(s): one value, one per block of ``axis``/``block_size``,
        or a shape broadcastable against ``x``. None: ``max |x|`` per block.
    num_bits : int or (E, M)
        Integer bits, or a floating-point format ``(4, 3)`` (E4M3, scale 448 / amax),
        ``(5, 2)`` or ``(2, 1)``.
    unsigned, narrow_range : bool
        Integer range: ``[0, 2**n - 1]``; signed ``[-(2**(n-1) - 1), 2**(n-1) - 1]``
        when narrow (the default, as modelopt's function), else down to ``-2**(n-1)``.
    axis, block_size : int or tuple of int, optional
        Granularity of ``amax`` (``axis`` is the kept dimension, as in modelopt).
    {backend}

    {fake_returns}

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> nbquant.modelopt.fake_tensor_quant(np.array([0.3, -1.0, 2.5], np.float32), 2.0, num_bits=4)
    array([ 0.2857143, -1.1428572,  2.       ], dtype=float32)
    """
    return _fake(x, amax, num_bits, unsigned, narrow_range, axis, block_size, backend, False)[0]


@fill_doc(**DOCS)
def tensor_quant(
    x: npt.ArrayLike,
    amax: npt.ArrayLike | None = None,
    num_bits: int = 8,
    unsigned: bool = False,
    narrow_range: bool = True,
    *,
    axis: int | None = None,
    block_size: int | tuple[int, ...] | None = None,
    backend: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Quantize as modelopt's ``TensorQuantFunction``: float32 codes ``clamp(rne(x * S))`` and the scale ``S``.

    ``S = maxbound / amax`` per block, 1.0 where ``amax <= 2**-24``; ``codes / S``
    dequantizes. NaN inputs stay NaN codes.

    Parameters
    ----------
    {x_amax}
    num_bits : int
        Integer bits (``tensor_quant`` has no floating-point formats).
    unsigned, narrow_range : bool
        The integer range, as in :func:`fake_tensor_quant`.
    {granularity}
    {backend}

    Returns
    -------
    codes : numpy.ndarray
        float32, the shape of ``x``.
    scale : numpy.ndarray
        float32 block grid.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> q, s = nbquant.modelopt.tensor_quant(np.array([0.3, -1.0, 2.5], np.float32), 2.0, num_bits=4)
    >>> q, s
    (array([ 1., -4.,  7.], dtype=float32), array(3.5, dtype=float32))
    """
    _, codes, grid, spec, p = _fake(x, amax, num_bits, unsigned, narrow_range, axis, block_size, backend, True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = np.float32(spec.maxbound) / grid
    s = np.where(grid <= np.float32(2.0 ** -24), np.float32(1), s).astype(np.float32)
    return codes, p.like_input(s.reshape(()) if spec.layout.num_blocks == 1 else s)


@fill_doc(**DOCS)
def scaled_e4m3(x: npt.ArrayLike, amax: npt.ArrayLike | None = None, E: int = 4, M: int = 3, *,
                axis: int | None = None, block_size=None, backend: str | None = None) -> np.ndarray:
    """Fake-quantize to E4M3 as modelopt's ``scaled_e4m3``: ``e4m3(clamp(x * S, ±448)) * fl(1 / S)``.

    ``S = fl(fl(1 / amax) * 448)``. ``amax=None`` here means ``max |x|`` per block (modelopt's
    ``amax=None`` plain cast is ``nbquant.quantize(x, 1.0, "float8_e4m3fn", saturate=False)``).

    Parameters
    ----------
    {x_amax}
    E, M : int
        4 and 3 (the only format modelopt's ``scaled_e4m3`` takes).
    {granularity}
    {backend}

    {fake_returns}

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> nbquant.modelopt.scaled_e4m3(np.array([1.0, 0.3, -2.0], np.float32), 2.0)
    array([ 1.       ,  0.2857143, -2.       ], dtype=float32)
    """
    if (check_int("E", E, integral_float=True), check_int("M", M, integral_float=True)) != (4, 3):
        raise ValueError(f"E={E}, M={M}: modelopt's scaled_e4m3 supports E=4, M=3 only "
                         "(fake_tensor_quant takes num_bits=(5, 2) and (2, 1) too)")
    return fake_tensor_quant(x, amax, (4, 3), axis=axis, block_size=block_size, backend=backend)


@fill_doc(**DOCS)
def dynamic_block_quant(x: npt.ArrayLike, block_sizes: dict, num_bits: int | tuple[int, int] = 8,
                        unsigned: bool = False, narrow_range: bool = True, *,
                        backend: str | None = None) -> np.ndarray:
    """Fake-quantize per block with the amax computed on the fly (``block_sizes={-1: B, "type": "dynamic"}``).

    Parameters
    ----------
    x : array_like
        float32, float16, bfloat16 or float64 input.
    block_sizes : dict
        modelopt's ``{axis: block, "type": "dynamic"}``; blocks along several dims
        (``{-2: B0, -1: B1}``) are tiles of a host input zero-padded to whole tiles, as
        modelopt's static blocks pad (the padding cannot change an amax), cropped back.
    num_bits : int or (E, M)
        As in :func:`fake_tensor_quant`.
    unsigned, narrow_range : bool
        As in :func:`fake_tensor_quant`.
    {backend}

    {fake_returns}

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> x = np.array([[0.1, -0.2, 4.0, 1.0]], np.float32)
    >>> nbquant.modelopt.dynamic_block_quant(x, {-1: 2, "type": "dynamic"}, num_bits=4)
    array([[ 0.11428571, -0.2       ,  4.        ,  1.1428572 ]],
          dtype=float32)
    >>> x = np.float32([[0.1, 2.0, 0.3], [-1.0, 0.5, 1.0]])
    >>> nbquant.modelopt.dynamic_block_quant(x, {-2: 2, -1: 2}, num_bits=4)
    array([[ 0.       ,  2.       ,  0.2857143],
           [-1.1428572,  0.5714286,  1.       ]], dtype=float32)
    """
    p = placement(x)
    x = p.float_input(x)
    if isinstance(block_sizes, dict) and "scale_bits" in block_sizes:
        raise ValueError(f"block_sizes={block_sizes!r}: scale_bits is not supported by dynamic_block_quant "
                         "(modelopt runs it on CUDA only, see docs/dynamic.md); use nbquant.quantize_nf4 (4-bit "
                         "with double quantization of the scales), nbquant.quantize_nvfp4 or nbquant.quantize_mx, "
                         "and .dequantize() for a fake-quantized tensor")
    axes = _block_axes(tuple(x.shape), block_sizes)
    pads = [(0, -n % axes[d] if len(axes) > 1 and d in axes else 0) for d, n in enumerate(x.shape)]
    if any(p for _, p in pads):  # tiles that do not divide the input: modelopt's zero padding, then a crop
        if p.device:
            raise ValueError(f"block_sizes={block_sizes!r} does not tile a device input of shape {tuple(x.shape)}; "
                             "pad it to whole tiles first, or pass a host array")
        y = dynamic_block_quant(np.pad(x, pads), block_sizes, num_bits, unsigned, narrow_range, backend=backend)
        return np.ascontiguousarray(y[tuple(slice(0, n) for n in x.shape)])
    layout = block_sizes_to_layout(tuple(x.shape), block_sizes)
    axis = layout.axis if layout.kind == "blocked" else None
    bs = layout.block[layout.axis] if layout.kind == "blocked" else layout.block
    return fake_tensor_quant(x, None, num_bits, unsigned, narrow_range, axis=axis, block_size=bs, backend=backend)


def _affine_params(min_range, max_range, num_bits):
    """FakeAffine's float32 ``(step, qz, minb, maxb)``; a range whose output would be NaN or inf raises.

    The outputs are the levels ``(q + qz) * step`` for ``minb <= q <= maxb``: all are
    finite exactly when ``step`` is finite and > 0 and the two extreme levels are
    finite. ``step`` is 0 when ``max_range - min_range`` is below about ``(2**n - 1) *
    2**-150`` (a subnormal step is fine), inf when that difference overflows float32;
    an extreme level overflows for a range reaching near float32's largest value.
    """
    lo, hi = check_affine_range(min_range, max_range)
    n = check_int("num_bits", num_bits, low=2, high=16)
    minb, maxb = -(1 << (n - 1)), (1 << (n - 1)) - 1
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        width = hi - lo
        step = np.float32(width / np.float32((1 << n) - 1))
        qz = np.float32(np.rint(lo / step) - np.float32(minb))
        levels = np.array([(np.float32(minb) + qz) * step, (np.float32(maxb) + qz) * step])
    if not (np.isfinite(step) and step > 0 and np.isfinite(levels).all()):
        largest = f"{float(np.finfo(np.float32).max):.8g}"
        if not np.isfinite(width):
            why, fix = f"max_range - min_range overflows float32 (largest {largest})", "narrow the range"
        elif step == 0:
            why = (f"the step (max_range - min_range) / (2**{n} - 1) = {float(width) / ((1 << n) - 1):.3g} underflows "
                   "to 0 in float32")
            fix = f"use max_range - min_range >= {((1 << n) - 1) * 2.0 ** -149:.3g}"
        else:
            why = (f"the {'lowest' if not np.isfinite(levels[0]) else 'highest'} output level (q + zero point) * step "
                   f"overflows float32 (largest {largest})")
            fix = "narrow the range"
        raise ValueError(f"min_range={min_range!r}, max_range={max_range!r}, num_bits={n}: {why}, so the output "
                         f"would be NaN or inf; {fix}")
    return step, qz, minb, maxb


@fill_doc(**DOCS)
def fake_affine_tensor_quant(x: npt.ArrayLike, min_range: float, max_range: float, num_bits: int = 8, *,
                             backend: str | None = None) -> np.ndarray:
    """Fake-quantize as modelopt's legacy ``FakeAffineTensorQuantFunction`` (per tensor, gemmlowp style).

    ``step = (max - min) / (2**n - 1)``, ``qz = rne(min / step) + 2**(n-1)``,
    ``out = (clamp(rne(x / step) - qz, -2**(n-1), 2**(n-1) - 1) + qz) * step``, all float32.

    Parameters
    ----------
    x : array_like
        float32, float16, bfloat16 or float64 input.
    min_range, max_range : float
        The range (``min``, ``max`` above).
    num_bits : int
        Bits, 2 to 16.
    {backend}

    {fake_returns}

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> nbquant.modelopt.fake_affine_tensor_quant(np.array([-1.0, 0.1, 0.5, 3.0], np.float32), -1.0, 2.0, num_bits=2)
    array([-1.,  0.,  0.,  2.], dtype=float32)
    """
    p = placement(x)
    x = p.float_input(x)
    step, qz, minb, maxb = _affine_params(min_range, max_range, num_bits)
    out = p.result(tuple(x.shape), result_dtype(x))
    if x.size:
        resolve_backend(backend, p).fake_affine(x, step, qz, minb, maxb, out)
    return out
