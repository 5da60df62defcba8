"""Timing of the ratio benchmark: interleaved repeats of every contender of one case, one :class:`Row` each.

For every case and size, nbquant, the roofline and each available peer are called in
one process, interleaved (the order rotates every repeat), after two warm-up calls
each; each peer's result is first compared with nbquant's (the ``same`` column).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import nbquant

from .cases import Case
from .comparison import compare
from .problems import Bench, Problem
from .roofline import cpu_roofline, cuda_roofline


def interleaved(calls: dict[str, Bench], repeats: int, sync: Callable[[], None] = lambda: None) -> dict[str, list]:
    """Time each callable ``repeats`` times, interleaved, after two warm-up calls each.

    The order rotates every repeat so no contender always follows the same one.

    Parameters
    ----------
    calls : dict of str to callable
        Zero-argument calls by label.
    repeats : int
        Timed calls of each.
    sync : callable, optional
        Called after every call, inside the timed span (``cuda.synchronize`` on the GPU).

    Returns
    -------
    dict of str to list of float
        Seconds of each timed call, by label.
    """
    for fn in calls.values():
        fn()
        fn()
    sync()
    labels = list(calls)
    times: dict[str, list[float]] = {k: [] for k in labels}
    for rep in range(repeats):
        k = rep % len(labels)
        for label in labels[k:] + labels[:k]:
            fn = calls[label]
            t0 = time.perf_counter()
            fn()
            sync()
            times[label].append(time.perf_counter() - t0)
    return times


@dataclass
class Row:
    """One line of the printed table."""

    case: str
    n: int
    impl: str
    median: float
    best: float
    gbps: float
    roof: float
    speedup: float
    match: str = ""


def _rows(case: str, n: int, nbytes: int, times: dict[str, list], matches: dict[str, str] | None = None) -> list[Row]:
    med = {k: statistics.median(v) for k, v in times.items()}
    t_nbq, t_roof = med["nbquant"], med["roofline"]
    return [Row(case, n, k, med[k], min(v), nbytes / med[k] / 1e9, t_roof / med[k], med[k] / t_nbq,
                (matches or {}).get(k, "")) for k, v in times.items()]


def _peer_calls(case: Case, p: Problem, ref) -> tuple[dict[str, Bench], dict[str, str]]:
    """The timed calls of the case's installed peers that can do it, and their ``same`` marks against ``ref``."""
    calls, matches = {}, {}
    same = case.compare or compare
    for peer in case.peers:
        if not peer.available():
            continue
        try:
            fn = peer.make(p)
            matches[peer.label] = same(ref, fn())
            calls[peer.label] = fn
        except Exception:  # noqa: BLE001 - a peer that cannot do this case is skipped
            pass
    return calls, matches


def run_case(case: Case, n: int, repeats: int, seed: int = 0) -> list[Row]:
    """Time nbquant, the roofline and every available peer on ``case`` at ``n`` elements (CPU).

    Parameters
    ----------
    case : Case
        The case to run.
    n : int
        Element count.
    repeats : int
        Timed calls per contender.
    seed : int, optional
        Seed of the random input.

    Returns
    -------
    list of Row
        nbquant, the roofline, then each peer.
    """
    p = case.setup(n, np.random.default_rng(seed))
    nbq = case.nbquant(p, None)
    peers, matches = _peer_calls(case, p, nbq())
    calls = {"nbquant": nbq, "roofline": cpu_roofline(p), **peers}
    return _rows(case.name, n, p.nbytes, interleaved(calls, repeats), matches)


def cuda_unavailable_reason() -> str:
    """Empty when nbquant's cuda backend can run, else why not."""
    info = {b.name: b for b in nbquant.backends()}
    if "cuda" not in info:
        return "nbquant has no cuda backend yet"
    return "" if info["cuda"].available else info["cuda"].reason


def _to_device(p: Problem) -> Problem:
    from nbquant.backends.cuda.runtime import to_device  # ml_dtypes arrays too (fp8 codes, ...)

    return dataclasses.replace(p, src=to_device(p.src), out=to_device(p.out))


def run_case_cuda(case: Case, n: int, repeats: int, seed: int = 0) -> list[Row]:
    """Time nbquant's cuda backend on device arrays against a device copy of the same bytes and torch on CUDA.

    Arguments and result as :func:`run_case`. The peers are the case's torch peers with their
    tensors on the GPU (:func:`benchmarks.torch_peers.on_device`); NumPy and onnxruntime run
    on the CPU only and are left out. Every call is timed to its end (``cuda.synchronize``).
    """
    from numba import cuda

    from .torch_peers import on_device

    p = case.setup(n, np.random.default_rng(seed))
    dev = _to_device(p)
    nbq = case.nbquant(dev, "cuda")
    torch_case = dataclasses.replace(case, peers=tuple(q for q in case.peers if "torch" in q.needs))
    with on_device("cuda"):
        peers, matches = _peer_calls(torch_case, p, nbq()) if _torch_cuda() else ({}, {})
    calls = {"nbquant": nbq, "roofline": cuda_roofline(p), **peers}
    return _rows(case.name, n, p.nbytes, interleaved(calls, repeats, cuda.synchronize), matches)


def _torch_cuda() -> bool:
    """Whether torch is installed with a usable CUDA device (the GPU peers)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()
