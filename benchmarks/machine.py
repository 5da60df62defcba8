"""The header of the ratio benchmark's report: the machine, the software versions and the git state."""

from __future__ import annotations

import importlib
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

import nbquant

from .threads import OPENMP_PRELOADED


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str:
    """The short commit of the nbquant being timed, flagged when its package directory has uncommitted changes."""
    try:
        here = Path(nbquant.__file__).parent
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=here, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], capture_output=True, text=True,
                               cwd=here, timeout=5).stdout.strip()
        return (head + (" + uncommitted changes in nbquant/" if dirty else "")) or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_info(commit: str | None = None) -> list[str]:
    """Lines describing the machine and the software (call after the first parallel call).

    Parameters
    ----------
    commit : str, optional
        The git state taken when the run started (default: :func:`git_commit` now).

    Returns
    -------
    list of str
        The machine and its load; the versions, numba's threading layer and threads; the
        peers imported, the OpenMP wait policy and, when onnxruntime was imported, its
        sessions' settings (no spinning, nbquant's thread count: :mod:`benchmarks.onnxruntime_peers`).
    """
    import numba

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        layer = numba.threading_layer()
    except ValueError:
        layer = "not initialised"
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    peers = [f"{m} {importlib.import_module(m).__version__}" for m in ("torch", "torchao", "onnxruntime")
             if m in sys.modules]
    return [
        f"machine: {cores} usable cores ({os.cpu_count()} online), {_cpu_model()}, {platform.platform()}; "
        f"load average {load} (1/5/15 min, at the end)",
        f"python {platform.python_version()}, numpy {np.__version__}, numba {numba.__version__} "
        f"(roofline: threading layer {layer}, {numba.get_num_threads()} threads), nbquant {nbquant.__version__} "
        f"({nbquant.get_num_threads()} threads) "
        f"(git {commit or git_commit()} at the start)",
        f"peers: {', '.join(peers) or 'none installed'}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}"
        + (" (an OpenMP runtime was loaded before benchmarks: it may not apply)" if OPENMP_PRELOADED else "")
        + (f", onnxruntime intra_op.allow_spinning=0 ({nbquant.get_num_threads()} intra-op threads)"
           if "onnxruntime" in sys.modules else ""),
    ]
