"""CPU kernels of the GGUF block formats: one work unit per row, blocks in order, records written in place.

A row is the unit because an importance matrix weighs a block with its row's mean
square (``sigma2``, a sequential float32 sum over the row). A quantize and a dequantize
kernel per format, each a row walk around the format's element function (the tables of
:mod:`nbquant.element.gguf_legacy` and :mod:`nbquant.element.gguf_kquants`, which the
cuda kernels run too): every number is an element call.
"""

from __future__ import annotations

import numpy as np

from ...element.bits import element_function
from ...element.gguf_iq4 import IQ4_NL
from ...element.gguf_kquants import (
    IQ4_XS,
    KQUANT_DEQUANTIZERS,
    KQUANT_QUANTIZERS,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    SCRATCH,
    kmin_blocks,
    q6k_blocks,
)
from ...element.gguf_lanes import LANE_ACC_ROWS, LANE_STATE_ROWS, iq4_nl_blocks, iq4_xs_blocks, q2k_blocks, q3k_blocks
from ...element.gguf_legacy import LEGACY_DEQUANTIZERS, LEGACY_QUANTIZERS, row_sigma2
from ...element.gguf_search import KX_ACC_ROWS, KX_STATE_ROWS, QX_STATE_ROWS
from ...gguf.formats import get_format
from .._format_kernel import format_kernel
from ._kernel import CpuKernel, cpu_kernel, part_range

__all__ = ["QUANTIZE_KERNELS", "DEQUANTIZE_KERNELS"]


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


def _decode_rows(dequantize_block, block):
    """The row walk of a format's dequantize kernel around its ``dequantize_block`` (an element closure)."""

    @element_function
    def rows(part, parts, data, type_size, out):
        n_rows, n = out.shape
        first, last = part_range(n_rows, part, parts)
        for r in range(first, last):
            drow = data[r]
            orow = out[r]
            for b in range(n // block):
                dequantize_block(drow, b * type_size, orow, b * block)
    return rows


#: Searches side by side in the Q2_K, Q3_K, IQ4_XS and IQ4_NL row walks.
LANES = 64


def _lane_rows(blocks_fn, group, block):
    """The row walk of a format whose ``blocks_fn`` (:mod:`nbquant.element.gguf_lanes`) quantizes ``group``
    blocks of ``block`` values at a time, their (sub-block) searches side by side."""

    @element_function
    def rows(part, parts, x, qw, use_qw, type_size, out):
        n_rows, n = x.shape
        first, last = part_range(n_rows, part, parts)
        xt = np.empty((32, LANES), np.float32)
        wt = np.empty((32, LANES), np.float32)
        lt = np.empty((32, LANES), np.float32)
        st = np.empty((LANE_STATE_ROWS, LANES), np.float32)
        acc = np.empty((LANE_ACC_ROWS, LANES), np.float32)
        fs = np.empty(SCRATCH, np.float32)
        blocks = n // block
        for r in range(first, last):
            xr = x[r]
            orow = out[r]
            for b in range(0, blocks, group):
                blocks_fn(xr, b * block, min(group, blocks - b), orow, b * type_size, type_size, qw, use_qw, xt, wt, lt,
                          st, acc, fs)
    return rows


# Placeholder: each format's kernel has its own (its row walk).
_ROWS = None


def _quantize_template(part, parts, x, qw, use_qw, type_size, out):
    _ROWS(part, parts, x, qw, use_qw, type_size, out)


def _dequantize_template(part, parts, data, type_size, out):
    _ROWS(part, parts, data, type_size, out)


#: The formats whose quantize walks search several super-blocks side by side (vector lanes), not one block a call.
_LANE_ROWS = {Q4_K: _kmin_rows(np.int64(15)), Q5_K: _kmin_rows(np.int64(31)), Q6_K: _q6_k_rows,
              Q2_K: _lane_rows(q2k_blocks, LANES // 16, 256), Q3_K: _lane_rows(q3k_blocks, LANES // 16, 256),
              IQ4_XS: _lane_rows(iq4_xs_blocks, LANES // 8, 256), IQ4_NL: _lane_rows(iq4_nl_blocks, LANES, 32)}


def _format_kernels(kind: int) -> tuple[CpuKernel, CpuKernel]:
    """The quantize and dequantize kernels of format ``kind``: one each per format, so that a first call compiles
    its format alone (Q8_0 in seconds; a kernel that dispatched on the format at run time compiled every format,
    minutes). Each is a function of its own (:func:`~nbquant.backends._format_kernel.format_kernel`), so Numba's
    disk cache keys it on its own code and name."""
    fmt = get_format(kind)
    legacy = fmt.block_size == 32
    rows = _LANE_ROWS[kind] if kind in _LANE_ROWS else \
        _legacy_rows(LEGACY_QUANTIZERS[kind]) if legacy else _kquant_rows(KQUANT_QUANTIZERS[kind])
    decode = _decode_rows((LEGACY_DEQUANTIZERS if legacy else KQUANT_DEQUANTIZERS)[kind], fmt.block_size)
    name = fmt.name.lower()
    return (cpu_kernel(format_kernel(_quantize_template, f"{name}_quantize_kernel",
                                     f"{fmt.name} records of the rows of ``x`` (rows, n) float32 into ``out`` uint8.",
                                     _ROWS=rows)),
            cpu_kernel(format_kernel(_dequantize_template, f"{name}_dequantize_kernel",
                                     f"Decode {fmt.name} ``data`` (rows, row bytes) uint8 into ``out`` (rows, n) "
                                     "float32.", _ROWS=decode)))


_KERNELS = {kind: _format_kernels(kind) for kind in (*LEGACY_QUANTIZERS, *KQUANT_QUANTIZERS)}
#: The quantize kernel of each format (ggml type id).
QUANTIZE_KERNELS = {kind: pair[0] for kind, pair in _KERNELS.items()}
#: The dequantize kernel of each format (ggml type id).
DEQUANTIZE_KERNELS = {kind: pair[1] for kind, pair in _KERNELS.items()}
