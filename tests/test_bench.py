"""Smoke tests of the benchmark tooling (not timings): ``benchmarks/`` and the asv suite.

The ratio benchmark (``python -m benchmarks``) runs every case at 2^10 elements (full tier; the
quick tier builds every case at 2^10 and calls nbquant on it, in this process); the per-element
cost table (``python -m benchmarks.kernel_cost``) prints its verdicts; the cuda bandwidth
benchmark (``python -m benchmarks.cuda``) either runs or says it needs a GPU.

The asv tests are skipped when asv is not installed (``pip install -e .[bench]``).
They check ``asv_bench/asv.conf.json`` (a virtualenv per commit, pins inside
pyproject's ranges, results git-ignored), run ``asv check`` and a quick dry run of
one benchmark per class at 2^10 elements (``NBQUANT_ASV_QUICK=1``) in the current
environment (``--python=same``: nothing built), and, in the full tier, build this
checkout's HEAD into a virtualenv with the real build and install commands, run two
benchmarks there and publish the html, all under a temporary directory. ``HOME``
points at a temporary directory so asv's machine file stays out of the user's home.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import kernel_cost
from benchmarks.cases import CASES, select_cases
from benchmarks.ratio import parse_sizes
from benchmarks.roofline import roofline_kind

ROOT = Path(__file__).resolve().parents[1]
ASV_DIR = ROOT / "asv_bench"
HAVE_ASV = importlib.util.find_spec("asv") is not None
HAVE_NUMBA_CUDA = importlib.util.find_spec("numba_cuda") is not None
#: One benchmark per class: quantize (allocating and out= via setup) of the 8-bit, sub-byte and float schemes,
#: dequantize (out= via setup), the block formats and NF4 (quantize and dequantize via setup), dynamic quantize,
#: calibrator collect and compute_amax, the numerics tracks (SQNR, bits against the reference backend), the
#: roofline, import time.
ASV_SMOKE = (r"QuantizeStatic\.time_quantize\b|QuantizePacked\.time_quantize_out|Dequantize\.time_dequantize\b"
             r"|DequantizePacked\.peakmem|QuantizeFloat\.time_quantize\b|DequantizeFloat\.time_dequantize_out"
             r"|BlockFormats\.time_dequantize|NF4\.time_quantize|QuantizeDynamic\.time_quantize_dynamic"
             r"|Collect\.time_collect|ComputeAmax\.track_amax|Numerics\.track_sqnr"
             r"|BitsVsReference\.track_mismatched_bytes|Roofline\.time_cast|timeraw_import_nbquant")


def _run(args: list[str], cwd: Path, env: dict | None = None, timeout: int = 1200) -> subprocess.CompletedProcess:
    """``args`` run in ``cwd``; ``timeout`` is a liveness guard against a hung child, not a timing (a cold cache
    on a loaded 2-core machine takes minutes)."""
    return subprocess.run(args, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


def test_parse_sizes():
    assert parse_sizes("2^10, 2**4,100") == [1024, 16, 100]


def test_select_cases():
    names = [c.name for c in select_cases("int4,dq int8 per-tensor out=")]
    assert names and all("int4" in n or n == "dq int8 per-tensor out=" for n in names)
    assert len(select_cases(None)) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_case_sets_up_with_a_roofline(case):
    """Each case's arrays at 2^10 and the roofline kernel their shapes and dtypes select.

    Nothing is compiled here: running every case's nbquant call and roofline kernel costs a
    minute of JIT on a cold cache, which the full tier's ``test_ratio_benchmark_prints_table``
    pays (every case at 2^10, in a new process).
    """
    p = case.setup(1 << 10, np.random.default_rng(0))
    assert roofline_kind(p) in ("cast", "pack2", "pack4", "pack43", "unpack2", "unpack4", "absmax")
    assert p.nbytes > 0


def test_names_are_unique_and_fit_the_table():
    names = [c.name for c in CASES]
    assert len(set(names)) == len(names)
    assert max(map(len, names)) <= 31


def test_kernel_cost_prints_verdicts(capsys, monkeypatch):
    """The table's verdicts; and the run leaves nbquant's thread setting alone (the environment still decides)."""
    import nbquant

    monkeypatch.setenv("NBQUANT_NUM_THREADS", "3")
    selected = [c.name for c in select_cases("q int8 per-tensor")]
    assert kernel_cost.main(["--n", "2^10", "--budget-n", "2^12", "--repeats", "2", "--budget-repeats", "1",
                             "--ghz", "3", "--cases", "q int8 per-tensor"]) == 0
    out = capsys.readouterr().out
    assert "verdict" in out and "cycles/elem" in out and "budget" in out and "skipped" not in out, out
    rows = {line[:31].rstrip(): line.split()[-1] for line in out.splitlines() if line[:31].rstrip() in selected}
    assert sorted(rows) == sorted(selected), out
    assert set(rows.values()) <= {"compute", "memory"}, out
    monkeypatch.setenv("NBQUANT_NUM_THREADS", "5")  # nothing explicit was left set: the environment still decides
    assert nbquant.get_num_threads() == 5


def test_cpu_ghz_reads_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\ncpu MHz\t\t: 2445.406\n")
    assert kernel_cost.cpu_ghz(info) == pytest.approx(2.445406)
    assert kernel_cost.cpu_ghz(tmp_path / "missing") == 3.0


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
def test_cuda_fixed_cost_benchmark_runs_or_needs_a_gpu():
    res = _run([sys.executable, "-m", "benchmarks.cuda", "--repeat", "1"], ROOT)
    if res.returncode == 0:
        assert "device:" in res.stdout and "first s" in res.stdout and "failed" not in res.stdout, res.stdout
    else:
        assert res.returncode == 1 and "needs a real CUDA GPU" in res.stderr, res.stdout + res.stderr


def _asv_conf() -> dict:
    from asv.util import load_json  # the JSON-with-comments reader asv itself uses

    return load_json(str(ASV_DIR / "asv.conf.json"), js_comments=True)


@pytest.mark.skipif(not HAVE_ASV, reason="asv is not installed (pip install -e .[bench])")
def test_asv_conf_builds_each_commit_with_pins_inside_pyproject():
    import tomllib

    from packaging.requirements import Requirement

    conf = _asv_conf()
    assert conf["environment_type"] == "virtualenv" and conf["pythons"] == ["3.11"]
    assert conf["branches"] == ["main"] and conf["repo"] == ".."
    assert any("pip wheel" in c and "{build_cache_dir}" in c for c in conf["build_command"])
    assert any("pip install {wheel_file}" in c for c in conf["install_command"])
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    reqs = {(r := Requirement(d)).name.replace("-", "_"): r for d in deps}
    pins = conf["matrix"]["req"]
    assert set(pins) == set(reqs), "asv's matrix must pin exactly nbquant's runtime dependencies"
    for name, versions in pins.items():
        assert len(versions) == 1 and reqs[name].specifier.contains(versions[0]), (name, versions, str(reqs[name]))
    for key in ("results_dir", "html_dir", "env_dir") if (ROOT / ".git").exists() else ():
        path = f"asv_bench/{conf[key]}/x.json"
        res = _run(["git", "check-ignore", "-q", path], ROOT)
        assert res.returncode == 0, f"{path} is not git-ignored"


@pytest.mark.skipif(not HAVE_ASV, reason="asv is not installed (pip install -e .[bench])")
def test_asv_check():
    res = _run([sys.executable, "-m", "asv", "check", "--python=same"], ASV_DIR)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "No problems found" in res.stdout


def _tmp_conf(tmp_path: Path) -> Path:
    """asv.conf.json with its environments, results and html under ``tmp_path`` (the user's results untouched)."""
    conf = _asv_conf()
    conf.update(repo=str(ROOT), benchmark_dir=str(ASV_DIR / "benchmarks"), env_dir=str(tmp_path / "env"),
                results_dir=str(tmp_path / "results"), html_dir=str(tmp_path / "html"))
    cfg = tmp_path / "asv.conf.json"
    cfg.write_text(json.dumps(conf), encoding="utf-8")
    return cfg


@pytest.mark.full(reason="slow tooling: runs fifteen asv benchmarks, each in a new process (minutes on a cold cache)")
@pytest.mark.skipif(not HAVE_ASV, reason="asv is not installed (pip install -e .[bench])")
def test_asv_quick_dry_run(tmp_path):
    env = {"HOME": str(tmp_path), "NBQUANT_ASV_QUICK": "1"}
    asv = [sys.executable, "-m", "asv"]
    cfg = _tmp_conf(tmp_path)
    machine = _run([*asv, "machine", "--yes", "--machine", "ci", "--config", str(cfg)], tmp_path, env)
    assert machine.returncode == 0, machine.stdout + machine.stderr
    res = _run([*asv, "run", "--config", str(cfg), "--python=same", "--quick", "--dry-run", "--machine", "ci",
                "--show-stderr", "-b", ASV_SMOKE], tmp_path, env, timeout=1800)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "failed" not in out.lower(), out
    assert out.count(" ok") >= 13 and "timeraw_import_nbquant" in out, out
    for name in ("Collect.time_collect", "ComputeAmax.track_amax", "NF4.time_quantize", "Numerics.track_sqnr",
                 "BitsVsReference.track_mismatched_bytes", "Roofline.time_cast_float32_to_int8"):
        assert name in out, (name, out)


def _head_has_parent() -> bool:
    return _run(["git", "rev-parse", "--verify", "-q", "HEAD^"], ROOT).returncode == 0


@pytest.mark.full(reason="slow tooling: builds a virtualenv (numpy, numba, ml_dtypes from the package index) and "
                        "this checkout's HEAD into it (about a minute)")
@pytest.mark.skipif(not HAVE_ASV, reason="asv is not installed (pip install -e .[bench])")
@pytest.mark.skipif(shutil.which("python3.11") is None, reason="asv.conf.json's virtualenvs use python3.11")
@pytest.mark.skipif(not (ROOT / ".git").exists() or not _head_has_parent(), reason="needs a git checkout with HEAD^")
def test_asv_builds_a_commit_runs_and_publishes(tmp_path):
    """The real build and install commands on HEAD; environments, results and html under ``tmp_path``."""
    cfg = _tmp_conf(tmp_path)
    # HOME moves for asv's machine file; pip keeps the user's cache of numpy/numba/llvmlite wheels.
    pip_cache = os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))
    env = {"HOME": str(tmp_path), "NBQUANT_ASV_QUICK": "1", "PIP_CACHE_DIR": pip_cache}
    asv = [sys.executable, "-m", "asv"]
    machine = _run([*asv, "machine", "--yes", "--machine", "ci", "--config", str(cfg)], tmp_path, env)
    assert machine.returncode == 0, machine.stdout + machine.stderr
    res = _run([*asv, "run", "--config", str(cfg), "--machine", "ci", "--quick", "--show-stderr",
                "-b", r"timeraw_import_nbquant|Numerics\.track_sqnr", "HEAD^!"], tmp_path, env, timeout=1800)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "Building" in out and "Installing" in out and "failed" not in out.lower(), out
    results = list((tmp_path / "results" / "ci").glob("*-virtualenv-py3.11-*.json"))
    assert len(results) == 1, out
    saved = json.loads(results[0].read_text(encoding="utf-8"))["results"]
    sqnr = saved["numerics.Numerics.track_sqnr"][0]
    assert all(v > 10 for v in sqnr), sqnr  # int4 g32 and nvfp4 on the heavy-tailed matrix: 17 and 22 dB
    pub = _run([*asv, "publish", "--config", str(cfg)], tmp_path, env, timeout=300)
    assert pub.returncode == 0, pub.stdout + pub.stderr
    assert (tmp_path / "html" / "index.html").exists()


