"""nbquant.placement: where a call runs (host, CUDA, dask) is decided once, and its steps follow from that."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import nbquant
from nbquant.backends import BackendUnavailableError, resolve_backend
from nbquant.placement import HOST, LAZY, Device, Host, Lazy, placement, plug

pytestmark = pytest.mark.nosim


class FakeCudaArray:
    """An object that says it is a CUDA array (nothing reads its memory here)."""

    __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3}


def test_a_numpy_call_is_the_shared_host_placement():
    x = np.zeros(4, np.float32)
    assert placement(x, 0.5, None, out=None) is HOST
    assert placement(x, np.float32(0.5), np.zeros(1, np.int8)) is HOST
    assert placement([1.0, 2.0]) is HOST  # lists and other host inputs too
    assert not HOST.device and not HOST.lazy


def test_a_dask_argument_makes_the_call_lazy_and_refuses_out():
    da = pytest.importorskip("dask.array")
    x = np.zeros((2, 4), np.float32)
    assert placement(x, da.ones(1), None) is LAZY and isinstance(LAZY, Lazy) and LAZY.lazy
    with pytest.raises(TypeError, match="out= cannot be combined with dask arrays"):
        placement(da.from_array(x), 1.0, out=np.empty((2, 4), np.int8))


def test_a_cuda_data_array_or_out_puts_the_call_on_the_device():
    p = placement(FakeCudaArray(), 0.5)
    assert isinstance(p, Device) and p.device and not p.lazy
    assert placement(np.zeros(2, np.float32), out=FakeCudaArray()).device
    assert placement(np.zeros(2, np.float32), FakeCudaArray()) is HOST  # only the data and out= decide


def test_a_device_placement_refuses_a_host_only_backend_before_any_cuda_lookup():
    p = placement(FakeCudaArray())
    with pytest.raises(BackendUnavailableError, match="works on host"):
        resolve_backend("cpu", p)
    assert p._backend is None  # the cuda backend was never looked up


def test_resolve_backend_takes_a_placement_or_arrays():
    assert resolve_backend("reference", HOST).name == "reference"
    assert resolve_backend("reference", (np.zeros(2),)).name == "reference"


def test_host_steps():
    x = np.arange(3.0)
    assert HOST.float_input(x) is x
    codes = HOST.code_input(np.arange(4, dtype=np.int8)[::2])
    assert codes.flags.c_contiguous and codes.tolist() == [0, 2]
    out = np.empty(3, np.int8)
    assert HOST.result((3,), np.int8, out, {"x": x}) is out
    with pytest.raises(ValueError, match="out shares memory with x"):
        HOST.result((3,), np.uint8, x.view(np.uint8)[:3], {"x": x})
    assert HOST.like_input(x) is x
    packed = HOST.packed(np.zeros((1, 1), np.uint8), "int4")
    assert isinstance(packed, nbquant.PackedCodes) and packed.format == "int4"


def test_plug_names_a_kind():
    with pytest.raises(ValueError, match="kind='gpu' is not a placement"):
        plug("gpu", lambda: None)
    assert issubclass(Device, Host) and issubclass(Lazy, Host)


def test_placement_imports_neither_numba_nor_dask():
    code = ("import sys, numpy as np, nbquant.placement as p; p.placement(np.zeros(2)); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'dask')); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
