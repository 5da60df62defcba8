"""``python -m benchmarks.convert_gguf``: ``nbquant convert IN.gguf`` against ``llama-quantize``, whole process.

It writes a synthetic BF16 Llama-shaped GGUF (594 MiB: hidden 2048, intermediate 5632, 4 layers,
vocabulary 32000; Student-t weights; :func:`nbquant.convert.gguf.write_synthetic_gguf`), warms
nbquant's compile cache on a small file, then runs each tool as its own process under
``/usr/bin/time -v`` (wall time, peak RSS), alternating the two, ``--repeats`` times per scheme,
with the same thread count, and compares the last outputs byte for byte.

nbquant runs as ``python -m nbquant convert SRC DST --scheme S --workers N --quiet --overwrite``
(no table, so no SQNR: the conversion only, as llama-quantize does); the peer as
``llama-quantize SRC DST S N``, the executable given by ``--llama-quantize`` (default: built by
``tools/ggml_oracle.py quantize``, which takes minutes).

Examples
--------
Shell::

    $ python -m benchmarks.convert_gguf --schemes Q4_K_M,Q8_0 --threads 2 --repeats 3 \\
          --llama-quantize /tmp/ggml-oracle/build-tools/bin/llama-quantize
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.convert import ROOT, timed

SHAPE = {"hidden": 2048, "intermediate": 5632, "layers": 4, "vocab": 32000}
SMOKE = {"hidden": 256, "intermediate": 512, "layers": 2, "vocab": 256}


def _llama_quantize(given: str | None) -> str:
    if given:
        return given
    spec = importlib.util.spec_from_file_location("ggml_oracle", ROOT / "tools" / "ggml_oracle.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return str(mod.build_quantize())


def _same(a: Path, b: Path) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 24), fb.read(1 << 24)
            if x != y:
                return False
            if not x:
                return True


def run(args: argparse.Namespace) -> dict:
    from nbquant.convert.gguf import convert_gguf, write_synthetic_gguf

    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    src = work / "model-BF16.gguf"
    if not src.exists():
        write_synthetic_gguf(src, **(SMOKE if args.smoke else SHAPE))
    small = write_synthetic_gguf(work / "warm.gguf", **SMOKE)
    peer = _llama_quantize(args.llama_quantize)
    results = {}
    for scheme in args.schemes.split(","):
        convert_gguf(small, work / "warm-out.gguf", scheme, overwrite=True, progress=False)  # the compile cache
        ours, theirs = work / f"nbquant-{scheme}.gguf", work / f"llama-{scheme}.gguf"
        rows = {"nbquant": [], "llama-quantize": []}
        for _ in range(args.repeats):
            rows["nbquant"].append(timed([sys.executable, "-m", "nbquant", "convert", str(src), str(ours), "--scheme",
                                          scheme, "--workers", str(args.threads), "--quiet", "--overwrite"]))
            rows["llama-quantize"].append(timed([peer, str(src), str(theirs), scheme, str(args.threads)]))
        results[scheme] = {tool: {"seconds": statistics.median(t for t, _ in r), "rss_mib": max(m for _, m in r) / 1024,
                                  "runs": r} for tool, r in rows.items()}
        results[scheme]["identical"] = _same(ours, theirs)
        a, b = results[scheme]["nbquant"], results[scheme]["llama-quantize"]
        print(f"{scheme:8s} identical={results[scheme]['identical']}  nbquant {a['seconds']:.2f} s "
              f"{a['rss_mib']:.0f} MiB  llama-quantize {b['seconds']:.2f} s {b['rss_mib']:.0f} MiB  "
              f"speed-up {b['seconds'] / a['seconds']:.2f}x", flush=True)
    return {"source_mib": os.path.getsize(src) / 2**20, "threads": args.threads, "schemes": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.convert_gguf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "nbquant-convert-gguf-bench"))
    parser.add_argument("--schemes", default="Q4_K_M,Q8_0")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--llama-quantize", default=None, help="the llama-quantize executable")
    parser.add_argument("--json", default=None, help="write the results there")
    parser.add_argument("--smoke", action="store_true", help="a small file, one repeat")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats = 1
    out = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
