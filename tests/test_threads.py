"""The cpu backend's threads: a call split into parts gives the bits of one part; fork and threads are safe."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import nbquant
from nbquant.backends.cpu import _kernel

pytestmark = pytest.mark.filterwarnings("error")


@pytest.fixture
def threads():
    """Restore the thread count a test changes."""
    before = list(nbquant.threads._requested)
    yield
    nbquant.threads._requested[:] = before


def _calls(x: np.ndarray) -> dict[str, object]:
    """One call per kernel family; every result as a tuple of arrays."""
    finite = np.abs(np.nan_to_num(x, nan=1.0, posinf=1.0))
    s_row = finite.max(axis=1, keepdims=True) / 127
    s_grp = finite.reshape(x.shape[0], -1, 32).max(axis=2) / 7
    calls = {
        "int8 per-row": lambda: nbquant.quantize(x, s_row, "int8", axis=0, backend="cpu"),
        "int4 g32 packed": lambda: nbquant.quantize(x, s_grp, "int4", block_size=(1, 32), packed=True, backend="cpu"),
        "fp8": lambda: nbquant.quantize(x, np.float32(0.01), "float8_e4m3fn", backend="cpu"),
        "fp4 packed": lambda: nbquant.quantize(x, np.float32(0.1), "float4_e2m1fn", packed=True, backend="cpu"),
        "dequantize": lambda: nbquant.dequantize(nbquant.quantize(x, s_row, "int8", axis=0, backend="cpu"), s_row,
                                                 axis=0, backend="cpu"),
        "mxfp4": lambda: nbquant.quantize_mx(x, "mxfp4", backend="cpu"),
        "nvfp4": lambda: nbquant.quantize_nvfp4(x, global_scale=np.float32(0.01), backend="cpu"),
        "nf4": lambda: nbquant.quantize_nf4(np.nan_to_num(x, nan=0.5, posinf=3.0), backend="cpu"),
        "dynamic rows": lambda: nbquant.quantize_dynamic(x, "uint4", block_size=(1, 32), mapping="asymmetric",
                                                         packed=True, backend="cpu"),
        "dynamic per-tensor": lambda: nbquant.quantize_dynamic(x, "int8", backend="cpu"),
        "dynamic per-column": lambda: nbquant.quantize_dynamic(x, "int8", axis=1, backend="cpu"),
        "amax": lambda: nbquant.reduce_amax(x, backend="cpu"),
        "fake quant": lambda: nbquant.modelopt.fake_tensor_quant(x, None, 8, axis=0, backend="cpu"),
        "histogram": lambda: _histogram(x),
    }
    return calls


def _histogram(x: np.ndarray) -> np.ndarray:
    calibrator = nbquant.modelopt.HistogramCalibrator(num_bins=257, backend="cpu")
    calibrator.collect(np.nan_to_num(x, nan=0.5, posinf=3.0))
    return calibrator.histogram


def _arrays(result) -> list[np.ndarray]:
    if isinstance(result, tuple):
        return [a for r in result for a in _arrays(r)]
    if hasattr(result, "scales"):
        return [np.asarray(result.data), np.asarray(result.scales)]
    return [np.asarray(result)]


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(u.dtype == v.dtype and u.shape == v.shape and u.tobytes() == v.tobytes()
                                    for u, v in zip(a, b, strict=True))


def test_part_range_covers_every_unit_once():
    for n in (0, 1, 2, 7, 64, 1001):
        for parts in (1, 2, 3, 5, 16):
            ranges = [_kernel.part_range(n, p, parts) for p in range(parts)]
            assert ranges[0][0] == 0 and ranges[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(ranges[:-1], ranges[1:], strict=True))
            assert max(hi - lo for lo, hi in ranges) - min(hi - lo for lo, hi in ranges) <= 1


def test_split_calls_give_the_bits_of_one_part(monkeypatch, threads):
    """Every kernel family, on 1 thread and split into 3 parts of a few units each: the same bits."""
    x = np.random.default_rng(5).standard_normal((37, 128)).astype(np.float32)
    x[3, 5] = np.nan
    x[7, 1] = np.inf
    calls = _calls(x)
    nbquant.set_num_threads(1)
    one = {name: _arrays(call()) for name, call in calls.items()}
    monkeypatch.setattr(_kernel, "PART_BYTES", 1)
    nbquant.set_num_threads(3)
    assert _kernel.parallel_parts(4096) == 3
    for name, call in calls.items():
        assert _same(_arrays(call()), one[name]), name


def test_concurrent_callers_get_their_own_results(monkeypatch, threads):
    """Eight Python threads calling split kernels at once each get the single-thread result."""
    monkeypatch.setattr(_kernel, "PART_BYTES", 1)
    nbquant.set_num_threads(2)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((33, 64)).astype(np.float32) * (i + 1) for i in range(8)]
    expected = [nbquant.quantize_dynamic(x, "int8", axis=0, backend="reference") for x in inputs]
    with ThreadPoolExecutor(8) as pool:
        for _ in range(5):
            got = list(pool.map(lambda x: nbquant.quantize_dynamic(x, "int8", axis=0, backend="cpu"), inputs))
            for g, e in zip(got, expected, strict=True):
                assert _same(_arrays(g), _arrays(e))


def test_fork_after_parallel_kernels_works():
    """A fork()-ed multiprocessing pool after split kernels ran: the children compute, nothing hangs."""
    script = textwrap.dedent("""
        import multiprocessing, numpy as np, nbquant
        from nbquant.backends.cpu import _kernel
        _kernel.PART_BYTES = 1
        nbquant.set_num_threads(2)
        x = np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64)

        def work(seed):
            return int(nbquant.quantize(x * seed, np.float32(0.01), "int8", backend="cpu").astype(np.int64).sum())

        parent = work(1)
        with multiprocessing.get_context("fork").Pool(2) as pool:
            assert pool.map(work, [1, 2, 3]) == [parent, work(2), work(3)]
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@pytest.mark.parametrize("bad", [True, np.bool_(False), 2.0, "2", None])
def test_set_num_threads_rejects_non_integers(bad, threads):
    with pytest.raises(TypeError, match=r"n=.*positive integer"):
        nbquant.set_num_threads(bad)


