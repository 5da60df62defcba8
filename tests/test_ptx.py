"""The GPU-less PTX/SASS compile check of every CUDA kernel signature (tools/ptx_check.py).

Runs in a separate process without ``NUMBA_ENABLE_CUDASIM``. It skips only when the
toolkit wheels of the ``test`` extra (numba-cuda, NVVM/NVRTC, ptxas 13.0) are absent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "ptx_check.py"
MISSING = 2  # ptx_check's exit status when the toolkit wheels are absent


@pytest.mark.nosim
def test_every_kernel_compiles_for_every_arch_without_f64_or_spills():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    res = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=1200)
    output = (res.stdout + res.stderr).strip()
    print(output)
    if res.returncode == MISSING:
        pytest.skip(output.splitlines()[-1])
    assert res.returncode == 0, output
    assert "failures=0" in output and "spills: none" in output


@pytest.mark.nosim
def test_f64_detector_allows_only_the_float64_input_load_and_conversion():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ptx_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ptx = "\t.reg .f64 \t%fd<3>;\n\tld.global.f64 \t%fd1, [%rd4];\n\tcvt.rn.f32.f64 \t%f1, %fd1;\n"
    assert mod.f64_violations(ptx, f64_input=True) == []
    assert len(mod.f64_violations(ptx, f64_input=False)) == 3
    add = "add.f64 \t%fd2, %fd1, %fd1;"
    assert mod.f64_violations(ptx + "\t" + add + "\n", f64_input=True) == [add]