def test_compile_cost_rows_and_signatures():
    from numba import types

    from benchmarks import compile_cost

    sig = (types.int64, types.Array(types.float32, 3, "C"), types.Array(types.uint8, 2, "C", readonly=True),
           types.boolean)
    assert compile_cost._short(sig) == "i64, f32[3C], ro u8[2C], b"
    result = {"target": "int8-per-tensor", "cold_first_s": 9.5, "cold_first_cpu_s": 9.0, "warm_first_ms": 3.25,
              "warm_compiled": 0, "signatures": [
                  {"kernel": "quantize_kernel", "signature": "i64", "wall_s": 9.0, "cpu_s": 8.5, "front": 5.0,
                   "typing": 1.0, "lowering": 2.0, "llvm": 1.5, "load_ms": 4.0}]}
    lines = compile_cost.format_rows(result)
    assert lines[0].split() == ["int8-per-tensor", "quantize_kernel", "9.00", "8.50", "5.00", "1.00", "2.00", "1.50",
                                "4.0", "i64"]
    assert lines[1].endswith("1 signature(s) compiled; cold first call 9.50 s (9.00 s cpu), warm first call 3.2 ms "
                             "(0 compiled warm)")
    assert compile_cost.HEADER.split()[:3] == ["target", "kernel", "wall"]


