"""``python -m benchmarks.gguf_quantize``: nbquant's GGUF quantize against ggml's C, one thread each.

Each format quantizes the same float32 matrix (``standard_normal``, ``--rows`` x 4096)
through nbquant's ``cpu`` backend with one thread and through ggml's
``ggml_quantize_chunk`` (the ``ggml-base`` library of ``tools/ggml_oracle.py``, which
``$NBQUANT_GGML_ORACLE_DIR`` locates; single-threaded), alternating the two
``--repeats`` times after a warm-up call; it prints the medians, their ratio, whether
the records are equal byte for byte, and the load average.

Examples
--------
Shell::

    $ NBQUANT_GGML_ORACLE_DIR=/tmp/oracleO0 python -m benchmarks.gguf_quantize --formats Q4_K,Q6_K --repeats 5
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gguf_quantize", description=__doc__.split("\n\n")[0])
    parser.add_argument("--formats", default="Q4_K,Q5_K,Q6_K")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--imatrix", action="store_true", help="with a random importance matrix")
    parser.add_argument("--json", default=None, help="write the results there")
    args = parser.parse_args(argv)
    out = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
