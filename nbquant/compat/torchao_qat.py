"""torchao 0.18's fake quantization and the qparams helpers a user calls next, on NumPy arrays.

* :func:`_fake_quantize_affine`: ``quantize_affine`` then ``dequantize_affine`` without
  the integer cast, for the INT, FLOAT (tinygemm) and NONE zero-point domains; NaN
  stays NaN (torchao never casts it to an integer here).
* :func:`_fake_quantize_affine_cachemask`: the same and the mask ``qmin <= q <= qmax``
  of the clamped codes (False exactly where the code is NaN).
* :func:`choose_qparams_affine_with_min_max`: the scales and zero points of given
  per-block minima and maxima (an observer's running min/max).

The other qparams variants of ``quant_primitives`` are refused by functions of their
names that say what to use instead (docs/compat/torchao.md, "Refused").
"""

from __future__ import annotations

import enum

import numpy as np
import numpy.typing as npt

from .._docstrings import fill_doc
from ..validation import check_finite, show
from . import torchao_affine as _ao
from .torchao_tinygemm import _dequantize_affine_tinygemm, _quantize_affine_tinygemm

__all__ = [
    "ZeroPointDomain",
    "_fake_quantize_affine",
    "_fake_quantize_affine_cachemask",
    "choose_qparams_affine_with_min_max",
    "_choose_qparams_and_quantize_affine_hqq",
    "_choose_qparams_gguf",
    "_quantize_gguf",
    "_dequantize_gguf",
]


class ZeroPointDomain(enum.Enum):
    """The domain of torchao's zero point (``ZeroPointDomain``): INT codes, FLOAT values, or NONE."""

    INT = 1
    FLOAT = 2
    NONE = 3


def _domain(zero_point_domain) -> ZeroPointDomain:
    name = getattr(zero_point_domain, "name", zero_point_domain)
    if zero_point_domain is None:
        raise ValueError("zero_point_domain=None: Please use ZeroPointDomain.NONE instead of None")
    if not isinstance(name, str) or name not in ZeroPointDomain.__members__:
        raise ValueError(f"zero_point_domain={zero_point_domain!r}: use ZeroPointDomain.INT, FLOAT or NONE")
    return ZeroPointDomain[name]


def _fake(input, block_size, scale, zero_point, quant_dtype, quant_min, quant_max, zero_point_domain):
    domain = _domain(zero_point_domain)
    x = _ao.read_input(input)
    if domain is ZeroPointDomain.NONE:
        if zero_point is not None:
            raise ValueError("zero_point should be None when zero_point_domain is NONE")
        q = _ao._quantize_affine_no_zero_point(x, block_size, scale, None, quant_dtype, quant_min, quant_max)
        dq = _ao._dequantize_affine_no_zero_point(q, block_size, scale, None, quant_dtype, quant_min, quant_max,
                                                  output_dtype=str(x.dtype))
        # torchao's float codes keep rne(-0.3) = -0.0 (clamp keeps it too), and -0.0 * scale is -0.0; integer codes
        # cannot. The zeros of a negative x whose rne is -0.0: codes of a signed range, where -1 is not clamped to 0
        negative = np.signbit(x.astype(np.float32)) & (dq == 0)
        if negative.any():
            signed = _ao._quantize_affine_no_zero_point(x, block_size, scale, None, "int16")
            dq[negative & (signed == 0)] = -0.0
    elif domain is ZeroPointDomain.FLOAT:
        q = _quantize_affine_tinygemm(x, block_size, scale, zero_point, quant_dtype, quant_min, quant_max)
        dq = _dequantize_affine_tinygemm(q, block_size, scale, zero_point, quant_dtype, quant_min, quant_max,
                                         output_dtype=str(x.dtype))
    else:
        q = _ao.quantize_affine(x, block_size, scale, zero_point, quant_dtype, quant_min, quant_max)
        dq = _ao.dequantize_affine(q, block_size, scale, zero_point, quant_dtype, quant_min, quant_max,
                                   output_dtype=str(x.dtype))
    nan = np.isnan(x.astype(np.float32))
    if nan.any():  # torchao keeps NaN (no integer cast in fake quantization); nbquant's codes made it the zero point
        dq[nan] = np.nan
    return dq, ~nan