def test_compile_cost_measures_a_call_in_process():
    from benchmarks import compile_cost

    first = compile_cost.measure("int8-per-tensor", "float32")  # compiles or loads, as this session's cache has it
    again = compile_cost.measure("int8-per-tensor", "float32")
    assert again["compiled"] == [] and again["loaded"] == []  # both signatures are in memory now
    assert {row["kernel"] for row in first["compiled"] + first["loaded"]} <= {"quantize_kernel", "dequantize_kernel"}
    assert all(row["cpu_s"] > 0 and row["front"] >= 0 and row["llvm"] >= 0 for row in first["compiled"])


@pytest.mark.full(reason="compiles a target cold, then loads it, in two fresh processes")
def test_compile_cost_table_cold_and_warm(tmp_path):
    out = tmp_path / "cost.json"
    res = _run([sys.executable, "-m", "benchmarks.compile_cost", "--targets", "nvfp4", "--json", str(out)], ROOT,
               timeout=900)
    assert res.returncode == 0, res.stderr
    (result,) = json.loads(out.read_text())["results"]
    assert result["target"] == "nvfp4" and result["warm_compiled"] == 0
    assert {row["kernel"] for row in result["signatures"]} == {"nvfp4_quantize_kernel", "nvfp4_dequantize_kernel"}
    assert all(row["cpu_s"] > 0 and row["load_ms"] is not None for row in result["signatures"])
    assert "nvfp4" in res.stdout.splitlines()[-1] and "2 signature(s) compiled" in res.stdout


def test_small_call_profile_adds_up(capsys):
    from benchmarks import small_call

    assert small_call.main(["--n", "64", "--calls", "70"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("small call: quantize 64 float32 -> int8 per-tensor")
    first = float(lines[1].split()[0])
    start = next(i for i, line in enumerate(lines) if line.startswith("by step")) + 1
    steps = {line.split("%", 1)[1].strip(): float(line.split()[0]) for line in lines[start:]}
    assert "validation" in steps and "kernel call (numba dispatch + kernel)" in steps
    assert sum(steps.values()) == pytest.approx(first, rel=0.01)
