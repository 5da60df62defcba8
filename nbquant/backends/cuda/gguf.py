"""CUDA kernels of the GGUF block formats: one thread per block record.

* :func:`gguf_sigma2_kernel`: one thread per row, the row's mean square summed in
  order (what an importance matrix weighs each block with, as ggml does).
* the quantize and dequantize kernels of the 32-value formats (``legacy``) and of the
  256-value super-blocks (``kquant``): along a row (``blockIdx.y``, grid-stride) thread
  ``t`` takes blocks ``t, t + S, ...`` (one walk, :func:`_record_frame`, around each
  kernel's step): it copies the block (and its importance) into thread-local arrays,
  runs the block function of :mod:`nbquant.element.gguf_legacy` or
  :mod:`nbquant.element.gguf_kquants` (the same as the cpu kernels) on them, and copies
  the record out. The local copies are what the element functions'
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


def _record_frame(op):
    """The walk of a GGUF kernel around ``op(args, scratch, row, b)``, which handles block ``b`` of row ``row``.

    Along each row (``blockIdx.y``, grid-stride) thread ``t`` takes blocks ``t, t + S, ...``
    of the ``nblocks``. Returns ``walk(rows, nblocks, args, scratch)``, a device function
    for a kernel to call (``op`` is frozen in as a compile-time constant and inlined, as
    :func:`~nbquant.backends.cuda._loops.column_frame` does).
    """

    @cuda.jit(device=True, inline="always")
    def walk(rows, nblocks, args, scratch):
        start, stride = thread_start()
        row = np.uint64(cuda.blockIdx.y)
        while row < rows:
            b = start
            while b < nblocks:
                op(args, scratch, row, np.int64(b))
                b += stride
            row += np.uint64(cuda.gridDim.y)

    return walk


@cuda.jit(device=True, inline="always")
def _load_block(x, qw, use_qw, row, c, n, xb, wb):
    """Copy the ``n`` values of ``x[row]`` from column ``c``, and their importance, into ``xb`` and ``wb``."""
    for j in range(n):
        xb[j] = x[row, c + j]
        wb[j] = qw[c + j] if use_qw else np.float32(0.0)


@cuda.jit(device=True, inline="always")
def _copy_row(src, row, o, n, dst):
    """``dst[0:n] = src[row, o:o + n]``."""
    for k in range(n):
        dst[k] = src[row, o + k]


@cuda.jit(device=True, inline="always")
def _copy_to_row(src, n, dst, row, o):
    """``dst[row, o:o + n] = src[0:n]``."""
    for k in range(n):
        dst[row, o + k] = src[k]


@cuda.jit(device=True, inline="always")
def _legacy_quantize_op(args, scratch, row, b):
    x, kind, qw, use_qw, type_size, sigma2, out = args
    xb, wb, rb = scratch
    _load_block(x, qw, use_qw, row, b * 32, 32, xb, wb)
    legacy_quantize_block(kind, xb, 0, rb, 0, wb, use_qw, sigma2[row])
    _copy_to_row(rb, type_size, out, row, b * type_size)


@cuda.jit(device=True, inline="always")
def _kquant_quantize_op(args, scratch, row, b):
    x, kind, qw, use_qw, type_size, out = args
    xb, wb, rb, fs = scratch
    _load_block(x, qw, use_qw, row, b * 256, 256, xb, wb)
    kquant_quantize_block(kind, xb, 0, rb, 0, wb, use_qw, fs)
    _copy_to_row(rb, type_size, out, row, b * type_size)


@cuda.jit(device=True, inline="always")
def _legacy_dequantize_op(args, scratch, row, b):
    data, kind, type_size, out = args
    rb, vb = scratch
    _copy_row(data, row, b * type_size, type_size, rb)
    legacy_dequantize_block(kind, rb, 0, vb, 0)
    _copy_to_row(vb, 32, out, row, b * 32)


@cuda.jit(device=True, inline="always")
def _kquant_dequantize_op(args, scratch, row, b):
    data, kind, type_size, out = args
    rb, vb = scratch
    _copy_row(data, row, b * type_size, type_size, rb)
    kquant_dequantize_block(kind, rb, 0, vb, 0)
    _copy_to_row(vb, 256, out, row, b * 256)


_legacy_quantize_walk = _record_frame(_legacy_quantize_op)
_kquant_quantize_walk = _record_frame(_kquant_quantize_op)
_legacy_dequantize_walk = _record_frame(_legacy_dequantize_op)
_kquant_dequantize_walk = _record_frame(_kquant_dequantize_op)


@cuda_kernel(lambda: types.void(_F2, I64, _F1, B1, I64, _F1, _U2), [()])
def gguf_legacy_quantize_kernel(x, kind, qw, use_qw, type_size, sigma2, out):
    """Quantize ``x`` (rows, n) into ``out`` (rows, n / 32 * type_size): one thread per 32-element block."""
    scratch = (cuda.local.array(32, types.float32), cuda.local.array(32, types.float32),
               cuda.local.array(_MAX_RECORD, types.uint8))
    _legacy_quantize_walk(np.uint64(x.shape[0]), np.uint64(x.shape[1] // 32),
                          (x, kind, qw, use_qw, type_size, sigma2, out), scratch)


@cuda_kernel(lambda: types.void(_U2, I64, I64, _F2), [()])
def gguf_legacy_dequantize_kernel(data, kind, type_size, out):
    """Decode ``data`` (rows, row bytes) into ``out`` (rows, n): one thread per record."""
    scratch = (cuda.local.array(_MAX_RECORD, types.uint8), cuda.local.array(32, types.float32))
    _legacy_dequantize_walk(np.uint64(out.shape[0]), np.uint64(out.shape[1] // 32), (data, kind, type_size, out),
                            scratch)


@cuda_kernel(lambda: types.void(_F2, I64, _F1, B1, I64, _U2), [()])
def gguf_kquant_quantize_kernel(x, kind, qw, use_qw, type_size, out):
    """Quantize ``x`` (rows, n) into K-quant ``out`` (rows, n / 256 * type_size): one thread per super-block."""
    scratch = (cuda.local.array(256, types.float32), cuda.local.array(256, types.float32),
               cuda.local.array(_MAX_K_RECORD, types.uint8), cuda.local.array(SCRATCH, types.float32))
    _kquant_quantize_walk(np.uint64(x.shape[0]), np.uint64(x.shape[1] // 256), (x, kind, qw, use_qw, type_size, out),
                          scratch)


@cuda_kernel(lambda: types.void(_U2, I64, I64, _F2), [()])
def gguf_kquant_dequantize_kernel(data, kind, type_size, out):
    """Decode K-quant ``data`` (rows, row bytes) into ``out`` (rows, n): one thread per record."""
    scratch = (cuda.local.array(_MAX_K_RECORD, types.uint8), cuda.local.array(256, types.float32))
    _kquant_dequantize_walk(np.uint64(out.shape[0]), np.uint64(out.shape[1] // 256), (data, kind, type_size, out),
                            scratch)


#: ``(kernel, signature)`` of every launch of this module (what the PTX check compiles).
KERNEL_SIGNATURES = [(k, sig) for k in (gguf_sigma2_kernel, gguf_legacy_quantize_kernel,
                                        gguf_legacy_dequantize_kernel, gguf_kquant_quantize_kernel,
                                        gguf_kquant_dequantize_kernel) for sig in k.signatures()]


def _quantize(kernel, block: int, kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int,
              with_sigma2: bool) -> np.ndarray:
    stream = runtime.current_stream()
    rows, n = x.shape
    out = np.empty((rows, n // block * type_size), np.uint8)
    d_x = runtime.to_device(x, stream)
    d_qw = runtime.to_device(np.zeros(1, np.float32) if imatrix is None else imatrix, stream)
    args = (d_x, kind, d_qw, imatrix is not None, type_size)
    if with_sigma2:  # the 32-value formats weigh a block with its row's mean square
        d_sigma2 = runtime.result_on_device(np.zeros(max(rows, 1), np.float32), stream)
        if imatrix is not None:
            grid, threads = runtime.grid_for_rows(1, rows)
            gguf_sigma2_kernel.launch(grid, threads, stream, (d_x, d_sigma2))
        args += (d_sigma2,)
    d_out = runtime.result_on_device(out, stream)
    grid, threads = runtime.grid_for_rows(rows, n // block)
    kernel.launch(grid, threads, stream, (*args, d_out))
    runtime.copy_back([(out, d_out)], stream)
    return out


def _dequantize(kernel, block: int, kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    stream = runtime.current_stream()
    out = np.empty((data.shape[0], data.shape[1] // type_size * block), np.float32)
    d_data = runtime.to_device(data, stream)
    d_out = runtime.result_on_device(out, stream)
    grid, threads = runtime.grid_for_rows(out.shape[0], out.shape[1] // block)
    kernel.launch(grid, threads, stream, (d_data, kind, type_size, d_out))
    runtime.copy_back([(out, d_out)], stream)
    return out


def legacy_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """Records of ``x`` (rows, n) float32 (host, C-contiguous) computed on the GPU; ``imatrix`` (n,) or None."""
    return _quantize(gguf_legacy_quantize_kernel, 32, kind, x, imatrix, type_size, True)


def legacy_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of the records ``data`` (rows, row bytes), decoded on the GPU."""
    return _dequantize(gguf_legacy_dequantize_kernel, 32, kind, data, type_size)


def kquant_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """K-quant records of ``x`` (rows, n) float32 (host, C-contiguous) computed on the GPU."""
    return _quantize(gguf_kquant_quantize_kernel, 256, kind, x, imatrix, type_size, False)


def kquant_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of the K-quant records ``data`` (rows, row bytes), decoded on the GPU."""
    return _dequantize(gguf_kquant_dequantize_kernel, 256, kind, data, type_size)
