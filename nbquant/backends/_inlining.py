"""Faster ``inline="always"`` inlining for Numba's IR inliner: each callee's IR made once, copied in one pass.

Every element function is ``njit(inline="always")``, which Numba inlines on its IR
before typing (``InlineInlinables``, through ``InlineWorker.inline_function``). In
Numba 0.68 and numba-cuda 0.30 that costs more than the compile itself for the larger
kernels, for two reasons (numba/numba#8989, NVIDIA/numba-cuda#688):

* each call site runs the callee's whole untyped pipeline again, and that pipeline
  inlines the callee's own callees, so a tree of helpers is rebuilt at every
  transitive call site;
* the callee's IR is deep-copied block by block, each block with a memo of its own,
  so the scope holding all of the callee's variables is copied once per block:
  blocks times variables.

:func:`install` replaces ``inline_function`` of a module's ``InlineWorker`` with one
that keeps the untyped IR of each callee (per target and rewrite flags) and copies
it with one memo per inlined call. ``inline_ir`` copies the callee's IR before it
changes anything, so the kept IR is never modified; the inlined IR is the same
statements with the same values, and only the names of the inlined variables can
differ (each call site's are renamed apart either way). ``inline_ir`` also copies its
copy, unchanged, to return it; ``InlineInlinables`` discards that, so here it is not
made (its blocks are the inlined ones). The machine code is the same as with Numba's
inliner (``tests/test_inlining.py`` compares it, and the PTX). One difference shows
only when a program rebinds a module global that an inlined function reads: Numba
reads a global's value when it builds the IR, so a function inlined again after that
keeps the value it was first built with (nbquant's element functions read constants
only). A GGUF Q4_K quantize kernel's first compile fell from 40 to 10 s, Q3_K's from
41 to 13 s, Q6_K's from 10 to 5 s.

The replacement applies where the inliner has the shape this was written against
(Numba 0.68.x, numba-cuda 0.30.x); anywhere else, or with ``NBQUANT_FAST_INLINE=0``
in the environment, Numba's own inliner runs.
"""

from __future__ import annotations

import copy
import os
import threading
from types import ModuleType

__all__ = ["install", "installed"]

_STATE = threading.local()
#: The modules whose ``InlineWorker`` runs :func:`_inline_function`.
_INSTALLED: set[str] = set()
#: The untyped IR of each inlined function, by (function, target context type, pipeline, rewrite flags).
_UNTYPED_IR: dict = {}


class _OneMemoCopy:
    """The ``copy`` module as the inliner sees it: blocks deep-copied inside :func:`_inline_function` share a memo."""

    def __init__(self, block_type: type) -> None:
        self._block_type = block_type

    def __getattr__(self, name: str):
        return getattr(copy, name)

    def deepcopy(self, value, memo=None):
        shared = getattr(_STATE, "memo", None)
        if memo is None and shared is not None and isinstance(value, self._block_type):
            if id(value) not in _STATE.kept_blocks:  # inline_ir's second copy, of its own copy: it is discarded
                return value
            return copy.deepcopy(value, shared)
        return copy.deepcopy(value, memo)


def _untyped_ir(worker, function):
    """``worker.run_untyped_passes(function)``, made once per key and kept (callers copy it before any change)."""
    flags = worker.flags
    parallel = getattr(flags, "auto_parallel", None)
    key = (function, type(worker.targetctx), worker._compiler_pipeline, bool(flags.no_rewrites),
           bool(getattr(parallel, "enabled", False)))
    found = _UNTYPED_IR.get(key)
    if found is None:
        found = _UNTYPED_IR[key] = worker.run_untyped_passes(function)
    else:
        flags.enable_ssa = False  # what run_untyped_passes leaves set on the caller's flags
    return found


def _inline_function(self, caller_ir, block, i, function, arg_typs=None):
    """``InlineWorker.inline_function``: the kept untyped IR of ``function``, copied with one memo, inlined."""
    callee_ir = _untyped_ir(self, function)
    outer = getattr(_STATE, "memo", None), getattr(_STATE, "kept_blocks", None)
    _STATE.memo, _STATE.kept_blocks = {}, {id(b) for b in callee_ir.blocks.values()}
    try:
        return self.inline_ir(caller_ir, block, i, callee_ir, function.__code__.co_freevars, arg_typs=arg_typs)
    finally:
        _STATE.memo, _STATE.kept_blocks = outer


def _has_expected_shape(module: ModuleType) -> bool:
    worker = getattr(module, "InlineWorker", None)
    return (worker is not None and getattr(module, "copy", None) is copy and hasattr(worker, "inline_ir")
            and hasattr(worker, "run_untyped_passes") and hasattr(worker, "inline_function"))


def install(module: ModuleType, ir_module: ModuleType, version: str, supported: str) -> bool:
    """Make ``module``'s ``InlineWorker`` inline with :func:`_inline_function`; return whether it does.

    Parameters
    ----------
    module : module
        ``numba.core.inline_closurecall`` or numba-cuda's ``numba.cuda.core.inline_closurecall``.
    ir_module : module
        The IR module whose ``Block`` that inliner copies.
    version : str
        The installed version of the package ``module`` belongs to.
    supported : str
        The version prefix the replacement was checked against (``"0.68."``).

    Returns
    -------
    bool
        True when ``module`` inlines with the replacement (now or already), False when Numba's own runs.

    Examples
    --------
    >>> import numba
    >>> import numba.core.inline_closurecall as inliner
    >>> from numba.core import ir
    >>> install(inliner, ir, numba.__version__, "0.68.") == installed(inliner)
    True
    """
    if module.__name__ in _INSTALLED:
        return True
    if (os.environ.get("NBQUANT_FAST_INLINE", "1") == "0" or not version.startswith(supported)
            or not _has_expected_shape(module)):
        return False
    module.copy = _OneMemoCopy(ir_module.Block)
    module.InlineWorker.inline_function = _inline_function
    _INSTALLED.add(module.__name__)
    return True


def installed(module: ModuleType) -> bool:
    """Whether ``module``'s inliner runs :func:`_inline_function`."""
    return module.__name__ in _INSTALLED
