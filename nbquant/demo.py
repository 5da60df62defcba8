"""The ``nbquant demo`` workload: quantize a weight-like matrix with several schemes on every backend.

Everything here returns data and prints nothing; :mod:`nbquant.cli` formats it.

The input (:func:`make_weights`) is deterministic: Student-t samples (heavy
tails, like trained weights) with a different magnitude per row, so per-channel
scales matter. Scales come from the absolute maximum of each block, computed with
NumPy (:func:`scheme_params`). Each :class:`DemoRow` holds the accuracy of
``dequantize(quantize(x))`` against ``x``, the time of ``quantize``, and whether the
codes equal the ``reference`` backend's bit for bit.

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

import math
import os
import platform
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import nbquant

__all__ = [
    "DEFAULT_SIZE",
    "DemoRow",
    "Scheme",
    "make_weights",
    "schemes",
    "scheme_params",
    "sqnr_db",
    "run_demo",
    "machine_info",
    "unavailable_backends",
]

#: Rows and columns of the default input (4096 x 4096 float32, 64 MiB).
DEFAULT_SIZE = (4096, 4096)
#: Degrees of freedom of the Student-t input: few, so the tails are heavy.
T_DOF = 4


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
        scales (:func:`nbquant.quantize_mx`, :func:`nbquant.quantize_nvfp4`); ``dtype``
        is then the MX format name.
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
        ``10 log10(sum(x^2) / sum((x - dequantize(quantize(x)))^2))``, in float64.
    max_abs_error : float
        ``max |x - dequantize(quantize(x))|``.
    first_call_s : float
        Time of the first ``quantize`` call of this scheme on this backend (it
        includes the JIT compile, or the load from numba's cache, of a compiled backend).
    median_s : float
        Median time of ``repeats`` further ``quantize`` calls.
    bytes_moved : int
        Bytes ``quantize`` reads and writes: input, scales, zero points and codes.
    equals_reference : bool
        Whether the codes equal the ``reference`` backend's bit for bit.
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
    100x and per-channel scales pay off.

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
    row_factor = 0.02 * 10.0 ** rng.uniform(-1.0, 1.0, size=(rows, 1))
    w = rng.standard_t(T_DOF, size=(rows, cols)).astype(np.float32)
    w *= row_factor.astype(np.float32)
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
    smaller), with a partial last block when 32 does not divide ``cols``.

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


def _block_quantize(x: np.ndarray, scheme: Scheme, backend: str) -> nbquant.BlockQuantized:
    if scheme.block_format == "mx":
        return nbquant.quantize_mx(x, scheme.dtype, backend=backend, **scheme.kwargs)
    return nbquant.quantize_nvfp4(x, backend=backend, **scheme.kwargs)


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

    Examples
    --------
    >>> x = np.array([[-1.0, 2.0], [0.5, -0.25]], np.float32)
    >>> s, zp = scheme_params(x, schemes(2)[1])
    >>> s * 127, zp
    (array([2. , 0.5], dtype=float32), None)
    """
    tiny = np.finfo(np.float32).smallest_normal
    if scheme.asymmetric:
        lo = np.minimum(_block_reduce(np.minimum, x, scheme.kwargs), 0).astype(np.float32)
        hi = np.maximum(_block_reduce(np.maximum, x, scheme.kwargs), 0).astype(np.float32)
        scale = np.maximum((hi - lo) / np.float32(255), tiny).astype(np.float32)
        zp = np.clip(np.rint(-lo / scale), 0, 255).astype(np.uint8)
        return scale, zp
    amax = _block_reduce(np.maximum, np.abs(x), scheme.kwargs).astype(np.float32)
    scale = np.where(amax > 0, np.maximum(amax / np.float32(scheme.divisor), tiny), np.float32(1))
    return scale.astype(np.float32), None


