"""``python -m benchmarks.gguf_quantize``: nbquant's GGUF quantize against ggml's C, one thread each.

Each format quantizes the same float32 matrix (``standard_normal``, ``--rows`` x 4096)
through nbquant's ``cpu`` backend with one thread and through ggml's
``ggml_quantize_chunk`` (the ``ggml-base`` library of ``tools/ggml_oracle.py``, which
``$NBQUANT_GGML_ORACLE_DIR`` locates; single-threaded), alternating the two
``--repeats`` times after a warm-up call; it prints the medians, their ratio, whether
the records are equal byte for byte, and the load average.

With ``--device cuda`` it times the cuda backend instead, on a device copy of the matrix
(``nbquant.block_rows.quantize_blocks``, each call timed to its end), against the cpu
backend on every core, and compares the two outputs byte for byte (no C oracle needed).

Examples
--------
Shell::

    $ NBQUANT_GGML_ORACLE_DIR=/tmp/oracleO0 python -m benchmarks.gguf_quantize --formats Q4_K,Q6_K --repeats 5
    $ python -m benchmarks.gguf_quantize --device cuda --formats Q8_0,Q4_K,IQ4_XS
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.convert import ROOT

#: The formats this benchmark knows (``--formats`` takes a comma-separated selection).
FORMATS = ("Q8_0", "Q4_0", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS")


def _oracle():
    spec = importlib.util.spec_from_file_location("ggml_oracle", ROOT / "tools" / "ggml_oracle.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.GgmlOracle(mod.build_library())


def run(args: argparse.Namespace) -> dict:
    from nbquant import gguf
    from nbquant.threads import thread_limit

    oracle = _oracle()
    x = np.random.default_rng(0).standard_normal((args.rows, 4096), dtype=np.float32)
    imatrix = np.random.default_rng(1).random(4096, dtype=np.float32) + np.float32(0.1) if args.imatrix else None
    results = {"rows": args.rows, "imatrix": args.imatrix, "load": os.getloadavg()[0], "formats": {}}
    for name in args.formats.split(","):
        kind = gguf.get_format(name).type_id
        with thread_limit(1):
            gguf.quantize(x[:4], name, imatrix=imatrix, backend="cpu")  # compile (or load) the kernel
            ours, theirs = [], []
            for _ in range(args.repeats):
                t = time.perf_counter()
                a = gguf.quantize(x, name, imatrix=imatrix, backend="cpu")
                ours.append(time.perf_counter() - t)
                t = time.perf_counter()
                b = oracle.quantize(x, kind, imatrix)
                theirs.append(time.perf_counter() - t)
        row = {"nbquant_s": statistics.median(ours), "ggml_s": statistics.median(theirs), "equal": bool((a == b).all())}
        row["ratio"] = row["ggml_s"] / row["nbquant_s"]
        results["formats"][name] = row
        print(f"{name}: nbquant {row['nbquant_s']:.3f} s, ggml C {row['ggml_s']:.3f} s, "
              f"C / nbquant {row['ratio']:.2f}x, equal {row['equal']}", flush=True)
    results["load_after"] = os.getloadavg()[0]
    print(f"load average {results['load']:.1f} before, {results['load_after']:.1f} after")
    return results


def _timed(call, repeats: int, sync=lambda: None) -> tuple[float, object]:
    """The median seconds of ``repeats`` calls after a warm-up, and the last result."""
    result, times = call(), []
    sync()
    for _ in range(repeats):
        t = time.perf_counter()
        result = call()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def run_cuda(args: argparse.Namespace) -> dict:
    """The cuda backend on device arrays against the cpu backend on every core, per format."""
    from numba import cuda

    from nbquant.backends.cuda.runtime import to_device, to_host
    from nbquant.block_rows import quantize_blocks
    from nbquant.blocks import get_block_format

    x = np.random.default_rng(0).standard_normal((args.rows, 4096), dtype=np.float32)
    d_x = to_device(x)
    results = {"rows": args.rows, "formats": {}}
    for name in args.formats.split(","):
        fmt = get_block_format("gguf_" + name.lower())
        t_gpu, ((d_rec,), _) = _timed(lambda f=fmt: quantize_blocks(f, d_x, backend="cuda"), args.repeats,
                                      cuda.synchronize)
        t_cpu, ((rec,), _) = _timed(lambda f=fmt: quantize_blocks(f, x, backend="cpu"), args.repeats)
        row = {"cuda_s": t_gpu, "cpu_s": t_cpu, "cuda_GBps": (x.nbytes + rec.nbytes) / t_gpu / 1e9,
               "equal": bool((to_host(d_rec) == rec).all())}
        results["formats"][name] = row
        print(f"{name}: cuda {t_gpu * 1e3:.3f} ms ({row['cuda_GBps']:.0f} GB/s read + written), "
              f"cpu backend ({os.cpu_count()} cores) {t_cpu * 1e3:.1f} ms, cpu / cuda {t_cpu / t_gpu:.1f}x, "
              f"equal {row['equal']}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gguf_quantize", description=__doc__.split("\n\n")[0])
    parser.add_argument("--formats", default="Q4_K,Q5_K,Q6_K")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--imatrix", action="store_true", help="with a random importance matrix")
    parser.add_argument("--json", default=None, help="write the results there")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu: one thread against ggml's C (default); cuda: the GPU against the cpu backend")
    args = parser.parse_args(argv)
    out = run_cuda(args) if args.device == "cuda" else run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
