"""Per-element cost of the CPU kernels on one thread, cache-resident: what each kernel costs besides memory.

``python -m benchmarks.kernel_cost [--n 2^20] [--repeats 30]`` times each case on 4 MiB of
float32 (L3-resident on the benchmark machine) with one nbquant thread and prints the best
time as ns and cycles per element (at the ``--ghz`` given). A kernel whose cost per
element on one thread exceeds the time the memory needs per element on all threads
(``bytes / bandwidth * threads``) is compute-bound; docs/performance.md records the figures.
"""

from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np


def _cases(x: np.ndarray) -> dict:
    import nbquant

    n = x.size
    rows = x.reshape(-1, 1024)
    outs = {"int8": np.empty(n, np.int8), "fp8": np.empty(n, ml_dtypes.float8_e4m3fn),
            "fp4": np.empty(n, ml_dtypes.float4_e2m1fn)}
    return {
        "q int8 per-tensor": lambda: nbquant.quantize(x, np.float32(0.05), "int8", out=outs["int8"]),
        "q fp8 e4m3 per-tensor": lambda: nbquant.quantize(x, np.float32(0.05), "float8_e4m3fn", out=outs["fp8"]),
        "q fp4 e2m1 per-tensor": lambda: nbquant.quantize(x, np.float32(0.5), "float4_e2m1fn", out=outs["fp4"]),
        "q mxfp4 (block 32)": lambda: nbquant.quantize_mx(rows, "mxfp4"),
        "q mxfp8 e4m3 (block 32)": lambda: nbquant.quantize_mx(rows, "mxfp8_e4m3"),
        "q nvfp4 (block 16)": lambda: nbquant.quantize_nvfp4(rows),
        "q nf4 (block 64)": lambda: nbquant.quantize_nf4(x, block_size=64),
    }


def main(argv: list[str] | None = None) -> None:
    """Print the best time per element of each case on one thread."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kernel_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="2^20", help="float32 elements (default 2^20: 4 MiB)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--ghz", type=float, default=3.0, help="clock for the cycles column (default 3.0)")
    args = parser.parse_args(argv)
    base, _, power = args.n.partition("^")
    n = int(base) ** int(power) if power else int(base)
    import nbquant

    previous = nbquant.get_num_threads()
    nbquant.set_num_threads(1)
    try:
        x = (np.random.default_rng(0).standard_normal(n) * 3).astype(np.float32)
        print(f"one thread, n = {n} float32 ({n * 4 >> 20} MiB), best of {args.repeats}; cycles at {args.ghz} GHz")
        print(f"{'case':28s} {'best ms':>9s} {'ns/elem':>8s} {'cycles/elem':>12s}")
        for name, call in _cases(x).items():
            call()
            best = min(_timed(call) for _ in range(args.repeats))
            print(f"{name:28s} {best * 1e3:9.3f} {best / n * 1e9:8.3f} {best / n * args.ghz * 1e9:12.2f}")
    finally:
        nbquant.set_num_threads(previous)


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
