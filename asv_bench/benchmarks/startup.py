"""Start-up costs, each in a fresh interpreter: ``import nbquant`` and the first call, cold and cached."""

from __future__ import annotations

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
