"""The cuda backend without a GPU: the simulator run of the backend tests, plus cuda-only tests.

``test_backend_suite_under_the_cuda_simulator`` spawns
``NUMBA_ENABLE_CUDASIM=1 NBQUANT_TEST_BACKENDS=cuda python -m pytest ... -p _cudasim_plugin``,
which runs tests that use the ``backend`` fixture on ``cuda`` (bit-exact against
``reference``) together with the tests below that need a usable cuda backend. In the
default tier the backend tests are those of ``test_cuda_kernel_families.py`` (every
kernel family on small odd shapes); in the full tier (``--full``) every backend test of
the suite. Outside that run (no simulator, no GPU) the cuda-only tests skip. Tests marked
``gpu`` need real hardware.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from _background import Job
from _helpers import device_copy, host_copy

import nbquant
from nbquant.backends import BackendUnavailableError, is_device_array, use_cuda_stream

ROOT = Path(__file__).resolve().parents[1]
#: What the default tier's simulator run collects; the full tier collects all of ``tests``.
DEFAULT_TIER_MODULES = ("tests/test_cuda_kernel_families.py", "tests/test_fuzz_special_values.py",
                        "tests/test_block_registry.py", "tests/test_cuda_simulator.py")
SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
CUDA = {b.name: b for b in nbquant.backends()}["cuda"]
needs_cuda = pytest.mark.skipif(not CUDA.available, reason=f"cuda backend unavailable: {CUDA.reason}")


def _real_gpu() -> bool:
    return CUDA.available and not SIMULATOR


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "NBQUANT_TEST_BACKENDS")}
    env.update(extra)
    return env


# --- the simulator run -----------------------------------------------------------------------------


def _simulator_job(full_tier: bool) -> Job | None:
    """The simulator run: the default tier's modules, or all of ``tests`` (full tier); None without numba-cuda."""
    if CUDA.reason.startswith("numba-cuda is not installed"):
        return None
    env = _env(NUMBA_ENABLE_CUDASIM="1", NBQUANT_TEST_BACKENDS="cuda", NBQUANT_TEST_TIER="full" if full_tier else "",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")])))
    targets = ["tests"] if full_tier else list(DEFAULT_TIER_MODULES)
    cmd = [sys.executable, "-m", "pytest", *targets, "-q", "--tb=line", "-p", "_cudasim_plugin",
           "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestUnknownMarkWarning"]
    # A limit against a hang, not a timing check: the run shares two cores with the rest of the tier, at a lower
    # priority (the default tier's passed 900 s on a slower 2-core guest while the tier took 19 minutes).
    return Job(cmd, ROOT, env, timeout=2700 if full_tier else 1800)


@pytest.mark.nosim
@pytest.mark.background(job=_simulator_job)
def test_backend_suite_under_the_cuda_simulator(full_tier, background_result):
    """The backend tests pass on cuda under NUMBA_ENABLE_CUDASIM=1: every kernel family (default tier), all (full)."""
    if background_result is None:
        pytest.skip(CUDA.reason)
    targets = "tests" if full_tier else " ".join(DEFAULT_TIER_MODULES)
    tail = "\n".join(background_result.output.strip().splitlines()[-60:])
    print(f"simulator run of {targets}: {background_result.seconds:.0f}s\n{tail}")
    assert background_result.returncode == 0, f"cuda simulator run failed (rc={background_result.returncode}):\n{tail}"
    assert " passed" in background_result.output


@pytest.mark.nosim
def test_import_nbquant_does_not_import_numba_cuda():
    code = "import sys, nbquant; nbquant.quantize([1.0], 1.0, 'int8'); print('numba.cuda' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- availability ----------------------------------------------------------------------------------


def test_backends_lists_cuda_with_a_reason():
    assert CUDA.available == (SIMULATOR or _real_gpu())
    if SIMULATOR:
        assert CUDA.available, CUDA.reason
    elif not CUDA.available:
        assert CUDA.reason.startswith(("no CUDA driver or GPU", "numba-cuda is not installed")), CUDA.reason


@pytest.mark.skipif(CUDA.available, reason="cuda is available here")
def test_explicit_cuda_without_a_gpu_raises_with_the_reason():
    with pytest.raises(BackendUnavailableError, match="backend 'cuda' is not available: "):
        nbquant.quantize(np.ones(3, np.float32), 1.0, "int8", backend="cuda")
    # auto still runs NumPy arrays on the CPU
    assert nbquant.quantize(np.ones(3, np.float32), 1.0, "int8").tolist() == [1, 1, 1]


def test_launch_config_covers_rows_and_columns():
    if CUDA.reason.startswith("numba-cuda is not installed"):
        pytest.skip(CUDA.reason)
    from nbquant.backends.cuda.runtime import MAX_BLOCKS, THREADS
    from nbquant.backends.cuda.runtime import grid_for_rows as launch_config

    (gx, gy), t = launch_config(1, 1 << 28, simulator=False)
    assert (gy, t) == (1, THREADS) and gx == MAX_BLOCKS
    (gx, gy), t = launch_config(1 << 20, 47, simulator=False)
    assert (gx, t) == (1, 64) and gy == MAX_BLOCKS
    (gx, gy), t = launch_config(3, 1, simulator=False)
    assert (gx, gy, t) == (1, 3, 32)
    (gx, gy), t = launch_config(100, 1000, simulator=True)
    assert gx * t < 1000 and gy < 100  # grid-stride loops are exercised in the simulator


# --- cuda-only behaviour (simulator or GPU) --------------------------------------------------------


@pytest.fixture
def cuda():
    if not CUDA.available:
        pytest.skip(f"cuda backend unavailable: {CUDA.reason}")
    from numba import cuda

    return cuda


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64])
def test_device_array_in_device_array_out(cuda, dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 9, 12)) * 4).astype(dtype)
    scale = (rng.random((5, 9, 3)) + 0.1).astype(np.float32)
    d = device_copy(x)
    q = nbquant.quantize(d, scale, "int4", axis=2, block_size=4)
    assert is_device_array(q) and q.dtype == ml_dtypes.int4
    ref = nbquant.quantize(x, scale, "int4", axis=2, block_size=4, backend="reference")
    np.testing.assert_array_equal(host_copy(q).view(np.uint8), ref.view(np.uint8))
    back = nbquant.dequantize(q, scale, axis=2, block_size=4, out_dtype=ml_dtypes.bfloat16)
    ref_back = nbquant.dequantize(ref, scale, axis=2, block_size=4, out_dtype=ml_dtypes.bfloat16, backend="reference")
    assert is_device_array(back)
    np.testing.assert_array_equal(host_copy(back).view(np.int16), ref_back.view(np.int16))


