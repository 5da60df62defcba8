"""Per-element cost of every benchmark case on one nbquant thread, cache-resident, against its memory budget.

``python -m benchmarks.kernel_cost [--n 2^20] [--budget-n 2^24] [--repeats 30] [--cases int8,nf4]`` builds
each case of :data:`benchmarks.cases.CASES` (``--cases``: those whose name contains one of the
comma-separated substrings, as in ``python -m benchmarks``) at ``--n`` elements (default 2^20: 4 MiB
of float32, cache-resident on the benchmark machine), times nbquant's call alone with nbquant on
one thread (``nbquant.threads.thread_limit(1)``) and prints the best of ``--repeats`` as
ns and cycles per element (at ``--ghz``; default the ``cpu MHz`` of ``/proc/cpuinfo``, else 3.0).
This is what the kernel costs besides the memory.

Next to it, the memory budget: the ns per element that the memory leaves each of T threads, T being
nbquant's thread count before the run (``--threads`` overrides it). It is measured, not assumed:
``t_roofline * T / n`` where ``t_roofline`` is the best of ``--budget-repeats`` calls of the case's
own roofline kernel (:func:`benchmarks.roofline.cpu_roofline`, a numba ``parallel=True`` cast of the
same shapes and dtypes, on T threads) on the case's arrays at ``n = --budget-n`` elements (default
2^24, beyond the caches). The verdict is ``compute`` when the one-thread cache-resident cost exceeds
that budget (T threads then cannot keep up with the memory), else ``memory``. docs/performance.md
records the figures; this table is the evidence for its "compute-bound" claims. Timings on a busy
machine are noise: run it on a quiet one.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from . import threads as _threads  # noqa: F401 - sets OMP_WAIT_POLICY before numba's pool starts
from .cases import Case, select_cases
from .ratio import parse_sizes
from .roofline import cpu_roofline


def cpu_ghz(cpuinfo: Path = Path("/proc/cpuinfo")) -> float:
    """The clock of the first ``cpu MHz`` line of ``cpuinfo`` in GHz, or 3.0 when there is none."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":", 1)[1]) / 1000
    except (OSError, ValueError):
        pass
    return 3.0


def best_time(call: Callable[[], object], repeats: int) -> float:
    """Seconds of the fastest of ``repeats`` calls of ``call``, after one warm-up call."""
    call()
    best = float("inf")
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def one_thread_cost(case: Case, n: int, repeats: int, seed: int = 0) -> float:
    """Best seconds of nbquant's call of ``case`` at ``n`` elements with nbquant on one thread."""
    from nbquant.threads import thread_limit

    p = case.setup(n, np.random.default_rng(seed))
    call = case.nbquant(p, None)
    with thread_limit(1):  # a cap for this thread's calls: the process's own setting is left as it was
        return best_time(call, repeats)


def memory_budget(case: Case, n: int, threads: int, repeats: int, seed: int = 0) -> float:
    """Seconds per element per thread that the memory allows: ``t_roofline(n, threads) * threads / n``.

    ``t_roofline`` is the best time of the case's roofline kernel on the case's arrays at ``n``
    elements, run by numba on ``threads`` threads (numba's count is restored after).
    """
    import numba

    roof = cpu_roofline(case.setup(n, np.random.default_rng(seed)))
    previous = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        return best_time(roof, repeats) * threads / n
    finally:
        numba.set_num_threads(previous)


def _size(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.kernel_cost", description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="2^20", help="elements of the timed call, cache-resident (default 2^20: 4 MiB "
                                                "of float32)")
    ap.add_argument("--repeats", type=int, default=30, help="timed calls of nbquant per case (best reported)")
    ap.add_argument("--cases", default=None, help="comma-separated substrings of case names (default: all)")
    ap.add_argument("--ghz", type=float, default=None,
                    help="clock for the cycles column (default: cpu MHz of /proc/cpuinfo, else 3.0)")
    ap.add_argument("--budget-n", default="2^24", help="elements of the roofline run giving the memory budget "
                                                       "(default 2^24, beyond the caches)")
    ap.add_argument("--budget-repeats", type=int, default=5, help="roofline calls per case (best used; default 5)")
    ap.add_argument("--threads", type=int, default=None,
                    help="T, the threads the memory budget is shared by (default: nbquant's thread count)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Print, per case, nbquant's one-thread cost per element, the memory budget per thread and the verdict.

    Parameters
    ----------
    argv : sequence of str, optional
        Command-line arguments (default: ``sys.argv[1:]``); ``--help`` lists them.

    Returns
    -------
    int
        0 (a case that fails is reported and skipped).
    """
    import nbquant

    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    n, budget_n = parse_sizes(args.n)[0], parse_sizes(args.budget_n)[0]
    ghz = args.ghz or cpu_ghz()
    threads = args.threads or nbquant.get_num_threads()
    mib = n * 4 / 2**20
    size = f"{mib:g} MiB" if mib >= 1 else f"{mib * 1024:g} KiB"
    print(f"nbquant on one thread, n = {_size(n)} ({size} of float32), best of {args.repeats}; "
          f"cycles at {ghz:.2f} GHz")
    print(f"budget: ns per element per thread that the memory allows T = {threads} threads, t_roofline * T / n "
          f"(the case's roofline kernel at n = {_size(budget_n)} on {threads} threads, best of {args.budget_repeats})")
    print("verdict: compute when the one-thread ns/elem exceeds the budget, else memory")
    head = f"{'case':<31} {'best ms':>9} {'ns/elem':>8} {'cycles/elem':>11} {'budget ns':>9} {'verdict':>8}"
    print(head)
    print("-" * len(head))
    for case in select_cases(args.cases):
        try:
            cost = one_thread_cost(case, n, args.repeats) / n
            budget = memory_budget(case, budget_n, threads, args.budget_repeats)
        except Exception as exc:  # noqa: BLE001 - report and go on with the other cases
            print(f"{case.name}: skipped ({type(exc).__name__}: {exc})")
            continue
        verdict = "compute" if cost > budget else "memory"
        print(f"{case.name:<31} {cost * n * 1e3:>9.3f} {cost * 1e9:>8.3f} {cost * ghz * 1e9:>11.2f} "
              f"{budget * 1e9:>9.3f} {verdict:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
