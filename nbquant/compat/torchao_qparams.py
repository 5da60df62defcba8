"""torchao 0.18's choose-qparams variants and its floatx helpers on NumPy arrays.

* :func:`_choose_qparams_affine_tinygemm`: ``scale = max(fl(max - min) / (qmax - qmin), eps)``
  and the **float** zero point ``fl(min + fl(scale * mid))``, ``mid = (qmax + qmin + 1) / 2``,
  each operation rounded to the input's dtype (torch computes on the half tensor).
* :func:`_choose_qparams_affine_dont_preserve_zero`: the same scale and the integer zero
  point ``clamp(qmin - rne(min / scale), qmin, qmax)``, where the range need not include 0.
* :func:`_choose_qparams_affine_floatx`: ``max(amax(|x|, dim=1), 1e-12) / max_normal`` per row
  in float32, cast to the input's dtype.
* :func:`_quantize_affine_floatx` / :func:`_dequantize_affine_floatx`: ``x / scale`` per row,
  rounded half to even and saturated to fp6 e3m2 / e2m3 or fp4 e2m1 (codes ``00SEEEMM``, low
  bits, as ml_dtypes stores them), and ``value * scale`` back.

The block min and max are exact in any order (NumPy reductions over the block grid); the
formulas are torch's elementwise operations on those small arrays.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import numpy.typing as npt

from .. import api
from .._docstrings import fill_doc
from ..validation import as_real_array, check_finite, check_float_scalar, check_int
from ._common import dtype_key
from .torchao_affine import block_grid, code_bounds, read_input, target_key

__all__ = ["_choose_qparams_affine_tinygemm", "_choose_qparams_affine_dont_preserve_zero",
           "_choose_qparams_affine_floatx", "_quantize_affine_floatx", "_dequantize_affine_floatx"]

_F32 = np.float32
_FLOATX = {(3, 2): "float6_e3m2fn", (2, 3): "float6_e2m3fn", (2, 1): "float4_e2m1fn"}
_OUT = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def _block_min_max(x: np.ndarray, block_size) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """Per-block min and max (NaN propagates, as torch.amin/amax), shaped as torchao's keepdim=False result."""
    block, grid = block_grid(x.shape, block_size)
    split, reduce, out_shape = [], [], []
    for n, b in zip(x.shape, block, strict=True):
        if b != n and b > 1:
            split += [n // b, b]
            reduce.append(len(split) - 1)
            out_shape.append(n // b)
        else:
            split.append(n)
            if b != 1:
                reduce.append(len(split) - 1)
            else:
                out_shape.append(n)
    v = x.reshape(split)
    axes = tuple(reduce) if reduce else None  # torch.amin(dim=[]) reduces every dim
    if not reduce:
        out_shape = []
    return v.min(axis=axes), v.max(axis=axes), tuple(out_shape)


def _asymmetric_scale(x: np.ndarray, mapping_type, block_size, target_dtype, quant_min, quant_max, eps):
    mapping = getattr(mapping_type, "name", mapping_type)
    if mapping != "ASYMMETRIC":
        raise ValueError(f"mapping_type={mapping_type!r}: Unsupported mapping type; these variants take 'ASYMMETRIC'")
    key = target_key(target_dtype, "target_dtype")
    qmin, qmax = code_bounds(key, quant_min, quant_max)
    lo, hi, shape = _block_min_max(x, block_size)
    dt = x.dtype
    floor = ml_dtypes.finfo(dt).smallest_normal if eps is None else check_float_scalar("eps", eps, positive=True)
    with np.errstate(invalid="ignore", over="ignore"):
        span = (hi.astype(_F32) - lo.astype(_F32)).astype(dt)
        scale = (span.astype(_F32) / _F32(qmax - qmin)).astype(dt)
        scale = np.where(scale < np.asarray(floor, dt), np.asarray(floor, dt), scale).astype(dt)  # clamp; NaN stays
    return lo.reshape(shape), scale.reshape(shape), qmin, qmax


#: The parameters and results the asymmetric variants share (:func:`nbquant._docstrings.fill_doc`).
_DOCS = {
    "asymmetric_params": """
        block_size : tuple of int
            The block of one (scale, zero point) pair, one entry per dimension.
        target_dtype : str or dtype
            The code format (``"uint4"``, ``"uint8"``, ``"int8"``, ...).
        quant_min, quant_max : int, optional
            Code bounds (default: the format's).
        eps : float, optional
            Scale floor (default: the input dtype's smallest normal).
        """,
    "qparams_returns": """
        Returns
        -------
        scale : numpy.ndarray
            One per block, shaped as torchao's ``keepdim=False`` reduction.
        zero_point : numpy.ndarray
            One per block, the same shape.
        """,
}


@fill_doc(**_DOCS)
def _choose_qparams_affine_tinygemm(input: npt.ArrayLike, mapping_type, block_size, target_dtype,
                                    quant_min: int | None = None, quant_max: int | None = None,
                                    eps: float | None = None, scale_dtype=None,
                                    zero_point_dtype=None) -> tuple[np.ndarray, np.ndarray]:
    """Choose tinygemm's qparams: the asymmetric scale and a float zero point ``min + scale * mid``.

    Parameters
    ----------
    input : numpy.ndarray
        float32, float16 or bfloat16; the arithmetic is in its dtype.
    mapping_type : str or MappingType
        ``"ASYMMETRIC"`` only, as in torchao.
    {asymmetric_params}
    scale_dtype, zero_point_dtype : str or dtype, optional
        Default: the input's dtype.

    {qparams_returns}

    Examples
    --------
    >>> import numpy as np
    >>> _choose_qparams_affine_tinygemm(np.array([[-1.0, 0.5, 2.0, 3.0]], np.float32), "ASYMMETRIC", (1, 4),
    ...                                 "uint4", 0, 15)
    (array([0.26666668], dtype=float32), array([1.1333334], dtype=float32))
    """
    x = read_input(input)
    lo, scale, qmin, qmax = _asymmetric_scale(x, mapping_type, block_size, target_dtype, quant_min, quant_max, eps)
    mid = _F32((qmax + qmin + 1) / 2)
    with np.errstate(invalid="ignore", over="ignore"):
        zp = (lo.astype(_F32) + (scale.astype(_F32) * mid).astype(x.dtype).astype(_F32)).astype(x.dtype)
    return (scale.astype(_out(scale_dtype, x.dtype, "scale_dtype")),
            zp.astype(_out(zero_point_dtype, x.dtype, "zero_point_dtype")))


@fill_doc(**_DOCS)
def _choose_qparams_affine_dont_preserve_zero(input: npt.ArrayLike, mapping_type, block_size, target_dtype,
                                              quant_min: int | None = None, quant_max: int | None = None,
                                              eps: float | None = None, scale_dtype=None,
                                              zero_point_dtype="int32") -> tuple[np.ndarray, np.ndarray]:
    """The asymmetric scale and ``clamp(qmin - rne(min / scale), qmin, qmax)``, the range not widened to 0.

    Parameters
    ----------
    input : numpy.ndarray
        float32, float16 or bfloat16; the arithmetic is in its dtype.
    mapping_type : str or MappingType
        ``"ASYMMETRIC"`` only.
    {asymmetric_params}
    scale_dtype : str or dtype, optional
        Default: the input's dtype.
    zero_point_dtype : str or dtype
        Default int32 (a NaN zero point becomes -2**31, as torch's cast gives on x86).

    {qparams_returns}

    Examples
    --------
    >>> import numpy as np
    >>> _choose_qparams_affine_dont_preserve_zero(np.array([[1.0, 2.0, 3.0, 4.0]], np.float32), "ASYMMETRIC",
    ...                                           (1, 4), "uint8")
    (array([0.01176471], dtype=float32), array([0], dtype=int32))
    """
    x = read_input(input)
    lo, scale, qmin, qmax = _asymmetric_scale(x, mapping_type, block_size, target_dtype, quant_min, quant_max, eps)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        q = np.rint((lo.astype(_F32) / scale.astype(_F32)).astype(x.dtype).astype(_F32))
        zp = np.clip((_F32(qmin) - q).astype(x.dtype).astype(_F32), qmin, qmax)
        zdt = np.dtype(dtype_key(zero_point_dtype, "zero_point_dtype",
                                 {"int32": "int32", "int8": "int8", "uint8": "uint8", "int16": "int16",
                                  "float32": "float32"}))
        zp = np.where(np.isnan(zp), np.iinfo(np.int32).min if zdt.kind == "i" else np.nan, zp)
    return scale.astype(_out(scale_dtype, x.dtype, "scale_dtype")), zp.astype(zdt)


def _out(dtype, default: np.dtype, name: str) -> np.dtype:
    return default if dtype is None else dtype_key(dtype, name, _OUT)


def _floatx(ebits, mbits) -> str:
    key = (check_int("ebits", ebits), check_int("mbits", mbits))
    if key not in _FLOATX:
        raise ValueError(f"ebits={ebits!r}, mbits={mbits!r}: the floatx formats here are (ebits, mbits) = "
                         f"{sorted(_FLOATX)} (fp6 e3m2, fp6 e2m3, fp4 e2m1)")
    return _FLOATX[key]


def _rows(tensor) -> np.ndarray:
    x = read_input(tensor, "tensor")
    if x.ndim != 2:
        raise ValueError(f"tensor has shape {x.shape}; torchao's floatx helpers take a 2-d tensor (one scale per row)")
    return x


def _choose_qparams_affine_floatx(tensor: npt.ArrayLike, ebits: int, mbits: int) -> np.ndarray:
    """One scale per row: ``max(amax(|x|), 1e-12) / max_normal`` in float32, cast to the tensor's dtype.

    Parameters
    ----------
    tensor : numpy.ndarray
        2-d float32, float16 or bfloat16.
    ebits, mbits : int
        ``(3, 2)``, ``(2, 3)`` or ``(2, 1)``.

    Returns
    -------
    numpy.ndarray
        One scale per row, in the tensor's dtype.

    Examples
    --------
    >>> import numpy as np
    >>> _choose_qparams_affine_floatx(np.array([[1.0, -56.0], [0.0, 0.0]], np.float32), 3, 2)
    array([2.0000000e+00, 3.5714287e-14], dtype=float32)
    """
    x = _rows(tensor)
    _floatx(ebits, mbits)
    bias = (1 << (ebits - 1)) - 1
    max_normal = 2.0 ** ((1 << ebits) - 1 - bias) * (((1 << (mbits + 1)) - 1) / 2 ** mbits)
    amax = np.abs(x.astype(_F32)).max(axis=1)
    return (np.maximum(amax, _F32(1e-12)) / _F32(max_normal)).astype(x.dtype)


def _quantize_affine_floatx(tensor: npt.ArrayLike, scale: npt.ArrayLike, ebits: int, mbits: int) -> np.ndarray:
    """``floatx(x / scale)`` per row (float32 quotient, RNE, saturated): uint8 codes ``00SEEEMM``.

    Parameters
    ----------
    tensor : numpy.ndarray
        2-d float32, float16 or bfloat16, finite.
    scale : numpy.ndarray
        One positive finite value per row.
    ebits, mbits : int
        Exponent and mantissa bits: ``(3, 2)``, ``(2, 3)`` or ``(2, 1)``.

    Returns
    -------
    numpy.ndarray
        uint8 codes in the low bits.

    Examples
    --------
    >>> import numpy as np
    >>> _quantize_affine_floatx(np.array([[1.0, -56.0, 100.0]], np.float32), np.float32([2.0]), 3, 2)
    array([[ 8, 63, 31]], dtype=uint8)
    """
    x = _rows(tensor)
    fmt = _floatx(ebits, mbits)
    if not np.isfinite(x.astype(_F32)).all():
        raise ValueError("tensor holds NaN or inf, which torchao's floatx encoding has no code for")
    s = np.asarray(check_finite("scale", scale, np.float32, positive=True), _F32).reshape(-1)
    return api.quantize(x.astype(_F32), s, fmt, axis=0, saturate=True).view(np.uint8)


def _dequantize_affine_floatx(tensor: npt.ArrayLike, scale: npt.ArrayLike, ebits: int, mbits: int,
                              output_dtype="float32") -> np.ndarray:
    """``value(code) * scale`` per row (float32), cast to ``output_dtype``.

    Parameters
    ----------
    tensor : numpy.ndarray
        2-d uint8 codes of :func:`_quantize_affine_floatx`.
    scale : numpy.ndarray
        One scale per row.
    ebits, mbits : int
        Exponent and mantissa bits: ``(3, 2)``, ``(2, 3)`` or ``(2, 1)``.
    output_dtype : str or dtype
        ``"float32"`` (default), ``"float16"`` or ``"bfloat16"``.

    Returns
    -------
    numpy.ndarray
        The dequantized tensor.

    Examples
    --------
    >>> import numpy as np
    >>> _dequantize_affine_floatx(np.array([[8, 63, 31]], np.uint8), np.float32([2.0]), 3, 2)
    array([[  1., -56.,  56.]], dtype=float32)
    """
    fmt = _floatx(ebits, mbits)
    q = np.asarray(tensor)
    if q.dtype != np.uint8 or q.ndim != 2:
        raise TypeError(f"tensor has dtype {q.dtype} and shape {q.shape}; pass the 2-d uint8 codes")
    bits = 1 + ebits + mbits
    if (q >> bits).any():
        raise ValueError(f"tensor holds codes above {2 ** bits - 1}, which {fmt} does not have")
    s = np.asarray(as_real_array("scale", scale), _F32).reshape(-1)
    out = dtype_key(output_dtype, "output_dtype", _OUT)
    return api.dequantize(q.view(getattr(ml_dtypes, fmt)), s, axis=0, out_dtype=out)
