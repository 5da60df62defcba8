"""CPU kernels of the GGUF block formats: one work unit per row, blocks in order, records written in place.

A row is the unit because an importance matrix weighs a block with its row's mean
square (``sigma2``, a sequential float32 sum over the row). Every number is an
:mod:`nbquant.element.gguf_legacy` call.
"""

from __future__ import annotations

import numpy as np

from ...element.gguf_kquants import SCRATCH, kquant_dequantize_block, kquant_quantize_block
from ...element.gguf_legacy import legacy_dequantize_block, legacy_quantize_block, row_sigma2
from ._kernel import cpu_kernel, part_range

__all__ = ["legacy_quantize_kernel", "legacy_dequantize_kernel", "kquant_quantize_kernel", "kquant_dequantize_kernel",
           "legacy_quantize", "legacy_dequantize", "kquant_quantize", "kquant_dequantize"]


@cpu_kernel
def legacy_quantize_kernel(part, parts, kind, x, qw, use_qw, type_size, out):
    """Quantize rows of ``x`` (rows, n) float32 into ``out`` (rows, n / 32 * type_size) uint8 records."""
    rows, n = x.shape
    first, last = part_range(rows, part, parts)
    for r in range(first, last):
        xr = x[r]
        sigma2 = row_sigma2(xr, n) if use_qw else np.float32(0.0)
        orow = out[r]
        for b in range(n // 32):
            legacy_quantize_block(kind, xr, b * 32, orow, b * type_size, qw, use_qw, sigma2)


@cpu_kernel
def legacy_dequantize_kernel(part, parts, kind, data, type_size, out):
    """Decode ``data`` (rows, row bytes) uint8 records into ``out`` (rows, n) float32."""
    rows, n = out.shape
    first, last = part_range(rows, part, parts)
    for r in range(first, last):
        drow = data[r]
        orow = out[r]
        for b in range(n // 32):
            legacy_dequantize_block(kind, drow, b * type_size, orow, b * 32)


@cpu_kernel
def kquant_quantize_kernel(part, parts, kind, x, qw, use_qw, type_size, out):
    """Quantize rows of ``x`` (rows, n) float32 into ``out`` (rows, n / 256 * type_size) K-quant records."""
    rows, n = x.shape
    first, last = part_range(rows, part, parts)
    fs = np.empty(SCRATCH, np.float32)
    for r in range(first, last):
        xr = x[r]
        orow = out[r]
        for b in range(n // 256):
            kquant_quantize_block(kind, xr, b * 256, orow, b * type_size, qw, use_qw, fs)


@cpu_kernel
def kquant_dequantize_kernel(part, parts, kind, data, type_size, out):
    """Decode ``data`` (rows, row bytes) uint8 K-quant records into ``out`` (rows, n) float32."""
    rows, n = out.shape
    first, last = part_range(rows, part, parts)
    for r in range(first, last):
        drow = data[r]
        orow = out[r]
        for b in range(n // 256):
            kquant_dequantize_block(kind, drow, b * type_size, orow, b * 256)


def _quantize(kernel, block: int, kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    out = np.empty((x.shape[0], x.shape[1] // block * type_size), np.uint8)
    kernel(kind, x, np.zeros(1, np.float32) if imatrix is None else imatrix, imatrix is not None, type_size, out)
    return out


def _dequantize(kernel, block: int, kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    out = np.empty((data.shape[0], data.shape[1] // type_size * block), np.float32)
    kernel(kind, data, type_size, out)
    return out


def legacy_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """Records of ``x`` (rows, n) float32 C-contiguous; ``imatrix`` (n,) float32 or None."""
    return _quantize(legacy_quantize_kernel, 32, kind, x, imatrix, type_size)


def legacy_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of the records ``data`` (rows, row bytes) uint8 C-contiguous."""
    return _dequantize(legacy_dequantize_kernel, 32, kind, data, type_size)


def kquant_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """K-quant records of ``x`` (rows, n) float32 C-contiguous; ``imatrix`` (n,) float32 or None."""
    return _quantize(kquant_quantize_kernel, 256, kind, x, imatrix, type_size)


def kquant_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of the K-quant records ``data`` (rows, row bytes) uint8 C-contiguous."""
    return _dequantize(kquant_dequantize_kernel, 256, kind, data, type_size)
