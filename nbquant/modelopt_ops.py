"""The former home of :mod:`nbquant.modelopt.ops`, kept so that existing imports keep working."""

from __future__ import annotations

from .modelopt.ops import (
    block_sizes_to_layout,
    dynamic_block_quant,
    fake_affine_tensor_quant,
    fake_tensor_quant,
    scaled_e4m3,
    tensor_quant,
)
from .reductions import reduce_amax, reduce_min_max

__all__ = [
    "reduce_amax",
    "reduce_min_max",
    "tensor_quant",
    "fake_tensor_quant",
    "scaled_e4m3",
    "fake_affine_tensor_quant",
    "dynamic_block_quant",
    "block_sizes_to_layout",
]
