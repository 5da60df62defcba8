"""The ``nbquant demo`` workload: quantize a weight-like matrix with several schemes and check it against ``reference``.

Everything here returns data and prints nothing: this package runs the schemes of
:mod:`nbquant.demo.workload` and checks them, :mod:`nbquant.demo.convert` is the last part
(``nbquant convert`` on small synthetic models), :mod:`nbquant.demo.table` formats the rows and
:mod:`nbquant.cli` prints them.

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
from dataclasses import dataclass
from typing import Any

import numpy as np

import nbquant

from .convert import GGUF_MODEL, GGUF_SCHEME, gguf_step
from .workload import DEFAULT_SIZE, Scheme, make_weights, scheme_codec, scheme_params, schemes
from .workload import T_DOF as T_DOF  # cli's header line names it

__all__ = [
    "CHECK_ELEMENTS",
    "DEFAULT_REPEATS",
    "DEFAULT_SIZE",
    "DemoRow",
    "GGUF_MODEL",
    "GGUF_SCHEME",
    "Scheme",
    "check_step",
    "default_backends",
    "gguf_step",
    "make_weights",
    "schemes",
    "scheme_params",
    "sqnr_db",
    "run_demo",
    "unavailable_backends",
]

#: Timed quantize calls after the first one, per scheme and backend (their median is reported).
DEFAULT_REPEATS = 3
#: At most this many values (whole rows, at least one) are checked against the reference backend.
CHECK_ELEMENTS = 2**20


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


def unavailable_backends(names: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """``(name, reason)`` for each backend in ``names`` (default: all) that cannot run here.

    The reason is the one :func:`nbquant.backends` gives.

    Examples
    --------
    >>> unavailable_backends(["reference"])
    []
    """
    return [(b.name, b.reason) for b in nbquant.backends() if not b.available and (names is None or b.name in names)]