@pytest.mark.parametrize("bad", [0, -1])
def test_set_num_threads_rejects_counts_below_one(bad, threads):
    with pytest.raises(ValueError, match=rf"n={bad}: expected a positive integer"):
        nbquant.set_num_threads(bad)


def test_thread_count_from_the_environment(monkeypatch, threads):
    nbquant.threads._requested.clear()
    monkeypatch.setenv("NBQUANT_NUM_THREADS", "5")
    assert nbquant.get_num_threads() == 5
    nbquant.set_num_threads(np.int64(2))
    assert nbquant.get_num_threads() == 2
    nbquant.threads._requested.clear()
    monkeypatch.setenv("NBQUANT_NUM_THREADS", "many")
    with pytest.raises(ValueError, match=r"NBQUANT_NUM_THREADS='many': expected a positive integer"):
        nbquant.get_num_threads()


def test_small_calls_start_no_worker_thread():
    """A call too small to split runs on the calling thread: no worker thread exists until a large call."""
    code = textwrap.dedent("""
        import threading, numpy as np, nbquant
        workers = lambda: sum(t.name.startswith("nbquant-cpu") for t in threading.enumerate())
        x = np.linspace(-1, 1, 4096, dtype=np.float32)
        for _ in range(3):
            q = nbquant.quantize(x, np.float32(0.01), "int8", backend="cpu")
            nbquant.dequantize(q, np.float32(0.01), backend="cpu")
        small = workers()
        nbquant.quantize(np.resize(x, 1 << 21), np.float32(0.01), "int8", backend="cpu")
        print(small, workers())
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True,
                          env={**os.environ, "NBQUANT_NUM_THREADS": "4"})
    small, large = map(int, done.stdout.split())
    assert small == 0 and large >= 1  # the pool starts a thread per part only while none is idle