#: The parameters of :func:`_fake_quantize_affine` and :func:`_fake_quantize_affine_cachemask`
#: (:func:`nbquant._docstrings.fill_doc`).
_FAKE_PARAMETERS = _ao.FLOAT_INPUT + """scale : numpy.ndarray
    As in :func:`~nbquant.compat.torchao.quantize_affine`.
zero_point : numpy.ndarray or None
    As in :func:`~nbquant.compat.torchao.quantize_affine`; None with ``ZeroPointDomain.NONE``,
    float zero points with ``ZeroPointDomain.FLOAT``.
quant_dtype : str or dtype
    As ``output_dtype`` of :func:`~nbquant.compat.torchao.quantize_affine`.
quant_min, quant_max : int, optional
    As in :func:`~nbquant.compat.torchao.quantize_affine`.
zero_point_domain : ZeroPointDomain
    ``INT`` (default), ``FLOAT`` (tinygemm) or ``NONE``; the member or its name.
"""


@fill_doc(fake_parameters=_FAKE_PARAMETERS)
def _fake_quantize_affine(input: npt.ArrayLike, block_size, scale: npt.ArrayLike, zero_point: npt.ArrayLike | None,
                          quant_dtype, quant_min: int | None = None, quant_max: int | None = None,
                          zero_point_domain=ZeroPointDomain.INT) -> np.ndarray:
    """Fake-quantize as torchao: quantize, then dequantize to the input's dtype, without the integer cast.

    Parameters
    ----------
    {fake_parameters}

    Returns
    -------
    numpy.ndarray
        The fake-quantized values, the input's shape and dtype; NaN stays NaN.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.26, -1.0, 7.0, np.nan]], np.float32)
    >>> _fake_quantize_affine(x, (1, 4), np.float32(0.5), np.int32(1), "int8", -4, 3)
    array([[ 0.5, -1. ,  1. ,  nan]], dtype=float32)
    """
    return _fake(input, block_size, scale, zero_point, quant_dtype, quant_min, quant_max, zero_point_domain)[0]


@fill_doc(fake_parameters=_FAKE_PARAMETERS)
def _fake_quantize_affine_cachemask(input: npt.ArrayLike, block_size, scale: npt.ArrayLike,
                                    zero_point: npt.ArrayLike | None, quant_dtype, quant_min: int | None = None,
                                    quant_max: int | None = None,
                                    zero_point_domain=ZeroPointDomain.INT) -> tuple[np.ndarray, np.ndarray]:
    """Fake-quantize as :func:`_fake_quantize_affine`, and return torchao's mask of the codes in range.

    The mask is ``(q >= quant_min) & (q <= quant_max)``; the codes are clamped, so it is
    False exactly where the input is NaN.

    Parameters
    ----------
    {fake_parameters}

    Returns
    -------
    dq : numpy.ndarray
        The fake-quantized values, as :func:`_fake_quantize_affine` returns them.
    mask : numpy.ndarray
        bool, the input's shape.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[0.26, np.nan]], np.float32)
    >>> _fake_quantize_affine_cachemask(x, (1, 2), np.float32(0.5), np.int32(0), "int8")
    (array([[0.5, nan]], dtype=float32), array([[ True, False]]))
    """
    return _fake(input, block_size, scale, zero_point, quant_dtype, quant_min, quant_max, zero_point_domain)


