"""Smoke tests of the benchmark tooling (not timings): ``benchmarks/`` and the asv suite.

The ratio benchmark (``python -m benchmarks``) runs every case at 2^10 elements; the cuda
bandwidth benchmark (``python -m benchmarks.cuda``) either runs or says it needs a GPU.

The asv tests are skipped when asv is not installed (``pip install -e .[bench]``).
They run ``asv check`` and a quick dry run of one benchmark per capability module
at 2^10 elements (``NBQUANT_ASV_QUICK=1``) in the current environment, with
``HOME`` pointed at a temporary directory so asv's machine file stays out of the
user's home.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cases import CASES, select_cases
from benchmarks.ratio import parse_sizes

ROOT = Path(__file__).resolve().parents[1]
ASV_DIR = ROOT / "asv_bench"
HAVE_ASV = importlib.util.find_spec("asv") is not None
HAVE_NUMBA_CUDA = importlib.util.find_spec("numba_cuda") is not None
#: One benchmark per capability module: quantize (allocating and out= via setup),
#: packed, float-format, block-format and dynamic quantize plus dequantize (SQNR round trips), dequantize out=,
#: calibrator collect and compute_amax, import time.
ASV_SMOKE = (r"QuantizeStatic\.time_quantize\b|QuantizePacked\.track_sqnr|Dequantize\.time_dequantize_out"
             r"|QuantizeFloat\.track_sqnr|BlockFormats\.track_sqnr|QuantizeDynamic\.track_sqnr"
             r"|Collect\.time_collect|ComputeAmax\.track_amax|timeraw_import_nbquant")


def _run(args: list[str], cwd: Path, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


def test_parse_sizes():
    assert parse_sizes("2^10, 2**4,100") == [1024, 16, 100]


def test_select_cases():
    names = [c.name for c in select_cases("int4,dq int8 per-tensor out=")]
    assert names and all("int4" in n or n == "dq int8 per-tensor out=" for n in names)
    assert len(select_cases(None)) == len(CASES)


@pytest.mark.full(reason="slow tooling: the ratio benchmark compiles every case's kernels in a new process "
                        "(1-2 min on a cold cache)")
def test_ratio_benchmark_prints_table(tmp_path):
    res = _run([sys.executable, "-m", "benchmarks", "--sizes", "2^10", "--repeats", "2", "--json",
                str(tmp_path / "bench.json")], ROOT)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    data = json.loads((tmp_path / "bench.json").read_text(encoding="utf-8"))
    assert data["command"] == f"python -m benchmarks --sizes 2^10 --repeats 2 --json {tmp_path / 'bench.json'}"
    assert data["machine"][0].startswith("machine: ") and data["device"] == "cpu"
    assert {r["case"] for r in data["rows"]} == {c.name for c in CASES}
    assert sum(r["impl"] == "roofline" for r in data["rows"]) == len(CASES)
    assert "median ms" in out and "%roof" in out and "threading layer" in out
    assert "skipped" not in out, out
    for case in CASES:
        assert f"{case.name} " in out, case.name
    assert out.count(" roofline ") == len(CASES)


def test_ratio_benchmark_cuda_path_skips_or_runs():
    res = _run([sys.executable, "-m", "benchmarks", "--device", "cuda", "--sizes", "2^10", "--repeats", "1",
                "--cases", "q int8 per-tensor"], ROOT)
    assert res.returncode == 0, res.stderr
    assert "cuda benchmark skipped" in res.stdout or "median ms" in res.stdout


@pytest.mark.skipif(not HAVE_NUMBA_CUDA, reason="numba-cuda is not installed (pip install -e .[cuda])")
def test_cuda_bandwidth_benchmark_runs_or_needs_a_gpu():
    res = _run([sys.executable, "-m", "benchmarks.cuda", "--sizes", "17", "--repeat", "1"], ROOT)
    if res.returncode == 0:
        assert "device:" in res.stdout and "copy GB/s" in res.stdout, res.stdout
    else:
        assert res.returncode == 1 and "needs a real CUDA GPU" in res.stderr, res.stdout + res.stderr


@pytest.mark.skipif(not HAVE_ASV, reason="asv is not installed (pip install -e .[bench])")
def test_asv_check():
    res = _run([sys.executable, "-m", "asv", "check", "--python=same"], ASV_DIR)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "No problems found" in res.stdout


@pytest.mark.full(reason="slow tooling: runs nine asv benchmarks, each in a new process (minutes on a cold cache)")
@pytest.mark.skipif(not HAVE_ASV, reason="asv is not installed (pip install -e .[bench])")
def test_asv_quick_dry_run(tmp_path):
    env = {"HOME": str(tmp_path), "NBQUANT_ASV_QUICK": "1"}
    machine = _run([sys.executable, "-m", "asv", "machine", "--yes", "--machine", "ci"], ASV_DIR, env)
    assert machine.returncode == 0, machine.stdout + machine.stderr
    res = _run([sys.executable, "-m", "asv", "run", "--python=same", "--quick", "--dry-run", "--machine", "ci",
                "--show-stderr", "-b", ASV_SMOKE], ASV_DIR, env, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "failed" not in out.lower(), out
    assert out.count(" ok") >= 5 and "timeraw_import_nbquant" in out, out
    assert "Collect.time_collect" in out and "ComputeAmax.track_amax" in out, out
