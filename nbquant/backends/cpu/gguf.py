"""CPU kernels of the GGUF block formats: one work unit per row, blocks in order, records written in place.

A row is the unit because an importance matrix weighs a block with its row's mean
square (``sigma2``, a sequential float32 sum over the row). Every number is an
:mod:`nbquant.element.gguf_legacy` call.
"""

from __future__ import annotations

import numpy as np

from ...element.bits import element_function
from ...element.gguf_iq4 import IQ4_NL, IQ4_XS
from ...element.gguf_kquants import (
    KQUANT_QUANTIZERS,
    Q4_K,
    Q5_K,
    Q6_K,
    SCRATCH,
    kmin_blocks,
    kquant_dequantize_block,
    q6k_blocks,
)
from ...element.gguf_legacy import LEGACY_QUANTIZERS, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, legacy_dequantize_block, row_sigma2
from ...element.gguf_mxfp4 import MXFP4
from ...element.gguf_q2k import Q2_K
from ...element.gguf_q3k import Q3_K
from ...element.gguf_search import KX_ACC_ROWS, KX_STATE_ROWS, QX_STATE_ROWS
from ._kernel import cpu_kernel, part_range

__all__ = ["QUANTIZE_KERNELS", "legacy_dequantize_kernel", "kquant_dequantize_kernel", "legacy_quantize",
           "legacy_dequantize", "kquant_quantize", "kquant_dequantize"]


