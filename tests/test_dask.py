"""nbquant on dask arrays, threaded scheduler: NumPy's bits, lazily, argument checks at call time, chunk alignment.

The same calls run on a two-process ``LocalCluster`` in tests/test_dask_distributed.py
(docs/dask.md).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from _dask_cases import CHUNKS, EAGER, FINITE_LAZY, LAZY, ONE_NAN, SPECIAL, X, arrays, check, check_error, da, dask

import nbquant
from nbquant._dask import engine, is_dask_array
from nbquant.layout import resolve_layout

ALL = LAZY | FINITE_LAZY | EAGER


@pytest.fixture(autouse=True)
def threaded_scheduler():
    """Every compute of this module, the calibrators' own included, on the threaded scheduler."""
    with dask.config.set(scheduler="threads"):
        yield


@pytest.mark.parametrize("chunks", CHUNKS.values(), ids=CHUNKS)
@pytest.mark.parametrize("name", ALL)
def test_same_bits_as_numpy(name, chunks):
    check(ALL[name], X, chunks)


@pytest.mark.parametrize("chunks", CHUNKS.values(), ids=CHUNKS)
@pytest.mark.parametrize("name", LAZY)
def test_nan_and_inf_chunks_same_bits_as_numpy(name, chunks):
    check(LAZY[name], SPECIAL, chunks)


@pytest.mark.parametrize("name", FINITE_LAZY | EAGER)
def test_nan_refused_with_numpys_error(name):
    check_error(ALL[name], ONE_NAN, CHUNKS["misaligned"])
    with pytest.raises(ValueError, match="x holds NaN"):
        dask.compute(*arrays(ALL[name](da.from_array(SPECIAL, chunks=CHUNKS["misaligned"]))))


def _refuse(block):
    raise RuntimeError("computed")


@pytest.mark.parametrize("name", LAZY | FINITE_LAZY)
def test_calls_are_lazy(name):
    """Nothing is computed until asked: the input's chunks raise when computed, the call does not."""
    x = da.from_array(X, chunks=CHUNKS["misaligned"]).map_blocks(_refuse, dtype=X.dtype)
    results = [a for a in arrays(LAZY[name](x) if name in LAZY else FINITE_LAZY[name](x)) if a is not None]
    lazy = [a for a in results if is_dask_array(a)]
    assert lazy and all(is_dask_array(a) or isinstance(a, np.floating) for a in results)  # or a given global scale
    with pytest.raises(RuntimeError, match="computed"):
        dask.compute(*lazy)


def test_misaligned_chunks_are_moved_to_the_nearest_block_boundaries():
    x = da.from_array(X, chunks=(5, 23))
    bq = nbquant.quantize_mx(x, "mxfp4")
    assert bq.data.chunks == ((5, 5, 2), (16, 16, 16)) and bq.scales.chunks == ((5, 5, 2), (1, 1, 1))
    assert nbquant.quantize(x, 0.5, "int8").chunks == x.chunks  # per-tensor: no block to align to
    assert nbquant.quantize(x, 0.5, "int4", packed=True).chunks == ((5, 5, 2), (12, 11, 12, 11, 2))
    assert engine.aligned_chunks((23, 23, 23, 23, 4), 96, 32) == (32, 32, 32)
    assert engine.aligned_chunks((10, 80, 6), 96, 32) == (96,)  # every boundary nearest to 0 or 96: one chunk


def test_packed_codes_keep_their_format():
    q = nbquant.quantize(da.from_array(X, chunks=(5, 23)), 0.5, "uint4", packed=True)
    assert q._meta.format == "uint4" and q[:3, 8:].compute().format == "uint4"
    np.testing.assert_array_equal(nbquant.dequantize(q, 0.5).compute(), nbquant.dequantize(q.compute(), 0.5))


def test_a_per_tensor_scale_is_a_tree_reduction_not_a_gather():
    x = da.from_array(X, chunks=(1, 12))  # 96 chunks
    codes, scale, _ = nbquant.quantize_dynamic(x, "int8")
    graph = dict(codes.__dask_graph__())
    dependencies, _ = dask.core.get_deps(graph)
    inputs = {k for k in graph if isinstance(k, tuple) and k[0] == x.name}
    assert len(inputs) == 96
    assert max(len(dependencies[k] & inputs) for k in graph) == 1  # no task reads more than one chunk of x
    assert max(map(len, dependencies.values())) < 96


