"""The ``reference`` backend: plain NumPy, written from the formulas to be obviously correct; the tests' oracle.

It shares no indexing code with the compiled backends (it expands every block-grid
parameter to the input's shape) and no numerics (it casts through ml_dtypes and
NumPy's ``rint``), so agreeing with it bit for bit is evidence, not tautology.
"""

from __future__ import annotations

from .blocks import BlockOps
from .dynamic import DynamicOps
from .static import StaticOps

__all__ = ["BACKEND", "ReferenceBackend"]


class ReferenceBackend(StaticOps, BlockOps, DynamicOps):
    """Every :class:`~nbquant.backends.interface.Backend` operation in NumPy."""

    name = "reference"


#: The reference backend object.
BACKEND = ReferenceBackend()
