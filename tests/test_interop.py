"""Reading other libraries' arrays: DLPack-only objects, CPU torch tensors (bfloat16 zero-copy), and clear errors."""

from __future__ import annotations

import sys
import types

import ml_dtypes
import numpy as np
import pytest

import nbquant
from nbquant.interop import as_host_array


class OnlyDLPack:
    """An object exposing only DLPack (as JAX arrays and many tensors do), wrapping a NumPy array."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class _Device:
    def __init__(self, kind: str) -> None:
        self.type = kind

    def __str__(self) -> str:
        return self.type


class FakeTensor:
    """The slice of torch.Tensor nbquant uses: dtype, device, detach(), view(dtype), numpy() (no bfloat16)."""

    def __init__(self, data: np.ndarray, dtype: str, device: str = "cpu") -> None:
        self._data, self.dtype, self.device = data, dtype, _Device(device)

    def detach(self) -> FakeTensor:
        return self

    def view(self, dtype: str) -> FakeTensor:
        return FakeTensor(self._data.view(np.dtype(dtype)), f"torch.{dtype}", self.device.type)

    def numpy(self) -> np.ndarray:
        if self.dtype in ("torch.bfloat16", "torch.float8_e4m3fn"):
            raise TypeError(f"Got unsupported ScalarType {self.dtype}")
        return self._data


@pytest.fixture
def fake_torch(monkeypatch):
    """A stand-in ``torch`` module in ``sys.modules`` (nbquant never imports torch; it reads the loaded module)."""
    module = types.ModuleType("torch")
    module.Tensor, module.int16, module.uint8 = FakeTensor, "int16", "uint8"
    monkeypatch.setitem(sys.modules, "torch", module)
    return module


def test_a_dlpack_only_object_is_read_zero_copy():
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    wrapped = OnlyDLPack(a)
    assert np.shares_memory(as_host_array(wrapped), a)
    expected = nbquant.quantize(a, 0.1, "int8")
    for backend in ("reference", "cpu"):
        assert nbquant.quantize(wrapped, 0.1, "int8", backend=backend).tolist() == expected.tolist()
    codes = OnlyDLPack(expected)
    assert nbquant.dequantize(codes, 0.1).tolist() == nbquant.dequantize(expected, 0.1).tolist()


def test_a_bfloat16_cpu_tensor_is_read_zero_copy_without_importing_torch(fake_torch):
    x = np.linspace(-2, 2, 16, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(2, 8)
    tensor = FakeTensor(x, "torch.bfloat16")
    view = as_host_array(tensor)
    assert view.dtype == ml_dtypes.bfloat16 and np.shares_memory(view, x)
    for backend in ("reference", "cpu"):
        got = nbquant.quantize(tensor, 0.25, "int4", axis=None, backend=backend)
        assert got.tobytes() == nbquant.quantize(x, 0.25, "int4", backend="reference").tobytes()
    fp8 = np.array([0.5, -1.0], ml_dtypes.float8_e4m3fn)
    assert nbquant.dequantize(FakeTensor(fp8, "torch.float8_e4m3fn"), 2.0).tolist() == [1.0, -2.0]


def test_a_tensor_off_the_cpu_is_refused_with_the_fix(fake_torch):
    tensor = FakeTensor(np.zeros(4, np.float32), "torch.float32", device="mps")
    with pytest.raises(TypeError, match=r"^x is a torch tensor on device mps; .* Move it first: x.cpu\(\)"):
        nbquant.quantize(tensor, 0.5, "int8")


@pytest.mark.parametrize("value", [object(), {"a": 1}, [np.zeros(2), "a"]])
def test_an_unreadable_object_names_what_nbquant_accepts(value):
    with pytest.raises(TypeError, match=r"^x=.* is not an array of numbers; nbquant accepts NumPy arrays, objects "
                                        r"with __array__ or __array_interface__, objects with a CPU __dlpack__"):
        nbquant.quantize(value, 0.5, "int8")


def test_the_dtype_message_suggests_numpy_and_torch_conversions():
    with pytest.raises(TypeError, match=r"^x has dtype int64; .*x.astype\(numpy.float32\) \(NumPy\) or x.float\(\) "
                                        r"\(torch\)"):
        nbquant.quantize(np.arange(4), 0.5, "int8")


def test_real_torch_bfloat16_tensor_when_installed():
    torch = pytest.importorskip("torch")
    t = torch.linspace(-2, 2, 16, dtype=torch.bfloat16).reshape(2, 8)
    view = as_host_array(t)
    assert view.dtype == ml_dtypes.bfloat16 and view.ctypes.data == t.data_ptr()
    assert nbquant.quantize(t, 0.25, "int8").tolist() == nbquant.quantize(view.copy(), 0.25, "int8").tolist()
