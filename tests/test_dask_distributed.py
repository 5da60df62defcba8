"""nbquant on a ``dask.distributed.LocalCluster`` of two worker processes (one thread each), started here.

The calls of tests/_dask_cases.py against NumPy bit for bit, the thread count of a chunk
call on a worker, and the kernels of a fresh worker process coming from the disk cache.
"""

from __future__ import annotations

import logging
import sys

import numpy as np
import pytest
from _dask_cases import CHUNKS, EAGER, FINITE_LAZY, LAZY, ONE_NAN, SPECIAL, X, check, check_error, da

import nbquant
from nbquant._dask import engine
from nbquant.layout import resolve_layout

distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")
ALL = LAZY | FINITE_LAZY | EAGER


@pytest.fixture(scope="module", autouse=True)
def client():
    """A two-process cluster for this module; every compute of the module runs on it (the default client)."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the probes below, for the workers
    with (distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                   silence_logs=logging.ERROR) as cluster,
          distributed.Client(cluster) as client):
        yield client
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("chunks", CHUNKS.values(), ids=CHUNKS)
@pytest.mark.parametrize("name", ALL)
def test_same_bits_as_numpy(name, chunks):
    check(ALL[name], X, chunks)


@pytest.mark.parametrize("name", LAZY)
def test_nan_and_inf_chunks_same_bits_as_numpy(name):
    check(LAZY[name], SPECIAL, CHUNKS["misaligned"])


@pytest.mark.parametrize("name", FINITE_LAZY | EAGER)
def test_nan_refused_with_numpys_error(name):
    check_error(ALL[name], ONE_NAN, CHUNKS["misaligned"])


def _threads(x):
    return np.array(nbquant.get_num_threads())


def test_chunk_calls_run_one_thread_on_the_workers(client):
    probe, = engine.map_layout(_threads, da.from_array(X, chunks=(4, 32)), resolve_layout(X.shape),
                               [engine.Output("grid", np.dtype(np.int64))])
    assert set(probe.compute().ravel()) == {1}
    assert set(client.run(nbquant.get_num_threads).values()) == {nbquant.threads.usable_cpus()}  # outside tasks


def _compiled() -> int:
    """How many kernel signatures this process compiled (the others it loaded from the disk cache, or did not use)."""
    from nbquant.backends.cpu._kernel import KERNELS

    return sum(sum(k.dispatcher.stats.cache_misses.values()) for k in KERNELS)


def test_fresh_workers_load_the_kernels_from_the_disk_cache(client):
    """A worker process compiles a kernel at most once, and only where no process has cached it before."""
    calls = [LAZY["quantize_dynamic int4 g32 packed"], FINITE_LAZY["quantize_nvfp4 global amax"]]
    for call in calls:
        check(call, X, CHUNKS["misaligned"])  # the workers compile what the cache lacks (read-only chunks, say)
    client.restart()
    for call in calls:
        check(call, X, CHUNKS["misaligned"])
    assert set(client.run(_compiled).values()) == {0}
