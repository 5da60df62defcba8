"""``nbquant precompile``: compile the cpu kernels a workload calls ahead of time, into Numba's on-disk cache.

A cpu kernel is compiled the first time a process calls it with a new signature (0.3 s
to a few seconds each on a 2-core machine) and written to Numba's cache; every later
process loads it from there in milliseconds. :func:`precompile` makes small public
calls of the chosen *targets* (:data:`TARGETS`: each scheme of ``nbquant demo``,
quantized and dequantized; NF4; dynamic int8; each ``nbquant convert`` preset on a
tiny synthetic checkpoint; each GGUF format, quantized and dequantized) for the chosen
input dtypes, so that the first real call of a later process finds its kernels in the
cache. With several jobs the targets compile in that many worker processes at once
(Numba's compiler holds the GIL: threads would not overlap).

:func:`compile_watch` counts the kernel signatures a block of code compiles (Numba's
``numba:compile`` events, outermost only) and the seconds they take; ``nbquant demo``
prints it.

Examples
--------
>>> from nbquant.precompile import TARGETS, precompile
>>> "int8-per-tensor" in TARGETS and "convert:W4A16" in TARGETS
True
>>> [p.target for p in precompile(["int8-per-tensor"], jobs=1, progress=False)]
['int8-per-tensor']
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from typing import TextIO

import numpy as np

__all__ = ["TARGETS", "GROUPS", "DTYPES", "CompileWatch", "Prepared", "AheadCompile", "compile_watch", "precompile",
           "compile_ahead", "compile_note", "resolve_targets", "cache_location"]

#: Input dtypes a target can be prepared for (``nbquant convert`` targets take the first three).
DTYPES = ("float32", "float16", "bfloat16", "float64")
#: Rows and columns of a library target's input: small, and a multiple of every block size it uses.
_SHAPE = (4, 256)
#: The synthetic checkpoint of a convert target: the smallest Llama shape every preset applies to.
_CHECKPOINT = {"hidden": 128, "intermediate": 256, "layers": 1, "vocab": 256, "shard_bytes": 1 << 20}


def _dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _demo_scheme(index: int, dtype: str) -> None:
    """Quantize and dequantize on cpu with the ``index``-th scheme of ``nbquant demo`` and its scales."""
    import nbquant
    from nbquant import demo

    x = demo.make_weights(*_SHAPE).astype(_dtype(dtype))
    scheme = demo.schemes(_SHAPE[1])[index]
    quantize, _, _ = demo.scheme_codec(x, scheme)
    result = quantize(slice(None), "cpu")
    if isinstance(result, nbquant.BlockQuantized):
        result.dequantize(backend="cpu")
        return
    scale, zero_point = demo.scheme_params(x, scheme)
    kwargs = {k: v for k, v in scheme.kwargs.items() if k != "packed"}
    nbquant.dequantize(result, scale, zero_point=zero_point, dtype=scheme.dtype, backend="cpu", **kwargs)


def _nf4(dtype: str) -> None:
    import nbquant
    from nbquant import demo

    nbquant.quantize_nf4(demo.make_weights(*_SHAPE).astype(_dtype(dtype)), backend="cpu").dequantize(backend="cpu")


def _dynamic_int8(dtype: str) -> None:
    import nbquant
    from nbquant import demo

    nbquant.quantize_dynamic(demo.make_weights(*_SHAPE).astype(_dtype(dtype)), "int8", axis=0, backend="cpu")


def _convert(scheme: str, dtype: str) -> None:
    """``nbquant convert`` with ``scheme`` of a tiny synthetic checkpoint of ``dtype`` (float64: nothing)."""
    if dtype == "float64":  # checkpoints hold float32, float16 or bfloat16
        return
    from nbquant.convert import convert, write_synthetic_checkpoint

    with tempfile.TemporaryDirectory(prefix="nbquant-precompile-") as tmp:
        src, dst = os.path.join(tmp, "src"), os.path.join(tmp, "dst")
        write_synthetic_checkpoint(src, dtype=dtype, **_CHECKPOINT)
        convert(src, dst, scheme, progress=False)


def _gguf(qtype: str, dtype: str) -> None:
    """GGUF ``qtype`` quantize and dequantize on cpu (one kernel pair whatever ``dtype``: each is read as float32)."""
    from nbquant import demo, gguf

    x = demo.make_weights(*_SHAPE).astype(_dtype(dtype))
    gguf.dequantize(gguf.quantize(x, qtype, backend="cpu"), qtype, backend="cpu")


def _targets() -> dict[str, Callable[[str], None]]:
    from functools import partial

    from nbquant import demo
    from nbquant.convert.schemes import SCHEMES
    from nbquant.gguf import implemented_formats

    targets: dict[str, Callable[[str], None]] = {}
    for i, scheme in enumerate(demo.schemes(_SHAPE[1])):
        targets[scheme.name.replace(" ", "-")] = partial(_demo_scheme, i)
    targets["nf4"] = _nf4
    targets["dynamic-int8"] = _dynamic_int8
    for name in SCHEMES:
        targets[f"convert:{name}"] = partial(_convert, name)
    for name in implemented_formats():
        targets[f"gguf:{name}"] = partial(_gguf, name)
    return targets


#: Every target, by name: a function of the dtype name that makes its calls.
TARGETS: dict[str, Callable[[str], None]] = _targets()
#: Names that stand for several targets.
GROUPS: dict[str, tuple[str, ...]] = {
    "demo": (*(n for n in TARGETS if ":" not in n and n not in ("nf4", "dynamic-int8")), "convert:W4A16",
             "gguf:Q8_0"),
    "convert": tuple(n for n in TARGETS if n.startswith("convert:")),
    "gguf": tuple(n for n in TARGETS if n.startswith("gguf:")),
    "all": tuple(TARGETS),
}


def resolve_targets(names: Sequence[str] | None) -> list[str]:
    """The target names ``names`` stand for, in order, once each (default: the ``demo`` group).

    A name is a target, a group of :data:`GROUPS`, a convert preset without its
    ``convert:`` prefix (``W4A16``) or a GGUF format without its ``gguf:`` prefix (``Q4_K``).

    Raises
    ------
    ValueError
        Naming the unknown name and the targets and groups there are.

    See Also
    --------
    precompile : Compiles the targets these names stand for.

    Examples
    --------
    >>> resolve_targets(["nvfp4", "W4A16", "q4_k"])
    ['nvfp4', 'convert:W4A16', 'gguf:Q4_K']
    """
    chosen: list[str] = []
    for name in names or ["demo"]:
        if name in GROUPS:
            chosen.extend(GROUPS[name])
        elif name in TARGETS:
            chosen.append(name)
        elif f"convert:{name.upper()}" in TARGETS:
            chosen.append(f"convert:{name.upper()}")
        elif f"gguf:{name.upper()}" in TARGETS:
            chosen.append(f"gguf:{name.upper()}")
        else:
            raise ValueError(f"target {name!r}: expected one of the groups {', '.join(GROUPS)} or the targets "
                             f"{', '.join(TARGETS)}")
    return list(dict.fromkeys(chosen))


@dataclass
class CompileWatch:
    """What a :func:`compile_watch` block compiled: ``signatures`` kernel signatures in ``seconds`` in all."""

    signatures: int = 0
    seconds: float = 0.0


@contextmanager
def compile_watch() -> Iterator[CompileWatch]:
    """Count the Numba compiles of the block: kernel signatures (outermost compiles only) and their seconds.

    A signature loaded from the on-disk cache is not a compile and is not counted.

    Examples
    --------
    >>> import numpy as np, nbquant
    >>> with compile_watch() as watch:
    ...     _ = nbquant.quantize(np.ones(8, np.float32), np.float32(1), "int8", backend="cpu")
    >>> watch.signatures >= 0
    True
    """
    from numba.core import event

    watch = CompileWatch()
    depth, started = [0], [0.0]

    class _Listener(event.Listener):
        def on_start(self, ev) -> None:
            if depth[0] == 0:
                started[0] = time.perf_counter()
            depth[0] += 1

        def on_end(self, ev) -> None:
            depth[0] -= 1
            if depth[0] == 0:
                watch.signatures += 1
                watch.seconds += time.perf_counter() - started[0]

    with event.install_listener("numba:compile", _Listener()):
        yield watch


def cache_location() -> str:
    """Where the cpu kernels' compiled code goes: ``NUMBA_CACHE_DIR``, or the default Numba picks.

    Examples
    --------
    >>> isinstance(cache_location(), str)
    True
    """
    from numba.core import config

    return config.CACHE_DIR or "numba's default (the package's __pycache__, else the user cache directory)"


@dataclass(frozen=True)
class Prepared:
    """One target made ready: its name, the kernel signatures it compiled, and the seconds it took."""

    target: str
    signatures: int
    seconds: float


def _prepare(target: str, dtypes: tuple[str, ...]) -> Prepared:
    """Run ``target`` for each dtype on one kernel thread; what it compiled (in this process)."""
    from nbquant.threads import thread_limit

    start = time.perf_counter()
    with compile_watch() as watch, thread_limit(1):
        for dtype in dtypes:
            TARGETS[target](dtype)
    return Prepared(target, watch.signatures, time.perf_counter() - start)


def _bar(done: int, total: int, last: Prepared, elapsed: float, width: int = 24) -> str:
    """One progress line: ``[#####.....] 3/12  4.1 s  int8-per-tensor: 2 signatures in 1.9 s``."""
    filled = width * done // total
    return (f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {elapsed:6.1f} s  {last.target}: "
            f"{last.signatures} signature(s) in {last.seconds:.1f} s")


def precompile(targets: Sequence[str] | None = None, dtypes: Sequence[str] = ("float32",), jobs: int | None = None,
               progress: bool | None = None, stream: TextIO | None = None) -> list[Prepared]:
    """Compile the cpu kernels of ``targets`` for ``dtypes`` into Numba's on-disk cache.

    Parameters
    ----------
    targets : sequence of str, optional
        Target and group names (:func:`resolve_targets`; default: the ``demo`` group).
    dtypes : sequence of str
        Input dtypes, from :data:`DTYPES` (default float32).
    jobs : int, optional
        Worker processes compiling at once (default: the usable CPUs, at most one per
        target); 1 compiles in this process.
    progress : bool, optional
        Print a progress line per finished target on ``stream`` (default: stderr when it is
        a terminal; a bar redrawn in place there).
    stream : file, optional
        Where progress goes (default ``sys.stderr``).

    Returns
    -------
    list of Prepared
        One per target, in the order they finished.

    Raises
    ------
    ValueError
        On an unknown target or dtype, or ``jobs`` below 1.

    Examples
    --------
    >>> [p.target for p in precompile(["int8-per-tensor"], jobs=1, progress=False)]
    ['int8-per-tensor']
    """
    names = resolve_targets(targets)
    dtypes = tuple(dict.fromkeys(dtypes))
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        raise ValueError(f"dtypes={list(dtypes)!r}: expected one or more of {', '.join(DTYPES)}")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValueError(f"jobs={jobs!r}: expected a positive integer (1 compiles in this process)")
    from nbquant.threads import usable_cpus

    jobs = min(jobs or usable_cpus(), len(names))
    stream = sys.stderr if stream is None else stream
    tty = stream.isatty()
    show = tty if progress is None else progress
    start, done = time.perf_counter(), []

    def report(prepared: Prepared) -> None:
        done.append(prepared)
        if show:
            line = _bar(len(done), len(names), prepared, time.perf_counter() - start)
            print(f"\r\033[K{line}" if tty else line, end="" if tty else "\n", file=stream, flush=True)

    if jobs == 1:
        for name in names:
            report(_prepare(name, dtypes))
    else:
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
            for future in as_completed([pool.submit(_prepare, name, dtypes) for name in names]):
                report(future.result())
    if show and tty:
        print(file=stream)
    return done


@dataclass(frozen=True)
class AheadCompile:
    """What :func:`compile_ahead` compiled: kernel ``signatures`` in ``seconds`` (wall) on ``jobs`` processes."""

    signatures: int
    seconds: float
    jobs: int


def compile_ahead(progress: bool | None = None,
                  announce: Callable[[int, int], None] | None = None) -> AheadCompile | None:
    """On an empty compile cache and a machine with several CPUs, compile the demo's cpu kernels in parallel first.

    The demo's first target (``int8-per-tensor`` of :data:`TARGETS`)
    runs here; when its kernels load from Numba's cache, this returns None in
    milliseconds. When it had to compile them, the cache is cold, and the rest of the
    ``demo`` group compiles in one worker process per usable CPU
    (:func:`precompile`) instead of one after another on the demo's
    first calls, which then load them. With one usable CPU, or no writable cache location
    (nothing compiled elsewhere could be loaded here), it returns None after the probe.

    Parameters
    ----------
    progress : bool, optional
        Passed to :func:`precompile` (default: a progress bar on a terminal).
    announce : callable, optional
        Called with the number of targets and of processes once the cache is found cold,
        before they compile.

    Returns
    -------
    AheadCompile or None
        What was compiled, probe included; None when the cache held the probe's kernels, one
        CPU is usable, or no cache location is writable.

    Examples
    --------
    >>> ahead = compile_ahead(progress=False)
    >>> ahead is None or ahead.signatures > 0
    True
    """
    from nbquant.backends.cpu import disk_cached
    from nbquant.threads import usable_cpus

    start = time.perf_counter()
    probe, *rest = GROUPS["demo"]
    with compile_watch() as watch:
        TARGETS[probe]("float32")
    jobs = min(usable_cpus(), len(rest))
    if watch.signatures == 0 or jobs < 2 or not disk_cached():  # warm; one CPU; or worker processes could not share
        return None
    if announce is not None:
        announce(len(rest), jobs)
    done = precompile(rest, jobs=jobs, progress=progress)
    return AheadCompile(watch.signatures + sum(p.signatures for p in done), time.perf_counter() - start, jobs)


def compile_note(signatures: int, seconds: float, first_calls_s: float, ahead: AheadCompile | None = None) -> str:
    """The line ``nbquant demo`` prints under its table: what it compiled, and what later runs do.

    Parameters
    ----------
    signatures, seconds : int, float
        Kernel signatures the table's calls compiled and the seconds that took
        (:func:`compile_watch`).
    first_calls_s : float
        The first calls' seconds, summed over the table's rows.
    ahead : AheadCompile, optional
        What :func:`compile_ahead` compiled before the table.

    Examples
    --------
    >>> compile_note(0, 0.0, 0.012)
    "compile: none, every kernel was loaded from numba's on-disk cache (first calls 0.01 s in all)"
    >>> compile_note(3, 9.5, 10.0).split(";")[0]
    'compile: the first calls compiled 3 kernel signature(s) in 9.5 s of their 10.0 s'
    >>> compile_note(0, 0.0, 0.05, AheadCompile(26, 11.2, 2)).split(";")[0]
    'compile: the cache was empty: 26 kernel signature(s) compiled ahead in 11.2 s on 2 processes at once'
    """
    if ahead is not None:
        more = f", {signatures} more by the first calls in {seconds:.1f} s" if signatures else ""
        return (f"compile: the cache was empty: {ahead.signatures} kernel signature(s) compiled ahead in "
                f"{ahead.seconds:.1f} s on {ahead.jobs} processes at once; the table's first calls loaded them "
                f"({first_calls_s:.2f} s in all{more}); later runs load them from numba's on-disk cache in "
                "milliseconds (`nbquant precompile` compiles them ahead of time)")
    if signatures == 0:
        return (f"compile: none, every kernel was loaded from numba's on-disk cache (first calls {first_calls_s:.2f} s "
                "in all)")
    return (f"compile: the first calls compiled {signatures} kernel signature(s) in {seconds:.1f} s of their "
            f"{first_calls_s:.1f} s; numba's on-disk cache keeps them, so later runs load them in milliseconds "
            "(`nbquant precompile` compiles them ahead of time)")
