"""The reference backend's GGUF block kernels: the NumPy oracle of :mod:`.gguf_rows`, as registered block kernels."""

from __future__ import annotations

import numpy as np

from ...blocks._format import block_kernel
from ...blocks.gguf import check_imatrix
from . import gguf_rows

__all__ = ["quantize_gguf", "dequantize_gguf"]


@block_kernel("reference", "gguf", "quantize")
def quantize_gguf(x, spec, outputs) -> None:
    """Fill ``outputs[0]`` (rows, row bytes) with the records of ``x`` (rows, n), computed in float32."""
    fmt = spec.format.gguf
    run = gguf_rows.kquant_quantize if fmt.block_size == 256 else gguf_rows.legacy_quantize
    weights = check_imatrix(spec.params.imatrix, x.shape[1])
    outputs[0][...] = run(fmt.type_id, np.ascontiguousarray(x, np.float32), weights, fmt.type_size)


@block_kernel("reference", "gguf", "dequantize")
def dequantize_gguf(inputs, spec, out) -> None:
    """Fill ``out`` (rows, n) with the float32 values of the records ``inputs[0]``, cast to ``out``'s dtype."""
    fmt = spec.format.gguf
    run = gguf_rows.kquant_dequantize if fmt.block_size == 256 else gguf_rows.legacy_dequantize
    out[...] = run(fmt.type_id, np.ascontiguousarray(inputs[0], np.uint8), fmt.type_size)