def test_device_out_and_packed(cuda):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((7, 10)).astype(np.float32)
    scale = np.float32(0.3)
    zp = np.int32(5)
    out = cuda.device_array((7, 5), np.uint8)
    r = nbquant.quantize(device_copy(x), scale, "uint4", zero_point=zp, packed=True, out=out)
    assert r is out
    ref = nbquant.quantize(x, scale, "uint4", zero_point=zp, packed=True, backend="reference")
    np.testing.assert_array_equal(host_copy(out), ref)
    # numpy codes, device out
    dout = cuda.device_array((7, 10), np.float16)
    nbquant.dequantize(ref, scale, zero_point=zp, dtype="uint4", out_dtype=np.float16, out=dout)
    expect = nbquant.dequantize(ref, scale, zero_point=zp, dtype="uint4", out_dtype=np.float16, backend="reference")
    np.testing.assert_array_equal(host_copy(dout).view(np.uint16), expect.view(np.uint16))


def test_device_arrays_need_cuda_and_checked_out(cuda):
    d = device_copy(np.ones((4, 6), np.float32))
    with pytest.raises(BackendUnavailableError, match="host"):
        nbquant.quantize(d, 1.0, "int8", backend="cpu")
    with pytest.raises(ValueError, match="shape"):
        nbquant.quantize(d, 1.0, "int8", out=cuda.device_array((4, 5), np.int8))
    with pytest.raises(TypeError, match="dtype"):
        nbquant.quantize(device_copy(np.ones(3, np.int32)), 1.0, "int8")


