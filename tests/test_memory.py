"""The output pool (nbquant/_memory.py): large results reuse mapped buffers, never one a live array still views."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import nbquant
from nbquant import _memory

N = _memory.POOL_MIN_BYTES // 4  # float32 elements of one pooled result


@pytest.fixture(autouse=True)
def _fresh_pool():
    previous = nbquant.set_output_pool(0)
    nbquant.set_output_pool(256 << 20)
    yield
    nbquant.set_output_pool(previous)


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_a_released_result_is_reused_and_a_live_view_is_not():
    q = np.zeros(N, np.int8)
    first = nbquant.dequantize(q, 0.5)
    where = _address(first)
    view = first[10:]
    del first
    gc.collect()
    second = nbquant.dequantize(q, 0.5)
    assert _address(second) != where  # `view` still holds the first buffer
    second_where = _address(second)
    second[:] = 7
    assert (view == 0).all()
    del view, second
    gc.collect()
    third = nbquant.dequantize(q, 0.5)
    assert _address(third) in (where, second_where)  # one of the two idle buffers, no fresh mapping
    assert nbquant.output_pool_bytes()[1] <= 256 << 20
    assert third.flags.writeable and third.flags.c_contiguous and third.dtype == np.float32


def test_small_results_and_a_disabled_pool_are_plain_numpy_arrays():
    assert nbquant.quantize(np.zeros(16, np.float32), 1.0, "int8").flags.owndata
    nbquant.set_output_pool(0)
    assert nbquant.dequantize(np.zeros(N, np.int8), 0.5).flags.owndata
    assert nbquant.output_pool_bytes() == (0, 0)


def test_the_bound_is_kept():
    nbquant.set_output_pool(_memory.POOL_MIN_BYTES * 2)
    results = [nbquant.dequantize(np.zeros(N, np.int8), 0.5) for _ in range(4)]
    del results
    gc.collect()
    limit, idle = nbquant.output_pool_bytes()
    assert idle <= limit == _memory.POOL_MIN_BYTES * 2


def test_threads_get_distinct_correct_results():
    x = np.arange(N, dtype=np.float32) % 100
    expected = nbquant.quantize(x, 0.5, "int16")
    failures = []

    def work():
        for _ in range(5):
            if not np.array_equal(nbquant.quantize(x, 0.5, "int16"), expected):
                failures.append(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True])
def test_bad_bound(bad):
    with pytest.raises((TypeError, ValueError), match="max_bytes"):
        nbquant.set_output_pool(bad)


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "512MiB"])
def test_a_bad_pool_size_in_the_environment_is_named_where_the_pool_is_used(monkeypatch, value):
    monkeypatch.setenv(_memory.ENV_VAR, value)
    monkeypatch.setitem(_memory._state, "limit", None)  # as in a process that has not used the pool yet
    message = rf"^NBQUANT_OUTPUT_POOL_BYTES='{re.escape(value)}': expected a byte count >= 0 \(0 turns the output "
    for call in (nbquant.output_pool_bytes, lambda: nbquant.set_output_pool(0),
                 lambda: nbquant.quantize(np.zeros(4, np.float32), 1.0, "int8")):
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.parametrize(("value", "limit"), [("", 512 << 20), (" 0 ", 0), ("1048576", 1 << 20)])
def test_the_pool_size_from_the_environment(monkeypatch, value, limit):
    monkeypatch.setenv(_memory.ENV_VAR, value)
    monkeypatch.setitem(_memory._state, "limit", None)
    assert nbquant.output_pool_bytes()[0] == limit


@pytest.mark.parametrize(("variable", "message"), [
    ("NBQUANT_OUTPUT_POOL_BYTES", "NBQUANT_OUTPUT_POOL_BYTES='abc': expected a byte count >= 0"),
    ("NBQUANT_NUM_THREADS", "NBQUANT_NUM_THREADS='abc': expected a positive integer thread count"),
    ("NBQUANT_BACKEND", "NBQUANT_BACKEND='abc' is not a backend"),
])
def test_a_bad_environment_value_never_breaks_import(variable, message):
    """``import nbquant`` works whatever the environment; the first call that needs the value names it."""
    code = ("import numpy as np, nbquant\n"
            "try:\n"
            "    nbquant.quantize(np.zeros(1 << 21, np.float32), 1.0, 'int8')\n"
            "except ValueError as error:\n"
            "    print(error)\n")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, variable: "abc"}, capture_output=True,
                          text=True, timeout=300, check=True)
    assert proc.stdout.startswith(message) and proc.stdout.count("\n") == 1, proc.stdout
