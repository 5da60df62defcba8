"""CUDA kernels of the GGUF block formats: one kernel per format and direction, one thread per block record.

* :func:`gguf_sigma2_kernel`: one thread per row, the row's mean square summed in
  order (what an importance matrix weighs each block with, as ggml does).
* a quantize and a dequantize kernel per format (``gguf_q8_0_quantize``, ...,
  ``gguf_iq4_xs_dequantize``), so that a first call compiles its format alone. Each is
  one of two templates around the format's element function (the tables
  :data:`~nbquant.element.gguf_legacy.LEGACY_QUANTIZERS`,
  :data:`~nbquant.element.gguf_kquants.KQUANT_QUANTIZERS` and their ``DEQUANTIZERS``,
  which the cpu kernels run too), made a kernel of its own by
  :func:`~nbquant.backends._format_kernel.format_kernel`. Along a row
  (``blockIdx.y``, grid-stride) thread ``t`` takes blocks ``t, t + S, ...`` (one walk,
  :func:`_record_frame`, around the format's step): it copies the block (and its
  importance) into thread-local arrays, runs the element function on them, and copies
  the record out. The local copies are what the element functions' array arguments are
  on every target (the CUDA simulator's device arrays cannot be handed to a compiled
  function; its local arrays are NumPy arrays).

The kernels are declared with :func:`~nbquant.backends.cuda.runtime.cuda_kernel` (when
this module is imported; each compiles on its first launch), so
:func:`~nbquant.backends.cuda.runtime.all_signatures` lists them for the PTX check.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from ...element.gguf_kquants import KQUANT_DEQUANTIZERS, KQUANT_QUANTIZERS, SCRATCH
from ...element.gguf_legacy import LEGACY_DEQUANTIZERS, LEGACY_QUANTIZERS, square_add
from ...gguf.formats import get_format
from .._format_kernel import format_kernel
from . import runtime
from ._loops import thread_start
from .runtime import B1, array_type, cuda_kernel

__all__ = ["gguf_sigma2_kernel", "QUANTIZE_KERNELS", "DEQUANTIZE_KERNELS", "quantize_rows", "dequantize_rows"]

_F2, _F1, _U2 = array_type(np.float32, 2), array_type(np.float32, 1), array_type(np.uint8, 2)


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
def _row_sigma2(sigma2, row, fs):
    """The last argument of a 32-value format's quantize function: its row's mean square."""
    return sigma2[row]


@cuda.jit(device=True, inline="always")
def _float_scratch(sigma2, row, fs):
    """The last argument of a 256-value format's quantize function: the float scratch."""
    return fs


def _quantize_op(quantize_block, block, size, last):
    """Quantize block ``b`` of row ``row`` with ``quantize_block`` (``block`` values to ``size`` bytes)."""

    @cuda.jit(device=True, inline="always")
    def op(args, scratch, row, b):
        x, qw, use_qw, sigma2, out = args
        xb, wb, rb, fs = scratch
        _load_block(x, qw, use_qw, row, b * block, block, xb, wb)
        quantize_block(xb, 0, rb, 0, wb, use_qw, last(sigma2, row, fs))
        _copy_to_row(rb, size, out, row, b * size)
    return op


def _dequantize_op(dequantize_block, block, size):
    """Decode record ``b`` of row ``row`` with ``dequantize_block`` (``size`` bytes to ``block`` values)."""

    @cuda.jit(device=True, inline="always")
    def op(args, scratch, row, b):
        data, out = args
        rb, vb = scratch
        _copy_row(data, row, b * size, size, rb)
        dequantize_block(rb, 0, vb, 0)
        _copy_to_row(vb, block, out, row, b * block)
    return op


# Placeholders: each format's kernel has its own values of these (its walk, its block, record and scratch sizes).
_WALK = _BLOCK = _RECORD = _SCRATCH = None


