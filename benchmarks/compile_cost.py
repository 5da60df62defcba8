"""Compile cost of every cpu kernel signature a public call compiles: cold compile, cache load, specialisations.

``python -m benchmarks.compile_cost [--targets int8,nvfp4] [--dtype float32] [--json FILE]`` runs each
target of :data:`nbquant.precompile.TARGETS` (``--targets``: those whose name contains one of the
comma-separated substrings; default the ``demo`` group, NF4 and dynamic int8) twice, each time in a
fresh interpreter sharing one new, empty ``NUMBA_CACHE_DIR``:

* **cold**: every kernel signature the target's calls need is compiled. Per signature (Numba's
  ``numba:compile`` event, outermost): the wall seconds, the CPU seconds of the compiling thread
  (what the compile costs whatever the machine's load), and where they went (Numba's pipeline:
  the front end and inlining, type inference, lowering to LLVM IR with LLVM's optimisation and
  code generation; ``llvm`` is the time under Numba's LLVM lock);
* **warm**: the same calls load every signature from the cache; per signature the milliseconds of
  :meth:`numba.core.caching.Cache.load_overload`.

It prints one line per (target, kernel, signature) and a summary per target: the signatures
compiled (the specialisations a public call costs), the cold first call, the warm first call.
``--json`` writes every figure. A cold run of the default targets takes minutes on 2 cores.
The CPU seconds are the figures to compare across runs on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

#: Targets measured when ``--targets`` is not given.
DEFAULT_TARGETS = ("demo", "nf4", "dynamic-int8")
#: The pipeline passes summed into each phase of a compile (by the name after Numba's ``N_`` prefix).
PHASES = {"typing": ("nopython_type_inference",), "lowering": ("native_lowering",)}


def _short(sig) -> str:
    """A signature as a short string: ``array(float32, 3d, C)`` becomes ``f32[3C]``, literals kept."""
    import re

    text = ", ".join(str(a) for a in sig)
    text = re.sub(r"readonly array\((\w+), (\d)d, (\w)\)", lambda m: f"ro {m[1]}[{m[2]}{m[3]}]", text)
    text = re.sub(r"array\((\w+), (\d)d, (\w)\)", lambda m: f"{m[1]}[{m[2]}{m[3]}]", text)
    for long, short in (("float", "f"), ("uint", "u"), ("int", "i"), ("bool", "b")):
        text = text.replace(long, short)
    return text


def _phases(dispatcher, sig) -> dict[str, float]:
    """Seconds of type inference, lowering and under the LLVM lock of one compiled signature."""
    try:
        meta = dispatcher.get_metadata(sig)
    except (KeyError, AttributeError):
        return {}
    passes = meta.get("pipeline_times", {}).get("nopython", {})
    phases = {name: sum(t.run for key, t in passes.items() if key.split("_", 1)[1] in names)
              for name, names in PHASES.items()}
    phases["front"] = sum(t.run for t in passes.values()) - sum(phases.values())
    phases["llvm"] = meta.get("timers", {}).get("llvm_lock", 0.0)
    return phases


def measure(target: str, dtype: str) -> dict:
    """Run ``target`` for ``dtype`` in this process and return what it compiled and loaded (the child's job)."""
    from numba.core import caching, event

    from nbquant.backends.cpu._kernel import KernelCache
    from nbquant.precompile import TARGETS
    from nbquant.threads import thread_limit

    compiled: list[dict] = []
    loaded: list[dict] = []
    stack: list[tuple[float, float]] = []

    class Listener(event.Listener):
        def on_start(self, ev) -> None:
            stack.append((time.perf_counter(), time.thread_time()))

        def on_end(self, ev) -> None:
            wall, cpu = stack.pop()
            if not stack:
                d = ev.data["dispatcher"]
                compiled.append({"kernel": d.py_func.__qualname__, "module": d.py_func.__module__,
                                 "signature": _short(ev.data["args"]), "wall_s": time.perf_counter() - wall,
                                 "cpu_s": time.thread_time() - cpu, "_sig": (d, tuple(ev.data["args"]))})

    def timed(original):
        def timed_load(self, sig, target_context):
            start = time.perf_counter()
            result = original(self, sig, target_context)
            if result is not None:
                loaded.append({"kernel": self._py_func.__qualname__, "signature": _short(result.signature.args),
                               "load_ms": (time.perf_counter() - start) * 1e3})
            return result

        return timed_load

    # the cpu kernels' cache class loads without calling Numba's; any other cached dispatcher uses Numba's
    originals = {cls: cls.load_overload for cls in (caching.Cache, KernelCache)}
    for cls, original in originals.items():
        cls.load_overload = timed(original)
    try:
        start, cpu = time.perf_counter(), time.process_time()
        with event.install_listener("numba:compile", Listener()), thread_limit(1):
            TARGETS[target](dtype)
        first_s, first_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    finally:
        for cls, original in originals.items():
            cls.load_overload = original
    for row in compiled:
        row.update(_phases(*row.pop("_sig")))
    return {"target": target, "dtype": dtype, "first_s": first_s, "first_cpu_s": first_cpu_s,
            "compiled": compiled, "loaded": loaded}


def _child(target: str, dtype: str, cache: str, timeout: float) -> dict:
    """:func:`measure` in a fresh interpreter with ``NUMBA_CACHE_DIR=cache``."""
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    code = ("import json, sys; from benchmarks.compile_cost import measure; "
            f"print(json.dumps(measure({target!r}, {dtype!r})))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if done.returncode:
        raise RuntimeError(f"{target} ({dtype}) failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_target(target: str, dtype: str = "float32", timeout: float = 1800.0) -> dict:
    """Cold then warm :func:`measure` of ``target`` in two fresh interpreters sharing a new, empty cache."""
    with tempfile.TemporaryDirectory(prefix="nbquant-compile-cost-") as cache:
        cold = _child(target, dtype, cache, timeout)
        warm = _child(target, dtype, cache, timeout)
    loads = {(r["kernel"], r["signature"]): r["load_ms"] for r in warm["loaded"]}
    for row in cold["compiled"]:
        row["load_ms"] = loads.get((row["kernel"], row["signature"]))
    return {"target": target, "dtype": dtype, "signatures": cold["compiled"], "cold_first_s": cold["first_s"],
            "cold_first_cpu_s": cold["first_cpu_s"], "warm_first_ms": warm["first_s"] * 1e3,
            "warm_compiled": len(warm["compiled"])}


HEADER = (f"{'target':22} {'kernel':28} {'wall s':>7} {'cpu s':>6} {'front':>6} {'typing':>6} {'lower':>6} "
          f"{'llvm':>6} {'load ms':>8}  signature")


def format_rows(result: dict) -> list[str]:
    """The table lines of one :func:`run_target` result: one per signature, then the target's summary."""
    lines = []
    for r in result["signatures"]:
        load = "-" if r.get("load_ms") is None else f"{r['load_ms']:.1f}"
        lines.append(f"{result['target']:22} {r['kernel']:28} {r['wall_s']:7.2f} {r['cpu_s']:6.2f} "
                     f"{r.get('front', 0):6.2f} {r.get('typing', 0):6.2f} {r.get('lowering', 0):6.2f} "
                     f"{r.get('llvm', 0):6.2f} {load:>8}  {r['signature']}")
    lines.append(f"{result['target']:22} = {len(result['signatures'])} signature(s) compiled; cold first call "
                 f"{result['cold_first_s']:.2f} s ({result['cold_first_cpu_s']:.2f} s cpu), warm first call "
                 f"{result['warm_first_ms']:.1f} ms ({result['warm_compiled']} compiled warm)")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the targets, print the table (and write ``--json``)."""
    from nbquant.precompile import resolve_targets

    parser = argparse.ArgumentParser(prog="python -m benchmarks.compile_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default="", help="comma-separated substrings of target names (default: the "
                                                       "demo group, nf4, dynamic-int8)")
    parser.add_argument("--dtype", default="float32", help="input dtype (default float32)")
    parser.add_argument("--json", metavar="FILE", help="write every figure there")
    args = parser.parse_args(argv)
    names = resolve_targets(DEFAULT_TARGETS)
    if args.targets:
        wanted = [w for w in args.targets.split(",") if w]
        names = [n for n in resolve_targets(["all"]) if any(w in n for w in wanted)]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"compile cost, {args.dtype}, load average {load:.2f} on {os.cpu_count()} cpus; cold = a fresh "
          "NUMBA_CACHE_DIR; seconds are per signature, cpu = the compiling thread's cpu time")
    print(HEADER, flush=True)
    results = []
    for name in names:
        result = run_target(name, args.dtype)
        results.append(result)
        print("\n".join(format_rows(result)), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_average": load, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
