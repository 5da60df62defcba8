"""The ``nbquant demo`` workload: quantize a weight-like matrix with several schemes and check it against ``reference``.

Everything here returns data and prints nothing; :mod:`nbquant.cli` formats it.

The input (:func:`make_weights`) is deterministic: Student-t samples (heavy tails, like
trained weights) with a different magnitude per row, so per-channel scales matter.
Scales come from each block of the whole matrix (:func:`scheme_params`, NumPy). Each
backend quantizes the whole matrix (timed). The ``reference`` backend, the NumPy oracle,
quantizes only the rows :func:`check_step` picks, with the same scales; each
:class:`DemoRow` says whether the backend's codes of those rows equal it bit for bit, and
gives the accuracy of ``dequantize(quantize(x))`` on those rows.

Examples
--------
>>> from nbquant import demo
>>> rows = list(demo.run_demo(rows=8, cols=64, backends=["reference"], repeats=1))
>>> [r.scheme for r in rows] == [s.name for s in demo.schemes(64)]
True
>>> all(r.equals_reference for r in rows)
True
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

import nbquant

if TYPE_CHECKING:  # the GGUF job is imported by gguf_step only
    from nbquant.convert.gguf import GGUFReport

__all__ = [
    "CHECK_ELEMENTS",
    "DEFAULT_REPEATS",
    "DEFAULT_SIZE",
    "DemoRow",
    "GGUF_MODEL",
    "GGUF_SCHEME",
    "Scheme",
    "check_step",
    "compile_note",
    "default_backends",
    "gguf_step",
    "make_weights",
    "schemes",
    "scheme_params",
    "sqnr_db",
    "run_demo",
    "unavailable_backends",
]

#: Rows and columns of the default input (4096 x 4096 float32, 64 MiB).
DEFAULT_SIZE = (4096, 4096)
#: Timed quantize calls after the first one, per scheme and backend (their median is reported).
DEFAULT_REPEATS = 3
#: Degrees of freedom of the Student-t input: few, so the tails are heavy (an even number, see make_weights).
T_DOF = 4
#: At most this many values (whole rows, at least one) are checked against the reference backend.
CHECK_ELEMENTS = 2**20
#: The demo's GGUF model (:func:`nbquant.convert.gguf.write_synthetic_gguf`): Llama-shaped, BF16, 2 layers, 2.3 MiB.
GGUF_MODEL = {"hidden": 256, "intermediate": 512, "layers": 2, "vocab": 512}
#: The scheme of the demo's GGUF step: Q8_0, whose two kernels (quantize, and dequantize for the SQNR) compile
#: in a few seconds cold; Q4_K_M's Q4_K and Q6_K kernels take about a minute cold (docs/convert.md).
GGUF_SCHEME = "Q8_0"
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


@dataclass(frozen=True)
class DemoRow:
    """The result of one scheme on one backend.

    Attributes
    ----------
    scheme, layout, backend : str
        What ran.
    sqnr_db : float
        ``10 log10(sum(x^2) / sum((x - dequantize(quantize(x)))^2))`` over the checked
        rows (see :func:`check_step`), the codes dequantized by ``reference``.
    max_abs_error : float
        ``max |x - dequantize(quantize(x))|`` over the checked rows.
    first_call_s : float
        Time of the first ``quantize`` call of the whole matrix with this scheme on this
        backend (it includes the JIT compile, or the load from numba's cache, of a
        compiled backend).
    median_s : float
        Median time of ``repeats`` further ``quantize`` calls of the whole matrix.
    bytes_moved : int
        Bytes ``quantize`` reads and writes: input, scales, zero points and codes.
    equals_reference : bool
        Whether the codes (and block scales) of the checked rows equal the ``reference``
        backend's bit for bit.

    Examples
    --------
    >>> row = DemoRow("int8 per-tensor", "per-tensor", "cpu", 14.2, 0.04, 0.5, 0.004, 2 * 10**7, True)
    >>> round(row.gb_per_s, 6)
    5.0
    """

    scheme: str
    layout: str
    backend: str
    sqnr_db: float
    max_abs_error: float
    first_call_s: float
    median_s: float
    bytes_moved: int
    equals_reference: bool

    @property
    def gb_per_s(self) -> float:
        """``bytes_moved / median_s`` in GB/s (10^9 bytes per second)."""
        return self.bytes_moved / self.median_s / 1e9 if self.median_s > 0 else math.inf


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


def check_step(rows: int, cols: int) -> int:
    """The step ``k`` of the rows checked against ``reference``: rows ``0, k, 2k, ...`` of the matrix.

    The smallest step that keeps the checked values to at most :data:`CHECK_ELEMENTS`
    (but always at least one row): 1 (every row) for small inputs, 16 (256 rows) for
    the default 4096 x 4096.

    Examples
    --------
    >>> check_step(4096, 4096), check_step(256, 256), check_step(3, 2**21)
    (16, 1, 3)
    """
    per_check = max(1, CHECK_ELEMENTS // cols)
    return -(-rows // per_check)


def sqnr_db(x: np.ndarray, y: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio of ``y`` against ``x`` in dB.

    Differences and squares in float32, sums accumulated in float64 (no float64 copies
    of the arrays).

    Examples
    --------
    >>> x = np.array([1.0, -1.0], np.float32)
    >>> round(sqnr_db(x, x * np.float32(1.1)), 1)
    20.0
    >>> sqnr_db(x, x)
    inf
    """
    noise = float(np.sum(np.square(x - y), dtype=np.float64))
    signal = float(np.sum(np.square(x), dtype=np.float64))
    return math.inf if noise == 0 else 10.0 * math.log10(signal / noise)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two code arrays have the same dtype, shape and bytes."""
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - t0


def default_backends() -> list[str]:
    """The backends the demo times when none is named: every available one but ``reference``.

    ``reference`` (plain NumPy, 10-80x slower than ``cpu``) is the oracle that checks the others on a
    slice of rows; it is timed only when named, or when no compiled backend can run.

    Examples
    --------
    >>> "reference" in default_backends()
    False
    """
    compiled = [b.name for b in nbquant.backends() if b.available and b.name != "reference"]
    return compiled or ["reference"]


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


def _arrays(result) -> tuple[np.ndarray, ...]:
    """The arrays ``quantize`` wrote: codes, and the block scales of a block format."""
    return (result.data, result.scales) if isinstance(result, nbquant.BlockQuantized) else (result,)


def _take(result, rows: slice):
    """The part of a whole-matrix result that belongs to ``x[rows]``."""
    if isinstance(result, nbquant.BlockQuantized):
        return dataclasses.replace(result, data=result.data[rows], scales=result.scales[rows])
    return result[rows]


def run_demo(
    rows: int = DEFAULT_SIZE[0],
    cols: int = DEFAULT_SIZE[1],
    backends: Iterable[str] | None = None,
    repeats: int = DEFAULT_REPEATS,
    seed: int = 0,
    x: np.ndarray | None = None,
) -> Iterator[DemoRow]:
    """Run every scheme on every backend, yielding one :class:`DemoRow` as each finishes.

    Per scheme, the ``reference`` backend first quantizes the checked rows (every
    :func:`check_step`-th row) with the scales of the whole matrix: its codes are the
    oracle. Then each backend quantizes the whole matrix once (timed as the first call)
    and ``repeats`` more times (median time); its codes of the checked rows are compared
    with the oracle's and dequantized by ``reference`` for the error figures.

    Parameters
    ----------
    rows, cols : int
        Shape of the :func:`make_weights` input; ``cols`` must be even.
    backends : iterable of str, optional
        Available backends to time, in order (default: :func:`default_backends`).
    repeats : int
        Timed calls after the first; at least 1.
    seed : int
        Seed of the input.
    x : numpy.ndarray, optional
        A float32 matrix to use instead of :func:`make_weights` (then ``rows``,
        ``cols`` and ``seed`` are ignored).

    Yields
    ------
    DemoRow
    """
    if repeats < 1:
        raise ValueError(f"repeats={repeats} must be >= 1")
    names = default_backends() if backends is None else list(backends)
    if x is None:
        x = make_weights(rows, cols, seed)
    checked = slice(None, None, check_step(*x.shape))
    x_checked = x[checked]
    for scheme in schemes(x.shape[1]):
        quantize, dequantize, param_bytes = scheme_codec(x, scheme)
        oracle = _arrays(quantize(checked, "reference"))
        for backend in names:
            result, first = _timed(quantize, slice(None), backend)
            times = [_timed(quantize, slice(None), backend)[1] for _ in range(repeats)]
            part = _take(result, checked)
            back = dequantize(part, checked)
            yield DemoRow(
                scheme=scheme.name,
                layout=scheme.layout,
                backend=backend,
                sqnr_db=sqnr_db(x_checked, back),
                max_abs_error=float(np.max(np.abs(x_checked - back))),
                first_call_s=first,
                median_s=float(np.median(times)),
                bytes_moved=x.nbytes + param_bytes + sum(a.nbytes for a in _arrays(result)),
                equals_reference=all(map(_same_bits, _arrays(part), oracle)),
            )


def compile_note(signatures: int, seconds: float, first_calls_s: float) -> str:
    """The line ``nbquant demo`` prints under its table: what the first calls compiled, and what later runs do.

    Parameters
    ----------
    signatures, seconds : int, float
        Kernel signatures the run compiled and the seconds that took
        (:func:`nbquant.precompile.compile_watch`).
    first_calls_s : float
        The first calls' seconds, summed over the table's rows.

    Examples
    --------
    >>> compile_note(0, 0.0, 0.012)
    "compile: none, every kernel was loaded from numba's on-disk cache (first calls 0.01 s in all)"
    >>> compile_note(3, 9.5, 10.0).split(";")[0]
    'compile: the first calls compiled 3 kernel signature(s) in 9.5 s of their 10.0 s'
    """
    if signatures == 0:
        return (f"compile: none, every kernel was loaded from numba's on-disk cache (first calls {first_calls_s:.2f} s "
                "in all)")
    return (f"compile: the first calls compiled {signatures} kernel signature(s) in {seconds:.1f} s of their "
            f"{first_calls_s:.1f} s; numba's on-disk cache keeps them, so later runs load them in milliseconds "
            "(`nbquant precompile` compiles them ahead of time)")


def unavailable_backends(names: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """``(name, reason)`` for each backend in ``names`` (default: all) that cannot run here.

    The reason is the one :func:`nbquant.backends` gives.

    Examples
    --------
    >>> unavailable_backends(["reference"])
    []
    """
    return [(b.name, b.reason) for b in nbquant.backends() if not b.available and (names is None or b.name in names)]


def gguf_step(folder: str, scheme: str = GGUF_SCHEME) -> GGUFReport:
    """Write the demo's GGUF model (:data:`GGUF_MODEL`) into ``folder`` and convert it with ``scheme``.

    Parameters
    ----------
    folder : str
        An existing folder; ``model-BF16.gguf`` and ``model-{scheme}.gguf`` are written there.
    scheme : str
        A llama-quantize scheme (:data:`nbquant.gguf.policy.SCHEMES`).

    Returns
    -------
    nbquant.convert.gguf.GGUFReport
        The conversion's report (each tensor's type, why, SQNR, bytes).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     report = gguf_step(d)
    >>> sorted({t.target for t in report.tensors})
    ['F32', 'Q8_0']
    """
    import os

    from nbquant.convert.gguf import convert_gguf, write_synthetic_gguf

    src = write_synthetic_gguf(os.path.join(folder, "model-BF16.gguf"), **GGUF_MODEL)
    return convert_gguf(src, os.path.join(folder, f"model-{scheme}.gguf"), scheme, progress=False)

