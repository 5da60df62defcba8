"""torchao 0.18 affine quantization primitives (``quant_primitives``): quantize, dequantize, choose qparams.

Numerics (quant_primitives.py, identical in 0.18.0 and the 0.19 snapshot):

* :func:`quantize_affine` (INT zero-point domain):
  ``q = clamp(rne(x * fl(1 / scale)) + zero_point, quant_min, quant_max)`` —
  reciprocal-multiply (``scale_op="reciprocal"``), zero point added **after**
  rounding;
* :func:`dequantize_affine`: ``(q - zero_point) * scale``, in float32, cast to
  ``output_dtype``;
* :func:`choose_qparams_affine`: torchao's SYMMETRIC / SYMMETRIC_NO_CLIPPING_ERR /
  ASYMMETRIC scales and zero points (via :func:`nbquant.choose_qparams`);
* the private NONE zero-point domain: :func:`_quantize_affine_no_zero_point`,
  :func:`_dequantize_affine_no_zero_point` (the FLOAT, "tinygemm", domain is in
  :mod:`~nbquant.compat.torchao_tinygemm`).

``block_size`` has one entry per dimension; element ``i`` along dimension ``d``
uses block ``i // block_size[d]``. ``scale`` / ``zero_point`` may have any shape
with one value per block (torchao ``.view()``-s them), row-major over the block
grid.

Dtypes are strings (``"uint8"``, ``"torch.uint4"``), numpy dtypes, or ``torch``
dtype objects. ``uint1``..``uint7`` results are uint8 arrays holding ``0 ..
2**b - 1`` (as torchao returns ``torch.uint8``). As in torch 2.13, ``int1``..``int7``
outputs cannot be materialised: quantize to ``"int8"`` with ``quant_min=-8,
quant_max=7`` for int4.

Exactness: the arithmetic follows torch's type promotion: float32 for a float32
scale (or a half scale with an input of another dtype), the half type itself for
an input and scale of one half type (``compute_dtype``). A float64 scale (float64
arithmetic) raises rather than give different bits.

:mod:`nbquant.compat.torchao` re-exports these with the float8 primitives
(:mod:`~nbquant.compat.torchao_float8`), the tinygemm domain
(:mod:`~nbquant.compat.torchao_tinygemm`) and fake quantization
(:mod:`~nbquant.compat.torchao_qat`).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import numpy.typing as npt

from .. import api
from ..validation import as_real_array, check_bool, check_finite, check_int, show
from ._common import dtype_key
from .torchao_float8 import float8_key, round_to_float8

__all__ = [
    "quantize_affine",
    "dequantize_affine",
    "choose_qparams_affine",
    "MappingType",
    "_quantize_affine_no_zero_point",
    "_dequantize_affine_no_zero_point",
]


class MappingType:
    """The names of torchao's ``MappingType`` (plain strings are accepted too)."""

    SYMMETRIC = "SYMMETRIC"
    SYMMETRIC_NO_CLIPPING_ERR = "SYMMETRIC_NO_CLIPPING_ERR"
    ASYMMETRIC = "ASYMMETRIC"


# name -> (core format, bounds)
TARGETS: dict[str, tuple[str, int, int]] = {
    "uint8": ("uint8", 0, 255), "int8": ("int8", -128, 127), "int16": ("int16", -32768, 32767),
    "int32": ("int32", -(2 ** 31), 2 ** 31 - 1),
    **{f"uint{b}": ("uint8", 0, 2**b - 1) for b in range(1, 8)},
    **{f"int{b}": ("int8", -(2 ** (b - 1)), 2 ** (b - 1) - 1) for b in range(1, 8)},
}
SUB_BYTE_UINT = {f"uint{b}" for b in range(1, 8)}
SUB_BYTE_INT = {f"int{b}" for b in range(1, 8)}
_FLOATS = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
           "bfloat16": np.dtype(ml_dtypes.bfloat16)}
_HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
#: The ``input`` and ``block_size`` parameters of the torchao functions that take a float input in blocks, as
#: :func:`nbquant._docstrings.fill_doc` fills them.
FLOAT_INPUT = """
input : numpy.ndarray
    float32, float16 or bfloat16.
block_size : tuple of int
    As in :func:`~nbquant.compat.torchao.quantize_affine`.
"""


def target_key(dtype, name: str) -> str:
    """The torchao target format name of ``dtype`` (a TypeError naming ``name`` for any other)."""
    key = dtype_key(dtype, name, {**{k: k for k in TARGETS}, "uint16": "uint16"})
    if key == "uint16":
        raise ValueError(f"{name}={dtype!r}: Unsupported dtype (torchao 0.18 has no bounds for uint16)")
    return key


def code_bounds(key: str, quant_min, quant_max) -> tuple[int, int]:
    """``(quant_min, quant_max)`` inside the range of the target ``key`` (its full range by default)."""
    _, lo, hi = TARGETS[key]
    qmin = lo if quant_min is None else check_int("quant_min", quant_min, integral_float=True)
    qmax = hi if quant_max is None else check_int("quant_max", quant_max, integral_float=True)
    if qmin < lo:
        raise ValueError(f"quant_min={quant_min} is out of bound for dtype {key}: quant_min_lower_bound is {lo}")
    if qmax > hi:
        raise ValueError(f"quant_max={quant_max} is out of bound for dtype {key}: quant_max_upper_bound is {hi}")
    return qmin, qmax


def read_input(x, name: str = "input") -> np.ndarray:
    """``x`` as a float32 / float16 / bfloat16 NumPy array, the inputs torchao's affine functions take."""
    arr = np.asarray(x)
    if arr.dtype not in (np.dtype(np.float32), *_HALF):
        raise TypeError(f"{name} has dtype {arr.dtype}; Unsupported input dtype: torchao quantizes float32, "
                        "float16 or bfloat16")
    return arr


