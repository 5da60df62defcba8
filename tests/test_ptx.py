"""The GPU-less PTX/SASS compile check of every CUDA kernel signature (tools/ptx_check.py).

Runs in a separate process without ``NUMBA_ENABLE_CUDASIM``, on this checkout's nbquant.
The default tier compiles the first signature of each kernel for one architecture (sm_90,
the H100's); the full tier (``--full``) every signature for every architecture the script knows. It skips only when the
toolkit wheels of the ``test`` extra (numba-cuda, NVVM/NVRTC, ptxas 13.0) are absent.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from _background import Job

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "ptx_check.py"
MISSING = 2  # ptx_check's exit status when the toolkit wheels are absent
DEFAULT_TIER_ARCH = 90  # the H100's


def _ptx_check():
    """tools/ptx_check.py as a module (it imports numba and nbquant only inside its functions)."""
    spec = importlib.util.spec_from_file_location("ptx_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _arches(full_tier: bool) -> list[int]:
    return list(_ptx_check().ARCHES) if full_tier else [DEFAULT_TIER_ARCH]


def _ptx_job(full_tier: bool) -> Job:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # A liveness limit, not a timing check: the job runs at a lower priority and shares two cores with the rest of
    # the tier (28 signatures took 20 min wall at load 5-7 beside a parity run; about 4 min of CPU). The GGUF
    # formats now have a kernel each per direction (50 kernels): their 27 took 4.7 min of CPU at sm_90.
    sample = [] if full_tier else ["--one-per-kernel"]
    return Job([sys.executable, str(SCRIPT), "--arch", ",".join(map(str, _arches(full_tier))), *sample], ROOT, env,
               3600 if full_tier else 2400)


@pytest.mark.nosim
@pytest.mark.background(job=_ptx_job)
def test_every_kernel_compiles_without_f64_or_spills(full_tier, background_result):
    """Each kernel's first signature compiles for sm_90 (default tier); every signature for every architecture
    (full tier)."""
    output = background_result.output.strip()
    print(f"ptx_check ({background_result.seconds:.0f}s):\n{output}")
    if background_result.returncode == MISSING:
        pytest.skip(output.splitlines()[-1])
    assert background_result.returncode == 0, output
    assert "failures=0" in output and "spills: none" in output
    assert "equals compile_ptx's for every arch" in output  # one lowering per signature stands for compile_ptx
    assert f" x {len(_arches(full_tier))} arches)" in output, output.splitlines()[-1]


@pytest.mark.nosim
def test_f64_detector_allows_only_the_float64_input_load_and_conversion():
    mod = _ptx_check()
    ptx = "\t.reg .f64 \t%fd<3>;\n\tld.global.f64 \t%fd1, [%rd4];\n\tcvt.rn.f32.f64 \t%f1, %fd1;\n"
    assert mod.f64_violations(ptx, f64_input=True) == []
    assert len(mod.f64_violations(ptx, f64_input=False)) == 3
    add = "add.f64 \t%fd2, %fd1, %fd1;"
    assert mod.f64_violations(ptx + "\t" + add + "\n", f64_input=True) == [add]


@pytest.mark.nosim
def test_every_gguf_format_has_its_own_kernels_in_the_check():
    """Each GGUF format's quantize and dequantize kernels are entries of ``all_signatures()`` of their own, so the
    PTX check (``--one-per-kernel`` included) compiles every format, and ``--only 'gguf_*'`` picks them."""
    from nbquant import gguf
    from nbquant.backends.cuda import runtime

    names = [name for name, _ in runtime.all_signatures()]
    gguf_names = {name for name in names if name.startswith(_ptx_check().NO_FMA_PREFIX)}
    want = {f"gguf_{f.lower()}_{op}" for f in gguf.implemented_formats() for op in ("quantize", "dequantize")}
    assert gguf_names == want | {"gguf_sigma2"}
    assert all(names.count(name) == 1 and runtime.KERNELS[name].fn.__closure__ is None for name in gguf_names)
