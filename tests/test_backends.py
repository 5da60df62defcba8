"""The backend registry and the device switch: backends(), set_backend, use_backend, backend=, NBQUANT_BACKEND."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba.core.dispatcher import Dispatcher

import nbquant

registry = importlib.import_module("nbquant.backends")  # ``nbquant.backends`` is the function
X = np.array([0.5, 1.5, -2.5], np.float32)


@pytest.fixture(autouse=True)
def _clean_selection(monkeypatch):
    """Each test starts with no process-wide selection and no NBQUANT_BACKEND, and leaves none behind."""
    monkeypatch.delenv("NBQUANT_BACKEND", raising=False)
    monkeypatch.setattr(registry, "_selected", None)
    yield
    registry._selected = None


@pytest.fixture
def calls(monkeypatch):
    """Record which backend module ran each quantize / dequantize call."""
    seen: list[str] = []
    for name in ("reference", "cpu"):
        backend = importlib.import_module(f"nbquant.backends.{name}").BACKEND
        for fn in ("quantize", "dequantize", "quantize_per_tensor"):  # the last: the front door's short path (cpu)
            original = getattr(backend, fn, None)
            if original is None:
                continue

            def spy(*args, _original=original, _name=name, **kwargs):
                seen.append(_name)
                return _original(*args, **kwargs)

            monkeypatch.setattr(backend, fn, spy)
    return seen


# --- import ----------------------------------------------------------------------------------------


def test_import_nbquant_does_not_import_numba():
    code = ("import sys, nbquant; "
            "assert 'numba' not in sys.modules, sorted(m for m in sys.modules if m.startswith('numba')); "
            "assert 'numba.cuda' not in sys.modules; assert 'llvmlite' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)


def test_reference_backend_runs_without_numba():
    code = ("import sys, numpy as np, nbquant; "
            "q = nbquant.quantize(np.array([0.5, 1.5], np.float32), 1.0, 'int4', packed=True, backend='reference'); "
            "assert q.tolist() == [0x20], q; "
            "d = nbquant.dequantize(q, 1.0, dtype='int4', backend='reference'); assert d.tolist() == [0, 2], d; "
            "assert 'numba' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)


def test_scale_op_codes_agree_with_the_element_functions():
    """Each ScaleOp member's code makes the element function divide or multiply, in its compute dtype."""
    import ml_dtypes

    from nbquant import element, modes, spec

    assert spec.ScaleOp is modes.ScaleOp and len(set(map(int, modes.ScaleOp))) == len(modes.ScaleOp)
    x, s = np.float32(1000.0), np.float32(3.0)
    for op in modes.ScaleOp:
        t = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[op.compute_dtype]
        want = np.float32(t(t(x) * t(s) if op.multiplies else t(x) / t(s)))
        assert element.scaled(x, s, int(op)) == want, op


# --- backends() ------------------------------------------------------------------------------------


def test_backends_rows():
    rows = nbquant.backends()
    names = [r.name for r in rows]
    assert names[:2] == ["reference", "cpu"] and len(set(names)) == len(names)
    for r in rows:
        assert isinstance(r, nbquant.BackendInfo)
        assert isinstance(r.available, bool) and isinstance(r.reason, str)
        assert (r.reason == "available") == r.available, r
        assert r.reason, r
    by_name = {r.name: r for r in rows}
    assert by_name["reference"] == ("reference", True, "available")
    assert by_name["cpu"] == ("cpu", True, "available")


def test_cpu_unavailable_without_numba(monkeypatch, request):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numba" else real_find_spec(
        name, *a))
    registry._cpu_unavailable_reason.cache_clear()  # availability is probed once per process
    request.addfinalizer(registry._cpu_unavailable_reason.cache_clear)
    cpu = {r.name: r for r in nbquant.backends()}["cpu"]
    assert not cpu.available and "numba is not installed" in cpu.reason
    with pytest.raises(nbquant.BackendUnavailableError, match=r"backend 'cpu' is not available: numba"):
        nbquant.quantize(X, 1.0, "int8", backend="cpu")
    assert registry.resolve_backend("auto", (X,)).name == "reference"
    assert nbquant.quantize(X, 1.0, "int8").tolist() == [0, 2, -2]


