"""The ``reference`` backend: plain NumPy, written from the formulas to be obviously correct; the tests' oracle.

It shares no indexing code with the compiled backends (it expands every block-grid
parameter to the input's shape) and no numerics (it casts through ml_dtypes and
NumPy's ``rint``), so agreeing with it bit for bit is evidence, not tautology.
"""

from __future__ import annotations

import functools

import numpy as np

from ..interface import OPERATIONS
from .blocks import BlockOps
from .dynamic import DynamicOps
from .static import StaticOps

__all__ = ["BACKEND", "ReferenceBackend"]


def _ieee_quietly(cls):
    """Run every operation under ``numpy.errstate(all="ignore")``: NaN, inf and overflow are results, as in the
    kernels, not warnings (a user's NaN data must not warn on one backend and not on another)."""
    for name in OPERATIONS:
        method = getattr(cls, name)

        @functools.wraps(method)
        def quiet(*args, _method=method, **kwargs):
            with np.errstate(all="ignore"):
                return _method(*args, **kwargs)

        setattr(cls, name, quiet)
    return cls


@_ieee_quietly
class ReferenceBackend(StaticOps, BlockOps, DynamicOps):
    """Every :class:`~nbquant.backends.interface.Backend` operation in NumPy."""

    name = "reference"


#: The reference backend object.
BACKEND = ReferenceBackend()
