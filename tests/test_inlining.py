"""nbquant.backends._inlining: Numba's IR inliner with each callee's untyped IR made once and one copy memo a call."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import types
from pathlib import Path

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


_ASM_DIGEST = """
import hashlib, re, sys
import numpy as np
from numba import njit

def digest(fn, *args):
    from numba.core import inline_closurecall
    from nbquant.backends import _inlining

    fn = njit(error_model="numpy", nogil=True)(fn)  # a new dispatcher: compiled here, never loaded from a cache
    fn(*args)
    code = hashlib.sha256(re.sub(r"_ZN\\S+", "SYM", fn.inspect_asm(fn.signatures[0])).encode()).hexdigest()
    return f"{_inlining.installed(inline_closurecall)} {code}"

if sys.argv[1] == "outer":
    import tests.test_inlining as t
    print(digest(t._outer, np.ones(3, np.float32)))
elif sys.argv[1].startswith("ptx:"):  # a cuda kernel's PTX for sm_90, with numba-cuda's inliner or nbquant's
    from numba import cuda
    from nbquant.backends.cuda import runtime
    name = sys.argv[1][4:]
    sig = next(sig for kernel, sig in runtime.all_signatures() if kernel == name)
    ptx = cuda.compile_ptx(runtime.KERNELS[name].fn, sig.args, cc=(9, 0))[0]
    print(runtime.FAST_INLINING, hashlib.sha256(re.sub(r"_ZN\\w+", "_", ptx).encode()).hexdigest())
else:
    from nbquant.backends.cpu.gguf import QUANTIZE_KERNELS
    from nbquant.gguf import get_format
    fmt = get_format(sys.argv[1])
    rows = np.zeros((2, 256), np.float32)
    print(digest(QUANTIZE_KERNELS[fmt.type_id].__wrapped__, 0, 1, rows, np.zeros(1, np.float32), False,
                 fmt.type_size, np.zeros((2, fmt.type_size), np.uint8)))
"""


def _asm_digest(target: str, fast: bool) -> tuple[str, str]:
    """Whether the fast inliner ran, and the SHA-256 of the machine code of ``target`` compiled in a new process
    (mangled names set aside)."""
    env = {**os.environ, "NBQUANT_FAST_INLINE": "1" if fast else "0"}
    done = subprocess.run([sys.executable, "-c", _ASM_DIGEST, target], capture_output=True, text=True, env=env,
                          timeout=900, cwd=str(Path(__file__).parent.parent))
    assert done.returncode == 0, done.stderr
    installed, digest = done.stdout.split()
    return installed, digest


@pytest.mark.parametrize("target", ["outer", *(pytest.param(t, marks=pytest.mark.full(
    reason="compiles a GGUF or NVFP4 kernel twice (15 to 30 s)")) for t in ("Q6_K", "ptx:gguf_q6_k_quantize",
                                                                         "ptx:nvfp4_quantize"))])
def test_the_machine_code_is_the_same_as_with_numbas_own_inliner(target):
    (fast, ours), (slow, numbas) = _asm_digest(target, fast=True), _asm_digest(target, fast=False)
    assert (fast, slow) == ("True", "False")
    assert ours == numbas


@pytest.mark.parametrize("version", ["0.67.1", "0.69.0", "1.0.0"])
def test_another_numba_version_keeps_numbas_inliner(version):
    module = types.ModuleType("fake_inline_closurecall")
    module.copy, module.InlineWorker = copy, type("InlineWorker", (), {})
    assert not _inlining.install(module, ir, version, "0.68.")
    assert module.copy is copy and not _inlining.installed(module)


def test_an_inliner_of_another_shape_is_left_alone():
    module = types.ModuleType("fake_inline_closurecall_2")
    module.copy = copy
    module.InlineWorker = type("InlineWorker", (), {"inline_function": lambda self: None})  # no inline_ir
    assert not _inlining.install(module, ir, "0.68.1", "0.68.")
    assert not _inlining.installed(module)