BAD_CALLS = {
    "scale shape": lambda x: nbquant.quantize(x, np.ones(5), "int8", axis=0),
    "input dtype": lambda x: nbquant.quantize(x.astype(np.int32), 1.0, "int8"),
    "negative scale": lambda x: nbquant.quantize(x, -1.0, "int8"),
    "block larger than the axis": lambda x: nbquant.quantize(x, 1.0, "int4", axis=1, block_size=200),
    "odd packed axis": lambda x: nbquant.quantize(x[:, :95], 1.0, "int4", packed=True),
    "saturate": lambda x: nbquant.quantize(x, 1.0, "int8", compute_dtype="float16", scale_op="reciprocal",
                                           saturate=1),
    "float codes": lambda x: nbquant.dequantize(x, 1.0),
    "float dynamic format": lambda x: nbquant.choose_qparams(x, "float8_e4m3fn"),
    "tile not dividing": lambda x: nbquant.quantize_dynamic(x, "int8", block_size=(5, 32)),
    "odd packed dynamic": lambda x: nbquant.quantize_dynamic(x[:, :95], "int4", packed=True),
    "mx block not dividing": lambda x: nbquant.quantize_mx(x, "mxfp4", block_size=40),
    "nvfp4 odd block": lambda x: nbquant.quantize_nvfp4(x, block_size=3),
    "nvfp4 zero global scale": lambda x: nbquant.quantize_nvfp4(x, global_scale=0.0),
    "nf4 scale blocks": lambda x: nbquant.quantize_nf4(x, block_size=16, scale_block_size=5),
    "mx codes dtype": lambda x: nbquant.dequantize_mx(x, x, "mxfp4"),
    "calibrator axis": lambda x: nbquant.modelopt.MaxCalibrator(axis=3).collect(x),
}


@pytest.mark.parametrize("name", BAD_CALLS)
def test_arguments_checked_at_call_time_as_for_numpy(name):
    call = BAD_CALLS[name]
    with pytest.raises(Exception) as numpy_error:
        call(X)
    with pytest.raises(type(numpy_error.value)) as dask_error:
        call(da.from_array(X, chunks=(5, 23)))
    assert str(dask_error.value) == str(numpy_error.value)


def test_dask_scales_checked_for_shape_at_call_time_and_values_when_computed():
    x = da.from_array(X, chunks=(5, 23))
    with pytest.raises(ValueError, match=r"scale has shape \(5,\)"):
        nbquant.quantize(x, da.ones(5), "int8", axis=0)
    q = nbquant.quantize(x, da.from_array(np.r_[np.ones(11), -1.0]), "int8", axis=0)
    with pytest.raises(ValueError, match="scale must be finite and > 0"):
        q.compute()
    with pytest.raises(TypeError, match="out= cannot be combined with dask arrays"):
        nbquant.quantize(x, 1.0, "int8", out=np.empty(X.shape, np.int8))


def test_numpy_input_with_a_dask_scale_is_lazy():
    s = da.from_array(np.full(12, 0.05, np.float32), chunks=5)
    q = nbquant.quantize(X, s, "int8", axis=0)
    assert is_dask_array(q)
    np.testing.assert_array_equal(q.compute(), nbquant.quantize(X, np.full(12, 0.05, np.float32), "int8", axis=0))


def test_the_two_graph_recipes_of_docs_dask_md():
    """Scale first, then quantize: quantize_dynamic's and quantize_nvfp4's bits without holding the input."""
    x = da.from_array(X, chunks=(5, 23))
    scale, zp = dask.compute(*nbquant.choose_qparams(x, "int8"))
    check(lambda a: nbquant.quantize(a, scale, "int8", zero_point=zp, scale_op="reciprocal"), X, (5, 23))
    np.testing.assert_array_equal(nbquant.quantize(x, scale, "int8", zero_point=zp, scale_op="reciprocal").compute(),
                                  nbquant.quantize_dynamic(X, "int8")[0])
    g = nbquant.quantize_nvfp4(x).global_scale.compute()
    two, one = nbquant.quantize_nvfp4(x, global_scale=g), nbquant.quantize_nvfp4(X)
    assert g == one.global_scale and (two.data.compute() == one.data).all()
    assert (two.scales.compute().view(np.uint8) == one.scales.view(np.uint8)).all()


