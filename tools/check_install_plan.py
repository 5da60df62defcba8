"""Refuse an install plan that would pull CUDA packages into a CPU-only environment.

Run with the interpreter of the environment to be installed, and the requirements
``pip install`` would get::

    python tools/check_install_plan.py -e ".[parity]"

It asks ``pip install --dry-run --report`` what would be installed and exits 1, listing
the offenders, if the plan holds a CUDA runtime or library wheel (``nvidia-*`` other
than the pure-Python ``nvidia-modelopt`` and ``nvidia-ml-py``), ``triton``, or a
``torch`` that is not a ``+cpu`` build (the registry's default torch brings several GB
of CUDA libraries). Otherwise it prints the plan and exits 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

#: ``nvidia-*`` distributions that hold no CUDA binaries.
PURE_PYTHON_NVIDIA = {"nvidia-modelopt", "nvidia-ml-py"}


def offenders(plan: list[tuple[str, str]]) -> list[str]:
    """The ``name==version`` entries of ``plan`` that are CUDA packages.

    Examples
    --------
    >>> offenders([("torch", "2.13.0+cpu"), ("nvidia-modelopt", "0.47.0"), ("nvidia-cublas-cu12", "12.8")])
    ['nvidia-cublas-cu12==12.8']
    >>> offenders([("torch", "2.13.0")])
    ['torch==2.13.0 (not a +cpu build)']
    """
    bad = []
    for name, version in plan:
        key = name.lower().replace("_", "-")
        if key.startswith("nvidia-") and key not in PURE_PYTHON_NVIDIA or key == "triton":
            bad.append(f"{name}=={version}")
        elif key == "torch" and not version.endswith("+cpu"):
            bad.append(f"{name}=={version} (not a +cpu build)")
    return bad


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "plan.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
                        "--report", str(report), *argv], check=True)
        plan = [(i["metadata"]["name"], i["metadata"]["version"]) for i in json.loads(report.read_text())["install"]]
    bad = offenders(plan)
    print(f"install plan for {' '.join(argv)}: {len(plan)} packages")
    for name, version in sorted(plan):
        print(f"  {name}=={version}")
    if bad:
        print(f"refused: the plan pulls CUDA packages: {', '.join(bad)}. Install torch==2.13.0 (the CPU build on "
              "this machine) first, or pin the peer so that it does not ask for a newer torch.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
