"""The ``nbquant`` command line (also ``python -m nbquant``).

``nbquant demo`` quantizes a built-in weight-like matrix with several schemes on
every available backend and prints a table of accuracy, speed and agreement with
the ``reference`` backend. The work is done by :mod:`nbquant.demo`; this module only
parses arguments and formats.

Examples
--------
In a shell::

    $ nbquant demo                    # 4096 x 4096, every available backend
    $ nbquant demo --size 1024x4096 --backend cpu --repeats 10
    $ python -m nbquant demo --size 256
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

__all__ = ["main", "parse_size", "format_row", "HEADER"]

#: Column titles and widths of the demo table.
_COLUMNS = (
    ("scheme", 22), ("layout", 28), ("backend", 9), ("SQNR dB", 8), ("max abs err", 11),
    ("first ms", 9), ("median ms", 10), ("GB/s", 7), ("= reference", 11),
)


def _line(cells: Sequence[str]) -> str:
    """Cells padded to the column widths: the three text columns left-aligned, the numbers right-aligned."""
    padded = (c.ljust(w) if i < 3 else c.rjust(w) for i, (c, (_, w)) in enumerate(zip(cells, _COLUMNS, strict=True)))
    return " ".join(padded).rstrip()


HEADER = _line([title for title, _ in _COLUMNS])


def parse_size(text: str) -> tuple[int, int]:
    """Parse ``--size``: ``N`` for an N x N matrix or ``RxC``; the column count must be even.

    Examples
    --------
    >>> parse_size("256"), parse_size("128x4096")
    ((256, 256), (128, 4096))
    >>> parse_size("3")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: --size 3: the column count must be even (packed int4 stores two codes per byte)
    """
    parts = text.lower().split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        dims = []
    if len(dims) not in (1, 2) or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"--size {text}: use N (an N x N matrix) or ROWSxCOLS with positive integers,"
                                         " e.g. 4096 or 1024x4096")
    rows, cols = dims * 2 if len(dims) == 1 else dims
    if cols % 2:
        raise argparse.ArgumentTypeError(f"--size {text}: the column count must be even "
                                         "(packed int4 stores two codes per byte)")
    return rows, cols


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def format_row(row) -> str:
    """One table line for a :class:`nbquant.demo.DemoRow`, aligned with :data:`HEADER`."""
    cells = (
        row.scheme, row.layout, row.backend, f"{row.sqnr_db:.2f}", f"{row.max_abs_error:.4g}",
        f"{row.first_call_s * 1e3:.3f}", f"{row.median_s * 1e3:.3f}", f"{row.gb_per_s:.3g}",
        "yes" if row.equals_reference else "NO",
    )
    return _line(cells)


def _machine_line(info: dict) -> str:
    layer = info["threading_layer"] or "not started (no parallel kernel ran)"
    numba = (f"numba {info['numba']}, {info['numba_threads']} threads, threading layer {layer}"
             if info["numba"] else "numba not loaded")
    return (f"machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), {info['platform']}; "
            f"Python {info['python']}, numpy {info['numpy']}, {numba}; "
            f"OMP_WAIT_POLICY={info['omp_wait_policy'] or '(unset)'}")


def _build_parser() -> argparse.ArgumentParser:
    import nbquant

    parser = argparse.ArgumentParser(prog="nbquant", description="nbquant: Numba-compiled quantization kernels.")
    parser.add_argument("--version", action="version", version=f"nbquant {nbquant.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    names = [b.name for b in nbquant.backends()]
    demo = sub.add_parser(
        "demo",
        help="quantize a built-in weight-like matrix with several schemes on every backend",
        description="Quantize a deterministic heavy-tailed float32 matrix (Student-t, per-row magnitudes) with "
                    "several schemes on every available backend; print SQNR, max abs error, quantize time "
                    "(first call, which includes the JIT compile or cache load, and the median of the repeats), "
                    "GB/s (bytes read + written / median time) and whether the codes equal the reference "
                    "backend's bit for bit. Exits 1 if any backend disagrees with reference.",
    )
    demo.add_argument("--size", type=parse_size, default="4096",
                      help="N (an N x N matrix) or ROWSxCOLS; COLS must be even (default: 4096)")
    demo.add_argument("--backend", action="append", choices=names, dest="backends", metavar="NAME",
                      help=f"run only this backend (repeatable; one of {', '.join(names)}; default: all)")
    demo.add_argument("--repeats", type=_positive_int, default=5,
                      help="timed quantize calls after the first, per scheme and backend (default: 5)")
    demo.add_argument("--seed", type=int, default=0, help="seed of the input matrix (default: 0)")
    return parser


def _demo(args: argparse.Namespace) -> int:
    import nbquant
    from nbquant import demo

    rows, cols = args.size
    wanted = args.backends or [b.name for b in nbquant.backends()]
    skipped = demo.unavailable_backends(wanted)
    run = [n for n in dict.fromkeys(wanted) if n not in {name for name, _ in skipped}]
    x = demo.make_weights(rows, cols, args.seed)
    print(f"nbquant {nbquant.__version__} demo: {rows}x{cols} float32 weight-like matrix ({x.nbytes / 2**20:.1f} MiB; "
          f"Student-t df={demo.T_DOF}, per-row magnitudes x0.1..x10, seed {args.seed})")
    print(f"backends: {', '.join(run) or 'none'}" + "".join(f"; skipped {n}: {why}" for n, why in skipped))
    print(f"time: quantize only; first call (includes JIT compile or cache load), then median of {args.repeats}; "
          "GB/s = (input + scales + codes bytes) / median"
          + ("; cuda times include copying the NumPy arrays to and from the GPU" if "cuda" in run else ""))
    print(HEADER, flush=True)
    mismatches = 0
    for row in demo.run_demo(backends=run, repeats=args.repeats, x=x):
        mismatches += not row.equals_reference
        print(format_row(row), flush=True)
    print(_machine_line(demo.machine_info()))
    if mismatches:
        print(f"error: {mismatches} row(s) differ from the reference backend", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nbquant`` command line and return its exit status.

    Sets ``OMP_WAIT_POLICY=PASSIVE`` (unless already set) before numba starts its
    OpenMP threads: with the default policy idle OpenMP workers spin and stall short
    parallel calls by milliseconds.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success, 1 if a backend's codes differ from the reference backend's.
        Bad arguments raise :class:`SystemExit` with status 2 and a message on stderr.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args = _build_parser().parse_args(argv)
    if args.command == "demo":
        try:
            return _demo(args)
        except BrokenPipeError:  # e.g. `nbquant demo | head`: stop quietly, as other Unix tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse only accepts known commands


if __name__ == "__main__":
    sys.exit(main())
