"""The former home of :mod:`nbquant.modelopt.ops`, kept so that existing imports keep working."""

from __future__ import annotations

from .modelopt.ops import *  # noqa: F403  (the alias module re-exports exactly the names of ``ops.__all__``)
from .modelopt.ops import __all__ as _OPS_NAMES
from .reductions import reduce_amax, reduce_min_max

__all__ = ["reduce_amax", "reduce_min_max", *_OPS_NAMES]