@pytest.mark.parametrize(("kwargs", "packed"), [
    ({"block_size": (1, 10), "mapping": "asymmetric"}, True),  # fused one-pass kernel
    ({"axis": 1, "block_size": 5, "mapping": "symmetric"}, False),  # fused, partial last block
    ({"mapping": "symmetric"}, False),  # per-tensor: reduction, then the static kernel
    ({"block_size": (3, 4), "mapping": "modelopt"}, True),  # 2-D blocks: two passes
])
def test_dynamic_device_arrays_stay_on_the_device(cuda, kwargs, packed):
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((6, 20)) * 3).astype(np.float32)
    x[2, 3] = np.nan
    dtype = "int4" if kwargs["mapping"] != "asymmetric" else "uint4"
    got = nbquant.quantize_dynamic(device_copy(x), dtype, packed=packed, **kwargs)
    ref = nbquant.quantize_dynamic(x, dtype, packed=packed, backend="reference", **kwargs)
    assert all(is_device_array(a) for a in got)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_array_equal(host_copy(a).view(np.uint8 if b.dtype.itemsize == 1 else b.dtype),
                                      b.view(np.uint8 if b.dtype.itemsize == 1 else b.dtype))
    s, z = nbquant.choose_qparams(device_copy(x), dtype, **kwargs)
    assert is_device_array(s) and is_device_array(z)
    np.testing.assert_array_equal(host_copy(s), ref[1])
    np.testing.assert_array_equal(host_copy(z), ref[2])
    with pytest.raises(BackendUnavailableError, match="host"):
        nbquant.quantize_dynamic(device_copy(x), dtype, backend="cpu", **kwargs)


def test_dynamic_empty_device_input(cuda):
    q, s, z = nbquant.quantize_dynamic(device_copy(np.zeros((0, 4), np.float32)), "int8", axis=1)
    assert is_device_array(q) and q.shape == (0, 4)
    assert is_device_array(s) and s.shape == (4,)


def _host(a):
    return host_copy(a) if is_device_array(a) else np.asarray(a)


def test_modelopt_ops_keep_device_arrays_on_the_device(cuda):
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((6, 16)) * 2).astype(np.float32)
    x[1, 2] = np.nan
    g = rng.standard_normal((6, 16)).astype(np.float32)
    amax = np.abs(x).max(axis=1, keepdims=True) * np.float32(0.8)
    amax[1] = 1.5
    dx, dg = device_copy(x), device_copy(g)
    calls = [
        (lambda a, **k: nbquant.modelopt.fake_tensor_quant(a, amax, 4, **k)),
        (lambda a, **k: nbquant.modelopt.fake_tensor_quant(a, None, (4, 3), axis=0, **k)),
        (lambda a, **k: nbquant.modelopt.tensor_quant(a, 2.0, 8, **k)),
        (lambda a, **k: nbquant.modelopt.scaled_e4m3(a, amax, **k)),
        (lambda a, **k: nbquant.reduce_amax(a, block_size=(2, 8), **k)),
        (lambda a, **k: nbquant.modelopt.dynamic_block_quant(a, {-1: 8, "type": "dynamic"}, 4, **k)),
        (lambda a, **k: nbquant.modelopt.fake_affine_tensor_quant(a, -1.0, 2.0, 4, **k)),
    ]
    for call in calls:
        got, ref = call(dx), call(x, backend="reference")
        for a, b in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,),
                        strict=True):
            assert is_device_array(a)
            np.testing.assert_array_equal(_host(a).view(np.uint32), np.asarray(b).view(np.uint32))
    got = nbquant.modelopt.fake_tensor_quant_backward(dg, dx, device_copy(amax))
    ref = nbquant.modelopt.fake_tensor_quant_backward(g, x, amax, backend="reference")
    assert is_device_array(got)
    np.testing.assert_array_equal(_host(got), ref)
    got = nbquant.modelopt.fake_affine_tensor_quant_backward(dg, dx, -1.0, 2.0)
    np.testing.assert_array_equal(_host(got), nbquant.modelopt.fake_affine_tensor_quant_backward(g, x, -1.0, 2.0,
                                                                                         backend="reference"))
    with pytest.raises(TypeError, match="both"):
        nbquant.modelopt.fake_tensor_quant_backward(g, dx, amax)


