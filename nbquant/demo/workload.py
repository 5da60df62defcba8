"""What ``nbquant demo`` quantizes: its weight-like input matrix and its schemes, with their scales and codecs.

The schemes' scales come from each block of the whole matrix (:func:`scheme_params`, NumPy);
:func:`scheme_codec` gives the calls that quantize rows of the matrix on a backend and decode
them with ``reference``. :mod:`nbquant.demo` runs them.

Examples
--------
>>> from nbquant.demo.workload import make_weights, schemes
>>> make_weights(2, 64).shape, len(schemes(64))
((2, 64), 10)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import nbquant

__all__ = ["DEFAULT_SIZE", "T_DOF", "Scheme", "make_weights", "scheme_codec", "scheme_params", "schemes"]

#: Rows and columns of the default input (4096 x 4096 float32, 64 MiB).
DEFAULT_SIZE = (4096, 4096)
#: Degrees of freedom of the Student-t input: few, so the tails are heavy (an even number, see make_weights).
T_DOF = 4
#: NVFP4's default global scale is ``amax / (6 * 448)``: e2m1's largest value times E4M3's.
_NVFP4_GLOBAL_DIVISOR = 6 * 448


@dataclass(frozen=True)
class Scheme:
    """One quantization scheme of the demo.

    Attributes
    ----------
    name : str
        Row label, e.g. ``"int8 per-channel"``; the same for every input size.
    dtype : str
        nbquant format name.
    layout : str
        The layout arguments as passed to :func:`nbquant.quantize`, for display.
    kwargs : dict
        ``axis``, ``block_size`` and ``packed`` arguments of :func:`nbquant.quantize`
        and :func:`nbquant.dequantize`.
    asymmetric : bool
        Whether the scale and zero point come from ``[min, max]`` instead of ``amax``.
    divisor : float
        ``scale = amax / divisor`` for symmetric schemes.
    block_format : str or None
        ``"mx"`` or ``"nvfp4"``: a scaled block format whose kernel computes its own
        block scales (:func:`nbquant.quantize_mx`, :func:`nbquant.quantize_nvfp4`);
        ``dtype`` is then the MX format name.

    Examples
    --------
    >>> s = schemes(4096)[1]
    >>> s.name, s.dtype, s.layout, s.kwargs
    ('int8 per-channel', 'int8', 'axis=0', {'axis': 0})
    """

    name: str
    dtype: str
    layout: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    asymmetric: bool = False
    divisor: float = 1.0
    block_format: str | None = None


def make_weights(rows: int = DEFAULT_SIZE[0], cols: int = DEFAULT_SIZE[1], seed: int = 0) -> np.ndarray:
    """A deterministic weight-like float32 matrix.

    Student-t samples with :data:`T_DOF` degrees of freedom, scaled by 0.02 and by a
    per-row factor drawn log-uniformly from [0.1, 10], so row magnitudes differ by up to
    100x and per-channel scales pay off. The samples are ``z / sqrt(c / T_DOF)`` with
    ``z`` standard normal and ``c`` chi-squared with ``T_DOF`` degrees of freedom, drawn
    as twice a sum of ``T_DOF / 2`` standard exponentials, all in float32 (about three times
    faster than :meth:`numpy.random.Generator.standard_t`, which works in float64).

    Parameters
    ----------
    rows, cols : int
        Shape of the matrix.
    seed : int
        Seed of the :class:`numpy.random.Generator` (PCG64).

    Returns
    -------
    numpy.ndarray
        C-contiguous float32 array of shape ``(rows, cols)``.

    Examples
    --------
    >>> w = make_weights(4, 8)
    >>> w.shape, w.dtype
    ((4, 8), dtype('float32'))
    >>> bool((make_weights(4, 8) == w).all())
    True
    """
    rng = np.random.default_rng(seed)
    row_factor = (0.02 * 10.0 ** rng.uniform(-1.0, 1.0, size=(rows, 1))).astype(np.float32)
    w = rng.standard_normal((rows, cols), dtype=np.float32)
    half_chi2 = rng.standard_exponential((rows, cols), dtype=np.float32)
    for _ in range(T_DOF // 2 - 1):
        half_chi2 += rng.standard_exponential((rows, cols), dtype=np.float32)
    np.divide(np.float32(T_DOF / 2), half_chi2, out=half_chi2)  # T_DOF / c
    w *= np.sqrt(half_chi2, out=half_chi2)
    w *= row_factor
    return w


def _group_size(cols: int, preferred: int = 128) -> int:
    """``preferred`` if it divides ``cols``, else the largest even divisor of ``cols`` below it."""
    for g in range(min(preferred, cols), 1, -1):
        if cols % g == 0 and g % 2 == 0:
            return g
    raise ValueError(f"{cols} columns have no even divisor; the packed int4 scheme needs an even column count")


def schemes(cols: int = DEFAULT_SIZE[1]) -> list[Scheme]:
    """The demo's schemes for a matrix with ``cols`` columns (an even number).

    The torchao-style group is 128 columns when ``cols`` is a multiple of 128 (else the
    largest even divisor of ``cols`` below 128); the ONNX block is 32 (or ``cols`` if
    smaller), with a partial last block when 32 does not divide ``cols``. The MX schemes
    need ``cols`` to be a multiple of 32 and NVFP4 a multiple of 16; they are left out
    otherwise.

    Examples
    --------
    >>> [s.name for s in schemes(4096)]  # doctest: +NORMALIZE_WHITESPACE
    ['int8 per-tensor', 'int8 per-channel', 'uint8 asym per-tensor', 'int4 group packed',
     'int4 onnx blocked', 'int2 per-channel', 'fp8 e4m3 per-channel', 'mxfp8 e4m3', 'mxfp4', 'nvfp4']
    >>> schemes(64)[3].layout
    'block_size=(1, 64), packed'
    """
    if cols < 2 or cols % 2:
        raise ValueError(f"the demo needs an even number of columns >= 2 (packed int4); got {cols}")
    g = _group_size(cols)
    b = min(32, cols)
    return [
        Scheme("int8 per-tensor", "int8", "per-tensor", {}, divisor=127),
        Scheme("int8 per-channel", "int8", "axis=0", {"axis": 0}, divisor=127),
        Scheme("uint8 asym per-tensor", "uint8", "per-tensor, zero_point", {}, asymmetric=True),
        # torchao symmetric: scale = amax / ((qmax - qmin) / 2).
        Scheme("int4 group packed", "int4", f"block_size=(1, {g}), packed",
               {"block_size": (1, g), "packed": True}, divisor=7.5),
        Scheme("int4 onnx blocked", "int4", f"axis=1, block_size={b}", {"axis": 1, "block_size": b}, divisor=7),
        Scheme("int2 per-channel", "int2", "axis=0", {"axis": 0}, divisor=1),
        Scheme("fp8 e4m3 per-channel", "float8_e4m3fn", "axis=0", {"axis": 0}, divisor=448),
        *_block_schemes(cols),
    ]


def _block_schemes(cols: int) -> list[Scheme]:
    """MX (blocks of 32) and NVFP4 (blocks of 16) schemes, when the column count allows them."""
    blocks = [Scheme("mxfp8 e4m3", "mxfp8_e4m3", "block 32, E8M0 scale", {"block_size": 32}, block_format="mx"),
              Scheme("mxfp4", "mxfp4", "block 32, E8M0, packed", {"block_size": 32}, block_format="mx"),
              Scheme("nvfp4", "nvfp4", "block 16, E4M3, packed", {"block_size": 16},
                     block_format="nvfp4")]
    return [s for s in blocks if cols % s.kwargs["block_size"] == 0]


def _block_reduce(ufunc: np.ufunc, x: np.ndarray, kwargs: dict[str, Any]) -> np.ndarray:
    """Reduce ``x`` (2-D) with ``ufunc`` over each block of the scheme's layout, giving the scale's shape."""
    axis, block = kwargs.get("axis"), kwargs.get("block_size")
    if isinstance(block, tuple):
        (br, bc), (r, c) = block, x.shape
        return ufunc.reduce(x.reshape(r // br, br, c // bc, bc), axis=(1, 3))
    if block is not None:
        starts = np.arange(0, x.shape[axis], block)
        return ufunc.reduceat(x, starts, axis=axis)
    if axis is not None:
        return ufunc.reduce(x, axis=1 - axis)
    return ufunc.reduce(x, axis=None)


def scheme_params(x: np.ndarray, scheme: Scheme) -> tuple[np.ndarray, np.ndarray | None]:
    """Scale (and zero point) of ``scheme`` for ``x``, from the block absmax or min/max.

    Symmetric: ``scale = amax / divisor``. Asymmetric (uint8): the range ``[lo, hi]``
    is widened to contain 0, ``scale = (hi - lo) / 255`` and
    ``zero_point = clip(rne(-lo / scale), 0, 255)``. A block of zeros gets scale 1.
    Every scale that is not per-tensor has one entry per row of ``x`` along its first axis.

    Examples
    --------
    >>> x = np.array([[-1.0, 2.0], [0.5, -0.25]], np.float32)
    >>> s, zp = scheme_params(x, schemes(2)[1])
    >>> s * 127, zp
    (array([2. , 0.5], dtype=float32), None)
    """
    tiny = np.finfo(np.float32).smallest_normal
    lo = _block_reduce(np.minimum, x, scheme.kwargs).astype(np.float32)
    hi = _block_reduce(np.maximum, x, scheme.kwargs).astype(np.float32)
    if scheme.asymmetric:
        lo, hi = np.minimum(lo, 0), np.maximum(hi, 0)
        scale = np.maximum((hi - lo) / np.float32(255), tiny).astype(np.float32)
        zp = np.clip(np.rint(-lo / scale), 0, 255).astype(np.uint8)
        return scale, zp
    amax = np.maximum(hi, -lo)  # max |x| without a temporary |x| as large as x
    scale = np.where(amax > 0, np.maximum(amax / np.float32(scheme.divisor), tiny), np.float32(1))
    return scale.astype(np.float32), None



def scheme_codec(x: np.ndarray, scheme: Scheme) -> tuple[Callable[[slice, str], Any], Callable[[Any, slice], Any], int]:
    """``(quantize, dequantize, param_bytes)`` of ``scheme`` on ``x``.

    ``quantize(rows, backend)`` quantizes ``x[rows]`` with the scales of the whole ``x``
    (MX and NVFP4 kernels compute their block scales; NVFP4 gets the global scale of the
    whole ``x``, its default ``amax / (6 * 448)``, from NumPy, which spares the compiled
    backends a reduction kernel). ``dequantize(result, rows)`` decodes such a result with
    ``reference``. ``param_bytes``: the scales and zero points that ``quantize`` reads.
    """
    kwargs = scheme.kwargs
    if scheme.block_format == "mx":
        return (lambda rows, b: nbquant.quantize_mx(x[rows], scheme.dtype, backend=b, **kwargs),
                lambda bq, rows: bq.dequantize(backend="reference"), 0)
    if scheme.block_format == "nvfp4":
        amax = np.float32(max(x.max(), -x.min()))
        g = amax / np.float32(_NVFP4_GLOBAL_DIVISOR) if amax > 0 else np.float32(1)
        return (lambda rows, b: nbquant.quantize_nvfp4(x[rows], global_scale=g, backend=b, **kwargs),
                lambda bq, rows: bq.dequantize(backend="reference"), 0)
    scale, zp = scheme_params(x, scheme)
    dq_kwargs = {k: v for k, v in kwargs.items() if k != "packed"}

    def params(rows: slice) -> list[np.ndarray | None]:
        """Scale and zero point of ``x[rows]``: per-row ones sliced, per-tensor ones as they are."""
        return [a[rows] if a is not None and a.ndim else a for a in (scale, zp)]

    def quantize(rows: slice, backend: str) -> np.ndarray:
        s, z = params(rows)
        return nbquant.quantize(x[rows], s, scheme.dtype, zero_point=z, backend=backend, **kwargs)

    def dequantize(codes: np.ndarray, rows: slice) -> np.ndarray:
        s, z = params(rows)
        return nbquant.dequantize(codes, s, zero_point=z, dtype=scheme.dtype, backend="reference", **dq_kwargs)

    return quantize, dequantize, scale.nbytes + (zp.nbytes if zp is not None else 0)