@pytest.mark.parametrize("x", [np.zeros((0, 32), np.float32), np.float32(1.5)], ids=["empty", "0-d"])
def test_empty_and_0d_inputs(x):
    check(lambda a: nbquant.quantize_dynamic(a, "int8"), np.asarray(x), -1)
    check(lambda a: nbquant.quantize(a, 0.5, "int8"), np.asarray(x), -1)


def _threads(x):
    return np.array(nbquant.get_num_threads())


def test_chunk_calls_run_one_thread_on_dask_worker_threads():
    x = da.from_array(X, chunks=(4, 32))
    probe, = engine.map_layout(_threads, x, resolve_layout(X.shape), [engine.Output("grid", np.dtype(np.int64))])
    assert probe.shape == (3, 3)
    assert set(probe.compute(scheduler="threads").ravel()) == {1}
    assert set(probe.compute(scheduler="synchronous").ravel()) == {nbquant.get_num_threads()}
    assert nbquant.get_num_threads() >= 1  # the cap was for the chunk calls only


def test_import_nbquant_does_not_import_dask():
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import nbquant
        x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
        nbquant.quantize_dynamic(x, "int4", block_size=(1, 32), packed=True)
        nbquant.quantize_mx(x, "mxfp4").dequantize()
        nbquant.modelopt.MaxCalibrator().collect(x)
        print(sorted(m for m in sys.modules if m == "dask" or m.startswith(("dask.", "distributed"))))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _unknown_rows(a: np.ndarray, chunks) -> da.Array:
    """``a`` as a dask array whose first dimension has unknown chunk sizes (boolean indexing, all rows kept)."""
    return da.from_array(a, chunks=chunks)[da.from_array(np.ones(a.shape[0], bool), chunks=chunks[0])]


_UNKNOWN = r" is a dask array of unknown chunk sizes \(shape \(nan[^)]*\), e\.g\. after boolean indexing\); call "


@pytest.mark.parametrize("name", ALL)
def test_unknown_chunk_sizes_refused_naming_the_argument(name):
    """Every call on ``x[mask]`` says to call ``x.compute_chunk_sizes()``, at call time; after it the call works."""
    x = _unknown_rows(X, CHUNKS["aligned"])
    with pytest.raises(ValueError, match=rf"^x{_UNKNOWN}x\.compute_chunk_sizes\(\) first"):
        ALL[name](x)
    arrays(ALL[name](x.compute_chunk_sizes()))


def test_unknown_chunk_sizes_of_scales_codes_and_containers_named():
    scale = np.full(96, 0.05, np.float32)
    q = nbquant.quantize(X, scale, "int8", axis=1)
    bq = nbquant.quantize_mx(X, "mxfp8_e4m3", axis=0, block_size=4)
    nq = nbquant.quantize_nf4(X, block_size=32)
    calls = {
        "scale": lambda: nbquant.quantize(X, _unknown_rows(scale, (32,)), "int8", axis=1),
        "zero_point": lambda: nbquant.quantize(X, scale, "uint8", axis=1,
                                               zero_point=_unknown_rows(np.zeros(96, np.int32), (32,))),
        "q": lambda: nbquant.dequantize(_unknown_rows(q, (4, 32)), scale, axis=1),
        "data": lambda: nbquant.dequantize_mx(_unknown_rows(bq.data, (4, 32)), bq.scales, "mxfp8_e4m3", axis=0,
                                              block_size=4),
        "scales": lambda: nbquant.dequantize_mx(bq.data, _unknown_rows(bq.scales, (1, 32)), "mxfp8_e4m3", axis=0,
                                                block_size=4),
        "nf4 data": lambda: nbquant.NF4Quantized(_unknown_rows(nq.data, (64,)), nq.scales, nq.shape, 32).dequantize(),
    }
    for argument, call in calls.items():
        name = argument.split()[-1]
        with pytest.raises(ValueError, match=rf"^{name}{_UNKNOWN}{name}\.compute_chunk_sizes\(\) first"):
            call()