def test_modelopt_unsigned_check_on_the_device(cuda):
    """modelopt raises for unsigned when ``x.min() < 0`` (a NaN min does not raise), on host and device alike."""
    neg = np.array([[0.5, -0.25, 1.0]], np.float32)
    for a in (neg, device_copy(neg)):
        with pytest.raises(TypeError, match="unsigned"):
            nbquant.modelopt.fake_tensor_quant(a, 1.0, 8, unsigned=True)
    with_nan = np.array([[0.5, -0.25, np.nan]], np.float32)
    ref = nbquant.modelopt.fake_tensor_quant(with_nan, 1.0, 8, unsigned=True, backend="reference")
    got = nbquant.modelopt.fake_tensor_quant(device_copy(with_nan), 1.0, 8, unsigned=True)
    np.testing.assert_array_equal(_host(got).view(np.uint32), ref.view(np.uint32))


def test_calibrators_collect_device_arrays(cuda):
    rng = np.random.default_rng(10)
    batches = [(rng.standard_normal((5, 12)) * (i + 1)).astype(np.float32) for i in range(3)]
    batches[1][0, :3] = 0.0
    batches[1][2, 5] = -0.0
    for make in (lambda: nbquant.modelopt.MaxCalibrator(axis=0),
                 lambda: nbquant.modelopt.HistogramCalibrator(num_bins=64),
                 lambda: nbquant.modelopt.HistogramCalibrator(num_bins=64, skip_zeros=True)):
        on_device, on_host = make(), make()
        for b in batches:
            on_device.collect(device_copy(b))
            on_host.collect(b)
        np.testing.assert_array_equal(on_device.compute_amax(), on_host.compute_amax())
        if isinstance(on_host, nbquant.modelopt.HistogramCalibrator):
            np.testing.assert_array_equal(on_device.histogram, on_host.histogram)


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp4", "mxint8", "nvfp4"])
def test_block_formats_keep_device_arrays_on_the_device(cuda, fmt):
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, 2, 64)) * 5).astype(np.float32)
    quantize = (lambda a, **k: nbquant.quantize_nvfp4(a, **k)) if fmt == "nvfp4" else \
        (lambda a, **k: nbquant.quantize_mx(a, fmt, **k))
    got, ref = quantize(device_copy(x)), quantize(x, backend="reference")
    assert is_device_array(got.data) and is_device_array(got.scales)
    assert got.data.dtype == ref.data.dtype and got.scales.dtype == ref.scales.dtype
    np.testing.assert_array_equal(host_copy(got.data).view(np.uint8), ref.data.view(np.uint8))
    np.testing.assert_array_equal(host_copy(got.scales).view(np.uint8), ref.scales.view(np.uint8))
    back = got.dequantize(out_dtype=np.float16)
    assert is_device_array(back)
    np.testing.assert_array_equal(host_copy(back), ref.dequantize(out_dtype=np.float16, backend="reference"))
    with pytest.raises(ValueError, match="last axis"):
        quantize(device_copy(np.ascontiguousarray(x.transpose(0, 2, 1))), axis=1)
    with pytest.raises(TypeError, match="both"):
        nbquant.dequantize_mx(got.data, ref.scales, "mxfp8_e4m3")


