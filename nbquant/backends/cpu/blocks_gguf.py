"""The cpu backend's GGUF block kernels: each format's own quantize and dequantize kernel (:mod:`.gguf`).

:mod:`.gguf` (26 kernel declarations) is imported on a GGUF call's first use, not with the backend.
"""

from __future__ import annotations

import numpy as np

from ...blocks._format import block_kernel
from ...blocks.gguf import check_imatrix

__all__ = ["quantize_gguf", "dequantize_gguf"]

_NO_WEIGHTS = np.zeros(1, np.float32)


@block_kernel("cpu", "gguf", "quantize")
def quantize_gguf(x, spec, outputs) -> None:
    """Fill ``outputs[0]`` (rows, row bytes) with the records of ``x`` (rows, n), computed in float32."""
    from .gguf import QUANTIZE_KERNELS

    fmt = spec.format.gguf
    weights = check_imatrix(spec.params.imatrix, x.shape[1])
    QUANTIZE_KERNELS[fmt.type_id](np.ascontiguousarray(x, np.float32), _NO_WEIGHTS if weights is None else weights,
                                  weights is not None, fmt.type_size, outputs[0])


@block_kernel("cpu", "gguf", "dequantize")
def dequantize_gguf(inputs, spec, out) -> None:
    """Fill ``out`` (rows, n) with the float32 values of the records ``inputs[0]`` (cast when ``out`` is not
    float32)."""
    from .gguf import DEQUANTIZE_KERNELS

    fmt = spec.format.gguf
    values = out if out.dtype == np.float32 else np.empty(out.shape, np.float32)
    DEQUANTIZE_KERNELS[fmt.type_id](np.ascontiguousarray(inputs[0], np.uint8), fmt.type_size, values)
    if values is not out:
        out[...] = values
