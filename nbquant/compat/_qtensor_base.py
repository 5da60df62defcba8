"""What modelopt's real-quantization tensors share here: the base class, argument checks, block helpers.

See :mod:`nbquant.compat.modelopt_qtensor` for the classes and their numerics.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import numpy.typing as npt

from .. import api
from .._docstrings import fill_doc
from ..validation import as_real_array, check_int, show
from ._common import dtype_key, float_array

F32 = np.dtype(np.float32)
_HALF = {np.dtype(np.float16): "float16", np.dtype(ml_dtypes.bfloat16): "bfloat16"}
_DTYPES = {"float32": F32, "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def input_array(x) -> np.ndarray:
    return float_array(x, "input")


def out_dtype(dtype, default: np.dtype) -> np.dtype:
    return default if dtype is None else dtype_key(dtype, "dtype", _DTYPES)


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """torch's promotion of two float dtypes: equal stays, anything else mixed is float32."""
    return a if a == b else F32


def _compute(dtype: np.dtype) -> str:
    return _HALF.get(dtype, "float32")


def block_sizes_arg(block_sizes, ndim: int) -> dict[int, int]:
    """``{dim: size}`` with int keys, as modelopt's qtensors take them; dims made non-negative."""
    if not isinstance(block_sizes, dict):
        raise TypeError(f"block_sizes={show(block_sizes)} must be a dict {{dim: block size}}")
    out = {}
    for dim, size in block_sizes.items():
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not -ndim <= dim < ndim:
            raise ValueError(f"block_sizes key {dim!r} must be a dimension of the {ndim}-d input")
        out[int(dim) % ndim] = check_int(f"block_sizes[{dim}]", size, low=1)
    return out


def pad(x: np.ndarray, blocks: dict[int, int]) -> np.ndarray:
    """Zeros appended along each blocked dim up to a multiple of its block (``reduce_block_padding``)."""
    widths = [(0, -n % blocks[d]) if d in blocks else (0, 0) for d, n in enumerate(x.shape)]
    return np.pad(x, widths) if any(w for _, w in widths) else x


def expand(s: np.ndarray, blocks: dict[int, int]) -> np.ndarray:
    for d, b in blocks.items():
        s = np.repeat(s, b, axis=d)
    return s


