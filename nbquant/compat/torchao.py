"""torchao 0.18 quantization primitives (``torchao.quantization.quant_primitives``) on NumPy arrays.

One namespace with torchao's names, from five modules:

* :mod:`~nbquant.compat.torchao_affine`: ``quantize_affine``, ``dequantize_affine``,
  ``choose_qparams_affine``, the NONE zero-point domain;
* :mod:`~nbquant.compat.torchao_tinygemm`: the tinygemm (FLOAT) zero-point domain;
* :mod:`~nbquant.compat.torchao_float8`: ``_choose_scale_float8``,
  ``_quantize_affine_float8``, ``_dequantize_affine_float8``;
* :mod:`~nbquant.compat.torchao_qparams`: ``_choose_qparams_affine_tinygemm``,
  ``_choose_qparams_affine_dont_preserve_zero`` and the floatx helpers;
* :mod:`~nbquant.compat.torchao_qat`: ``_fake_quantize_affine`` (and ``_cachemask``),
  ``choose_qparams_affine_with_min_max``, ``ZeroPointDomain``, and the variants
  nbquant refuses, each raising ``NotImplementedError`` with what to use instead.

Examples
--------
>>> import numpy as np
>>> from nbquant.compat import torchao
>>> x = np.array([[0.5, 1.5, -3.0, 100.0]], np.float32)
>>> torchao.quantize_affine(x, (1, 4), np.array([0.5], np.float32), np.array([3], np.int32), "uint4")
array([[ 4,  6,  0, 15]], dtype=uint8)
"""

from __future__ import annotations

from .torchao_affine import (
    MappingType,
    _dequantize_affine_no_zero_point,
    _quantize_affine_no_zero_point,
    choose_qparams_affine,
    dequantize_affine,
    quantize_affine,
)
from .torchao_float8 import _choose_scale_float8, _dequantize_affine_float8, _quantize_affine_float8
from .torchao_qat import (
    ZeroPointDomain,
    _choose_qparams_and_quantize_affine_hqq,
    _choose_qparams_gguf,
    _dequantize_gguf,
    _fake_quantize_affine,
    _fake_quantize_affine_cachemask,
    _quantize_gguf,
    choose_qparams_affine_with_min_max,
)
from .torchao_qparams import (
    _choose_qparams_affine_dont_preserve_zero,
    _choose_qparams_affine_floatx,
    _choose_qparams_affine_tinygemm,
    _dequantize_affine_floatx,
    _quantize_affine_floatx,
)
from .torchao_tinygemm import _dequantize_affine_tinygemm, _quantize_affine_tinygemm

__all__ = [
    "MappingType",
    "_dequantize_affine_no_zero_point",
    "_dequantize_affine_tinygemm",
    "_quantize_affine_no_zero_point",
    "_quantize_affine_tinygemm",
    "choose_qparams_affine",
    "dequantize_affine",
    "quantize_affine",
    "ZeroPointDomain",
    "_choose_qparams_affine_dont_preserve_zero",
    "_choose_qparams_affine_floatx",
    "_choose_qparams_affine_tinygemm",
    "_choose_qparams_and_quantize_affine_hqq",
    "_choose_qparams_gguf",
    "_dequantize_affine_floatx",
    "_dequantize_gguf",
    "_fake_quantize_affine",
    "_fake_quantize_affine_cachemask",
    "_quantize_affine_floatx",
    "_quantize_gguf",
    "choose_qparams_affine_with_min_max",
    "_choose_scale_float8",
    "_dequantize_affine_float8",
    "_quantize_affine_float8",
]
