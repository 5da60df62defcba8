"""The output pool (nbquant/_memory.py): large results reuse mapped buffers, never one a live array still views."""

from __future__ import annotations

import gc
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