@pytest.mark.parametrize("scale_block_size", [None, 4])
def test_nf4_keeps_device_arrays_on_the_device(cuda, scale_block_size):
    x = np.random.default_rng(12).standard_normal((4, 64)).astype(np.float32)
    got = nbquant.quantize_nf4(device_copy(x), block_size=16, scale_block_size=scale_block_size)
    ref = nbquant.quantize_nf4(x, block_size=16, scale_block_size=scale_block_size, backend="reference")
    assert is_device_array(got.data) and is_device_array(got.scales)
    np.testing.assert_array_equal(host_copy(got.data), ref.data)
    np.testing.assert_array_equal(host_copy(got.scales), ref.scales)
    back = got.dequantize()
    assert is_device_array(back)
    np.testing.assert_array_equal(host_copy(back), ref.dequantize(backend="reference"))


def test_stream_is_used(cuda):
    stream = cuda.stream()
    x = np.linspace(-3, 3, 50, dtype=np.float32)
    with use_cuda_stream(stream):
        q = nbquant.quantize(device_copy(x, stream=stream), 0.05, "int8")
        stream.synchronize()
    np.testing.assert_array_equal(host_copy(q), nbquant.quantize(x, 0.05, "int8", backend="reference"))


def test_every_launched_signature_is_in_the_ptx_check(cuda):
    """The PTX check compiles all_signatures(); every launch of this process must be one of them."""
    from nbquant.backends.cuda import runtime as _cuda

    rng = np.random.default_rng(5)
    for dtype in (np.float32, np.float64, np.float16, ml_dtypes.bfloat16):
        x = rng.standard_normal((3, 8)).astype(dtype)
        for fmt, packed in (("int8", False), ("int16", False), ("int2", True)):
            q = nbquant.quantize(x, 0.1, fmt, packed=packed, backend="cuda")
            for out_dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
                nbquant.dequantize(q, 0.1, dtype=fmt, out_dtype=out_dtype, backend="cuda")
    known = set(_cuda.all_signatures())
    assert _cuda.launched and _cuda.launched <= known, _cuda.launched - known


def test_block_format_launches_are_in_the_ptx_check(cuda):
    """MX/NVFP4/NF4 quantize and dequantize and amax launch only signatures that the PTX check compiles."""
    from nbquant.backends.cuda import blocks as _cuda_blocks
    from nbquant.backends.cuda import runtime as _cuda

    x = np.random.default_rng(7).standard_normal((2, 32)).astype(np.float32)
    for dtype in (np.float32, np.float64, np.float16, ml_dtypes.bfloat16):
        xx = x.astype(dtype)
        bqs = [nbquant.quantize_mx(xx, fmt, block_size=8, backend="cuda") for fmt in ("mxfp8_e5m2", "mxfp4", "mxint8")]
        bqs.append(nbquant.quantize_nvfp4(xx, block_size=8, backend="cuda"))
        bqs.append(nbquant.quantize_nf4(xx, block_size=8, backend="cuda"))
        for bq in bqs:
            for out_dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
                bq.dequantize(out_dtype, backend="cuda")
    block_signatures = [(k.name, s) for k in vars(_cuda_blocks).values() if isinstance(k, _cuda.CudaKernel)
                        for s in k.signatures()]
    blocks = {k for k, _ in block_signatures}
    mine = {(k, s) for k, s in _cuda.launched if k in blocks}
    assert len(mine) == len(block_signatures), mine
    assert mine <= set(_cuda.all_signatures())