def choose_qparams_affine_with_min_max(min_val: npt.ArrayLike, max_val: npt.ArrayLike, mapping_type, block_size,
                                       target_dtype, quant_min: int | None = None, quant_max: int | None = None,
                                       eps: float | None = None, scale_dtype=None,
                                       zero_point_dtype=None) -> tuple[np.ndarray, np.ndarray]:
    """Choose scales and zero points from given minima and maxima (one per block), as torchao computes them.

    The numbers are those of ``choose_qparams_affine`` on the blocks' minima and maxima.

    Parameters
    ----------
    min_val, max_val : numpy.ndarray
        float32, the same shape: one value per block (an observer's running min/max).
    mapping_type : str or MappingType
        As in :func:`~nbquant.compat.torchao.choose_qparams_affine`.
    block_size : tuple of int
        Unused by torchao beyond its signature; any tuple.
    target_dtype : str or dtype
        As in :func:`~nbquant.compat.torchao.choose_qparams_affine`.
    quant_min, quant_max : int, optional
        As in :func:`~nbquant.compat.torchao.choose_qparams_affine`.
    eps : float, optional
        As in :func:`~nbquant.compat.torchao.choose_qparams_affine`.
    scale_dtype : str or dtype, optional
        As in :func:`~nbquant.compat.torchao.choose_qparams_affine`.
    zero_point_dtype : str or dtype, optional
        Default: int32 for ASYMMETRIC, float32 (torchao's ``full_like(scale)``) otherwise.

    Returns
    -------
    scale : numpy.ndarray
        float32, ``min_val``'s shape.
    zero_point : numpy.ndarray
        ``zero_point_dtype``, ``min_val``'s shape.

    Examples
    --------
    >>> import numpy as np
    >>> choose_qparams_affine_with_min_max(np.array([-1.0, 0.5], np.float32), np.array([3.0, 2.0], np.float32),
    ...                                    "ASYMMETRIC", (1, 8), "uint8")
    (array([0.01568628, 0.00784314], dtype=float32), array([64,  0], dtype=int32))
    """
    lo = check_finite("min_val", min_val)
    hi = check_finite("max_val", max_val)
    for name, given in (("min_val", min_val), ("max_val", max_val)):
        if isinstance(given, np.ndarray) and given.dtype != np.float32:
            raise TypeError(f"{name} has dtype {given.dtype} ({name}={show(given)}); pass float32 (torchao computes "
                            "the qparams in the dtype of min_val and max_val)")
    if lo.shape != hi.shape:
        raise ValueError(f"min_val has shape {lo.shape} (min_val={show(min_val)}) and max_val {hi.shape}; they must "
                         "have the same shape")
    if (hi < lo).any():
        raise ValueError(f"max_val must be >= min_val; max_val={show(max_val)}, min_val={show(min_val)}")
    # each block's min and max, side by side: choose_qparams_affine reduces them to themselves
    pairs = np.stack([lo.reshape(-1), hi.reshape(-1)], axis=1)
    if zero_point_dtype is None:  # torchao: int32 for ASYMMETRIC, else the float zero points full_like(scale) made
        zero_point_dtype = "int32" if getattr(mapping_type, "name", mapping_type) == "ASYMMETRIC" else "float32"
    s, zp = _ao.choose_qparams_affine(pairs, mapping_type, (1, 2), target_dtype, quant_min, quant_max, eps=eps,
                                      scale_dtype=scale_dtype, zero_point_dtype=zero_point_dtype)
    return s.reshape(lo.shape), zp.reshape(lo.shape)


def _refuse(name: str, instead: str):
    def refused(*args, **kwargs):
        raise NotImplementedError(f"torchao's {name} is not reproduced by nbquant.compat.torchao; {instead} "
                                  "(docs/compat/torchao.md, 'Refused')")

    refused.__name__ = refused.__qualname__ = name
    refused.__doc__ = f"""Refuse the call: raise ``NotImplementedError``; {instead}.

    Parameters
    ----------
    *args, **kwargs
        torchao's arguments, not read.

    Raises
    ------
    NotImplementedError
        Always, saying what to use instead.
    """
    return refused


_choose_qparams_and_quantize_affine_hqq = _refuse(
    "_choose_qparams_and_quantize_affine_hqq", "HQQ's iterative optimizer is outside nbquant's kernels: use "
    "choose_qparams_affine + quantize_affine")
_choose_qparams_gguf = _refuse("_choose_qparams_gguf", "GGUF's super-block format is not implemented")
_quantize_gguf = _refuse("_quantize_gguf", "GGUF's super-block format is not implemented")
_dequantize_gguf = _refuse("_dequantize_gguf", "GGUF's super-block format is not implemented")
