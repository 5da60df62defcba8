"""The ``nbquant demo`` command line: table contents, exit codes and argument errors."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

import nbquant
from nbquant import cli, demo


def table(stdout: str) -> dict[tuple[str, str], list[str]]:
    """Parse the demo table: ``{(scheme + " " + layout, backend): [sqnr, err, first, median, gbps, eq]}``."""
    lines = stdout.splitlines()
    start = lines.index(cli.HEADER) + 1
    rows = {}
    for line in lines[start:]:
        if line.startswith("machine:"):
            break
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
    assert "machine:" in stdout and "OMP_WAIT_POLICY=" in stdout


# Under the CUDA simulator the cuda backend is "available" but far too slow for a demo run.
SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
AVAILABLE = [b.name for b in nbquant.backends() if b.available and not (SIMULATOR and b.name == "cuda")]
#: Demo arguments that run every backend in AVAILABLE: the default (all available) outside the simulator.
SELECT = [arg for name in AVAILABLE for arg in ("--backend", name)] if SIMULATOR else []


def test_demo_in_process(capsys, monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert cli.main(["demo", "--size", "256", "--repeats", "2", *SELECT]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    out = capsys.readouterr().out
    assert "256x256 float32" in out
    assert "cpu" in AVAILABLE
    check_table(out, 256, AVAILABLE)
    assert "threading layer omp" in out or "threading layer workqueue" in out or "threading layer tbb" in out


def test_demo_keeps_a_users_omp_wait_policy(capsys, monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert cli.main(["demo", "--size", "8x32", "--backend", "reference", "--repeats", "1"]) == 0
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    check_table(capsys.readouterr().out, 32, ["reference"])


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
    check_table(proc.stdout, 64, AVAILABLE)
    assert "OMP_WAIT_POLICY=" in proc.stdout


def test_unavailable_backend_is_skipped_with_its_reason(capsys, monkeypatch):
    fake = [b for b in nbquant.backends() if b.name != "cuda"] + [nbquant.BackendInfo("cuda", False, "no GPU here")]
    monkeypatch.setattr(nbquant, "backends", lambda: fake)
    assert cli.main(["demo", "--size", "8x16", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "skipped cuda: no GPU here" in out
    check_table(out, 16, [b.name for b in fake if b.available])


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
                          capture_output=True, text=True, timeout=120)
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