# --- resolution ------------------------------------------------------------------------------------


def test_default_is_auto_and_auto_resolves_to_cpu_for_numpy_arrays(calls):
    assert nbquant.get_backend() == "auto"
    assert registry.resolve_backend(None, (X,)).name == "cpu"
    assert registry.resolve_backend("auto", (X,)).name == "cpu"
    nbquant.quantize(X, 1.0, "int8")
    nbquant.dequantize(np.zeros(2, np.int8), 1.0)
    assert calls == ["cpu", "cpu"]


def test_per_call_backend(calls):
    assert nbquant.quantize(X, 1.0, "int8", backend="reference").tolist() == [0, 2, -2]
    assert nbquant.quantize(X, 1.0, "int8", backend="cpu").tolist() == [0, 2, -2]
    nbquant.dequantize(np.zeros(2, np.int8), 1.0, backend="reference")
    assert calls == ["reference", "cpu", "reference"]


def test_set_backend(calls):
    nbquant.set_backend("reference")
    assert nbquant.get_backend() == "reference"
    nbquant.quantize(X, 1.0, "int8")
    nbquant.quantize(X, 1.0, "int8", backend="cpu")  # the per-call argument wins
    nbquant.set_backend("auto")
    assert nbquant.get_backend() == "auto"
    nbquant.quantize(X, 1.0, "int8")
    assert calls == ["reference", "cpu", "cpu"]


def test_use_backend_nests_and_restores(calls):
    nbquant.set_backend("cpu")
    with nbquant.use_backend("reference"):
        assert nbquant.get_backend() == "reference"
        nbquant.quantize(X, 1.0, "int8")
        with nbquant.use_backend("cpu"):
            assert nbquant.get_backend() == "cpu"
            nbquant.quantize(X, 1.0, "int8")
            with nbquant.use_backend("reference"):
                nbquant.dequantize(np.zeros(1, np.int8), 1.0)
            nbquant.quantize(X, 1.0, "int8")
        assert nbquant.get_backend() == "reference"
        nbquant.quantize(X, 1.0, "int8", backend="cpu")  # the per-call argument wins
    assert nbquant.get_backend() == "cpu"
    assert calls == ["reference", "cpu", "reference", "cpu", "cpu"]


def test_use_backend_restores_on_exception():
    with pytest.raises(ZeroDivisionError):
        with nbquant.use_backend("reference"):
            with nbquant.use_backend("cpu"):
                1 / 0  # noqa: B018
    assert nbquant.get_backend() == "auto"
    with pytest.raises(ValueError, match="scale"):
        with nbquant.use_backend("reference"):
            nbquant.quantize(X, -1.0, "int8")
    assert nbquant.get_backend() == "auto"


def test_environment_variable(monkeypatch, calls):
    monkeypatch.setenv("NBQUANT_BACKEND", "reference")
    assert nbquant.get_backend() == "reference"
    nbquant.quantize(X, 1.0, "int8")
    nbquant.set_backend("cpu")  # set_backend wins over the environment
    nbquant.quantize(X, 1.0, "int8")
    nbquant.set_backend("auto")
    with nbquant.use_backend("cpu"):  # and so does use_backend
        nbquant.quantize(X, 1.0, "int8")
    assert calls == ["reference", "cpu", "cpu"]


def test_environment_variable_auto_and_unknown(monkeypatch):
    monkeypatch.setenv("NBQUANT_BACKEND", "auto")
    assert nbquant.get_backend() == "auto"
    monkeypatch.setenv("NBQUANT_BACKEND", "tpu")
    with pytest.raises(ValueError, match=r"^NBQUANT_BACKEND='tpu' is not a backend; use one of \['auto'"):
        nbquant.get_backend()
    with pytest.raises(ValueError, match=r"^NBQUANT_BACKEND='tpu' is not a backend"):
        nbquant.quantize(X, 1.0, "int8")
    assert nbquant.quantize(X, 1.0, "int8", backend="reference").tolist() == [0, 2, -2]  # per-call still works


@pytest.mark.parametrize("name", ["gpu", "CPU", "", None, 1])
def test_unknown_backend_names_raise(name):
    with pytest.raises(ValueError, match=r"^name=.* is not a backend"):
        nbquant.set_backend(name)
    with pytest.raises(ValueError, match=r"^name=.* is not a backend"):
        with nbquant.use_backend(name):
            pass
    assert nbquant.get_backend() == "auto"


