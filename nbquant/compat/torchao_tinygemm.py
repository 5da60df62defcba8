"""torchao 0.18's FLOAT ("tinygemm") zero-point domain: ``_quantize_affine_tinygemm``, ``_dequantize_affine_tinygemm``.

The float zero point is the value of the middle code: quantize ``rne((x - (zp - scale * mid)) / scale)`` (it
**divides** by the scale, unlike :func:`~nbquant.compat.torchao_affine.quantize_affine`), dequantize
``(q - mid) * scale + zp``, each step rounded to float32 as torch does, with ``mid = (quant_max + quant_min + 1) / 2``.
Block sizes, dtypes and bounds follow :mod:`~nbquant.compat.torchao_affine`; :mod:`nbquant.compat.torchao`
re-exports both functions.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .. import api
from .._docstrings import fill_doc
from ..validation import check_finite
from .torchao_affine import (
    FLOAT_INPUT,
    SUB_BYTE_INT,
    SUB_BYTE_UINT,
    TARGETS,
    block_grid,
    code_bounds,
    output_codes,
    output_dtype_of,
    param_view,
    read_input,
    scale_grid,
    target_key,
)

__all__ = ["_quantize_affine_tinygemm", "_dequantize_affine_tinygemm"]


def _tinygemm_params(block_size, scale, zero_point, shape, key, quant_min, quant_max):
    qmin, qmax = code_bounds(key, quant_min, quant_max)
    block, grid = block_grid(shape, block_size)
    s = scale_grid(scale, grid)
    if zero_point is None:
        raise TypeError("zero_point=None: the tinygemm (FLOAT domain) functions need a float zero point")
    zp = param_view("zero_point", zero_point, grid, floats_only=True)
    if s.dtype != np.float32 or zp.dtype != np.float32:
        raise NotImplementedError(f"scale ({s.dtype}) and zero_point ({zp.dtype}) must be float32: torchao computes "
                                  "the tinygemm shift in their dtype, nbquant in float32 only")
    s, zp = check_finite("scale", s, positive=True), check_finite("zero_point", zp)  # NumPy uses them before the core
    return block, grid, s, zp, qmin, qmax, (qmax + qmin + 1) / 2


def _per_block(op, a: np.ndarray, values: np.ndarray, block) -> np.ndarray:
    """``op(a, value of the element's block)`` in float32, one rounding per element; ``values`` is the block grid.

    ``a`` is viewed as torchao's ``shape_for_reduction`` (each dimension split into
    (blocks, block)) and ``values`` as (blocks, 1) per dimension, so they broadcast.
    """
    split = tuple(v for n, b in zip(a.shape, block, strict=True) for v in (n // b, b))
    expanded = tuple(v for g in values.shape for v in (g, 1))
    return op(a.astype(np.float32).reshape(split), values.reshape(expanded)).reshape(a.shape)


@fill_doc(float_input=FLOAT_INPUT)
def _quantize_affine_tinygemm(input: npt.ArrayLike, block_size, scale: npt.ArrayLike, zero_point: npt.ArrayLike,
                              output_dtype, quant_min: int | None = None,
                              quant_max: int | None = None) -> np.ndarray:
    """Quantize in ZeroPointDomain.FLOAT (tinygemm): ``clamp(rne((input - (zero_point - scale * mid)) / scale))``.

    ``mid = (quant_max + quant_min + 1) / 2``. This **divides** by the scale (unlike
    :func:`quantize_affine`). nbquant has no core option to subtract a float offset
    before scaling, so the shift ``input - min_val`` is one float32 NumPy subtraction
    here (the same single rounding torch does); the division, rounding and clamp run
    in :func:`nbquant.quantize` with ``scale_op="divide"``.

    Parameters
    ----------
    {float_input}
    scale, zero_point : numpy.ndarray
        float32, one per block: the scale and the float value of the middle code.
    output_dtype : str or dtype
        As in :func:`~nbquant.compat.torchao.quantize_affine`.
    quant_min, quant_max : int, optional
        As in :func:`~nbquant.compat.torchao.quantize_affine`.

    Returns
    -------
    numpy.ndarray
        The codes, as :func:`~nbquant.compat.torchao.quantize_affine` returns them.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.0, 1.0, 2.0, 3.0]], np.float32)
    >>> _quantize_affine_tinygemm(x, (1, 4), np.float32(0.2), np.float32(1.6), "uint4")
    array([[ 0,  5, 10, 15]], dtype=uint8)
    """
    key = target_key(output_dtype, "output_dtype")
    x = read_input(input)
    block, grid, s, zp, qmin, qmax, mid = _tinygemm_params(block_size, scale, zero_point, x.shape, key,
                                                           quant_min, quant_max)
    if key in SUB_BYTE_INT:
        raise NotImplementedError(f"output_dtype={output_dtype!r} cannot be materialised in torch 2.13")
    min_val = zp - s * np.float32(mid)
    shifted = _per_block(np.subtract, x, min_val, block)
    return api.quantize(shifted, s, TARGETS[key][0], block_size=block, quant_min=qmin, quant_max=qmax)


def _dequantize_affine_tinygemm(input: npt.ArrayLike, block_size, scale: npt.ArrayLike, zero_point: npt.ArrayLike,
                                input_dtype, quant_min: int | None = None, quant_max: int | None = None, *,
                                output_dtype="float32") -> np.ndarray:
    """Dequantize in ZeroPointDomain.FLOAT (tinygemm): ``(input - mid) * scale + zero_point``, rounded per step.

    ``(input - mid) * scale`` is :func:`nbquant.dequantize` with ``zero_point=mid``;
    adding the float zero point is one NumPy addition (nbquant has no core option
    for an offset after scaling).

    Parameters
    ----------
    input : numpy.ndarray
        Codes of ``input_dtype``.
    block_size : tuple of int
        As in :func:`~nbquant.compat.torchao.dequantize_affine`.
    scale, zero_point : numpy.ndarray
        float32, one per block, as given to :func:`_quantize_affine_tinygemm`.
    input_dtype : str or dtype
        As in :func:`~nbquant.compat.torchao.dequantize_affine`.
    quant_min, quant_max : int, optional
        As in :func:`~nbquant.compat.torchao.dequantize_affine`.
    output_dtype : str or dtype
        As in :func:`~nbquant.compat.torchao.dequantize_affine`.

    Returns
    -------
    numpy.ndarray
        The values, of ``output_dtype``.

    Examples
    --------
    The round trip of the :func:`_quantize_affine_tinygemm` example:

    >>> import numpy as np
    >>> x = np.array([[0.0, 1.0, 2.0, 3.0]], np.float32)
    >>> q = _quantize_affine_tinygemm(x, (1, 4), np.float32(0.2), np.float32(1.6), "uint4")
    >>> _dequantize_affine_tinygemm(q, (1, 4), np.float32(0.2), np.float32(1.6), "uint4")
    array([[0., 1., 2., 3.]], dtype=float32)
    """
    key = target_key(input_dtype, "input_dtype")
    out = output_dtype_of(output_dtype)
    q = output_codes(input, key)
    block, grid, s, zp, qmin, qmax, mid = _tinygemm_params(block_size, scale, zero_point, q.shape, key,
                                                           quant_min, quant_max)
    if key in SUB_BYTE_UINT:
        q = q.view(np.uint8)
    scaled = api.dequantize(q, s, zero_point=np.full(grid, mid, np.float32), block_size=block, out_dtype=out)
    return _per_block(np.add, scaled, zp, block).astype(out)

