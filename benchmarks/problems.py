"""The arrays the ratio benchmark's cases work on: :class:`Problem` and one setup per kind of case.

Every setup is called as ``setup(n, rng)`` (after binding its case's options) and returns
a :class:`Problem` of ``n`` elements: a 2-D float32 input with rows of :data:`COLUMNS`
(or its codes, for a dequantize case), a preallocated output, the scales and the
keyword arguments nbquant is called with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import nbquant

#: Columns of the 2-D benchmark arrays (rows = size // COLUMNS).
COLUMNS = 4096

#: The timed call of one contender: no arguments, returns its result (compared with nbquant's).
Bench = Callable[[], object]


@dataclass
class Problem:
    """The arrays of one case at one size.

    Attributes
    ----------
    src : numpy.ndarray
        The array the operation reads (float32 input or codes).
    out : numpy.ndarray
        A preallocated result (used by ``out=`` variants and the roofline).
    scale : numpy.ndarray
        Block-grid float32 scales.
    block : tuple of int
        The block of one scale, ``(rows, columns)``.
    qrange : tuple of int
        ``(qmin, qmax)`` of the format.
    kwargs : dict
        Keyword arguments for nbquant (``axis``, ``block_size``, ``packed``, ``dtype``).
    codes : numpy.ndarray
        Unpacked int8 codes (for peers that dequantize unpacked codes).
    zero_point : numpy.ndarray
        int32 zero points of the scale grid's shape (asymmetric static cases; None otherwise).
    """

    src: np.ndarray
    out: np.ndarray
    scale: np.ndarray
    block: tuple[int, int]
    qrange: tuple[int, int]
    kwargs: dict
    codes: np.ndarray | None = None
    zero_point: np.ndarray | None = None

    @property
    def reduces(self) -> bool:
        """Whether the case only reads ``src`` (calibrators): ``out`` then has fewer dimensions.

        ``out`` holds the result of the roofline's ``max |x|`` and is not counted in :attr:`nbytes`.
        """
        return self.out.ndim < self.src.ndim

    @property
    def nbytes(self) -> int:
        """Bytes read plus bytes written by one call (scales excluded); bytes read only when it :attr:`reduces`."""
        return self.src.nbytes + (0 if self.reduces else self.out.nbytes)


def grid_shape(p: Problem) -> tuple[int, int]:
    """The shape of the scale grid of ``p`` (one scale per block of the output)."""
    r, c = p.out.shape
    return (r // p.block[0], 1 if p.block[1] == c else c // p.block[1])


def quantize_block_format(x, fmt: str, backend: str | None = None):
    """``nbquant.quantize_nvfp4`` for ``"nvfp4"``, else ``nbquant.quantize_mx`` of format ``fmt``."""
    if fmt == "nvfp4":
        return nbquant.quantize_nvfp4(x, backend=backend)
    return nbquant.quantize_mx(x, fmt, backend=backend)


def _shape(n: int) -> tuple[int, int]:
    """A 2-D shape of ``n`` elements with rows of :data:`COLUMNS` (fewer for tiny sizes)."""
    cols = min(COLUMNS, n)
    return n // cols, cols


def _random_input(n: int, rng: np.random.Generator) -> np.ndarray:
    """Standard normal float32 values of the shape :func:`_shape` gives ``n``."""
    return rng.standard_normal(_shape(n), dtype=np.float32)


def _is_float(dtype: str) -> bool:
    return nbquant.get_format(dtype).is_float


def _absmax_scale(x: np.ndarray, block: tuple[int, int], qmax: int) -> np.ndarray:
    """Symmetric scales ``absmax / qmax`` over blocks of ``x``, shaped as the block grid."""
    r, c = x.shape
    br, bc = block
    a = np.abs(x).reshape(r // br, br, c // bc, bc).max(axis=(1, 3))
    return np.maximum(a / np.float32(qmax), np.float32(1e-8)).astype(np.float32)


def _minmax_qparams(x: np.ndarray, block: tuple[int, int], qmin: int, qmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Asymmetric scales ``(max - min) / (qmax - qmin)`` and int32 zero points over blocks of ``x`` (grid-shaped)."""
    r, c = x.shape
    br, bc = block
    v = x.reshape(r // br, br, c // bc, bc)
    lo, hi = np.minimum(v.min(axis=(1, 3)), np.float32(0)), np.maximum(v.max(axis=(1, 3)), np.float32(0))
    s = np.maximum((hi - lo) / np.float32(qmax - qmin), np.float32(1e-8)).astype(np.float32)
    return s, np.clip(qmin - np.rint(lo / s), qmin, qmax).astype(np.int32)


def _block(shape: tuple[int, int], granularity: str) -> tuple[tuple[int, int], dict]:
    """The scale block and nbquant layout keywords of ``"tensor"``, ``"axis0"``, ``"axis1"`` or ``"gN"``."""
    r, c = shape
    if granularity == "tensor":
        return (r, c), {}
    if granularity == "axis0":
        return (1, c), {"axis": 0}
    if granularity == "axis1":
        return (r, 1), {"axis": 1}
    g = min(int(granularity[1:]), c)
    return (1, g), {"block_size": (1, g)}


def quantize_problem(n: int, rng: np.random.Generator, dtype: str, granularity: str,
                     packed: bool = False, zero_point: bool = False) -> Problem:
    """A float32 input with absmax scales (min/max scales and zero points with ``zero_point``), for a static quantize.

    Parameters
    ----------
    n : int
        Element count.
    rng : numpy.random.Generator
        Source of the input.
    dtype : str
        nbquant format (``"int8"``, ``"int4"``, ``"float8_e4m3fn"``, ...).
    granularity : str
        ``"tensor"``, ``"axis0"``, ``"axis1"`` or ``"gN"`` (blocks of N columns).
    packed : bool, optional
        Packed sub-byte codes (``8 // bits`` per byte; 6-bit: 4 codes in 3 bytes).
    zero_point : bool, optional
        Asymmetric: ``(max - min) / (qmax - qmin)`` scales and int32 zero points per block
        (integer formats only).

    Returns
    -------
    Problem
        ``out`` has the shape and dtype of nbquant's codes.
    """
    x = _random_input(n, rng)
    fmt = nbquant.get_format(dtype)
    qrange = (fmt.qmin, fmt.qmax) if not _is_float(dtype) else (-fmt.max_value, fmt.max_value)
    block, kwargs = _block(x.shape, granularity)
    zp = None
    if zero_point:
        scale, zp = _minmax_qparams(x, block, *qrange)
    else:
        scale = _absmax_scale(x, block, qrange[1])
    kwargs = {**kwargs, "dtype": dtype, "packed": packed}
    codes = nbquant.quantize(x, scale, dtype, zero_point=zp, **{k: v for k, v in kwargs.items() if k != "dtype"})
    return Problem(x, np.empty_like(codes), scale, block, qrange, kwargs, zero_point=zp)


def dequantize_problem(n: int, rng: np.random.Generator, dtype: str, granularity: str,
                       packed: bool = False, zero_point: bool = False) -> Problem:
    """Codes (packed or not) of a random input, for a dequantize case (arguments as :func:`quantize_problem`)."""
    p = quantize_problem(n, rng, dtype, granularity, packed, zero_point)
    layout = {k: v for k, v in p.kwargs.items() if k not in ("dtype", "packed")}
    layout["zero_point"] = p.zero_point
    q = nbquant.quantize(p.src, p.scale, dtype, packed=packed, **layout)
    codes = None if _is_float(dtype) else nbquant.quantize(p.src, p.scale, dtype, **layout).astype(np.int8)
    return Problem(q, np.empty(p.src.shape, np.float32), p.scale, p.block, p.qrange, p.kwargs, codes, p.zero_point)


def mx_problem(n: int, rng: np.random.Generator, fmt: str) -> Problem:
    """A float32 input for a fused block-format quantize (``"mxfp4"``, ``"mxfp8_e4m3"``, ``"nvfp4"``, ...)."""
    x = _random_input(n, rng)
    r = quantize_block_format(x, fmt)
    return Problem(x, np.empty_like(r.data), np.ones((1, 1), np.float32), (1, r.block_size), (0, 0),
                   {"dtype": fmt, "packed": r.packed, "block_formats": r})


def mx_dequantize_problem(n: int, rng: np.random.Generator, fmt: str) -> Problem:
    """Codes and block scales of a random input, for a block-format dequantize."""
    p = mx_problem(n, rng, fmt)
    r = p.kwargs["block_formats"]
    return Problem(r.data, np.empty(p.src.shape, np.float32), p.scale, p.block, p.qrange, p.kwargs)


def dynamic_problem(n: int, rng: np.random.Generator, dtype: str, group: int | str | None, mapping: str,
                    packed: bool = False) -> Problem:
    """A float32 input for :func:`nbquant.quantize_dynamic` with blocks ``(1, group)``.

    ``group`` None is a whole row (per-row), ``"tensor"`` the whole input (per-tensor:
    neither ``axis`` nor ``block_size``). ``p.scale`` holds nbquant's scales (for
    reference only: every contender chooses its own).
    """
    x = _random_input(n, rng)
    r, c = x.shape
    fmt = nbquant.get_format(dtype)
    if group == "tensor":
        block, layout = (r, c), {}
    else:
        g = c if group is None else min(group, c)
        block, layout = (1, g), {"block_size": (1, g)}
    kwargs = {"dtype": dtype, **layout, "mapping": mapping, "packed": packed}
    _, scale, _ = nbquant.quantize_dynamic(x, dtype, mapping=mapping, **layout)
    out = np.empty((r, fmt.packed_length(c)) if packed else (r, c), np.uint8)
    return Problem(x, out, scale.reshape(r // block[0], c // block[1]), block, (fmt.qmin, fmt.qmax), kwargs)


def nf4_problem(n: int, rng: np.random.Generator, block: int = 64, scale_block: int | None = None) -> Problem:
    """A float32 input for :func:`nbquant.quantize_nf4` (blocks of ``block`` over the flattened input).

    ``scale_block``: double quantization of the block scales in groups of that many
    (fewer when the input has fewer blocks), as ``quantize_nf4(scale_block_size=...)``.
    """
    x = _random_input(n, rng)
    r, c = x.shape
    kwargs = {"dtype": "nf4", "packed": True, "block_size": block}
    if scale_block is not None:
        kwargs["scale_block_size"] = min(scale_block, n // block)
    return Problem(x, np.empty((r, c // 2), np.uint8), np.ones((1, 1), np.float32), (1, block), (0, 15), kwargs)


def nf4_dequantize_problem(n: int, rng: np.random.Generator, block: int = 64) -> Problem:
    """NF4 codes (as rows of packed bytes) and float32 block scales of a random input, for an NF4 dequantize.

    ``p.kwargs["nf4"]`` is the :class:`nbquant.NF4Quantized` they come from.
    """
    p = nf4_problem(n, rng, block)
    nq = nbquant.quantize_nf4(p.src, block_size=block)
    r, c = p.src.shape
    return Problem(nq.data.reshape(r, c // 2), np.empty((r, c), np.float32), p.scale, p.block, p.qrange,
                   {**p.kwargs, "nf4": nq})


def calibration_problem(n: int, rng: np.random.Generator, calibrator: str) -> Problem:
    """A float32 batch for a calibrator's ``collect``: ``"max"`` (per tensor) or ``"histogram"``.

    ``p.out`` is one float32, the result of the roofline's ``max |x|``: the case only
    reads ``x`` (:attr:`Problem.reduces`). ``p.kwargs`` holds the calibrator and, for
    the histogram, its default bin count.
    """
    x = _random_input(n, rng)
    kwargs = {"calibrator": calibrator}
    if calibrator == "histogram":
        kwargs["num_bins"] = nbquant.modelopt.HistogramCalibrator().num_bins
    return Problem(x, np.empty(1, np.float32), np.ones((1, 1), np.float32), x.shape, (0, 0), kwargs)
