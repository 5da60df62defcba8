"""The cpu kernels' on-disk compile cache never makes a call fail (nbquant/backends/cpu/_kernel.py).

Each case runs fresh processes on a temporary ``NUMBA_CACHE_DIR`` (the shared cache is
never touched), each doing one int8 quantize of a 4x8 array with ``backend="auto"`` and
reporting the codes, the warnings it saw and whether the kernel was compiled or loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The codes of ``(arange(32) - 16).reshape(4, 8)`` at scale 0.5.
CODES = list(range(-32, 32, 2))
#: One process: the environment failure named by argv[1] ("none", "no-locator", "full-disk"), then one call.
SCRIPT = """
import errno, json, sys, warnings
import numpy as np
from numba.core import caching
if sys.argv[1] == "no-locator":  # what a read-only package dir and a read-only HOME leave numba
    caching.CacheImpl._locator_classes = []
if sys.argv[1] == "full-disk":
    def _full(self, filepath):
        raise OSError(errno.ENOSPC, "No space left on device", filepath)
    caching.IndexDataCacheFile._open_for_write = _full
import nbquant
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    q = nbquant.quantize((np.arange(32, dtype=np.float32) - 16).reshape(4, 8), 0.5, "int8")
from nbquant.backends.cpu.elementwise import quantize_kernel
stats = quantize_kernel.dispatcher.stats
print(json.dumps({"codes": q.ravel().tolist(), "warnings": [[w.category.__name__, str(w.message)] for w in caught],
                  "cpu": [list(b) for b in nbquant.backends() if b.name == "cpu"][0],
                  "loaded": sum(stats.cache_hits.values()), "compiled": sum(stats.cache_misses.values())}))
"""


def _run(cache_dir: Path, failure: str = "none") -> dict:
    """Run :data:`SCRIPT` in a new process with ``NUMBA_CACHE_DIR=cache_dir``; return its report."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}
    for name in ("NBQUANT_BACKEND", "NUMBA_CACHE_LOCATOR_CLASSES", "NUMBA_DISABLE_JIT"):
        env.pop(name, None)
    res = subprocess.run([sys.executable, "-c", SCRIPT, failure], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _cache_files(cache_dir: Path) -> list[str]:
    return sorted(p.name for p in cache_dir.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory) -> Path:
    """A cache directory holding the int8 quantize kernel, written by one process."""
    cache_dir = tmp_path_factory.mktemp("warm-cache")
    report = _run(cache_dir)
    assert (report["codes"], report["warnings"], report["compiled"]) == (CODES, [], 1)
    return cache_dir


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(np.random.default_rng(14).bytes(len(data)))


_MORE = pytest.mark.full(reason="more kinds of damage, two new processes (~5 s) each")


@pytest.mark.parametrize(("suffix", "how"), [
    (".nbi", "truncated"),
    (".nbc", "garbage"),
    pytest.param(".nbi", "empty", marks=_MORE),
    pytest.param(".nbi", "garbage", marks=_MORE),
    pytest.param(".nbc", "empty", marks=_MORE),
    pytest.param(".nbc", "truncated", marks=_MORE),
])
def test_damaged_cache_file_is_recompiled_and_rewritten(warm_cache, tmp_path, suffix, how):
    """A truncated or overwritten index or data file: the next process recompiles and rewrites it, one after loads it.

    Numba 0.68 raises ``EOFError`` (an empty file) or ``UnpicklingError`` (truncated,
    garbage) unpickling it; before the fix every call of every process raised it.
    """
    cache_dir = tmp_path / "cache"
    shutil.copytree(warm_cache, cache_dir)
    [damaged] = [p for p in cache_dir.rglob(f"*{suffix}") if "quantize_kernel" in p.name]
    _damage(damaged, how)

    report = _run(cache_dir)  # the damaged entry is a miss: compiled again, and rewritten
    assert report["codes"] == CODES
    [[category, message]] = report["warnings"]
    assert category == "NumbaCacheWarning"
    assert message.startswith(f"nbquant: the compile cache file {damaged} is damaged (")
    assert message.endswith("); the kernel is recompiled and the file rewritten")
    assert (report["compiled"], report["loaded"]) == (1, 0)

    report = _run(cache_dir)  # the next process loads the rewritten entry
    assert (report["codes"], report["warnings"], report["compiled"], report["loaded"]) == (CODES, [], 0, 1)
    assert _cache_files(cache_dir) == _cache_files(warm_cache)


def test_no_cache_location_compiles_uncached_with_one_warning(tmp_path):
    """No locator applies (read-only package dir and HOME): the cpu backend runs uncached and stays available.

    Numba raises "no locator available" where ``njit(cache=True)`` builds the cache, when
    a kernel is defined: before the fix, importing the cpu backend (every cpu call) failed.
    """
    report = _run(tmp_path, "no-locator")
    assert report["codes"] == CODES
    assert report["cpu"] == ["cpu", True, "available"]  # and "auto" ran it: its kernel was compiled
    assert (report["compiled"], report["loaded"]) == (1, 0)
    [[category, message]] = report["warnings"]  # one for every kernel of the cpu backend
    assert category == "NumbaCacheWarning"
    assert message.startswith("nbquant: no writable location for the compile cache of the cpu kernels")
    assert "every process compiles each kernel it uses again" in message
    assert message.endswith("Set NUMBA_CACHE_DIR to a writable directory to cache them.")
    assert _cache_files(tmp_path) == []


def test_failed_cache_write_is_skipped_with_one_warning(tmp_path):
    """A cache write that fails (here a full disk) leaves the call to succeed, uncached."""
    report = _run(tmp_path, "full-disk")
    assert report["codes"] == CODES
    assert (report["compiled"], report["loaded"]) == (1, 0)
    [[category, message]] = report["warnings"]
    assert category == "NumbaCacheWarning"
    assert message.startswith(f"nbquant: cannot write the compile cache in {tmp_path}")
    assert "[Errno 28] No space left on device" in message
    assert _cache_files(tmp_path) == []
