"""Validated, backend-neutral descriptions of one quantize or dequantize call."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .formats import QuantFormat
from .layout import BlockLayout

__all__ = ["QuantizeSpec", "DequantizeSpec", "SCALE_DIVIDE", "SCALE_MULTIPLY"]

#: ``QuantizeSpec.scale_op`` codes, shared with :mod:`nbquant.element` (defined here so that the API
#: and the reference backend need not import numba).
SCALE_DIVIDE = 0
SCALE_MULTIPLY = 1


@dataclass(frozen=True)
class QuantizeSpec:
    """Everything a backend needs besides the arrays to run a quantize kernel.

    ``scale_op`` is :data:`~nbquant.element.SCALE_DIVIDE` or ``SCALE_MULTIPLY`` (a
    reciprocal scale arrives already inverted); ``zero_point_before`` adds the zero
    point before rounding instead of after. ``saturate`` applies to floating-point
    formats: overflow clamps to the largest finite value instead of NaN/inf.
    """

    format: QuantFormat
    layout: BlockLayout
    qmin: int
    qmax: int
    scale_op: int
    zero_point_before: bool
    packed: bool
    saturate: bool = True


@dataclass(frozen=True)
class DequantizeSpec:
    """Everything a backend needs besides the arrays to run a dequantize kernel.

    ``layout`` describes the unpacked codes; ``out_dtype`` is float32, float16 or
    bfloat16.
    """

    format: QuantFormat
    layout: BlockLayout
    packed: bool
    out_dtype: np.dtype
