"""Where a small call's microseconds go: the fixed cost of a public call, by step.

``python -m benchmarks.small_call [--n 4096] [--calls 20000]`` times
``nbquant.quantize(x, scale, "int8", backend="cpu")`` on ``--n`` float32 elements (per-tensor
scale; issue 30's small call), then the same call with ``out=``, the kernel object alone
(:class:`~nbquant.backends.cpu._kernel.CpuKernel`), Numba's dispatcher alone, and NumPy's
``clip(rint(x / s))`` and onnxruntime's ``QuantizeLinear`` when installed (the peers' fixed
cost). Each figure is the best of 7 loops of ``--calls // 7`` calls, in µs per call.

Then it runs ``--calls`` calls under :mod:`cProfile` and charges each function's own time
(``tottime``) to the step its module belongs to (:data:`STEPS`: validation, layout, backend
choice, output allocation, thread count, the kernel call, the rest of the front door), scaled
so that the steps add up to the unprofiled call: a profile of where the time goes, not a timing
(cProfile's own cost falls hardest on small Python functions). The kernel's compile is not
timed: one call comes first.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

#: Steps of a call, by the module (a substring of its path or name) a function is defined in; first match wins.
STEPS = (
    ("validation", ("nbquant/validation.py", "nbquant/formats.py", "nbquant/modes.py", "nbquant/spec.py")),
    ("layout", ("nbquant/layout.py",)),
    ("backend choice", ("nbquant/backends/__init__.py", "nbquant/backends/_device.py", "nbquant/_dask/")),
    ("output allocation", ("nbquant/_memory.py", "nbquant/codes.py")),
    ("thread count", ("nbquant/threads.py",)),
    ("kernel call (numba dispatch + kernel)", ("nbquant/backends/cpu/_kernel.py",
                                              "nbquant/backends/cpu/elementwise.py", "<built-in method builtins.sum>")),
    ("cpu backend glue", ("nbquant/backends/cpu/", "nbquant/backends/_views.py")),
    ("front door (api)", ("nbquant/api.py",)),
)


def best_us(call: Callable[[], object], calls: int) -> float:
    """µs per call: the best of 7 loops of ``calls // 7`` calls."""
    per_loop = max(1, calls // 7)
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(per_loop):
            call()
        best = min(best, (time.perf_counter() - start) / per_loop)
    return best * 1e6


def _step(filename: str, name: str) -> str:
    where = f"{filename}:{name}".replace("\\", "/")
    for step, markers in STEPS:
        if any(m in where for m in markers):
            return step
    return "python and numpy (other)"


def profile_steps(call: Callable[[], object], calls: int) -> Counter:
    """Seconds of own time per step over ``calls`` profiled calls."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    steps: Counter = Counter()
    for (filename, _, name), (_, _, tottime, _, _) in pstats.Stats(profiler).stats.items():
        steps[_step(filename, name)] += tottime
    return steps


def _onnxruntime(x: np.ndarray, scale: np.float32) -> Callable[[], object] | None:
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, list(x.shape))],
                              [helper.make_tensor("s", TensorProto.FLOAT, [], [float(scale)]),
                               helper.make_tensor("z", TensorProto.INT8, [], [0])])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as benchmarks.onnxruntime_peers
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"x": x})


def main(argv: Sequence[str] | None = None) -> int:
    """Print the timings and the profile by step."""
    import os

    import nbquant

    parser = argparse.ArgumentParser(prog="python -m benchmarks.small_call", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4096, help="elements (default 4096)")
    parser.add_argument("--calls", type=int, default=20000, help="calls timed and profiled (default 20000)")
    args = parser.parse_args(argv)
    x = np.random.default_rng(0).standard_normal(args.n).astype(np.float32)
    scale = np.float32(0.02)
    out = np.empty(args.n, np.int8)

    def call():
        return nbquant.quantize(x, scale, "int8", backend="cpu")

    call()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"small call: quantize {args.n} float32 -> int8 per-tensor, cpu backend; load average {load:.2f}")
    rows = [("nbquant.quantize", call), ("nbquant.quantize(out=)",
                                         lambda: nbquant.quantize(x, scale, "int8", backend="cpu", out=out)),
            ("numpy clip(rint(x / s)).astype", lambda: np.clip(np.rint(x / scale), -128, 127).astype(np.int8))]
    ort_call = _onnxruntime(x, scale)
    if ort_call is not None:
        rows.append(("onnxruntime QuantizeLinear (1 thread, no spinning)", ort_call))
    times = [best_us(fn, args.calls) for _, fn in rows]
    for (name, _), us in zip(rows, times, strict=True):
        print(f"{us:9.2f} us  {name}")
    total = times[0]
    steps = profile_steps(call, args.calls)
    profiled = sum(steps.values())
    print(f"by step (cProfile own time, scaled to the {total:.2f} us call):")
    for step, seconds in steps.most_common():
        print(f"{seconds / profiled * total:9.2f} us  {seconds / profiled:6.1%}  {step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
