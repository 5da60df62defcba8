"""Start-up costs, each in a fresh interpreter: ``import nbquant``, the first call cold and cached, compile costs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

_FIRST_CALL = """
import numpy as np, nbquant
nbquant.quantize(np.ones(1024, np.float32), np.float32(0.5), "int8", backend="cpu")
"""
_CACHED_SETUP = "import os; os.environ['NUMBA_CACHE_DIR'] = {path!r}"
_COLD_SETUP = "import os, tempfile; os.environ['NUMBA_CACHE_DIR'] = tempfile.mkdtemp(prefix='nbquant-asv-cold-')"


class Startup:
    """``timeraw_`` benchmarks: the returned code is timed in a new process (asv ``timeraw``)."""

    timeout = 300
    repeat = (3, 10, 60.0)

    def setup(self):
        self.cached_dir = os.path.join(tempfile.gettempdir(), f"nbquant-asv-numba-cache-{os.getuid()}")
        env = dict(os.environ, NUMBA_CACHE_DIR=self.cached_dir)
        subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, check=True, timeout=300)

    def timeraw_import_nbquant(self):
        """``import nbquant``."""
        return "import nbquant"

    def timeraw_first_call_cold(self):
        """Import plus the first int8 quantize with an empty kernel cache (JIT compile)."""
        return _FIRST_CALL, _COLD_SETUP

    def timeraw_first_call_cached(self):
        """Import plus the first int8 quantize with the kernel cache filled by ``setup``."""
        return _FIRST_CALL, _CACHED_SETUP.format(path=self.cached_dir)


#: A child's job: run one precompile target with a listener on Numba's compiles; print the figures as JSON.
_COMPILE_CHILD = """
import json, sys, time
from numba.core import event
from nbquant.precompile import TARGETS
depth, rows = [0], []
class Listener(event.Listener):
    def on_start(self, ev):
        if depth[0] == 0:
            rows.append(time.thread_time())
        depth[0] += 1
    def on_end(self, ev):
        depth[0] -= 1
        if depth[0] == 0:
            rows[-1] = time.thread_time() - rows[-1]
start = time.perf_counter()
with event.install_listener("numba:compile", Listener()):
    TARGETS[sys.argv[1]]("float32")
print(json.dumps({"first_s": time.perf_counter() - start, "cpu_s": rows}))
"""
#: The targets tracked (``nbquant.precompile.TARGETS``): one per kernel family of the demo; quick mode the first.
COMPILE_TARGETS = ["int8-per-tensor", "int4-group-packed", "fp8-e4m3-per-channel", "mxfp8-e4m3", "nvfp4", "nf4"]


def _compile_child(target: str, cache: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, NBQUANT_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", _COMPILE_CHILD, target], env=env, capture_output=True, text=True,
                          check=True, timeout=1800)
    return json.loads(done.stdout.strip().splitlines()[-1])


class CompileCost:
    """``track_`` benchmarks of what a public call costs to compile: each target cold, then warm, in fresh processes.

    Per target of ``nbquant.precompile`` (a public call and its inverse): the kernel
    signatures compiled with an empty cache, the cpu seconds of those compiles (the
    compiling thread's, so a loaded machine inflates them less than wall time), and the
    first call of a second process that loads them from the cache. ``setup_cache``
    measures every target once (minutes on 2 cores); commits before ``nbquant.precompile``
    are skipped.
    """

    params = [COMPILE_TARGETS[:1] if os.environ.get("NBQUANT_ASV_QUICK", "0") == "1" else COMPILE_TARGETS]
    param_names = ["target"]
    timeout = 3600

    def setup_cache(self):
        try:
            import nbquant.precompile  # noqa: F401 - commits without it have nothing to track
        except ImportError as e:
            raise NotImplementedError("nbquant.precompile is not in this commit") from e
        figures = {}
        for target in self.params[0]:
            with tempfile.TemporaryDirectory(prefix="nbquant-asv-compile-") as cache:
                cold = _compile_child(target, cache)
                warm = _compile_child(target, cache)
            figures[target] = {"signatures": len(cold["cpu_s"]), "cold_cpu_s": sum(cold["cpu_s"]),
                               "max_cpu_s": max(cold["cpu_s"], default=0.0), "warm_first_ms": warm["first_s"] * 1e3}
        return figures

    def track_signatures_compiled(self, figures, target):
        """Kernel signatures a cold first call (and its inverse) compiles."""
        return figures[target]["signatures"]

    track_signatures_compiled.unit = "signatures"

    def track_cold_compile_cpu_s(self, figures, target):
        """Cpu seconds of every compile of the cold first calls."""
        return figures[target]["cold_cpu_s"]

    track_cold_compile_cpu_s.unit = "seconds"

    def track_slowest_signature_cpu_s(self, figures, target):
        """Cpu seconds of the slowest single signature (issue 30's bound: 2 s on the 2-core machine)."""
        return figures[target]["max_cpu_s"]

    track_slowest_signature_cpu_s.unit = "seconds"

    def track_cache_load_first_call_ms(self, figures, target):
        """Milliseconds of the same calls in a new process, every kernel loaded from the cache."""
        return figures[target]["warm_first_ms"]

    track_cache_load_first_call_ms.unit = "ms"
