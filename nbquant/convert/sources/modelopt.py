"""modelopt's Hugging Face exports (``hf_quant_config.json``, ``quant_method: "modelopt"``): NVFP4 and FP8 weights.

* NVFP4: ``weight`` (uint8, two e2m1 codes a byte, the low nibble first), ``weight_scale`` (E4M3
  per 16) and ``weight_scale_2`` (one float32); modelopt's ``NVFP4QTensor.dequantize`` multiplies
  each code by ``fl32(weight_scale * weight_scale_2)`` in float32, then casts to the model's dtype;
  its e2m1 table reads the code of ``-0`` as ``+0``.
  compressed-tensors divides by a global scale instead, so :class:`ModeloptNVFP4` keeps the codec's
  decoding and changes only that product.
* FP8: ``weight`` (E4M3) and one float32 ``weight_scale``; ``FP8QTensor.dequantize`` computes
  ``weight.to(h) * weight_scale.to(h)`` in the model's dtype ``h``: the scale rounded to ``h``
  first, then one rounding of the exact product, which is compressed-tensors' per-tensor decoding
  of that rounded scale.

Examples
--------
>>> f = modelopt_format({"quant_algo": "NVFP4", "group_size": 16}, "x", {"torch_dtype": "float16"})
>>> f.label, f.codes, f.dtype
('modelopt NVFP4', 'weight', dtype('float16'))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..codecs import NVFP4PackQuantized
from ..codecs.floating import decode_codes
from ..safetensors import ConvertError
from ..schemes import get_scheme
from .formats import BF16, FLOAT_DTYPES, SourceFormat

__all__ = ["ModeloptNVFP4", "modelopt_format", "modelopt_config"]

_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


class ModeloptNVFP4(NVFP4PackQuantized):
    """NVFP4 decoded as modelopt decodes it: each e2m1 code times ``fl32(weight_scale * weight_scale_2)``."""

    def dequantize(self, tensors: Mapping[str, np.ndarray], dtype: np.dtype,
                   rows: slice = slice(None)) -> np.ndarray:
        d = tensors["weight_scale"][rows].astype(np.float32) * np.float32(tensors["weight_global_scale"][0])
        p = np.asarray(tensors["weight_packed"][rows])
        negative_zero = ((p & 0x0F) == 0x08) * np.uint8(0x08) | ((p & 0xF0) == 0x80) * np.uint8(0x80)
        codes = {"weight_packed": p & ~negative_zero}  # modelopt's e2m1 table decodes the code of -0 as +0
        return decode_codes(codes, d, self.element, self.block, dtype, slice(None))


def modelopt_config(qc: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``quantization`` part of a modelopt config: ``hf_quant_config.json``'s, or ``config.json``'s flat one."""
    inner = qc.get("quantization")
    return inner if isinstance(inner, Mapping) else qc


def modelopt_format(qc: Mapping[str, Any], where: str, config: Mapping[str, Any]) -> SourceFormat:
    """The :class:`SourceFormat` of a modelopt export; ``config`` (``config.json``) gives the model's dtype."""
    q = modelopt_config(qc)
    algo = q.get("quant_algo")
    name = config.get("torch_dtype", config.get("dtype", "bfloat16"))
    h = FLOAT_DTYPES[_DTYPES[name]] if name in _DTYPES else BF16
    if algo == "NVFP4":
        if q.get("group_size", 16) != 16:
            raise ConvertError(f"{where}: quantization group_size {q.get('group_size')!r} is not supported (NVFP4 "
                               "uses 16)")
        return SourceFormat("modelopt NVFP4", get_scheme("NVFP4A16"),
                            (("weight", "weight_packed"), ("weight_scale_2", "weight_global_scale")), h, ModeloptNVFP4)
    if algo == "FP8":
        args = {"num_bits": 8, "type": "float", "strategy": "tensor", "group_size": None, "symmetric": True,
                "block_structure": None}
        scheme = get_scheme("FP8_DYNAMIC")
        scheme = type(scheme)("FP8_TENSOR_SOURCE", "fp8", 8, "tensor", "float-quantized", args)
        return SourceFormat("modelopt FP8 per tensor", scheme, (), h, None, True)
    raise ConvertError(f"{where}: modelopt quant_algo {algo!r} is not supported (nbquant reads NVFP4 and FP8)")
