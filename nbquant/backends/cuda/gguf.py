"""CUDA kernels of the GGUF block formats: one thread per block record.

* :func:`gguf_sigma2_kernel`: one thread per row, the row's mean square summed in
  order (what an importance matrix weighs each block with, as ggml does).
* :func:`gguf_legacy_quantize_kernel` / :func:`gguf_legacy_dequantize_kernel`: along
  a row (``blockIdx.y``, grid-stride) thread ``t`` takes blocks ``t, t + S, ...``: it
  copies the block (and its importance) into thread-local arrays, runs the block
  function of :mod:`nbquant.element.gguf_legacy` (the same as the cpu kernels) on
  them, and copies the record out. The local copies are what the element functions'
  array arguments are on every target (the CUDA simulator's device arrays cannot be
  handed to a compiled function; its local arrays are NumPy arrays).

The kernels are declared with :func:`~nbquant.backends.cuda.runtime.cuda_kernel`, so
:data:`KERNEL_SIGNATURES` lists the signatures the PTX check of ``tests/test_gguf.py``
compiles.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from ...element.gguf_kquants import SCRATCH, kquant_dequantize_block, kquant_quantize_block
from ...element.gguf_legacy import legacy_dequantize_block, legacy_quantize_block, square_add
from . import runtime
from ._loops import thread_start
from .runtime import B1, I64, array_type, cuda_kernel

__all__ = ["gguf_sigma2_kernel", "gguf_legacy_quantize_kernel", "gguf_legacy_dequantize_kernel",
           "gguf_kquant_quantize_kernel", "gguf_kquant_dequantize_kernel", "KERNEL_SIGNATURES", "legacy_quantize",
           "legacy_dequantize", "kquant_quantize", "kquant_dequantize"]

_F2, _F1, _U2 = array_type(np.float32, 2), array_type(np.float32, 1), array_type(np.uint8, 2)
#: The largest record of the 32-value formats (Q8_0's 34 bytes) and of the K-quants (Q6_K's 210).
_MAX_RECORD, _MAX_K_RECORD = 34, 210


@cuda_kernel(lambda: types.void(_F2, _F1), [()])
def gguf_sigma2_kernel(x, sigma2):
    """``sigma2[r] = sum(x[r]**2) / n``, one thread per row, summed in order in float32."""
    start, stride = thread_start()
    r = start
    while r < np.uint64(x.shape[0]):
        s = np.float32(0.0)
        for j in range(x.shape[1]):
            s = square_add(s, x[r, j])
        sigma2[r] = s / np.float32(x.shape[1])
        r += stride


@cuda_kernel(lambda: types.void(_F2, I64, _F1, B1, I64, _F1, _U2), [()])
def gguf_legacy_quantize_kernel(x, kind, qw, use_qw, type_size, sigma2, out):
    """Quantize ``x`` (rows, n) into ``out`` (rows, n / 32 * type_size): one thread per 32-element block."""
    rows = np.uint64(x.shape[0])
    nblocks = np.uint64(x.shape[1] // 32)
    xb = cuda.local.array(32, types.float32)
    wb = cuda.local.array(32, types.float32)
    rb = cuda.local.array(_MAX_RECORD, types.uint8)
    start, stride = thread_start()
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        b = start
        while b < nblocks:
            c = np.int64(b) * 32
            for j in range(32):
                xb[j] = x[row, c + j]
                wb[j] = qw[c + j] if use_qw else np.float32(0.0)
            legacy_quantize_block(kind, xb, 0, rb, 0, wb, use_qw, sigma2[row])
            o = np.int64(b) * type_size
            for k in range(type_size):
                out[row, o + k] = rb[k]
            b += stride
        row += np.uint64(cuda.gridDim.y)


@cuda_kernel(lambda: types.void(_U2, I64, I64, _F2), [()])
def gguf_legacy_dequantize_kernel(data, kind, type_size, out):
    """Decode ``data`` (rows, row bytes) into ``out`` (rows, n): one thread per record."""
    rows = np.uint64(out.shape[0])
    nblocks = np.uint64(out.shape[1] // 32)
    rb = cuda.local.array(_MAX_RECORD, types.uint8)
    vb = cuda.local.array(32, types.float32)
    start, stride = thread_start()
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        b = start
        while b < nblocks:
            o = np.int64(b) * type_size
            for k in range(type_size):
                rb[k] = data[row, o + k]
            legacy_dequantize_block(kind, rb, 0, vb, 0)
            c = np.int64(b) * 32
            for j in range(32):
                out[row, c + j] = vb[j]
            b += stride
        row += np.uint64(cuda.gridDim.y)


@cuda_kernel(lambda: types.void(_F2, I64, _F1, B1, I64, _U2), [()])
def gguf_kquant_quantize_kernel(x, kind, qw, use_qw, type_size, out):
    """Quantize ``x`` (rows, n) into K-quant ``out`` (rows, n / 256 * type_size): one thread per super-block."""
    rows = np.uint64(x.shape[0])
    nblocks = np.uint64(x.shape[1] // 256)
    xb = cuda.local.array(256, types.float32)
    wb = cuda.local.array(256, types.float32)
    rb = cuda.local.array(_MAX_K_RECORD, types.uint8)
    fs = cuda.local.array(SCRATCH, types.float32)
    start, stride = thread_start()
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        b = start
        while b < nblocks:
            c = np.int64(b) * 256
            for j in range(256):
                xb[j] = x[row, c + j]
                wb[j] = qw[c + j] if use_qw else np.float32(0.0)
            kquant_quantize_block(kind, xb, 0, rb, 0, wb, use_qw, fs)
            o = np.int64(b) * type_size
            for k in range(type_size):
                out[row, o + k] = rb[k]
            b += stride
        row += np.uint64(cuda.gridDim.y)


@cuda_kernel(lambda: types.void(_U2, I64, I64, _F2), [()])
def gguf_kquant_dequantize_kernel(data, kind, type_size, out):
    """Decode K-quant ``data`` (rows, row bytes) into ``out`` (rows, n): one thread per record."""
    rows = np.uint64(out.shape[0])
    nblocks = np.uint64(out.shape[1] // 256)
    rb = cuda.local.array(_MAX_K_RECORD, types.uint8)
    vb = cuda.local.array(256, types.float32)
    start, stride = thread_start()
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        b = start
        while b < nblocks:
            o = np.int64(b) * type_size
            for k in range(type_size):
                rb[k] = data[row, o + k]
            kquant_dequantize_block(kind, rb, 0, vb, 0)
            c = np.int64(b) * 256
            for j in range(256):
                out[row, c + j] = vb[j]
            b += stride
        row += np.uint64(cuda.gridDim.y)


#: ``(kernel, signature)`` of every launch of this module (what the PTX check compiles).
KERNEL_SIGNATURES = [(k, sig) for k in (gguf_sigma2_kernel, gguf_legacy_quantize_kernel,
                                        gguf_legacy_dequantize_kernel, gguf_kquant_quantize_kernel,
                                        gguf_kquant_dequantize_kernel) for sig in k.signatures()]


def legacy_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """Records of ``x`` (rows, n) float32 (host, C-contiguous) computed on the GPU; ``imatrix`` (n,) or None."""
    stream = runtime.current_stream()
    rows, n = x.shape
    out = np.empty((rows, n // 32 * type_size), np.uint8)
    d_x = runtime.to_device(x, stream)
    d_qw = runtime.to_device(np.zeros(1, np.float32) if imatrix is None else imatrix, stream)
    d_sigma2 = runtime.result_on_device(np.zeros(max(rows, 1), np.float32), stream)
    if imatrix is not None:
        grid, threads = runtime.grid_for_rows(1, rows)
        gguf_sigma2_kernel.launch(grid, threads, stream, (d_x, d_sigma2))
    d_out = runtime.result_on_device(out, stream)
    grid, threads = runtime.grid_for_rows(rows, n // 32)
    gguf_legacy_quantize_kernel.launch(grid, threads, stream,
                                       (d_x, kind, d_qw, imatrix is not None, type_size, d_sigma2, d_out))
    runtime.copy_back([(out, d_out)], stream)
    return out


def legacy_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of the records ``data`` (rows, row bytes), decoded on the GPU."""
    stream = runtime.current_stream()
    out = np.empty((data.shape[0], data.shape[1] // type_size * 32), np.float32)
    d_data = runtime.to_device(data, stream)
    d_out = runtime.result_on_device(out, stream)
    grid, threads = runtime.grid_for_rows(out.shape[0], out.shape[1] // 32)
    gguf_legacy_dequantize_kernel.launch(grid, threads, stream, (d_data, kind, type_size, d_out))
    runtime.copy_back([(out, d_out)], stream)
    return out


def kquant_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """K-quant records of ``x`` (rows, n) float32 (host, C-contiguous) computed on the GPU."""
    stream = runtime.current_stream()
    rows, n = x.shape
    out = np.empty((rows, n // 256 * type_size), np.uint8)
    d_x = runtime.to_device(x, stream)
    d_qw = runtime.to_device(np.zeros(1, np.float32) if imatrix is None else imatrix, stream)
    d_out = runtime.result_on_device(out, stream)
    grid, threads = runtime.grid_for_rows(rows, n // 256)
    gguf_kquant_quantize_kernel.launch(grid, threads, stream, (d_x, kind, d_qw, imatrix is not None, type_size, d_out))
    runtime.copy_back([(out, d_out)], stream)
    return out


def kquant_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of the K-quant records ``data`` (rows, row bytes), decoded on the GPU."""
    stream = runtime.current_stream()
    out = np.empty((data.shape[0], data.shape[1] // type_size * 256), np.float32)
    d_data = runtime.to_device(data, stream)
    d_out = runtime.result_on_device(out, stream)
    grid, threads = runtime.grid_for_rows(out.shape[0], out.shape[1] // 256)
    gguf_kquant_dequantize_kernel.launch(grid, threads, stream, (d_data, kind, type_size, d_out))
    runtime.copy_back([(out, d_out)], stream)
    return out
