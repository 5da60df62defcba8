"""nbquant.backends._inlining: Numba's IR inliner with each callee's untyped IR made once and one copy memo a call."""

from __future__ import annotations

import subprocess
import sys
import types

import numba
import numpy as np
import pytest
from numba import njit
from numba.core import inline_closurecall, ir

from nbquant.backends import _inlining
from nbquant.backends.cpu import _kernel


@njit(inline="always")
def _leaf(v, k):
    t = v * np.float32(2.0) + k
    u = t - np.float32(1.0)
    return t if t > u else u


@njit(inline="always")
def _middle(v):
    a = _leaf(v, np.float32(1.0))
    b = _leaf(a, np.float32(3.0))
    return a + b


def _scaler(k):
    """An inlined closure: two of them differ only in the constant they capture."""

    @njit(inline="always")
    def scale(v):
        return v * k

    return scale


_TWICE, _THRICE = _scaler(np.float32(2.0)), _scaler(np.float32(3.0))


def _outer(x):
    s = np.float32(0.0)
    for i in range(x.size):
        s += _middle(x[i]) - _middle(-x[i]) + _TWICE(x[i]) + _THRICE(x[i])
    return s


def _expected(x):
    def leaf(v, k):
        t = v * np.float32(2.0) + k
        return max(t, t - np.float32(1.0))

    def middle(v):
        a = leaf(v, np.float32(1.0))
        return a + leaf(a, np.float32(3.0))

    return sum((middle(v) - middle(-v) + v * np.float32(2.0) + v * np.float32(3.0) for v in x), np.float32(0.0))


def test_the_cpu_and_cuda_backends_install_it_on_the_numba_they_pin():
    assert numba.__version__.startswith("0.68.")
    assert _kernel.FAST_INLINING and _inlining.installed(inline_closurecall)
    from nbquant.backends.cuda import runtime

    assert runtime.FAST_INLINING


def test_each_callee_runs_its_untyped_pipeline_once_and_every_call_site_keeps_its_own_variables(monkeypatch):
    made = []
    original = inline_closurecall.InlineWorker.run_untyped_passes

    def counted(self, func, enable_ssa=False):
        made.append(func.__name__)
        return original(self, func, enable_ssa)

    monkeypatch.setattr(inline_closurecall.InlineWorker, "run_untyped_passes", counted)
    x = np.array([0.5, -1.25, 3.0, 1e-3, -7.5], np.float32)
    assert njit(_outer)(x) == _expected(x)
    # _middle is inlined at two sites and _leaf at four (two in each _middle): each is made once.
    assert sorted(made) == ["_leaf", "_middle", "scale", "scale"]


def test_a_callee_inlined_again_in_a_later_compile_reuses_its_ir_unchanged(monkeypatch):
    made = []
    original = inline_closurecall.InlineWorker.run_untyped_passes
    monkeypatch.setattr(inline_closurecall.InlineWorker, "run_untyped_passes",
                        lambda self, func, enable_ssa=False: made.append(func) or original(self, func, enable_ssa))
    x = np.array([2.0, -0.75, 11.0], np.float32)
    first = njit(_outer)(x)
    made.clear()
    again = njit(types.FunctionType(_outer.__code__, _outer.__globals__, "_outer_again"))(x)  # a new kernel
    assert first == again == _expected(x)
    assert made == []


def test_results_equal_numbas_own_inliner_in_a_process_without_it():
    code = ("import numpy as np, numba, tests.test_inlining as t;"
            "from numba.core import inline_closurecall as i; from nbquant.backends import _inlining;"
            "from nbquant.backends.cpu import _kernel;"
            "assert not _kernel.FAST_INLINING and not _inlining.installed(i);"
            "x = np.linspace(-9, 9, 37, dtype=np.float32);"
            "print(repr(float(numba.njit(t._outer)(x))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**__import__("os").environ, "NBQUANT_FAST_INLINE": "0"})
    x = np.linspace(-9, 9, 37, dtype=np.float32)
    assert result.stdout.strip() == repr(float(njit(_outer)(x)))


@pytest.mark.parametrize("version", ["0.67.1", "0.69.0", "1.0.0"])
def test_another_numba_version_keeps_numbas_inliner(version):
    module = types.ModuleType("fake_inline_closurecall")
    module.copy, module.InlineWorker = __import__("copy"), type("InlineWorker", (), {})
    assert not _inlining.install(module, ir, version, "0.68.")
    assert module.copy is __import__("copy") and not _inlining.installed(module)


def test_an_inliner_of_another_shape_is_left_alone():
    module = types.ModuleType("fake_inline_closurecall_2")
    module.copy = __import__("copy")
    module.InlineWorker = type("InlineWorker", (), {"inline_function": lambda self: None})  # no inline_ir
    assert not _inlining.install(module, ir, "0.68.1", "0.68.")
    assert not _inlining.installed(module)