def test_results_do_not_depend_on_how_the_backend_was_chosen(backend):
    x = np.linspace(-4, 4, 9, dtype=np.float32)
    direct = nbquant.quantize(x, 0.3, "int4", backend=backend)
    with nbquant.use_backend(backend):
        scoped = nbquant.quantize(x, 0.3, "int4")
    np.testing.assert_array_equal(direct.view(np.uint8), scoped.view(np.uint8))


# --- the CPU kernel cache ---------------------------------------------------------------------------


def _kernel_sources_digest() -> bytes:
    """SHA-256 of every module the cpu kernels inline: the element package and the cpu package."""
    root = Path(importlib.import_module("nbquant").__file__).parent
    digest = hashlib.sha256()
    for package in (root / "element", root / "backends" / "cpu"):
        for path in sorted(package.glob("*.py")):
            digest.update(path.read_bytes())
    return digest.digest()


def test_cpu_kernel_cache_stamp_includes_the_element_source():
    importlib.import_module("nbquant.backends.cpu")
    cpu = importlib.import_module("nbquant.backends.cpu._kernel")
    digest = _kernel_sources_digest()
    assert cpu.KERNELS
    for kernel in cpu.KERNELS:
        cache = kernel.dispatcher._cache
        stamp = cache._cache_file._source_stamp
        assert isinstance(stamp, tuple) and stamp[-1] == digest, kernel
        # numba's own stamp of the kernel's file is kept alongside
        assert stamp == (cache._impl.locator.get_source_stamp(), digest), kernel


def test_cpu_kernel_cache_misses_when_the_element_source_changes(monkeypatch):
    """The on-disk index written under the current stamp is not loaded under another element.py digest."""
    cpu = importlib.import_module("nbquant.backends.cpu.elementwise")
    nbquant.quantize(np.ones(4, np.float32), 1.0, "int8", backend="cpu")  # compiled (or loaded) and indexed
    cache_file = cpu.quantize_kernel.dispatcher._cache._cache_file
    assert cache_file._load_index(), "the cpu kernel cache index should exist after a call"
    stamp = cache_file._source_stamp
    monkeypatch.setattr(cache_file, "_source_stamp", (stamp[0], hashlib.sha256(b"edited element.py").digest()))
    assert cache_file._load_index() == {}


def test_every_cached_cpu_kernel_is_stamped():
    """Every kernel of the cpu package is a ``CpuKernel`` in ``KERNELS``, and no other cached dispatcher exists there.

    A cached dispatcher outside ``KERNELS`` would run stale code after an element edit.
    """
    importlib.import_module("nbquant.backends.cpu")
    registry_ = importlib.import_module("nbquant.backends.cpu._kernel")
    package = importlib.import_module("nbquant.backends.cpu")
    modules = [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]
    values = [v for module in modules for v in vars(module).values()]
    values += [k for v in values if isinstance(v, dict) for k in v.values()]  # per-format tables (GGUF kernels)
    kernels = {id(v): v for v in values if isinstance(v, registry_.CpuKernel)}
    stray = [v for v in values if isinstance(v, Dispatcher) and hasattr(getattr(v, "_cache", None), "_cache_file")]
    assert kernels and set(kernels) == {id(k) for k in registry_.KERNELS}
    assert stray == []


# --- the Backend interface ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["reference", "cpu", "cuda"])
def test_every_backend_implements_every_operation(name):
    """Each backend package exposes one object with every operation of the Backend Protocol, defined by it."""
    from nbquant.backends.interface import OPERATIONS, Backend

    if name == "cuda" and importlib.util.find_spec("numba_cuda") is None:
        pytest.skip("numba-cuda is not installed")
    backend = importlib.import_module(f"nbquant.backends.{name}").BACKEND
    assert isinstance(backend, Backend) and backend.name == name
    missing = [op for op in OPERATIONS if not any(op in vars(cls) for cls in type(backend).__mro__[:-1])]
    assert not missing, missing
    assert len(OPERATIONS) == 12 and "quantize" in OPERATIONS and "abs_histogram" in OPERATIONS
