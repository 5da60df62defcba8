"""``nbquant convert``: quantize a Hugging Face safetensors checkpoint into the compressed-tensors format, no torch.

The output equals llm-compressor's ``model_free_ptq`` byte for byte (compressed-tensors 0.19
format: tensor names, dtypes, shapes, packing, index and ``quantization_config``), computed by
nbquant's kernels one tensor at a time. See docs/convert.md.

This package is not imported by ``import nbquant``; import it as ``nbquant.convert``.

Examples
--------
>>> import tempfile, os
>>> from nbquant.convert import convert, write_synthetic_checkpoint
>>> src = tempfile.mkdtemp()
>>> len(write_synthetic_checkpoint(src, hidden=128, intermediate=256, layers=1, vocab=64))  # tensors
12
>>> report = convert(src, os.path.join(tempfile.mkdtemp(), "nvfp4"), "NVFP4A16", ignore=["lm_head"], progress=False)
>>> report.quantized[0].scheme, round(report.quantized[0].sqnr_db) > 10
('NVFP4A16', True)
"""

from __future__ import annotations

from .codecs import dequantize_weight, quantize_weight
from .report import Report, TensorReport
from .run import convert
from .safetensors import ConvertError, SafetensorsFile, ShardWriter
from .schemes import SCHEMES, Scheme, get_scheme
from .synthetic import write_synthetic_checkpoint

__all__ = [
    "SCHEMES",
    "ConvertError",
    "Report",
    "SafetensorsFile",
    "Scheme",
    "ShardWriter",
    "TensorReport",
    "convert",
    "dequantize_weight",
    "get_scheme",
    "quantize_weight",
    "write_synthetic_checkpoint",
]
