"""The cuda backend's GGUF block kernels: each format's own kernels (:mod:`.gguf`), on host or device arrays.

A device input must be float32 and a device result float32 (the kernels read and write
float32; a host call converts on the host first, or casts the decoded values after).
:mod:`.gguf` is imported on a GGUF call's first use, not with the backend.
"""

from __future__ import annotations

import numpy as np

from ...blocks._format import block_kernel
from ...blocks.gguf import check_imatrix
from ...placement import is_device_array

__all__ = ["quantize_gguf", "dequantize_gguf"]


def _float32_on_device(a, what: str, fmt) -> None:
    if is_device_array(a) and np.dtype(a.dtype) != np.float32:
        raise NotImplementedError(f"{fmt.name} on a CUDA device takes float32 {what}, got {np.dtype(a.dtype)}; "
                                  "convert it to float32 on the device first, or pass a host array")


@block_kernel("cuda", "gguf", "quantize")
def quantize_gguf(x, spec, outputs) -> None:
    """Fill ``outputs[0]`` (rows, row bytes) with the records of ``x`` (rows, n), computed in float32 on the GPU."""
    from .gguf import quantize_rows

    fmt = spec.format
    _float32_on_device(x, "values", fmt)
    weights = check_imatrix(spec.params.imatrix, x.shape[1])
    quantize_rows(fmt.gguf.type_id, x if is_device_array(x) else np.ascontiguousarray(x, np.float32), weights,
                  outputs[0])


@block_kernel("cuda", "gguf", "dequantize")
def dequantize_gguf(inputs, spec, out) -> None:
    """Fill ``out`` (rows, n) with the float32 values of the records ``inputs[0]``, decoded on the GPU."""
    from .gguf import dequantize_rows

    fmt = spec.format
    _float32_on_device(out, "results (out_dtype)", fmt)
    values = out if np.dtype(out.dtype) == np.float32 else np.empty(out.shape, np.float32)
    dequantize_rows(fmt.gguf.type_id, inputs[0], values)
    if values is not out:
        out[...] = values