def sqnr_db(x: np.ndarray, y: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio of ``y`` against ``x`` in dB (float64 sums).

    Examples
    --------
    >>> x = np.array([1.0, -1.0], np.float32)
    >>> round(sqnr_db(x, x * 1.1), 1)
    20.0
    >>> sqnr_db(x, x)
    inf
    """
    x64 = x.astype(np.float64)
    noise = float(np.sum((x64 - y.astype(np.float64)) ** 2))
    signal = float(np.sum(x64**2))
    return math.inf if noise == 0 else 10.0 * math.log10(signal / noise)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two code arrays have the same dtype, shape and bytes."""
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _timed(fn) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0


def run_demo(
    rows: int = DEFAULT_SIZE[0],
    cols: int = DEFAULT_SIZE[1],
    backends: Iterable[str] | None = None,
    repeats: int = 5,
    seed: int = 0,
    x: np.ndarray | None = None,
) -> Iterator[DemoRow]:
    """Run every scheme on every backend, yielding one :class:`DemoRow` as each finishes.

    Per scheme, the ``reference`` backend runs first (its codes are the oracle, even
    when ``reference`` is not in ``backends``); then each backend quantizes once
    (timed as the first call), ``repeats`` more times (median time), and dequantizes
    once for the error figures.

    Parameters
    ----------
    rows, cols : int
        Shape of the :func:`make_weights` input; ``cols`` must be even.
    backends : iterable of str, optional
        Available backends to run, in order (default: every available one, see
        :func:`nbquant.backends`).
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
    names = [b.name for b in nbquant.backends() if b.available] if backends is None else list(backends)
    if x is None:
        x = make_weights(rows, cols, seed)
    for scheme in schemes(x.shape[1]):
        if scheme.block_format:
            yield from _run_block_scheme(x, scheme, names, repeats)
            continue
        scale, zp = scheme_params(x, scheme)
        kw = dict(scheme.kwargs, zero_point=zp)
        dq_kw = {k: v for k, v in kw.items() if k != "packed"}
        dq_kw["dtype"] = scheme.dtype

        def quantize(backend: str, scale=scale, scheme=scheme, kw=kw) -> np.ndarray:
            return nbquant.quantize(x, scale, scheme.dtype, backend=backend, **kw)

        def dequantize(codes: np.ndarray, backend: str, scale=scale, dq_kw=dq_kw) -> np.ndarray:
            return nbquant.dequantize(codes, scale, backend=backend, **dq_kw)

        params = scale.nbytes + (zp.nbytes if zp is not None else 0)
        yield from _scheme_rows(x, scheme, names, repeats, quantize, dequantize,
                                lambda codes, params=params: codes.nbytes + params, _same_bits)


def _scheme_rows(x: np.ndarray, scheme: Scheme, backends: list[str], repeats: int, quantize, dequantize,
                 result_bytes, same) -> Iterator[DemoRow]:
    """Time ``quantize(backend)`` on each backend, check it against ``reference``, and measure the round trip."""
    ref = quantize("reference")
    for backend in backends:
        result, first = _timed(lambda b=backend: quantize(b))
        times = [_timed(lambda b=backend: quantize(b))[1] for _ in range(repeats)]
        back = dequantize(result, backend)
        yield DemoRow(
            scheme=scheme.name,
            layout=scheme.layout,
            backend=backend,
            sqnr_db=sqnr_db(x, back),
            max_abs_error=float(np.max(np.abs(x - back))),
            first_call_s=first,
            median_s=float(np.median(times)),
            bytes_moved=x.nbytes + result_bytes(result),
            equals_reference=same(result, ref),
        )


def _run_block_scheme(x: np.ndarray, scheme: Scheme, backends: list[str], repeats: int) -> Iterator[DemoRow]:
    """:func:`_scheme_rows` for a block format: the kernel computes the scales too."""
    return _scheme_rows(
        x, scheme, backends, repeats,
        lambda b: _block_quantize(x, scheme, b),
        lambda bq, b: bq.dequantize(backend=b),
        lambda bq: bq.data.nbytes + bq.scales.nbytes,
        lambda a, r: _same_bits(a.data, r.data) and _same_bits(a.scales, r.scales),
    )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """Facts about this machine and numba's threads, for the demo's machine line.

    ``threading_layer`` is numba's layer once a parallel kernel has run in this
    process (``None`` before that, or when numba was never imported).

    Returns
    -------
    dict
        ``cpu``, ``cores`` (``os.cpu_count()``), ``usable_cores`` (the affinity
        mask), ``platform``, ``python``, ``numpy``, ``numba``, ``numba_threads``,
        ``threading_layer``, ``omp_wait_policy``.

    Examples
    --------
    >>> sorted(machine_info())[:3]
    ['cores', 'cpu', 'numba']
    """
    affinity = getattr(os, "sched_getaffinity", None)
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": len(affinity(0)) if affinity else os.cpu_count(),
        "platform": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": None,
        "numba_threads": None,
        "threading_layer": None,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
    }
    numba = sys.modules.get("numba")
    if numba is not None:
        info["numba"] = numba.__version__
        info["numba_threads"] = numba.get_num_threads()
        try:
            info["threading_layer"] = numba.threading_layer()
        except ValueError:  # no parallel kernel has run yet
            pass
    return info


def unavailable_backends(names: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """``(name, reason)`` for each backend in ``names`` (default: all) that cannot run here.

    Examples
    --------
    >>> unavailable_backends(["reference"])
    []
    """
    return [(b.name, b.reason) for b in nbquant.backends() if not b.available and (names is None or b.name in names)]
