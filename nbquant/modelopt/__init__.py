"""NVIDIA modelopt's vocabulary on nbquant's kernels: amax-based (fake) quantization, its gradients, calibrators.

* :mod:`.ops`: ``tensor_quant``, ``fake_tensor_quant``, ``scaled_e4m3``,
  ``fake_affine_tensor_quant``, ``dynamic_block_quant`` (modelopt's ``tensor_quant`` functions);
* :mod:`.grad`: their straight-through gradients;
* :mod:`.calibration`: :class:`MaxCalibrator` and :class:`HistogramCalibrator`.

nbquant's own verbs (``quantize``, ``choose_qparams``, ``reduce_amax`` ...) stay at the package
root; these names there are deprecated aliases of the ones here. ``nbquant.compat.modelopt``
wraps these functions once more with modelopt's exact signatures.

Examples
--------
>>> import numpy as np
>>> from nbquant import modelopt
>>> modelopt.fake_tensor_quant(np.array([0.3, -1.0, 2.5], np.float32), 2.0, num_bits=4)
array([ 0.2857143, -1.1428572,  2.       ], dtype=float32)
"""

from __future__ import annotations

from ..reductions import reduce_amax
from .calibration import HistogramCalibrator, MaxCalibrator
from .grad import fake_affine_tensor_quant_backward, fake_tensor_quant_backward
from .ops import (
    dynamic_block_quant,
    fake_affine_tensor_quant,
    fake_tensor_quant,
    scaled_e4m3,
    tensor_quant,
)

__all__ = [
    "HistogramCalibrator",
    "MaxCalibrator",
    "dynamic_block_quant",
    "fake_affine_tensor_quant",
    "fake_affine_tensor_quant_backward",
    "fake_tensor_quant",
    "fake_tensor_quant_backward",
    "reduce_amax",
    "scaled_e4m3",
    "tensor_quant",
]