def _quantize_template(x, qw, use_qw, sigma2, out):
    scratch = (cuda.local.array(_BLOCK, types.float32), cuda.local.array(_BLOCK, types.float32),
               cuda.local.array(_RECORD, types.uint8), cuda.local.array(_SCRATCH, types.float32))
    _WALK(np.uint64(x.shape[0]), np.uint64(x.shape[1] // _BLOCK), (x, qw, use_qw, sigma2, out), scratch)


def _dequantize_template(data, out):
    scratch = (cuda.local.array(_RECORD, types.uint8), cuda.local.array(_BLOCK, types.float32))
    _WALK(np.uint64(out.shape[0]), np.uint64(out.shape[1] // _BLOCK), (data, out), scratch)


def _format_kernels(kind: int) -> tuple[runtime.CudaKernel, runtime.CudaKernel]:
    """The quantize kernel ``(x, qw, use_qw, sigma2, out)`` and the dequantize kernel ``(data, out)`` of ``kind``."""
    fmt = get_format(kind)
    legacy = fmt.block_size == 32
    element = LEGACY_QUANTIZERS[kind] if legacy else KQUANT_QUANTIZERS[kind]
    decode = LEGACY_DEQUANTIZERS[kind] if legacy else KQUANT_DEQUANTIZERS[kind]
    sizes = {"_BLOCK": fmt.block_size, "_RECORD": fmt.type_size}
    name = f"gguf_{fmt.name.lower()}"
    quantize = format_kernel(
        _quantize_template, f"{name}_quantize_kernel",
        f"{fmt.name} records of ``x`` (rows, n) into ``out`` (rows, n / {fmt.block_size} * {fmt.type_size}): one "
        "thread per block; ``sigma2`` the rows' mean squares (32-value formats, with an importance ``qw``).",
        _WALK=_record_frame(_quantize_op(element, fmt.block_size, fmt.type_size,
                                         _row_sigma2 if legacy else _float_scratch)),
        _SCRATCH=1 if legacy else SCRATCH, **sizes)
    dequantize = format_kernel(
        _dequantize_template, f"{name}_dequantize_kernel",
        f"Decode {fmt.name} ``data`` (rows, row bytes) into ``out`` (rows, n): one thread per record.",
        _WALK=_record_frame(_dequantize_op(decode, fmt.block_size, fmt.type_size)), **sizes)
    return (cuda_kernel(lambda: types.void(_F2, _F1, B1, _F1, _U2), [()])(quantize),
            cuda_kernel(lambda: types.void(_U2, _F2), [()])(dequantize))


_KERNELS = {kind: _format_kernels(kind) for kind in (*LEGACY_QUANTIZERS, *KQUANT_QUANTIZERS)}
#: The quantize kernel of each format (ggml type id).
QUANTIZE_KERNELS = {kind: pair[0] for kind, pair in _KERNELS.items()}
#: The dequantize kernel of each format (ggml type id).
DEQUANTIZE_KERNELS = {kind: pair[1] for kind, pair in _KERNELS.items()}


def quantize_rows(kind: int, x, imatrix: np.ndarray | None, out) -> None:
    """Fill ``out`` (rows, row bytes) uint8 with format ``kind``'s records of ``x`` (rows, n) float32 C-contiguous,
    on the GPU; ``imatrix`` (n,) float32 or None. Host or device arrays; a host ``out`` is copied back."""
    fmt = get_format(kind)
    stream = runtime.current_stream()
    rows, n = x.shape
    # The 32-value formats weigh a block with its row's mean square; the others take no sigma2 (one unused value).
    with_sigma2 = fmt.block_size == 32
    d_x = runtime.to_device(x, stream)
    d_qw = runtime.to_device(np.zeros(1, np.float32) if imatrix is None else imatrix, stream)
    d_sigma2 = runtime.result_on_device(np.zeros(max(rows, 1) if with_sigma2 else 1, np.float32), stream)
    if with_sigma2 and imatrix is not None:
        grid, threads = runtime.grid_for_rows(1, rows)
        gguf_sigma2_kernel.launch(grid, threads, stream, (d_x, d_sigma2))
    d_out = runtime.result_on_device(out, stream)
    grid, threads = runtime.grid_for_rows(rows, n // fmt.block_size)
    QUANTIZE_KERNELS[kind].launch(grid, threads, stream, (d_x, d_qw, imatrix is not None, d_sigma2, d_out))
    runtime.copy_back([(out, d_out)], stream)


def dequantize_rows(kind: int, data, out) -> None:
    """Fill ``out`` (rows, n) float32 with the decoded records ``data`` (rows, row bytes) uint8 of format ``kind``,
    on the GPU. Host or device arrays; a host ``out`` is copied back."""
    stream = runtime.current_stream()
    d_data = runtime.to_device(data, stream)
    d_out = runtime.result_on_device(out, stream)
    grid, threads = runtime.grid_for_rows(out.shape[0], out.shape[1] // get_format(kind).block_size)
    DEQUANTIZE_KERNELS[kind].launch(grid, threads, stream, (d_data, d_out))
    runtime.copy_back([(out, d_out)], stream)