def test_block_entry_points_take_device_arrays(cuda):
    """The cuda block entry points accept numba device arrays (in and out) and match the cpu's bit for bit."""
    from nbquant.backends.cpu import BACKEND as cpu_blocks
    from nbquant.backends.cuda import BACKEND as _cuda
    from nbquant.block_formats import _mx_spec
    from nbquant.blocks import BlockSpec, get_block_format
    from nbquant.blocks.nvfp4 import NVFP4Params

    rng = np.random.default_rng(8)
    x = (rng.standard_normal((3, 32)) * 8).astype(ml_dtypes.bfloat16)
    x[1, 3] = np.nan
    spec = _mx_spec("mxfp4", 8, True)
    codes, scales = np.empty((3, 16), np.uint8), np.empty((3, 4), np.uint8)
    cpu_blocks.block_quantize(x, spec, (codes, scales))
    d_codes, d_scales = cuda.device_array((3, 16), np.uint8), cuda.device_array((3, 4), np.uint8)
    _cuda.block_quantize(device_copy(x), spec, (d_codes, d_scales))
    np.testing.assert_array_equal(host_copy(d_codes), codes)
    np.testing.assert_array_equal(host_copy(d_scales), scales)
    out_spec = _mx_spec("mxfp4", 8, True, out_dtype=np.float16)
    out = np.empty((3, 32), np.float16)
    cpu_blocks.block_dequantize((codes, scales), out_spec, out)
    d_out = cuda.device_array((3, 32), np.float16)
    _cuda.block_dequantize((d_codes, d_scales), out_spec, d_out)
    np.testing.assert_array_equal(host_copy(d_out).view(np.uint16), out.view(np.uint16))
    finite = np.nan_to_num(x.astype(np.float32))
    assert _cuda.amax(device_copy(finite)) == cpu_blocks.amax(finite)
    assert np.isnan(_cuda.amax(device_copy(x)))
    nv = BlockSpec(get_block_format("nvfp4"), 16, NVFP4Params(np.float32(0.01)))
    codes, scales = np.empty((3, 16), np.uint8), np.empty((3, 2), np.uint8)
    cpu_blocks.block_quantize(x, nv, (codes, scales))
    d_codes, d_scales = cuda.device_array((3, 16), np.uint8), cuda.device_array((3, 2), np.uint8)
    _cuda.block_quantize(device_copy(x), nv, (d_codes, d_scales))
    np.testing.assert_array_equal(host_copy(d_codes), codes)
    np.testing.assert_array_equal(host_copy(d_scales), scales)


# --- real hardware ---------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not _real_gpu(), reason="needs a real CUDA GPU (not the simulator)")
@pytest.mark.parametrize("shape", [(1 << 20,), (1023, 4098), (3, 5, 7, 12)])
@pytest.mark.parametrize("packed", [False, True])
def test_gpu_matches_cpu_on_large_inputs(shape, packed):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(np.float32)
    s = np.float32(0.02)
    q_gpu = nbquant.quantize(x, s, "int4", packed=packed, backend="cuda")
    q_cpu = nbquant.quantize(x, s, "int4", packed=packed, backend="cpu")
    np.testing.assert_array_equal(q_gpu.view(np.uint8), q_cpu.view(np.uint8))


@pytest.mark.gpu
@pytest.mark.skipif(not _real_gpu(), reason="needs a real CUDA GPU (not the simulator)")
def test_gpu_cupy_and_torch_zero_copy():
    x = np.linspace(-1, 1, 1001, dtype=np.float32)
    arrays = []
    try:
        import cupy

        arrays.append(cupy.asarray(x))
    except ImportError:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            arrays.append(torch.from_numpy(x).cuda())
    except ImportError:
        pass
    if not arrays:
        pytest.skip("neither cupy nor torch with CUDA is installed")
    ref = nbquant.quantize(x, 0.01, "int8", backend="reference")
    for a in arrays:
        q = nbquant.quantize(a, 0.01, "int8")
        assert is_device_array(q)
        np.testing.assert_array_equal(host_copy(q), ref)