def _legacy_rows(quantize_block):
    """The row walk of a 32-element format's quantize kernel around its ``quantize_block`` (an element closure)."""

    @element_function
    def rows(part, parts, x, qw, use_qw, type_size, out):
        n_rows, n = x.shape
        first, last = part_range(n_rows, part, parts)
        for r in range(first, last):
            xr = x[r]
            sigma2 = row_sigma2(xr, n) if use_qw else np.float32(0.0)
            orow = out[r]
            for b in range(n // 32):
                quantize_block(xr, b * 32, orow, b * type_size, qw, use_qw, sigma2)
    return rows


def _kquant_rows(quantize_block):
    """The row walk of a 256-element format's quantize kernel around its ``quantize_block`` (an element closure)."""

    @element_function
    def rows(part, parts, x, qw, use_qw, type_size, out):
        n_rows, n = x.shape
        first, last = part_range(n_rows, part, parts)
        fs = np.empty(SCRATCH, np.float32)
        for r in range(first, last):
            xr = x[r]
            orow = out[r]
            for b in range(n // 256):
                quantize_block(xr, b * 256, orow, b * type_size, qw, use_qw, fs)
    return rows


#: Super-blocks whose Q4_K/Q5_K sub-block searches run side by side (8 lanes each).
KMIN_GROUP = 8


def _kmin_rows(top):
    """The row walk of Q4_K (``top`` 15) / Q5_K (31): groups of :data:`KMIN_GROUP` super-blocks searched as lanes."""

    @element_function
    def rows(part, parts, x, qw, use_qw, type_size, out):
        n_rows, n = x.shape
        first, last = part_range(n_rows, part, parts)
        lanes = 8 * KMIN_GROUP
        xt = np.empty((32, lanes), np.float32)
        wt = np.empty((32, lanes), np.float32)
        lt = np.empty((32, lanes), np.float32)
        st = np.empty((KX_STATE_ROWS + 1, lanes), np.float32)
        acc = np.empty((KX_ACC_ROWS, lanes), np.float32)
        fs = np.empty(SCRATCH, np.float32)
        blocks = n // 256
        for r in range(first, last):
            xr = x[r]
            orow = out[r]
            for b in range(0, blocks, KMIN_GROUP):
                kmin_blocks(xr, b * 256, min(KMIN_GROUP, blocks - b), orow, b * type_size, type_size, qw, use_qw, top,
                            xt, wt, lt, st, acc, fs)
    return rows


#: Super-blocks whose Q6_K sub-block searches run side by side (16 lanes each).
Q6K_GROUP = 4


@element_function
def _q6_k_rows(part, parts, x, qw, use_qw, type_size, out):
    """The row walk of Q6_K: groups of :data:`Q6K_GROUP` super-blocks searched as lanes."""
    n_rows, n = x.shape
    first, last = part_range(n_rows, part, parts)
    lanes = 16 * Q6K_GROUP
    xt = np.empty((16, lanes), np.float32)
    wt = np.empty((16, lanes), np.float32)
    st = np.empty((QX_STATE_ROWS, lanes), np.float32)
    acc = np.empty((2, lanes), np.float32)
    fs = np.empty(SCRATCH, np.float32)
    blocks = n // 256
    for r in range(first, last):
        xr = x[r]
        orow = out[r]
        for b in range(0, blocks, Q6K_GROUP):
            q6k_blocks(xr, b * 256, min(Q6K_GROUP, blocks - b), orow, b * type_size, type_size, qw, use_qw, xt, wt, st,
                       acc, fs)


# One quantize kernel per format, so that a first call compiles its format alone (Q8_0 in seconds; a kernel that
# dispatched on the format at run time compiled every format, minutes). Each is a top-level function calling its
# row walk, so Numba's disk cache keys it on its own code (a closure's key would hold a dispatcher's per-process id).
_q8_0_rows = _legacy_rows(LEGACY_QUANTIZERS[Q8_0])
_q4_0_rows = _legacy_rows(LEGACY_QUANTIZERS[Q4_0])
_q4_1_rows = _legacy_rows(LEGACY_QUANTIZERS[Q4_1])
_q5_0_rows = _legacy_rows(LEGACY_QUANTIZERS[Q5_0])
_q5_1_rows = _legacy_rows(LEGACY_QUANTIZERS[Q5_1])
_iq4_nl_rows = _legacy_rows(LEGACY_QUANTIZERS[IQ4_NL])
_mxfp4_rows = _legacy_rows(LEGACY_QUANTIZERS[MXFP4])
_q2_k_rows = _kquant_rows(KQUANT_QUANTIZERS[Q2_K])
_q3_k_rows = _kquant_rows(KQUANT_QUANTIZERS[Q3_K])
_q4_k_rows = _kmin_rows(np.int64(15))
_q5_k_rows = _kmin_rows(np.int64(31))
_iq4_xs_rows = _kquant_rows(KQUANT_QUANTIZERS[IQ4_XS])


@cpu_kernel
def q8_0_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """Q8_0 records of the rows of ``x`` (rows, n) float32 into ``out`` uint8."""
    _q8_0_rows(part, parts, x, qw, use_qw, type_size, out)


@cpu_kernel
def q4_0_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """Q4_0 records of the rows of ``x``."""
    _q4_0_rows(part, parts, x, qw, use_qw, type_size, out)


@cpu_kernel
def q4_1_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """Q4_1 records of the rows of ``x``."""
    _q4_1_rows(part, parts, x, qw, use_qw, type_size, out)


@cpu_kernel
def q5_0_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """Q5_0 records of the rows of ``x``."""
    _q5_0_rows(part, parts, x, qw, use_qw, type_size, out)


@cpu_kernel
def q5_1_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """Q5_1 records of the rows of ``x``."""
    _q5_1_rows(part, parts, x, qw, use_qw, type_size, out)


@cpu_kernel
def iq4_nl_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """IQ4_NL records of the rows of ``x``."""
    _iq4_nl_rows(part, parts, x, qw, use_qw, type_size, out)


@cpu_kernel
def mxfp4_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """MXFP4 records of the rows of ``x``."""
    _mxfp4_rows(part, parts, x, qw, use_qw, type_size, out)


@cpu_kernel
def q2_k_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """Q2_K records of the rows of ``x``."""
    _q2_k_rows(part, parts, x, qw, use_qw, type_size, out)


@cpu_kernel
def q3_k_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """Q3_K records of the rows of ``x``."""
    _q3_k_rows(part, parts, x, qw, use_qw, type_size, out)


@cpu_kernel
def q4_k_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """Q4_K records of the rows of ``x``."""
    _q4_k_rows(part, parts, x, qw, use_qw, type_size, out)


@cpu_kernel
def q5_k_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """Q5_K records of the rows of ``x``."""
    _q5_k_rows(part, parts, x, qw, use_qw, type_size, out)


@cpu_kernel
def q6_k_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """Q6_K records of the rows of ``x``."""
    _q6_k_rows(part, parts, x, qw, use_qw, type_size, out)


@cpu_kernel
def iq4_xs_quantize_kernel(part, parts, x, qw, use_qw, type_size, out):
    """IQ4_XS records of the rows of ``x``."""
    _iq4_xs_rows(part, parts, x, qw, use_qw, type_size, out)


#: The quantize kernel of each format (ggml type id).
QUANTIZE_KERNELS = {Q8_0: q8_0_quantize_kernel, Q4_0: q4_0_quantize_kernel, Q4_1: q4_1_quantize_kernel,
                    Q5_0: q5_0_quantize_kernel, Q5_1: q5_1_quantize_kernel, IQ4_NL: iq4_nl_quantize_kernel,
                    MXFP4: mxfp4_quantize_kernel, Q2_K: q2_k_quantize_kernel, Q3_K: q3_k_quantize_kernel,
                    Q4_K: q4_k_quantize_kernel, Q5_K: q5_k_quantize_kernel, Q6_K: q6_k_quantize_kernel,
                    IQ4_XS: iq4_xs_quantize_kernel}


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
def kquant_dequantize_kernel(part, parts, kind, data, type_size, out):
    """Decode ``data`` (rows, row bytes) uint8 K-quant records into ``out`` (rows, n) float32."""
    rows, n = out.shape
    first, last = part_range(rows, part, parts)
    for r in range(first, last):
        drow = data[r]
        orow = out[r]
        for b in range(n // 256):
            kquant_dequantize_block(kind, drow, b * type_size, orow, b * 256)


def _quantize(block: int, kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    out = np.empty((x.shape[0], x.shape[1] // block * type_size), np.uint8)
    QUANTIZE_KERNELS[kind](x, np.zeros(1, np.float32) if imatrix is None else imatrix, imatrix is not None, type_size,
                           out)
    return out


def _dequantize(kernel, block: int, kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    out = np.empty((data.shape[0], data.shape[1] // type_size * block), np.float32)
    kernel(kind, data, type_size, out)
    return out


def legacy_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """Records of ``x`` (rows, n) float32 C-contiguous; ``imatrix`` (n,) float32 or None."""
    return _quantize(32, kind, x, imatrix, type_size)


def legacy_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of the records ``data`` (rows, row bytes) uint8 C-contiguous."""
    return _dequantize(legacy_dequantize_kernel, 32, kind, data, type_size)


def kquant_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """K-quant records of ``x`` (rows, n) float32 C-contiguous; ``imatrix`` (n,) float32 or None."""
    return _quantize(256, kind, x, imatrix, type_size)


def kquant_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of the K-quant records ``data`` (rows, row bytes) uint8 C-contiguous."""
    return _dequantize(kquant_dequantize_kernel, 256, kind, data, type_size)