def block_amax(x: np.ndarray, blocks: dict[int, int]) -> np.ndarray:
    """max |x| per block (NaN propagates), in x's dtype, shaped as the block grid."""
    shape = []
    for d, n in enumerate(x.shape):
        shape += [n // blocks[d], blocks[d]] if d in blocks else [n, 1]
    a = np.abs(x.astype(F32)).reshape(shape).max(axis=tuple(range(1, 2 * x.ndim, 2)))
    return a.astype(x.dtype)


def axis_amax(x: np.ndarray, axis) -> np.ndarray:
    """modelopt ``reduce_amax`` over the dims not in ``axis`` (kept dims; None: every dim, 0-d)."""
    if axis is None:
        return np.abs(x.astype(F32)).max().astype(x.dtype)[()]
    kept = axis if isinstance(axis, (tuple, list)) else (axis,)
    for a in kept:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not -x.ndim <= a < x.ndim:
            raise ValueError(f"axis={axis!r} must name dimensions of the {x.ndim}-d input")
    reduce = tuple(d for d in range(x.ndim) if d not in kept and d - x.ndim not in kept)
    reduce = reduce or None  # torch.amax(dim=[]) reduces every dim
    a = np.abs(x.astype(F32)).max(axis=reduce, keepdims=True).astype(x.dtype)
    return a.reshape(()) if a.size == 1 else a  # squeeze_scalar


def codes_of(x: np.ndarray, s: np.ndarray, block: tuple[int, ...], fmt: str, op: str, **kw) -> np.ndarray:
    """``fmt`` codes of ``x / s`` or ``x * s`` (``s``: one value per block of ``block``), in torch's arithmetic.

    The quotient is taken in ``promote(x, s)`` (a half type when both are). Finite
    positive scales run on :func:`nbquant.quantize`; the elements of a scale that is
    0, inf or NaN take IEEE's quotient, then the same cast (NaN → code 0 for integers,
    as torch's cast gives on x86).
    """
    dtype = promote(x.dtype, s.dtype)
    good = np.isfinite(s.astype(F32)) & (s.astype(F32) > 0)
    q = api.quantize(x.astype(dtype), np.where(good, s, np.ones((), s.dtype)).astype(F32), fmt,
                     block_size=block, scale_op=op, compute_dtype=_compute(dtype), **kw)
    if not good.all():
        bad = expand(~good, dict(enumerate(block)))
        sb = expand(s, dict(enumerate(block)))[bad].astype(F32)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            v = x[bad].astype(F32) / sb if op == "divide" else x[bad].astype(F32) * sb
        q[bad] = api.quantize(v.astype(dtype), np.float32(1), fmt, **kw)
    return q


def grid_scale(s: np.ndarray, shape: tuple[int, ...], blocks: dict[int, int], reshape: bool) -> np.ndarray:
    """``s`` with one entry per block of ``blocks`` (or broadcasting against ``shape``), at the input's rank."""
    if blocks:
        grid = tuple(n // blocks[d] if d in blocks else n for d, n in enumerate(shape))
        if s.shape != grid and reshape and s.size == math.prod(grid):
            s = s.reshape(grid)  # FP8QTensor takes an amax of the right size in another shape
        if s.shape != grid:
            raise ValueError(f"scales has shape {s.shape}; the blocks {blocks} of the (padded) input {shape} "
                             f"need {grid}")
        return s
    if s.ndim > len(shape) or any(m not in (1, n) for m, n in zip(s.shape[::-1], shape[::-1], strict=False)):
        raise ValueError(f"scales of shape {s.shape} does not broadcast against the input's {shape}")
    return s.reshape((1,) * (len(shape) - s.ndim) + s.shape)


def block_of(shape: tuple[int, ...], grid: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n // m for n, m in zip(shape, grid, strict=True))


def scale_array(scales, name: str = "scales") -> np.ndarray:
    s = np.asarray(scales)
    if s.dtype not in _DTYPES.values():
        s = np.asarray(as_real_array(name, scales), F32)
    return s


#: The constructor's parameters, which every qtensor class inherits.
CONSTRUCTOR = """
Parameters
----------
original_shape : tuple of int
    The shape of the tensor that was quantized.
original_dtype : dtype
    Its dtype (the default of :meth:`dequantize`).
quantized_data : numpy.ndarray
    The stored codes.
"""
#: ``dequantize``'s ``dtype`` parameter, opening its Parameters section.
DEQUANTIZE_DTYPE = """
Parameters
----------
dtype : str or dtype, optional
    ``"float32"``, ``"float16"`` or ``"bfloat16"``; default the original dtype.
"""
#: ``dequantize``'s Returns section.
DEQUANTIZE_RETURNS = """
Returns
-------
numpy.ndarray
    The dequantized tensor, of the original shape.
"""
#: The pieces of the qtensor classes' docstrings, for :func:`nbquant._docstrings.fill_doc`.
DOCS = {"constructor": CONSTRUCTOR, "dequantize_dtype": DEQUANTIZE_DTYPE, "dequantize_returns": DEQUANTIZE_RETURNS}


@fill_doc(**DOCS)
class BaseQuantizedTensor:
    """Quantized data with the original shape and dtype (modelopt ``BaseQuantizedTensor``).

    {constructor}

    Attributes
    ----------
    metadata : dict
        ``{"shape": original shape, "dtype": original dtype}``.
    """

    def __init__(self, original_shape: tuple[int, ...], original_dtype: npt.DTypeLike,
                 quantized_data: np.ndarray) -> None:
        self.metadata = {"shape": tuple(original_shape), "dtype": np.dtype(original_dtype)}
        self._quantized_data = quantized_data

    @property
    def quantized_data(self) -> np.ndarray:
        """The stored codes (int8, uint8 bytes or float8_e4m3fn)."""
        return self._quantized_data

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(shape={self.metadata['shape']}, dtype={self.metadata['dtype']}, "
                f"quantized_data={self._quantized_data.dtype}{self._quantized_data.shape})")

    def _dtype_and_block(self, dtype, kwarg: dict, low: int) -> tuple[np.dtype, int]:
        """``dequantize``'s output dtype and its ``block_sizes[-1]`` (at least ``low``)."""
        return out_dtype(dtype, self.metadata["dtype"]), check_int("block_sizes[-1]", kwarg["block_sizes"][-1],
                                                                   low=low)

    def _crop_flat(self, y: np.ndarray, out: np.dtype) -> np.ndarray:
        """The first ``prod(original shape)`` values of ``y``, in the original shape, cast to ``out``."""
        n = math.prod(self.metadata["shape"])
        return y.reshape(-1)[:n].reshape(self.metadata["shape"]).astype(out)


def flat_blocks(x: np.ndarray, block_size, name: str = "block_size") -> tuple[np.ndarray, int]:
    """The flattened input zero-padded to whole blocks, as ``(blocks, block_size)``."""
    b = check_int(name, block_size, low=1)
    flat = pad(x.reshape(-1), {0: b})
    return flat.reshape(-1, b), b


def pack_high_first(u: np.ndarray) -> np.ndarray:
    """Two 4-bit codes per byte, the first in the high nibble (modelopt's INT4 and NF4 layout)."""
    u = u.astype(np.uint8)
    return (u[..., 0::2] << 4) | u[..., 1::2]


def unpack_high_first(data: np.ndarray) -> np.ndarray:
    d = np.asarray(data, np.uint8)
    return np.stack([d >> 4, d & 0x0F], axis=-1).reshape(*d.shape[:-1], -1)


def reshape_packed(packed: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``packed.reshape(*shape[:-1], -1)``, which modelopt does and fails when the padding does not fit."""
    lead = math.prod(shape[:-1])
    if lead and packed.size % lead:
        raise ValueError(f"the packed codes ({packed.size} bytes after padding) do not reshape to {shape[:-1]} "
                         "rows (modelopt's reshape fails here too); pad the input to whole blocks")
    return packed.reshape(*shape[:-1], -1)


def pack_low_first(u: np.ndarray) -> np.ndarray:
    """Two 4-bit codes per byte along the last axis, the first in the low nibble (NVFP4, MXFP4)."""
    u = u.astype(np.uint8)
    return (u[..., 1::2] << 4) | u[..., 0::2]


def unpack_low_first(data: np.ndarray) -> np.ndarray:
    d = np.asarray(data, np.uint8)
    return np.stack([d & 0x0F, d >> 4], axis=-1).reshape(*d.shape[:-1], -1)


@fill_doc(**DOCS)
def dequantize_product(self: BaseQuantizedTensor, dtype=None, **kwarg) -> np.ndarray:
    """``q * scale`` in ``dtype`` (default the original), cropped to the original shape.

    ``(q.to(dtype) * scale.to(dtype))[crop]``, one float32 product rounded once: the
    ``dequantize`` method of ``INT8QTensor`` and ``FP8QTensor``.

    {dequantize_dtype}
    **kwarg
        ``scale`` (required) and ``block_sizes``.

    {dequantize_returns}
    """
    if "scale" not in kwarg:
        raise TypeError(f"{type(self).__name__}.dequantize needs scale=")
    out = out_dtype(dtype, self.metadata["dtype"])
    q = self._quantized_data
    blocks = block_sizes_arg(kwarg["block_sizes"], q.ndim) if kwarg.get("block_sizes") else {}
    q = pad(q, blocks) if blocks else q
    s = grid_scale(scale_array(kwarg["scale"]), q.shape, blocks, reshape=False).astype(out).astype(F32)
    block = block_of(q.shape, s.shape)
    good = np.isfinite(s) & (s > 0)
    y = api.dequantize(q, np.where(good, s, np.float32(1)), block_size=block, out_dtype=out)
    if not good.all():
        bad = expand(~good, dict(enumerate(block)))
        with np.errstate(invalid="ignore"):
            v = api.dequantize(q[bad], np.float32(1)) * expand(s, dict(enumerate(block)))[bad]
        y[bad] = v.astype(out)
    return y[tuple(slice(0, n) for n in self.metadata["shape"])]


