"""Side-by-side ratio benchmark: nbquant against the roofline, NumPy and installed peers.

Run ``python -m benchmarks [--sizes 2^24,2^26] [--repeats 15] [--cases int8,int4]`` from the
repository root. For every case and size, nbquant, the roofline cast and each peer are
called in one process, interleaved (the order rotates every repeat), and the median of
the repeats is reported with the effective bandwidth (bytes read + bytes written per
call; bytes read only for the calibrator cases, which only reduce their input):

* ``%roof`` is ``t_roofline / t``: the share of a numba ``parallel=True`` cast of the
  same shapes and dtypes into a preallocated buffer (float32 -> int8, float32 ->
  packed 4-, 2- or 6-bit codes, codes -> float32), or of a numba ``parallel=True``
  ``max |x|`` over the input for the calibrator cases (``--device cuda``: a
  device-to-device copy of the same bytes);
* ``nbq x`` is ``t / t_nbquant``: how many times faster nbquant is than that row.

Peers are imported lazily and skipped silently when absent (or when they cannot do the
case: fp6, fp4, MX, NVFP4 and NF4 have few or none): NumPy always; torch
(``torch.quantize_per_*``, ``quantized_decomposed``, ``Tensor.dequantize``,
``torch.amax``, ``torch.histc``), torchao (``quantize_affine`` /
``dequantize_affine``) and onnxruntime (``QuantizeLinear`` / ``DequantizeLinear``)
when installed. nbquant never needs them.

``OMP_WAIT_POLICY=PASSIVE`` is set on import (:mod:`benchmarks.threads`), before numba
or torch load an OpenMP runtime: with spinning waiters, two OpenMP pools in one process
stall each other.

Dynamic cases (``nbquant.quantize_dynamic``: per-row and per-tensor int8 symmetric,
per-row uint8 asymmetric, group-wise uint4 asymmetric as torchao's int4 weight-only and
int4 symmetric; ``nbquant.quantize_nf4``, with and without double quantization) time the
whole job (qparams, codes and packing) for every contender, packed and unpacked.

onnxruntime's sessions run on nbquant's thread count with ``session.intra_op.allow_spinning=0``
(:mod:`benchmarks.onnxruntime_peers`): spinning workers would take the cores from the others.

Calibrator cases (``MaxCalibrator`` per tensor and ``HistogramCalibrator`` with its
default 2048 bins) time one ``collect`` of one batch, the amax included, and compare
the amax or the histogram counts with the peers' by value. ``compute_amax`` reads the
histogram, not the tensor, so it has no place in this per-element table: the asv suite
times it (``asv_bench/benchmarks/calibration.py``).

``--json PATH`` also writes the run (its date, command, machine lines and rows) as JSON:
the documentation's throughput figure is drawn from such a file, committed as
``docs/_data/bench-*.json`` (named by its date), so that the docs build never runs the benchmark.

The pieces: the cases (:mod:`benchmarks.cases`) and their arrays
(:mod:`benchmarks.problems`); nbquant's calls (:mod:`benchmarks.nbquant_calls`); the
peers (:mod:`benchmarks.numpy_peers`, :mod:`benchmarks.torch_peers`,
:mod:`benchmarks.onnxruntime_peers`) and the ``same`` column
(:mod:`benchmarks.comparison`); the roofline (:mod:`benchmarks.roofline`); the timing
(:mod:`benchmarks.timing`); the header (:mod:`benchmarks.machine`). New cases are
added by appending a :class:`benchmarks.cases.Case` to :data:`benchmarks.cases.CASES`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from .cases import select_cases
from .machine import git_commit, machine_info
from .threads import use_threads
from .timing import Row, cuda_unavailable_reason, run_case, run_case_cuda

_PLAIN_WORD = re.compile(r"[\w@%+=:,./^*-]+")  # printed unquoted in the JSON's command (2^24 stays 2^24)


def _pow2(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def format_table(rows: Sequence[Row]) -> str:
    """The result table as fixed-width text."""
    head = (f"{'case':<31} {'n':>5} {'impl':<33} {'median ms':>10} {'best ms':>9} {'GB/s':>6} {'%roof':>6} "
            f"{'nbq x':>6} {'same':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.case:<31} {_pow2(r.n):>5} {r.impl:<33} {r.median * 1e3:>10.3f} {r.best * 1e3:>9.3f} "
                     f"{r.gbps:>6.1f} {r.roof:>6.0%} {r.speedup:>6.2f} {r.match:>6}")
    return "\n".join(lines)


def parse_sizes(text: str) -> list[int]:
    """Parse ``"2^20,2^24"``, ``"2**20"`` or ``"1048576"`` into element counts.

    Examples
    --------
    >>> parse_sizes("2^10,2**12,4096")
    [1024, 4096, 4096]
    """
    sizes = []
    for tok in filter(None, (t.strip() for t in text.split(","))):
        base, _, exp = tok.replace("**", "^").partition("^")
        sizes.append(int(base) ** int(exp) if exp else int(base))
    return sizes


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2^24,2^26", help="element counts, e.g. 2^20,2^24 (default 2^24,2^26)")
    ap.add_argument("--repeats", type=int, default=15, help="timed calls per contender (median reported)")
    ap.add_argument("--cases", default=None, help="comma-separated substrings of case names (default: all)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--threads", type=int, default=None,
                    help="threads for numba and torch (default: theirs; 1 is steadier on a busy machine)")
    ap.add_argument("--json", type=Path, default=None, metavar="PATH",
                    help="also write the rows, the machine lines and the date to PATH as JSON (the docs' figure "
                         "reads it: docs/_data/bench-*.json)")
    return ap


def report(rows: Sequence[Row], machine: list[str], *, started: float, argv: Sequence[str], device: str,
           repeats: int, threads: int | None) -> dict:
    """The run as a JSON-ready dict: when, how, on what, and every row of the table.

    Parameters
    ----------
    rows : sequence of Row
        The table's rows.
    machine : list of str
        The header lines of :func:`benchmarks.machine.machine_info`.
    started : float
        When the run started (``time.time()``).
    argv : sequence of str
        The command-line arguments of the run.
    device : str
        ``"cpu"`` or ``"cuda"``.
    repeats : int
        Timed calls per contender.
    threads : int or None
        ``--threads``, if given.

    Returns
    -------
    dict
        ``date`` (UTC, ISO 8601), ``command``, ``device``, ``repeats``, ``threads``, ``machine`` (the header
        lines) and ``rows``: one dict per row, times in seconds, ``roof`` and ``speedup`` as ratios.

    Examples
    --------
    >>> r = report([Row("q int8 per-tensor", 1024, "nbquant", 1e-5, 9e-6, 0.5, 0.8, 1.0, "")], ["machine: ..."],
    ...            started=0.0, argv=["--sizes", "2^10"], device="cpu", repeats=3, threads=None)
    >>> r["date"], r["command"], r["rows"][0]["impl"]
    ('1970-01-01T00:00:00Z', 'python -m benchmarks --sizes 2^10', 'nbquant')
    """
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "command": " ".join(a if _PLAIN_WORD.fullmatch(a) else shlex.quote(a) for a in ["python", "-m", "benchmarks",
                                                                                         *argv]),
        "device": device,
        "repeats": repeats,
        "threads": threads,
        "machine": list(machine),
        "rows": [dataclasses.asdict(r) for r in rows],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table.

    Parameters
    ----------
    argv : sequence of str, optional
        Command-line arguments (default: ``sys.argv[1:]``); ``--help`` lists them.

    Returns
    -------
    int
        The exit status: 0, also when the cuda backend cannot run (a skip message is printed)
        or a case fails (it is reported and skipped).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    started = time.time()
    warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions.*deprecated")
    cases, sizes = select_cases(args.cases), parse_sizes(args.sizes)
    commit = git_commit()
    if args.device == "cuda" and (reason := cuda_unavailable_reason()):
        print(f"cuda benchmark skipped: {reason}")
        return 0
    if args.threads:
        use_threads(args.threads)
    runner = run_case_cuda if args.device == "cuda" else run_case
    rows: list[Row] = []
    for n in sizes:
        for case in cases:
            try:
                done = runner(case, n, args.repeats)
                rows.extend(done)
                # as it goes, on stderr: a run cut short still shows its rows; the whole table follows on stdout
                print("\n".join(format_table(done).splitlines()[2:]), file=sys.stderr, flush=True)
            except Exception as exc:  # noqa: BLE001 - report and go on with the other cases
                print(f"{case.name} at {_pow2(n)}: skipped ({type(exc).__name__}: {exc})")
    machine = machine_info(commit)
    print("\n".join(machine))
    print(f"device {args.device}; {args.repeats} interleaved repeats, medians; %roof = t_roofline / t; "
          "nbq x = t / t_nbquant; GB/s = (bytes read + written) / median (calib: bytes read);\n"
          "same: '=' same codes/values as nbquant (dynamic cases: codes, scales and zero points; "
          "calib: amax or histogram counts), '≠k' k elements differ, '-' not comparable (unpacked int4, no result)")
    print(format_table(rows))
    if args.json is not None:
        data = report(rows, machine, started=started, argv=argv, device=args.device, repeats=args.repeats,
                      threads=args.threads)
        args.json.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0
