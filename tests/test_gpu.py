"""The cuda backend on real hardware: other libraries' device tensors, streams, ``out=`` and inputs above 2**31.

Every test here is marked ``gpu`` and skips without a GPU (and under the CUDA simulator, which
cannot hold these sizes or run torch's kernels). The kernel families themselves are checked bit
for bit against ``reference`` by the backend suite (``NBQUANT_TEST_BACKENDS=cuda``), which a GPU
run collects together with this module (``tests/_cudasim_plugin.py``; ``tools/gpu_check.sh``).
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
from _helpers import device_copy, host_copy

import nbquant
from nbquant.backends import is_device_array, use_cuda_stream

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
CUDA = {b.name: b for b in nbquant.backends()}["cuda"]
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA.available or SIMULATOR,
                                                  reason="needs a real CUDA GPU (not the simulator)")]


@pytest.fixture(scope="module")
def torch():
    """torch with CUDA, or a skip."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return torch


class OnlyDLPack:
    """A device tensor seen through DLPack alone (as JAX arrays and torch bfloat16 are)."""

    def __init__(self, t) -> None:
        self._t = t

    def __dlpack__(self, **kwargs):
        return self._t.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


class OnlyCAI:
    """A device tensor seen through ``__cuda_array_interface__`` alone (as CuPy and older libraries are)."""

    def __init__(self, t) -> None:
        self.__cuda_array_interface__ = t.__cuda_array_interface__
        self._t = t  # keeps the memory alive


def _host_bits(torch, t) -> np.ndarray:
    """A torch tensor's values as NumPy (bfloat16 through its int16 bits)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    return t.cpu().numpy()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("wrap", [None, OnlyDLPack, OnlyCAI])
def test_torch_cuda_tensors_in_and_back(torch, dtype, wrap):
    gen = torch.Generator(device="cuda").manual_seed(1)
    t = (torch.randn((37, 129), device="cuda", generator=gen) * 3).to(getattr(torch, dtype))
    if wrap is OnlyCAI and not hasattr(t, "__cuda_array_interface__"):
        pytest.skip(f"torch {torch.__version__} exports no __cuda_array_interface__ for {dtype} (DLPack carries it)")
    scale = np.linspace(0.01, 0.05, 37, dtype=np.float32)
    q = nbquant.quantize(t if wrap is None else wrap(t), scale, "int8", axis=0)
    assert is_device_array(q)
    x = _host_bits(torch, t)
    ref = nbquant.quantize(x, scale, "int8", axis=0, backend="reference")
    np.testing.assert_array_equal(host_copy(q), ref)
    back = torch.as_tensor(q, device="cuda")  # zero-copy the other way
    assert back.data_ptr() == q.device_ctypes_pointer.value
    y = nbquant.dequantize(q, scale, axis=0, out_dtype=ml_dtypes.bfloat16)
    y_ref = nbquant.dequantize(ref, scale, axis=0, out_dtype=ml_dtypes.bfloat16, backend="reference")
    np.testing.assert_array_equal(host_copy(y).view(np.int16), y_ref.view(np.int16))


@pytest.fixture(scope="module")
def cupy():
    """CuPy with a device, or a skip."""
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.runtime.getDeviceCount() == 0:
        pytest.skip("CuPy sees no device")
    return cupy


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cupy_arrays_in_and_back(cupy, dtype):
    x = (np.random.default_rng(2).standard_normal((41, 96)) * 3).astype(dtype)
    scale = np.linspace(0.01, 0.05, 41, dtype=np.float32)
    q = nbquant.quantize(cupy.asarray(x), scale, "int8", axis=0)
    assert is_device_array(q)
    ref = nbquant.quantize(x, scale, "int8", axis=0, backend="reference")
    np.testing.assert_array_equal(host_copy(q), ref)
    back = cupy.asarray(q)  # zero-copy the other way
    assert back.data.ptr == q.device_ctypes_pointer.value
    y = nbquant.dequantize(back, scale, axis=0)
    np.testing.assert_array_equal(host_copy(y), nbquant.dequantize(ref, scale, axis=0, backend="reference"))


def test_torch_stream_orders_the_work(torch):
    """Work queued on a torch stream runs after what that stream already holds, and the call returns at once."""
    stream = torch.cuda.Stream()
    x = torch.zeros(1 << 24, device="cuda")
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)  # keep the stream busy, then write the input on it
        x.fill_(1.0)
    with use_cuda_stream(stream):
        q = nbquant.quantize(x, 0.5, "int8")
    stream.synchronize()
    assert int(torch.as_tensor(q, device="cuda").min()) == 2


def test_numba_stream_and_device_out(torch):
    from numba import cuda

    rng = np.random.default_rng(2)
    x = rng.standard_normal((513, 1000)).astype(np.float32)
    scale = np.full((513, 25), 0.02, np.float32)  # blocks of 40 along the rows
    stream = cuda.stream()
    out = cuda.device_array((513, 500), np.uint8)
    with use_cuda_stream(stream):
        r = nbquant.quantize(device_copy(x, stream=stream), scale, "int4", axis=1, block_size=40, packed=True,
                             out=out)
    stream.synchronize()
    assert r is out
    ref = nbquant.quantize(x, scale, "int4", axis=1, block_size=40, packed=True, backend="reference")
    np.testing.assert_array_equal(host_copy(out), ref)


def test_above_two_to_the_31_elements(torch):
    """int8 per-tensor quantize and dequantize of 2**31 + 392352 elements: a periodic input, checked on the GPU."""
    period, reps = 4099, 524_000  # 2_147_876_000 elements (8.6 GB of float32)
    assert period * reps > 2**31
    rng = np.random.default_rng(5)
    block = (rng.standard_normal(period) * 2).astype(np.float32)
    block[:4] = [0.01, -0.01, 0.015, -0.025]  # ties at scale 0.01 (0.015 / 0.01 rounds to 2, -0.025 to -2)
    scale = np.float32(0.01)
    q_block = nbquant.quantize(block, scale, "int8", backend="reference")
    y_block = nbquant.dequantize(q_block, scale, backend="reference")
    x = torch.from_numpy(block).cuda().repeat(reps)
    q = nbquant.quantize(x, scale, "int8")
    qt = torch.as_tensor(q, device="cuda").view(reps, period)
    expect = torch.from_numpy(q_block).cuda()
    assert bool((qt == expect).all()), "int8 codes differ somewhere past the start"
    del x
    y = nbquant.dequantize(q, scale)
    yt = torch.as_tensor(y, device="cuda").view(reps, period)
    assert bool((yt.view(torch.int32) == torch.from_numpy(y_block.view(np.int32)).cuda()).all())
    last = yt[-1, -1].item()
    assert last == float(y_block[-1])
