"""``nbquant convert`` for GGUF files: llama-quantize's output, byte for byte, without a C build.

See :func:`convert_gguf` and docs/convert.md ("GGUF files").
"""

from __future__ import annotations

from .from_hf import convert_hf_gguf
from .job import convert_gguf
from .report import GGUFReport, GGUFTensor, format_gguf_table, gguf_summary
from .synthetic import write_synthetic_gguf

__all__ = ["convert_gguf", "convert_hf_gguf", "GGUFReport", "GGUFTensor", "format_gguf_table", "gguf_summary",
           "write_synthetic_gguf"]