def block_grid(shape: tuple[int, ...], block_size) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """torchao's ``_get_reduction_params`` checks; returns (block_size, block grid)."""
    try:
        entries = None if isinstance(block_size, str) else list(block_size)
    except TypeError:
        entries = None
    if entries is None:
        raise TypeError(f"block_size={block_size!r} must be a tuple of ints, one per dimension")
    block = tuple(check_int(f"block_size[{d}]", b) for d, b in enumerate(entries))
    if len(block) != len(shape):
        raise ValueError(f"block_size={block} has {len(block)} entries; the input has {len(shape)} dimension(s) "
                         f"{shape}")
    for d, (n, b) in enumerate(zip(shape, block, strict=True)):
        if b < 1 or b > n or n % b:
            raise ValueError(f"block_size={block}: expecting input size at {d} dimension: {n} to be divisible by "
                             f"block_size at {d} dimension: {b} (1 <= block <= size)")
    return block, tuple(n // b for n, b in zip(shape, block, strict=True))


def param_view(name: str, value, grid: tuple[int, ...], floats_only: bool = False) -> np.ndarray:
    """``value.view(grid)`` as torchao does: any shape with ``prod(grid)`` elements, row-major."""
    arr = as_real_array(name, value)
    if arr.size != int(np.prod(grid)):
        raise ValueError(f"{name} has shape {arr.shape} ({arr.size} values); block grid {grid} needs "
                         f"{int(np.prod(grid))} values")
    if floats_only and arr.dtype not in (np.dtype(np.float32), np.dtype(np.float64), *_HALF):
        raise TypeError(f"{name} has dtype {arr.dtype} ({name}={show(value)}); use a float32 (or float16/bfloat16) "
                        "array")
    return arr.reshape(grid)


def scale_grid(scale, grid: tuple[int, ...]) -> np.ndarray:
    """torchao's ``scale`` viewed on the block ``grid``, as float32 (torch's dtype for Python floats)."""
    # torch.tensor(python floats) is float32; an array keeps its dtype
    s = check_finite("scale", scale, scale.dtype if isinstance(scale, np.ndarray) else np.float32, positive=True)
    s = param_view("scale", s, grid, floats_only=True)
    if s.dtype == np.float64:
        raise TypeError("scale has dtype float64; torchao would then compute in float64, which nbquant does not "
                        "do: pass scale.astype(numpy.float32)")
    return s


def _reciprocal(s: np.ndarray, x_dtype: np.dtype) -> dict:
    """The core arguments of ``input * (1.0 / scale)`` under torch's type promotion.

    The reciprocal is taken in the scale's dtype; the product is float32 unless input and
    scale share a half type, where torch computes in it (``compute_dtype``).
    """
    if s.dtype == x_dtype and s.dtype in _HALF:
        return {"scale": s, "scale_op": "reciprocal", "compute_dtype": str(s.dtype)}
    if s.dtype == np.float32:
        return {"scale": s, "scale_op": "reciprocal"}
    return {"scale": (np.float32(1) / s.astype(np.float32)).astype(s.dtype), "scale_op": "multiply"}


def quantize_affine(input: npt.ArrayLike, block_size, scale: npt.ArrayLike, zero_point: npt.ArrayLike | None,
                    output_dtype, quant_min: int | None = None, quant_max: int | None = None) -> np.ndarray:
    """``clamp(rne(input * (1.0 / scale)) + zero_point, quant_min, quant_max)``.

    Parameters
    ----------
    input : numpy.ndarray
        float32, float16 or bfloat16.
    block_size : tuple of int
        One entry per dimension, each dividing its dimension.
    scale : numpy.ndarray
        One value per block (float32; a float16/bfloat16 scale is inverted in its
        own dtype, as torch does, and with an input of the same half type the whole
        computation is in that type: ``compute_dtype``).
    zero_point : numpy.ndarray
        Integer zero points, one per block. ``None`` raises ``TypeError`` (as in
        torchao 0.18); use :func:`_quantize_affine_no_zero_point` or zeros.
    output_dtype : str or dtype
        ``"uint8"``, ``"int8"``, ``"int16"``, ``"int32"``, ``"uint1"`` .. ``"uint7"`` (uint8
        result). int32 codes saturate at ``2**31 - 128`` (nbquant's float32 arithmetic;
        torch's cast of ``2**31`` overflows to ``-2**31``).
    quant_min, quant_max : int, optional
        Clamp bounds inside the dtype's bounds.

    Returns
    -------
    numpy.ndarray
        Codes of the input's shape: uint8 (``"uint8"`` and ``"uint1"`` .. ``"uint7"``),
        int8 or int16.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.5, 1.5, -3.0, 100.0]], np.float32)
    >>> quantize_affine(x, (1, 4), np.array([0.5], np.float32), np.array([3], np.int32), "uint4")
    array([[ 4,  6,  0, 15]], dtype=uint8)
    """
    key = target_key(output_dtype, "output_dtype")
    qmin, qmax = code_bounds(key, quant_min, quant_max)
    x = read_input(input)
    block, grid = block_grid(x.shape, block_size)
    if zero_point is None or np.asarray(zero_point).size == 0:
        raise TypeError("zero_point=None: torchao 0.18 quantize_affine adds the zero point unconditionally "
                        "(unsupported operand type(s) for +: 'Tensor' and 'NoneType'); pass zeros, or use "
                        "_quantize_affine_no_zero_point")
    if key in SUB_BYTE_INT:
        raise NotImplementedError(f"output_dtype={output_dtype!r}: \"copy_\" not implemented for "
                                  f"'{key.capitalize()}' in torch 2.13; use output_dtype='int8' with "
                                  f"quant_min={qmin}, quant_max={qmax}")
    applied = _reciprocal(scale_grid(scale, grid), x.dtype)
    zp = param_view("zero_point", zero_point, grid)
    return api.quantize(x, dtype=TARGETS[key][0], zero_point=zp, block_size=block, quant_min=qmin,
                        quant_max=qmax, **applied)


def output_codes(input, key: str) -> np.ndarray:
    """Codes ``input`` checked as holding the target ``key``'s integer dtype."""
    q = np.asarray(input)
    if key in SUB_BYTE_UINT:
        if q.dtype.kind not in "iu" or q.dtype.itemsize != 1:
            raise TypeError(f"input has dtype {q.dtype}; {key} codes are stored as uint8")
        return q
    want = np.dtype(ml_dtypes.int4 if key == "int4" else ml_dtypes.int2 if key == "int2"
                    else key if key in ("uint8", "int8", "int16", "int32") else np.int8)
    if q.dtype != want:
        raise TypeError(f"input has dtype {q.dtype}; Expected: {key} (input_dtype)")
    return q


def output_dtype_of(output_dtype) -> np.dtype:
    """The float dtype torchao's dequantize returns for ``output_dtype``."""
    return dtype_key(output_dtype, "output_dtype", _FLOATS)


def dequantize_affine(input: npt.ArrayLike, block_size, scale: npt.ArrayLike, zero_point: npt.ArrayLike | None,
                      input_dtype, quant_min: int | None = None, quant_max: int | None = None, *,
                      output_dtype="float32") -> np.ndarray:
    """``(input - zero_point) * scale``, cast to ``output_dtype``.

    Parameters
    ----------
    input : numpy.ndarray
        Codes of ``input_dtype`` (sub-byte unsigned dtypes: uint8 storage).
    block_size : tuple of int
        As in :func:`quantize_affine`.
    scale : numpy.ndarray
        One float per block.
    zero_point : numpy.ndarray or None
        One integer per block, or None (no zero point).
    input_dtype : str or dtype
        The codes' dtype, e.g. ``"int8"``, ``"uint4"``.
    quant_min, quant_max : int, optional
        Checked against the dtype's bounds (unused otherwise, as in torchao).
    output_dtype : str or dtype
        ``"float32"`` (default), ``"float16"`` or ``"bfloat16"``.

    Returns
    -------
    numpy.ndarray
        ``(input - zero_point) * scale`` computed in float32 and cast to
        ``output_dtype``; the input's shape.

    Examples
    --------
    >>> import numpy as np
    >>> q = np.array([[4, 6, 0, 15]], np.uint8)
    >>> dequantize_affine(q, (1, 4), np.array([0.5], np.float32), np.array([3], np.int32), "uint4")
    array([[ 0.5,  1.5, -1.5,  6. ]], dtype=float32)
    """
    key = target_key(input_dtype, "input_dtype")
    code_bounds(key, quant_min, quant_max)
    out = output_dtype_of(output_dtype)
    q = output_codes(input, key)
    block, grid = block_grid(q.shape, block_size)
    s = scale_grid(scale, grid)
    zp = None if zero_point is None else param_view("zero_point", zero_point, grid)
    if key in ("int16", "int32") and out in _HALF:
        raise NotImplementedError(f"input_dtype {key} with output_dtype {out}: torchao converts the codes to {out} "
                                  "before subtracting the zero point (rounding codes beyond 2048 / 256); nbquant "
                                  "subtracts in float32. Use output_dtype='float32'")
    if key == "int32" and zp is not None and np.any(np.asarray(zp) != 0):
        raise NotImplementedError("input_dtype int32 with a nonzero zero_point: torchao subtracts in int32 (and "
                                  "wraps), then rounds the difference to float; nbquant subtracts in float32. "
                                  "Subtract the zero point first (int64) and pass zero_point=None")
    if key in SUB_BYTE_UINT:
        q = q.view(np.uint8)
    return api.dequantize(q, s, zero_point=zp, block_size=block, out_dtype=out)


def choose_qparams_affine(input: npt.ArrayLike, mapping_type, block_size, target_dtype,
                          quant_min: int | None = None, quant_max: int | None = None, eps: float | None = None,
                          scale_dtype=None, zero_point_dtype="int32",
                          keepdim: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Choose scales and zero points as torchao's ``choose_qparams_affine`` (float32 inputs).

    Computed by :func:`nbquant.choose_qparams`.

    Parameters
    ----------
    input : numpy.ndarray
        float32 (torchao computes the parameters of a half input in that half
        dtype, which nbquant does not do).
    mapping_type : str or MappingType
        ``"SYMMETRIC"``, ``"SYMMETRIC_NO_CLIPPING_ERR"`` or ``"ASYMMETRIC"``.
    block_size : tuple of int
        As in :func:`quantize_affine`.
    target_dtype : str or dtype
        As ``output_dtype`` of :func:`quantize_affine` (``int1``..``int7`` allowed).
    quant_min, quant_max : int, optional
        Bounds inside ``target_dtype``'s (default: its full range).
    eps : float, optional
        Scale floor (default float32's smallest normal, as in torchao 0.18).
    scale_dtype : str or dtype, optional
        float32 (default: the input's dtype).
    zero_point_dtype : str or dtype
        ``"int32"`` (default), ``"int8"``, ``"uint8"``, ``"int16"`` or ``"float32"``.
    keepdim : bool
        Keep the block grid's size-1 dimensions.

    Returns
    -------
    scale : numpy.ndarray
        float32, one per block. With ``keepdim`` shaped as the block grid; else as torchao
        shapes it: a dim whose block is 1 stays (even of size 1), a dim whose block is the
        whole dim goes, and with no block larger than 1 torchao reduces over the whole
        tensor (one scale).
    zero_point : numpy.ndarray
        ``zero_point_dtype``, the shape of ``scale``.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[-1.0, 0.5], [2.0, 4.0]], np.float32)
    >>> choose_qparams_affine(x, "SYMMETRIC", (1, 2), "int8")
    (array([0.00784314, 0.03137255], dtype=float32), array([0, 0], dtype=int32))
    """
    from ..dynamic import choose_qparams

    key = target_key(target_dtype, "target_dtype")
    qmin, qmax = code_bounds(key, quant_min, quant_max)
    mapping = getattr(mapping_type, "name", mapping_type)
    mappings = {"SYMMETRIC": "symmetric", "SYMMETRIC_NO_CLIPPING_ERR": "symmetric_no_clipping_err",
                "ASYMMETRIC": "asymmetric"}
    if not isinstance(mapping, str) or mapping not in mappings:
        raise ValueError(f"mapping_type={mapping_type!r}: Unsupported mapping type; use one of {list(mappings)}")
    x = read_input(input)
    if x.dtype != np.float32:
        raise NotImplementedError(f"input has dtype {x.dtype}: torchao computes its scales in {x.dtype}, nbquant "
                                  "in float32 only; pass input.astype(numpy.float32)")
    block, grid = block_grid(x.shape, block_size)
    keepdim = check_bool("keepdim", keepdim)
    # torchao's shape: a dim with block 1 stays (size 1 too), a dim with 1 < block < n becomes n / block, a whole
    # dim (block == n > 1) goes. With no block > 1, torch's amin(dim=[]) reduces over every dim: one scale.
    shape = tuple(n // b for n, b in zip(x.shape, block, strict=True) if b == 1 or b != n)
    if all(b == 1 for b in block):
        block, grid, shape = tuple(x.shape), (1,) * x.ndim, ()
    if scale_dtype is not None and dtype_key(scale_dtype, "scale_dtype", _FLOATS) != np.float32:
        raise NotImplementedError(f"scale_dtype={scale_dtype!r}: only float32 scales are produced")
    zdt = dtype_key(zero_point_dtype, "zero_point_dtype",
                    {"int32": "int32", "int8": "int8", "uint8": "uint8", "int16": "int16", "float32": "float32"})
    s, zp = choose_qparams(x, TARGETS[key][0], block_size=block, mapping=mappings[mapping], quant_min=qmin,
                           quant_max=qmax, eps=eps, scale_op="reciprocal")
    shape = grid if keepdim else shape
    return s.reshape(shape), zp.reshape(shape).astype(zdt)


def _quantize_affine_no_zero_point(input: npt.ArrayLike, block_size, scale: npt.ArrayLike, zero_point,
                                   output_dtype, quant_min: int | None = None,
                                   quant_max: int | None = None) -> np.ndarray:
    """Quantize in ZeroPointDomain.NONE: ``clamp(rne(input * (1.0 / scale)), quant_min, quant_max)``.

    A float8 ``output_dtype`` (``float8_e4m3fn``, ``float8_e5m2``) gets torchao's float
    path: the product is rounded to an integer, clamped to ``±finfo.max`` (or the bounds
    given) and then cast to the float8 format (RNE), so ``17`` becomes ``16`` in E4M3;
    NaN stays NaN.

    Parameters
    ----------
    input : numpy.ndarray
        As in :func:`quantize_affine`.
    block_size : tuple of int
        As in :func:`quantize_affine`.
    scale : numpy.ndarray
        As in :func:`quantize_affine`.
    zero_point : object
        Ignored (torchao's signature).
    output_dtype : str or dtype
        As in :func:`quantize_affine`, or ``float8_e4m3fn`` / ``float8_e5m2``.
    quant_min, quant_max : int, optional
        As in :func:`quantize_affine` (default ``±finfo.max`` for float8).

    Returns
    -------
    numpy.ndarray
        The codes, as :func:`quantize_affine` returns them.

    Examples
    --------
    >>> import numpy as np
    >>> _quantize_affine_no_zero_point(np.array([1.25, -7.0], np.float32), (2,), np.float32(0.5), None, "int8")
    array([  2, -14], dtype=int8)
    >>> _quantize_affine_no_zero_point(np.array([8.5, 1e4], np.float32), (2,), np.float32(0.5), None,
    ...                                "float8_e4m3fn").astype(np.float32)
    array([ 16., 448.], dtype=float32)
    """
    x = read_input(input)
    block, grid = block_grid(x.shape, block_size)
    if float8_key(output_dtype) is not None:
        return round_to_float8(x, block, _reciprocal(scale_grid(scale, grid), x.dtype), float8_key(output_dtype),
                               quant_min, quant_max)
    key = target_key(output_dtype, "output_dtype")
    qmin, qmax = code_bounds(key, quant_min, quant_max)
    if key in SUB_BYTE_INT:
        raise NotImplementedError(f"output_dtype={output_dtype!r} cannot be materialised in torch 2.13; use 'int8' "
                                  f"with quant_min={qmin}, quant_max={qmax}")
    applied = _reciprocal(scale_grid(scale, grid), x.dtype)
    return api.quantize(x, dtype=TARGETS[key][0], block_size=block, quant_min=qmin, quant_max=qmax, **applied)


def _dequantize_affine_no_zero_point(input: npt.ArrayLike, block_size, scale: npt.ArrayLike, zero_point,
                                     input_dtype, quant_min: int | None = None, quant_max: int | None = None, *,
                                     output_dtype="float32") -> np.ndarray:
    """Dequantize in ZeroPointDomain.NONE: ``input * scale``.

    Parameters
    ----------
    input : numpy.ndarray
        As in :func:`dequantize_affine`.
    block_size : tuple of int
        As in :func:`dequantize_affine`.
    scale : numpy.ndarray
        As in :func:`dequantize_affine`.
    zero_point : None
        Must be None.
    input_dtype : str or dtype
        As in :func:`dequantize_affine`.
    quant_min, quant_max : int, optional
        As in :func:`dequantize_affine`.
    output_dtype : str or dtype
        As in :func:`dequantize_affine`.

    Returns
    -------
    numpy.ndarray
        The values, as :func:`dequantize_affine` returns them.

    Examples
    --------
    >>> import numpy as np
    >>> q = _quantize_affine_no_zero_point(np.array([1.25, -7.0], np.float32), (2,), np.float32(0.5), None, "int8")
    >>> q, _dequantize_affine_no_zero_point(q, (2,), np.float32(0.5), None, "int8")
    (array([  2, -14], dtype=int8), array([ 1., -7.], dtype=float32))
    """
    if zero_point is not None:
        raise ValueError("zero_point should be None for _dequantize_affine_no_zero_point")
    return dequantize_affine(input, block_size, scale, None, input_dtype, quant_min, quant_max,
                             output_dtype=output_dtype)
