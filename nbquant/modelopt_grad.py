"""The former home of :mod:`nbquant.modelopt.grad`, kept so that existing imports keep working."""

from __future__ import annotations

from .modelopt.grad import fake_affine_tensor_quant_backward, fake_tensor_quant_backward

__all__ = ["fake_tensor_quant_backward", "fake_affine_tensor_quant_backward"]
