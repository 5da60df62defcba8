"""The ``nbquant demo`` command line: table contents, exit codes and argument errors."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nbquant
from nbquant import cli, demo

ROOT = Path(__file__).resolve().parent.parent


def table(stdout: str) -> dict[tuple[str, str], list[str]]:
    """Parse the demo table: ``{(scheme + " " + layout, backend): [sqnr, err, first, median, gbps, eq]}``."""
    lines = stdout.splitlines()
    start = lines.index(cli.HEADER) + 1
    rows = {}
    for line in lines[start:lines.index("legend:")]:
        tokens = line.split()
        key = (" ".join(tokens[:-7]), tokens[-7])
        assert key not in rows, f"duplicate row {key}"
        rows[key] = tokens[-6:]
    return rows


def check_table(stdout: str, cols: int, backends: list[str]) -> None:
    rows = table(stdout)
    expected = {(f"{s.name} {s.layout}", b) for s in demo.schemes(cols) for b in backends}
    assert set(rows) == expected
    for (scheme, backend), (sqnr, err, first, median, gbps, eq) in rows.items():
        assert eq == "yes", f"{scheme} on {backend} differs from reference"
        assert float(sqnr) > 0 and float(err) >= 0
        assert float(first) > 0 and float(median) > 0 and float(gbps) > 0
    assert "machine:" in stdout and "cpu backend threads: " in stdout


def check_legend(stdout: str) -> None:
    """The legend follows the table verbatim, and the machine line follows the legend."""
    lines = stdout.splitlines()
    start = lines.index("legend:")
    assert tuple(lines[start:start + len(cli.LEGEND)]) == cli.LEGEND
    assert lines[start + len(cli.LEGEND)].startswith("machine: ")


# Under the CUDA simulator the cuda backend is "available" but far too slow for a demo run.
SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
#: The backends a demo without --backend times (every available one but reference), less the simulated cuda.
TIMED = [name for name in demo.default_backends() if not (SIMULATOR and name == "cuda")]
#: Demo arguments that run every backend in TIMED: the default outside the simulator.
SELECT = [arg for name in TIMED for arg in ("--backend", name)] if SIMULATOR else []
CUDA = {b.name: b for b in nbquant.backends()}["cuda"]


def test_demo_in_process(capsys):
    assert cli.main(["demo", "--size", "256", "--repeats", "2", *SELECT]) == 0
    out = capsys.readouterr().out
    assert "256x256 float32" in out
    assert "cpu" in TIMED and "reference" not in TIMED
    check_table(out, 256, TIMED)
    check_legend(out)
    assert "quantizes all 256 rows with the same scales" in out
    assert f"cpu backend threads: {nbquant.get_num_threads()} " in out


def test_default_size_checks_every_16th_row():
    assert demo.check_step(*demo.DEFAULT_SIZE) == 16
    assert cli._check_line(*demo.DEFAULT_SIZE) == (
        "check: the reference backend (NumPy) quantizes every 16th row (256 of 4096 rows) with the same scales; "
        "SQNR dB, max abs err and = reference cover those rows")


def test_checked_rows_are_a_strided_slice(capsys, monkeypatch):
    """16 rows of 32 fit in 512 checked values, so a 40-row matrix is checked on every 3rd row: 14 of 40."""
    monkeypatch.setattr(demo, "CHECK_ELEMENTS", 512)
    assert demo.check_step(40, 32) == 3
    assert cli.main(["demo", "--size", "40x32", "--backend", "cpu", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "check: the reference backend (NumPy) quantizes every 3rd row (14 of 40 rows) with the same scales;" in out
    check_table(out, 32, ["cpu"])


@pytest.mark.parametrize(("n", "text"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (12, "12th"),
                                         (13, "13th"), (16, "16th"), (21, "21st"), (22, "22nd"), (112, "112th")])
def test_ordinal(n, text):
    assert cli._ordinal(n) == text


def test_demo_reports_the_thread_count_from_the_environment(capsys, monkeypatch):
    monkeypatch.setenv("NBQUANT_NUM_THREADS", "3")
    assert cli.main(["demo", "--size", "8x32", "--backend", "reference", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "cpu backend threads: 3 " in out
    check_table(out, 32, ["reference"])
    check_legend(out)


def test_demo_rectangular_size_and_one_backend(capsys):
    assert cli.main(["demo", "--size", "16x96", "--backend", "cpu", "--repeats", "1", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "16x96 float32" in out and "seed 3" in out
    check_table(out, 96, ["cpu"])
    assert "block_size=(1, 96), packed" in out  # 128 does not divide 96


def test_demo_subprocess():
    proc = subprocess.run([sys.executable, "-m", "nbquant", "demo", "--size", "64", *SELECT],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    check_table(proc.stdout, 64, TIMED)
    check_legend(proc.stdout)
    assert "cpu backend threads: " in proc.stdout


def test_unavailable_backend_is_skipped_with_its_reason(capsys, monkeypatch):
    fake = [b for b in nbquant.backends() if b.name != "cuda"] + [nbquant.BackendInfo("cuda", False, "no GPU here")]
    monkeypatch.setattr(nbquant, "backends", lambda: fake)
    assert cli.main(["demo", "--size", "8x16", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "backends: cpu; skipped cuda: no GPU here\n" in out
    check_table(out, 16, ["cpu"])


def test_requested_unavailable_backend_exits_2_with_its_reason(capsys, monkeypatch):
    fake = [b for b in nbquant.backends() if b.name != "cuda"] + [nbquant.BackendInfo("cuda", False, "no GPU here")]
    monkeypatch.setattr(nbquant, "backends", lambda: fake)
    assert cli.main(["demo", "--size", "8x16", "--backend", "cpu", "--backend", "cuda"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "nbquant demo: backend cuda cannot run here: no GPU here\n"


@pytest.mark.skipif(CUDA.available, reason="the cuda backend can run here")
def test_demo_backend_cuda_without_a_gpu_subprocess():
    """No monkeypatching: on a machine without a GPU, ``--backend cuda`` fails with nbquant.backends()'s reason."""
    proc = subprocess.run([sys.executable, "-m", "nbquant", "demo", "--backend", "cuda"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"nbquant demo: backend cuda cannot run here: {CUDA.reason}\n"


def test_no_compiled_backend_times_reference(monkeypatch):
    fake = [nbquant.BackendInfo("reference", True, "available"), nbquant.BackendInfo("cpu", False, "no numba"),
            nbquant.BackendInfo("cuda", False, "no numba")]
    monkeypatch.setattr(nbquant, "backends", lambda: fake)
    assert demo.default_backends() == ["reference"]
    assert demo.unavailable_backends() == [("cpu", "no numba"), ("cuda", "no numba")]


def test_mismatch_with_reference_exits_1(capsys, monkeypatch):
    real = demo.run_demo

    def wrong(*args, **kwargs):
        for row in real(*args, **kwargs):
            yield dataclasses.replace(row, equals_reference=False)

    monkeypatch.setattr(demo, "run_demo", wrong)
    assert cli.main(["demo", "--size", "4x8", "--backend", "reference", "--repeats", "1"]) == 1
    captured = capsys.readouterr()
    assert " NO" in captured.out
    assert "differ from the reference backend" in captured.err


def test_wrong_codes_on_a_checked_row_are_caught(monkeypatch):
    """A backend whose int8 codes differ on one checked row only: its rows say NO, and their SQNR is its own."""
    real = nbquant.quantize

    def off_by_one_on_row_2(x, scale, dtype, *, backend=None, **kwargs):
        q = real(x, scale, dtype, backend=backend, **kwargs)
        if backend == "cpu" and dtype == "int8":
            q[2] = np.where(q[2] < 0, q[2] + 1, q[2] - 1)
        return q

    monkeypatch.setattr(nbquant, "quantize", off_by_one_on_row_2)
    monkeypatch.setattr(demo, "CHECK_ELEMENTS", 64)  # 2 rows of 32: rows 0 and 2 of 4 are checked
    x = demo.make_weights(4, 32)
    assert demo.check_step(*x.shape) == 2
    rows = {(r.scheme, r.backend): r for r in demo.run_demo(x=x, backends=["reference", "cpu"], repeats=1)}
    assert {key for key, r in rows.items() if not r.equals_reference} == {("int8 per-tensor", "cpu"),
                                                                          ("int8 per-channel", "cpu")}
    for scheme in ("int8 per-tensor", "int8 per-channel"):
        assert rows[scheme, "cpu"].sqnr_db < rows[scheme, "reference"].sqnr_db
    assert rows["int4 onnx blocked", "cpu"].sqnr_db == rows["int4 onnx blocked", "reference"].sqnr_db


def test_unchecked_rows_are_not_compared(monkeypatch):
    """Row 1 is not checked (every 2nd row of 4): codes that differ there alone pass, as the check line says."""
    real = nbquant.quantize

    def off_on_row_1(x, scale, dtype, *, backend=None, **kwargs):
        q = real(x, scale, dtype, backend=backend, **kwargs)
        if backend == "cpu" and dtype == "int8":
            q[1] = 0
        return q

    monkeypatch.setattr(nbquant, "quantize", off_on_row_1)
    monkeypatch.setattr(demo, "CHECK_ELEMENTS", 64)
    assert all(r.equals_reference for r in demo.run_demo(x=demo.make_weights(4, 32), backends=["cpu"], repeats=1))


def _readme_demo_paragraph() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("\n`nbquant demo` quantizes", 1)[1].split("\n## ", 1)[0]


NUMBERS = {"six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}


def test_readme_names_the_schemes_the_demo_runs():
    """The README counts the schemes, and its table names them (and their layouts) as the demo prints them."""
    text = _readme_demo_paragraph()
    count = re.search(r"with (\w+)\s+schemes", text).group(1)
    listed = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|", text, re.M)
    printed = [(s.name, s.layout) for s in demo.schemes()]
    assert listed == printed
    assert NUMBERS[count] == len(printed) == 10


def test_readme_quotes_the_legend_and_the_check():
    text = _readme_demo_paragraph()
    quoted = re.search(r"```text\n(legend:\n.*?)```", text, re.S).group(1)
    assert tuple(quoted.splitlines()) == cli.LEGEND
    assert cli._check_line(*demo.DEFAULT_SIZE) in text.replace("\n", " ")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["demo", "--size", "3"], "column count must be even"),
        (["demo", "--size", "0"], "positive integers"),
        (["demo", "--size", "12x"], "positive integers"),
        (["demo", "--size", "big"], "positive integers"),
        (["demo", "--backend", "gpu9000"], "invalid choice: 'gpu9000'"),
        (["demo", "--repeats", "0"], "'0' is not a positive integer"),
        (["demo", "--seed", "x"], "invalid int value"),
    ],
)
def test_bad_arguments(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_arguments_subprocess():
    proc = subprocess.run([sys.executable, "-m", "nbquant", "demo", "--size", "7"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2
    assert "--size 7" in proc.stderr and "even" in proc.stderr
    assert proc.stdout == ""


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"nbquant {nbquant.__version__}"


# The demo's building blocks.


def test_weights_are_deterministic_heavy_tailed_and_per_row():
    w = demo.make_weights(64, 512, seed=1)
    assert w.dtype == np.float32 and w.shape == (64, 512) and w.flags.c_contiguous
    np.testing.assert_array_equal(w, demo.make_weights(64, 512, seed=1))
    assert not np.array_equal(w, demo.make_weights(64, 512, seed=2))
    row_std = w.std(axis=1)
    assert row_std.max() / row_std.min() > 10  # per-row magnitudes differ
    z = w / row_std[:, None]
    assert np.mean(z**4) > 4  # kurtosis above a Gaussian's 3


def test_weights_follow_student_t_with_4_degrees_of_freedom():
    """One row (one magnitude): quantile ratios of |w| are Student-t df=4's (a Gaussian's 98% / 50% is 3.45)."""
    w = np.abs(demo.make_weights(1, 2**20, seed=5)[0])
    q50, q98, q998 = np.quantile(w, [0.5, 0.98, 0.998])
    assert q98 / q50 == pytest.approx(3.7469 / 0.74070, rel=0.02)  # t4 quantiles at 0.99 and 0.75
    assert q998 / q50 == pytest.approx(7.1732 / 0.74070, rel=0.05)  # and at 0.999


@pytest.mark.parametrize("cols", [2, 64, 96, 100, 4096])
def test_scheme_params_fit_every_layout(cols):
    x = demo.make_weights(6, cols)
    for scheme in (s for s in demo.schemes(cols) if s.block_format is None):  # block formats scale themselves
        scale, zp = demo.scheme_params(x, scheme)
        assert scale.dtype == np.float32 and np.all(np.isfinite(scale) & (scale > 0))
        codes = nbquant.quantize(x, scale, scheme.dtype, zero_point=zp, backend="reference", **scheme.kwargs)
        assert codes.shape[0] == 6
        assert (zp is not None) == scheme.asymmetric


def test_symmetric_scale_is_block_amax_over_divisor():
    x = demo.make_weights(4, 96)
    onnx = next(s for s in demo.schemes(96) if s.name == "int4 onnx blocked")
    scale, _ = demo.scheme_params(x, onnx)
    assert scale.shape == (4, 3)
    np.testing.assert_array_equal(scale, np.abs(x).reshape(4, 3, 32).max(axis=2) / np.float32(7))


def test_asymmetric_range_contains_zero():
    x = np.linspace(1, 2, 16, dtype=np.float32).reshape(2, 8)  # all positive
    scheme = next(s for s in demo.schemes(8) if s.asymmetric)
    scale, zp = demo.scheme_params(x, scheme)
    assert zp == 0 and scale == np.float32(2) / np.float32(255)


def test_zero_block_gets_scale_one():
    x = np.zeros((2, 8), np.float32)
    for scheme in demo.schemes(8):
        scale, _ = demo.scheme_params(x, scheme)
        assert np.all(scale > 0)


def test_odd_columns_are_rejected():
    with pytest.raises(ValueError, match="even number of columns"):
        demo.schemes(7)


def test_run_demo_rejects_zero_repeats():
    with pytest.raises(ValueError, match="repeats=0"):
        next(demo.run_demo(4, 8, repeats=0))


def test_sqnr():
    x = np.array([3.0, 4.0], np.float32)
    assert demo.sqnr_db(x, x) == float("inf")
    assert demo.sqnr_db(x, np.zeros(2, np.float32)) == pytest.approx(0.0)


# nbquant precompile, and what the demo says about compiling.


def test_demo_says_what_its_first_calls_compiled(capsys):
    assert cli.main(["demo", "--size", "8x64", "--backend", "cpu", "--repeats", "1", "--no-convert"]) == 0
    lines = capsys.readouterr().out.splitlines()
    machine = next(i for i, line in enumerate(lines) if line.startswith("machine: "))
    assert re.fullmatch(r"compile: (none, every kernel was loaded from numba's on-disk cache \(first calls [\d.]+ s "
                        r"in all\)|the first calls compiled \d+ kernel signature\(s\) in [\d.]+ s of their [\d.]+ s; "
                        r"numba's on-disk cache keeps them, .*nbquant precompile.*|the cache was empty: \d+ kernel "
                        r"signature\(s\) compiled ahead in [\d.]+ s on \d+ processes at once; .*)", lines[machine + 1])


def _fake_compiles(monkeypatch, probe_signatures: int, cpus: int, cached: bool = True) -> list:
    """compile_ahead's probe made to count ``probe_signatures`` compiles, ``cpus`` usable CPUs, precompile recorded."""
    import contextlib

    from nbquant import precompile as pre
    from nbquant.backends import cpu

    calls = []

    @contextlib.contextmanager
    def watch():
        yield pre.CompileWatch(probe_signatures, 1.5)

    monkeypatch.setattr(pre, "compile_watch", watch)
    monkeypatch.setattr(pre, "TARGETS", {**pre.TARGETS, pre.GROUPS["demo"][0]: lambda dtype: None})
    monkeypatch.setattr(pre, "precompile", lambda names, jobs, progress: calls.append((list(names), jobs)) or
                        [pre.Prepared(n, 2, 0.5) for n in names])
    monkeypatch.setattr("nbquant.threads.usable_cpus", lambda: cpus)
    monkeypatch.setattr(cpu, "disk_cached", lambda: cached)
    return calls


def test_the_demo_compiles_its_kernels_in_parallel_first_on_a_cold_cache(monkeypatch):
    from nbquant import precompile as pre
    from nbquant.precompile import GROUPS

    calls, announced = _fake_compiles(monkeypatch, probe_signatures=2, cpus=2), []
    ahead = pre.compile_ahead(progress=False, announce=lambda targets, jobs: announced.append((targets, jobs)))
    rest = list(GROUPS["demo"][1:])
    assert calls == [(rest, 2)] and announced == [(len(rest), 2)]
    assert ahead.signatures == 2 + 2 * len(rest) and ahead.jobs == 2 and ahead.seconds >= 0
    assert pre.compile_note(0, 0.0, 0.1, ahead).startswith(
        f"compile: the cache was empty: {ahead.signatures} kernel signature(s) compiled ahead in ")


@pytest.mark.parametrize(("probe_signatures", "cpus", "cached"), [(0, 2, True), (2, 1, True), (2, 2, False)],
                         ids=["warm cache", "one cpu", "no writable cache"])
def test_the_demo_compiles_nothing_ahead_when_it_would_not_help(monkeypatch, probe_signatures, cpus, cached):
    from nbquant import precompile as pre
    calls = _fake_compiles(monkeypatch, probe_signatures, cpus, cached)
    assert pre.compile_ahead(progress=False, announce=lambda *a: pytest.fail("announced")) is None
    assert calls == []


def test_precompile_in_process_and_its_summary(capsys):
    assert cli.main(["precompile", "int8-per-tensor", "--jobs", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"nbquant precompile: 1 target\(s\), \d+ kernel signature\(s\) compiled in [\d.]+ s into .+; "
                        r"later processes load them from there\n", out)


def test_precompile_lists_targets_and_groups(capsys):
    from nbquant.precompile import GROUPS, TARGETS

    assert cli.main(["precompile", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[1:] == list(TARGETS)
    assert [line.split(":")[0] for line in out[1:]] == [f"group {g}" for g in GROUPS]
    assert "convert:W4A16" in GROUPS["demo"] and all(n.startswith("convert:") for n in GROUPS["convert"])


def test_precompile_rejects_an_unknown_target_in_one_line(capsys):
    assert cli.main(["precompile", "int9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("nbquant precompile: error: target 'int9': expected one of the groups demo, convert, gguf, "
                          "all")
    assert err.count("\n") == 1


def test_precompile_rejects_a_bad_dtype_and_jobs(capsys):
    from nbquant.precompile import precompile

    for argv in (["precompile", "--dtype", "int8"], ["precompile", "--jobs", "0"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 2
    with pytest.raises(ValueError, match="jobs=0"):
        precompile(["nvfp4"], jobs=0)
    with pytest.raises(ValueError, match="dtypes=\\['int8'\\]"):
        precompile(["nvfp4"], ["int8"])


def test_precompile_targets_and_groups_resolve_once_each():
    from nbquant.precompile import GROUPS, resolve_targets

    assert resolve_targets(None) == list(GROUPS["demo"])
    assert resolve_targets(["nvfp4", "w4a16", "convert:W4A16", "nvfp4"]) == ["nvfp4", "convert:W4A16"]
    assert resolve_targets(["Q6_K", "gguf:Q6_K", "iq4_xs"]) == ["gguf:Q6_K", "gguf:IQ4_XS"]
    assert "gguf:Q4_K" in GROUPS["gguf"] and "gguf:Q8_0" in GROUPS["demo"]
    assert resolve_targets(["all"]) == list(GROUPS["all"])


@pytest.mark.full(reason="compiles two targets cold in three fresh processes (about 20 s of cpu)")
def test_precompile_fills_the_cache_a_new_process_loads(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "nbquant", "precompile", "nvfp4", "mxfp8-e4m3", "--jobs", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert re.match(r"nbquant precompile: 2 target\(s\), [1-9]\d* kernel signature\(s\) compiled in [\d.]+ s into "
                    + re.escape(str(tmp_path)), done.stdout)
    code = ("from nbquant.precompile import compile_watch, TARGETS\n"
            "with compile_watch() as w:\n"
            "    TARGETS['nvfp4']('float32'); TARGETS['mxfp8-e4m3']('float32')\n"
            "print(w.signatures)")
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert again.stdout.split() == ["0"], again.stderr


@pytest.mark.full(reason="the demo on an empty cache: its kernels compile in two worker processes (about 25 s of cpu)")
def test_the_demo_on_an_empty_cache_compiles_ahead_then_loads(tmp_path):
    from nbquant.threads import usable_cpus

    if usable_cpus() < 2:
        pytest.skip("one usable CPU: the demo compiles on its first calls (nothing to run beside them)")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "NBQUANT_NUM_THREADS": "2"}
    cmd = [sys.executable, "-m", "nbquant", "demo", "--size", "8x256", "--repeats", "1", "--backend", "cpu",
           "--no-convert"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("compile: numba's on-disk cache is empty, so the demo first compiles") for line in lines)
    note = next(line for line in lines if line.startswith("compile: the cache was empty: "))
    assert re.search(r"compiled ahead in [\d.]+ s on \d+ processes at once; the table's first calls loaded them "
                     r"\([\d.]+ s in all\);", note), note
    rows = [line for line in lines if line.split()[-1:] in (["yes"], ["no"])]
    assert len(rows) == len(demo.schemes(256)) and all(row.endswith("yes") for row in rows)
