"""The CUDA backend: ``numba.cuda.jit`` kernels over the same element functions as the CPU backend.

This module (with its private sibling ``_cuda_blocks``, imported only from here) is the
only place nbquant imports :mod:`numba.cuda`; it is imported
lazily, the first time the ``cuda`` backend runs (or a CUDA device array is passed).
Depend on it through the ``cuda`` extra (``pip install 'nbquant[cuda]'``, which
brings ``numba-cuda``).

Kernels
-------
Element kernels (eight), one launch each per canonical block layout (one launch per call for
every layout of at most three canonical dimensions, which is every granularity
nbquant offers except ``block_size`` tuples that leave four or more unmergeable
dimensions):

* :func:`quantize_kernel` / :func:`dequantize_kernel`: one code per element.
* :func:`quantize_packed_kernel` / :func:`dequantize_packed_kernel`: one byte
  (``8 // bits`` codes) per work item.
* the ``quantize_float*`` / ``dequantize_float*`` kernels: the same for fp8/fp6/fp4.

The scaled block formats (OCP MX, NVFP4: fused amax + scale + encode, one thread per
scale block) and the ``amax`` reduction live in the private sibling
:mod:`nbquant.backends._cuda_blocks`, imported only from here; their entry points
(``mx_quantize``, ``mx_dequantize``, ``nvfp4_quantize``, ``nvfp4_dequantize``, ``amax``)
are re-exported below, and their signatures are part of :func:`all_signatures`.

All numerics are :mod:`nbquant.element` calls (``quantize_value``, ``code_bits``,
``code_value``, ``dequantize_value``, ``store_float``, ``load_f32`` through
``quantize_value``); the layout comes from :func:`nbquant.layout.canonical_views`,
exactly as in :mod:`nbquant.backends.cpu`.

Launch shape: the grid is 2-D. ``blockIdx.y`` walks canonical rows ``(p, r)`` in a
grid-stride loop, so the scale row is looked up once per row. Along the contiguous
column axis consecutive threads take consecutive items (coalesced) in a grid-stride
loop. The scale block index ``g = c // bc`` is computed once per thread; every
stride then advances it with precomputed ``stride // bc`` and ``stride % bc`` and
one compare, so there is no integer division per element. All indices are 64-bit.

Streams
-------
Work is queued on the stream from :func:`nbquant.backends.use_cuda_stream` when one
is in force, else on the CUDA default stream. Calls with device arrays return as
soon as the work is queued (like CuPy); calls with NumPy arrays copy the result
back and synchronise that stream before returning.
"""

from __future__ import annotations

import warnings

import numpy as np
from numba import cuda, types
from numba.core.errors import NumbaPerformanceWarning
from numba.cuda.core import config as _cuda_config
from numba.np.numpy_support import from_dtype

from ..element import (
    code_bits,
    code_value,
    decode_minifloat,
    dequantize_value,
    quantize_float_value,
    quantize_value,
    store_float,
)
from ..layout import canonical_views
from ..validation import FLOAT_INPUT_DTYPES
from ._views import kernel_float_view, output_float_like

name = "cuda"

__all__ = [
    "quantize",
    "dequantize",
    "quantize_kernel",
    "quantize_packed_kernel",
    "dequantize_kernel",
    "dequantize_packed_kernel",
    "launch_config",
    "kernel_signature",
    "all_signatures",
    "SIMULATOR",
]

#: True when running under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``).
SIMULATOR = bool(_cuda_config.ENABLE_CUDASIM)

# ---------------------------------------------------------------------------------------------
# Kernels. Plain Python functions; compiled per signature by _compiled() (and by the PTX check).
# Kernel bodies call only njit(inline='always') element functions, never an @intrinsic.
# ---------------------------------------------------------------------------------------------


# Index arithmetic is unsigned 64-bit: no 2**31 limit, no sign fix-ups in the divisions, and no
# negative-index wraparound code on every array access (Numba adds it for signed indices).
_U1 = np.uint64(1)


def quantize_kernel(x, scale, zp, has_zp, scale_op, zp_before, qmin, qmax, mask, bp, br, bc, out):
    """Quantize ``x`` (P, R, C) into unsigned code storage ``out`` (P, R, C)."""
    R = np.uint64(x.shape[1])
    C = np.uint64(x.shape[2])
    rows = np.uint64(x.shape[0]) * R
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    g_step = stride // ubc
    o_step = stride - g_step * ubc
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    g_start = start // ubc
    o_start = start - g_start * ubc
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p = row // R
        r = row - p * R
        sp = p // ubp
        sr = r // ubr
        xs, ss, zs, os = x[p, r], scale[sp, sr], zp[sp, sr], out[p, r]
        c = start
        g = g_start
        off = o_start
        while c < C:
            z = zs[g] if has_zp else np.float32(0)
            os[c] = code_bits(quantize_value(xs[c], ss[g], z, scale_op, zp_before, qmin, qmax), mask)
            c += stride
            g += g_step
            off += o_step
            if off >= ubc:
                off -= ubc
                g += _U1
        row += np.uint64(cuda.gridDim.y)


def quantize_packed_kernel(x, scale, zp, has_zp, scale_op, zp_before, qmin, qmax, nbits, bp, br, bc, out):
    """Quantize ``x`` (P, R, C) into packed bytes ``out`` (P, R, C / k), first code in the low bits."""
    R = np.uint64(x.shape[1])
    nbytes = np.uint64(out.shape[2])
    rows = np.uint64(x.shape[0]) * R
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    k = np.uint64(8 // nbits)
    mask = np.int32((1 << nbits) - 1)
    shift = np.int32(nbits)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    g_step = (stride * k) // ubc
    o_step = stride * k - g_step * ubc
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    g_start = (start * k) // ubc
    o_start = start * k - g_start * ubc
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p = row // R
        r = row - p * R
        sp = p // ubp
        sr = r // ubr
        xs, ss, zs, os = x[p, r], scale[sp, sr], zp[sp, sr], out[p, r]
        j = start
        g = g_start
        off = o_start
        while j < nbytes:
            byte = np.int32(0)
            sh = np.int32(0)
            c = j * k
            end = c + k
            gt = g
            ot = off
            while c < end:
                z = zs[gt] if has_zp else np.float32(0)
                byte |= code_bits(quantize_value(xs[c], ss[gt], z, scale_op, zp_before, qmin, qmax), mask) << sh
                sh += shift
                c += _U1
                ot += _U1
                if ot == ubc:
                    ot = np.uint64(0)
                    gt += _U1
            os[j] = byte
            j += stride
            g += g_step
            off += o_step
            if off >= ubc:
                off -= ubc
                g += _U1
        row += np.uint64(cuda.gridDim.y)


def dequantize_kernel(q, scale, zp, has_zp, nbits, signed, bp, br, bc, like, out):
    """Dequantize unsigned code storage ``q`` (P, R, C) into ``out`` (float storage like ``like``)."""
    R = np.uint64(q.shape[1])
    C = np.uint64(q.shape[2])
    rows = np.uint64(q.shape[0]) * R
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    g_step = stride // ubc
    o_step = stride - g_step * ubc
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    g_start = start // ubc
    o_start = start - g_start * ubc
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p = row // R
        r = row - p * R
        sp = p // ubp
        sr = r // ubr
        qs, ss, zs, os = q[p, r], scale[sp, sr], zp[sp, sr], out[p, r]
        c = start
        g = g_start
        off = o_start
        while c < C:
            z = zs[g] if has_zp else np.float32(0)
            os[c] = store_float(dequantize_value(code_value(qs[c], nbits, signed), ss[g], z), like)
            c += stride
            g += g_step
            off += o_step
            if off >= ubc:
                off -= ubc
                g += _U1
        row += np.uint64(cuda.gridDim.y)


def dequantize_packed_kernel(q, scale, zp, has_zp, nbits, signed, bp, br, bc, like, out):
    """Dequantize packed bytes ``q`` (P, R, C / k) into ``out`` (P, R, C)."""
    R = np.uint64(q.shape[1])
    nbytes = np.uint64(q.shape[2])
    rows = np.uint64(q.shape[0]) * R
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    k = np.uint64(8 // nbits)
    shift = np.int32(nbits)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    g_step = (stride * k) // ubc
    o_step = stride * k - g_step * ubc
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    g_start = (start * k) // ubc
    o_start = start * k - g_start * ubc
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p = row // R
        r = row - p * R
        sp = p // ubp
        sr = r // ubr
        qs, ss, zs, os = q[p, r], scale[sp, sr], zp[sp, sr], out[p, r]
        j = start
        g = g_start
        off = o_start
        while j < nbytes:
            byte = np.int32(qs[j])
            sh = np.int32(0)
            c = j * k
            end = c + k
            gt = g
            ot = off
            while c < end:
                z = zs[gt] if has_zp else np.float32(0)
                code = code_value(byte >> sh, nbits, signed)
                os[c] = store_float(dequantize_value(code, ss[gt], z), like)
                sh += shift
                c += _U1
                ot += _U1
                if ot == ubc:
                    ot = np.uint64(0)
                    gt += _U1
            j += stride
            g += g_step
            off += o_step
            if off >= ubc:
                off -= ubc
                g += _U1
        row += np.uint64(cuda.gridDim.y)


def quantize_float_kernel(x, scale, scale_op, fp, saturate, bp, br, bc, out):
    """Encode ``x / scale`` (P, R, C) as floating-point codes ``out`` (P, R, C), one per byte."""
    R = np.uint64(x.shape[1])
    C = np.uint64(x.shape[2])
    rows = np.uint64(x.shape[0]) * R
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    g_step = stride // ubc
    o_step = stride - g_step * ubc
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    g_start = start // ubc
    o_start = start - g_start * ubc
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p = row // R
        r = row - p * R
        xs, ss, os = x[p, r], scale[p // ubp, r // ubr], out[p, r]
        c = start
        g = g_start
        off = o_start
        while c < C:
            os[c] = quantize_float_value(xs[c], ss[g], scale_op, fp, saturate)
            c += stride
            g += g_step
            off += o_step
            if off >= ubc:
                off -= ubc
                g += _U1
        row += np.uint64(cuda.gridDim.y)


def quantize_float_packed_kernel(x, scale, scale_op, fp, saturate, bp, br, bc, out):
    """Encode ``x / scale`` (P, R, C) as packed float codes: 4-bit two per byte, 6-bit four in three bytes.

    One work item is one packed group; codes fill a little-endian bit stream, the first
    element in the lowest bits.
    """
    R = np.uint64(x.shape[1])
    rows = np.uint64(x.shape[0]) * R
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    bits = np.int64(fp[0] + fp[1] + 1)
    k = np.uint64(4) if bits == 6 else np.uint64(2)
    m = np.uint64(3) if bits == 6 else _U1
    groups = np.uint64(out.shape[2]) // m
    mask = (np.int64(1) << bits) - np.int64(1)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    g_step = (stride * k) // ubc
    o_step = stride * k - g_step * ubc
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    g_start = (start * k) // ubc
    o_start = start * k - g_start * ubc
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p = row // R
        r = row - p * R
        xs, ss, os = x[p, r], scale[p // ubp, r // ubr], out[p, r]
        j = start
        g = g_start
        off = o_start
        while j < groups:
            word = np.int64(0)
            gt = g
            ot = off
            for t in range(k):
                code = np.int64(quantize_float_value(xs[j * k + np.uint64(t)], ss[gt], scale_op, fp, saturate))
                word |= (code & mask) << (np.int64(t) * bits)
                ot += _U1
                if ot == ubc:
                    ot = np.uint64(0)
                    gt += _U1
            for b in range(m):
                os[j * m + np.uint64(b)] = (word >> np.int64(8 * b)) & np.int64(0xFF)
            j += stride
            g += g_step
            off += o_step
            if off >= ubc:
                off -= ubc
                g += _U1
        row += np.uint64(cuda.gridDim.y)


def dequantize_float_kernel(q, scale, fp, bp, br, bc, like, out):
    """Decode floating-point codes ``q`` (P, R, C) times their scale into ``out``."""
    R = np.uint64(q.shape[1])
    C = np.uint64(q.shape[2])
    rows = np.uint64(q.shape[0]) * R
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    g_step = stride // ubc
    o_step = stride - g_step * ubc
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    g_start = start // ubc
    o_start = start - g_start * ubc
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p = row // R
        r = row - p * R
        qs, ss, os = q[p, r], scale[p // ubp, r // ubr], out[p, r]
        c = start
        g = g_start
        off = o_start
        while c < C:
            v = decode_minifloat(qs[c], fp[0], fp[1], fp[6]) * np.float32(ss[g])
            os[c] = store_float(v, like)
            c += stride
            g += g_step
            off += o_step
            if off >= ubc:
                off -= ubc
                g += _U1
        row += np.uint64(cuda.gridDim.y)


def dequantize_float_packed_kernel(q, scale, fp, bp, br, bc, like, out):
    """Decode packed float codes ``q`` (4-bit two per byte, 6-bit four in three bytes) into ``out`` (P, R, C)."""
    R = np.uint64(q.shape[1])
    rows = np.uint64(q.shape[0]) * R
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    bits = np.int64(fp[0] + fp[1] + 1)
    k = np.uint64(4) if bits == 6 else np.uint64(2)
    m = np.uint64(3) if bits == 6 else _U1
    groups = np.uint64(q.shape[2]) // m
    mask = (np.int64(1) << bits) - np.int64(1)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    g_step = (stride * k) // ubc
    o_step = stride * k - g_step * ubc
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    g_start = (start * k) // ubc
    o_start = start * k - g_start * ubc
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        p = row // R
        r = row - p * R
        qs, ss, os = q[p, r], scale[p // ubp, r // ubr], out[p, r]
        j = start
        g = g_start
        off = o_start
        while j < groups:
            word = np.int64(0)
            for b in range(m):
                word |= np.int64(qs[j * m + np.uint64(b)]) << np.int64(8 * b)
            gt = g
            ot = off
            for t in range(k):
                code = (word >> (np.int64(t) * bits)) & mask
                v = decode_minifloat(code, fp[0], fp[1], fp[6]) * np.float32(ss[gt])
                os[j * k + np.uint64(t)] = store_float(v, like)
                ot += _U1
                if ot == ubc:
                    ot = np.uint64(0)
                    gt += _U1
            j += stride
            g += g_step
            off += o_step
            if off >= ubc:
                off -= ubc
                g += _U1
        row += np.uint64(cuda.gridDim.y)


# ---------------------------------------------------------------------------------------------
# Signatures: the one place that says which types each kernel is compiled for. The launcher
# derives each launch's signature from its actual arrays through kernel_signature(); the PTX
# check compiles all_signatures(). tests/test_cuda_simulator.py checks that every launch is in it.
# ---------------------------------------------------------------------------------------------

_KERNELS = {
    "quantize": quantize_kernel,
    "quantize_packed": quantize_packed_kernel,
    "dequantize": dequantize_kernel,
    "dequantize_packed": dequantize_packed_kernel,
    "quantize_float": quantize_float_kernel,
    "quantize_float_packed": quantize_float_packed_kernel,
    "dequantize_float": dequantize_float_kernel,
    "dequantize_float_packed": dequantize_float_packed_kernel,
}

#: Kernel-side input element types: float32, float64, float16 bits (uint16), bfloat16 bits (int16).
INPUT_DTYPES = tuple(map(np.dtype, (np.float32, np.float64, np.uint16, np.int16)))
#: Kernel-side output float storage (float32, float16 bits, bfloat16 bits), also the ``like`` type.
OUTPUT_DTYPES = tuple(map(np.dtype, (np.float32, np.uint16, np.int16)))
#: Unpacked code storage.
CODE_DTYPES = tuple(map(np.dtype, (np.uint8, np.uint16)))


def _arr(dtype) -> types.Array:
    return types.Array(from_dtype(np.dtype(dtype)), 3, "C")


def kernel_signature(kernel: str, data_dtype, out_dtype):
    """The Numba signature of one kernel for its data (``x`` or ``q``) and ``out`` element types.

    Parameters
    ----------
    kernel : str
        ``"quantize"``, ``"quantize_packed"``, ``"dequantize"`` or ``"dequantize_packed"``.
    data_dtype, out_dtype : numpy.dtype
        Kernel-side element types (half types as their 16-bit integer views).

    Returns
    -------
    numba.core.typing.templates.Signature
    """
    f32, i64, b1 = types.float32, types.int64, types.boolean
    data, out, par = _arr(data_dtype), _arr(out_dtype), _arr(np.float32)
    fp = types.UniTuple(i64, 7)
    if kernel.startswith("quantize_float"):
        args = (data, par, i64, fp, b1, i64, i64, i64, out)
    elif kernel.startswith("dequantize_float"):
        args = (data, par, fp, i64, i64, i64, from_dtype(np.dtype(out_dtype)), out)
    elif kernel.startswith("quantize"):
        args = (data, par, par, b1, i64, b1, f32, f32, i64, i64, i64, i64, out)
    else:
        like = from_dtype(np.dtype(out_dtype))
        args = (data, par, par, b1, i64, b1, i64, i64, i64, like, out)
    return types.void(*args)


def all_signatures() -> list[tuple[str, object]]:
    """Every ``(kernel name, signature)`` the backend can launch (what the PTX check compiles).

    Examples
    --------
    >>> len(all_signatures())
    105
    """
    sigs = []
    for d in INPUT_DTYPES:
        sigs += [("quantize", kernel_signature("quantize", d, c)) for c in CODE_DTYPES]
        sigs.append(("quantize_packed", kernel_signature("quantize_packed", d, np.uint8)))
        sigs += [(f, kernel_signature(f, d, np.uint8)) for f in ("quantize_float", "quantize_float_packed")]
    for o in OUTPUT_DTYPES:
        sigs += [("dequantize", kernel_signature("dequantize", c, o)) for c in CODE_DTYPES]
        sigs.append(("dequantize_packed", kernel_signature("dequantize_packed", np.uint8, o)))
        sigs += [(f, kernel_signature(f, np.uint8, o)) for f in ("dequantize_float", "dequantize_float_packed")]
    return sigs + _cuda_blocks.all_block_signatures() + _cuda_dynamic.all_dynamic_signatures()


def kernel_function(kernel: str):
    """The Python function of a kernel by name (for :func:`numba.cuda.compile_ptx`)."""
    return _KERNELS[kernel]


_compiled_cache: dict = {}
#: ``(kernel, signature)`` pairs launched in this process (checked against :func:`all_signatures`).
launched: set = set()


def _compiled(kernel: str, sig):
    key = (kernel, sig)
    fn = _compiled_cache.get(key)
    if fn is None:
        fn = _compiled_cache[key] = cuda.jit(sig)(_KERNELS[kernel])
    return fn


# ---------------------------------------------------------------------------------------------
# Launch configuration.
# ---------------------------------------------------------------------------------------------

#: Threads per block on a GPU (a multiple of the warp size).
THREADS = 256
#: Upper bound on blocks per launch; the grid-stride loops cover the rest.
MAX_BLOCKS = 8192
_MAX_GRID_Y = 65535
# The simulator runs each thread as a Python thread (~100 us each), so it gets a few threads
# that each loop over many items; still several threads and blocks, so the striding is tested.
_SIM_THREADS, _SIM_BLOCKS_X, _SIM_BLOCKS_Y = 4, 2, 3


def launch_config(rows: int, items: int, simulator: bool = SIMULATOR) -> tuple[tuple[int, int], int]:
    """Grid and block size for ``rows`` canonical rows of ``items`` work items each.

    Parameters
    ----------
    rows : int
        Canonical rows ``P * R`` (walked by ``blockIdx.y``, grid-stride).
    items : int
        Work items per row: columns, or bytes when packed (``blockIdx.x``/``threadIdx.x``,
        grid-stride).
    simulator : bool
        Use the small simulator configuration.

    Returns
    -------
    ((int, int), int)
        ``(grid_x, grid_y)`` and threads per block.

    Examples
    --------
    >>> launch_config(1, 1 << 24, simulator=False)
    ((8192, 1), 256)
    >>> launch_config(4096, 47, simulator=False)
    ((1, 4096), 64)
    """
    rows, items = max(int(rows), 1), max(int(items), 1)
    if simulator:
        threads = min(_SIM_THREADS, items)
        return (min(_SIM_BLOCKS_X, -(-items // threads)), min(_SIM_BLOCKS_Y, rows)), threads
    threads = min(THREADS, -(-items // 32) * 32)
    grid_y = min(rows, _MAX_GRID_Y, MAX_BLOCKS)
    grid_x = max(1, min(-(-items // threads), MAX_BLOCKS // grid_y))
    return (grid_x, grid_y), threads


# ---------------------------------------------------------------------------------------------
# Arrays and streams.
# ---------------------------------------------------------------------------------------------


def is_device(a) -> bool:
    """Whether ``a`` lives on a CUDA device (see :func:`nbquant.backends.is_device_array`)."""
    from . import is_device_array

    return is_device_array(a)


def as_device_array(a):
    """A zero-copy numba device array view of a CUDA array (numba, CAI or DLPack); None for host arrays."""
    if not is_device(a):
        return None
    if getattr(a, "__cuda_ndarray__", False):
        return a
    if hasattr(a, "__cuda_array_interface__"):
        return cuda.as_cuda_array(a)
    from cuda.core.utils import StridedMemoryView  # DLPack-only producers (e.g. JAX)

    view = StridedMemoryView.from_dlpack(a, stream_ptr=-1)
    dtype = np.dtype(view.dtype)
    strides = None if view.strides is None else tuple(s * dtype.itemsize for s in view.strides)
    desc = {"shape": tuple(view.shape), "strides": strides, "typestr": dtype.str,
            "data": (int(view.ptr), bool(view.readonly)), "version": 3}
    return cuda.from_cuda_array_interface(desc, owner=a, sync=False)


def current_stream():
    """The stream this call runs on: :func:`nbquant.backends.use_cuda_stream`'s, else the default stream."""
    from . import _cuda_stream

    s = _cuda_stream.get()
    if s is None:
        return cuda.default_stream()
    if SIMULATOR:
        return s if hasattr(s, "synchronize") else cuda.default_stream()
    if isinstance(s, cuda.cudadrv.driver.Stream):
        return s
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy.cuda.Stream
        if isinstance(getattr(s, attr, None), int):
            return cuda.external_stream(getattr(s, attr))
    return cuda.external_stream(int(s))


def device_float_input(x, name: str = "x"):
    """Validate a device float input (dtype, C-contiguity) and return its numba device array."""
    d = as_device_array(x)
    if d.dtype not in FLOAT_INPUT_DTYPES:
        raise TypeError(f"{name} has dtype {d.dtype}; nbquant quantizes float32, float16, bfloat16 (ml_dtypes) "
                        f"or float64 arrays. Convert it on the device first")
    return _contiguous(d, name)


def device_code_input(q, name: str = "q"):
    """Return the numba device array of device codes ``q`` (must be C-contiguous)."""
    return _contiguous(as_device_array(q), name)


def _contiguous(d, name: str):
    if not d.is_c_contiguous():
        raise ValueError(f"{name} is a non-contiguous CUDA array; nbquant does not copy device arrays, so make it "
                         "C-contiguous first (e.g. cupy.ascontiguousarray or tensor.contiguous())")
    if SIMULATOR and type(d).__name__ == "FakeCUDAArray":
        return _sim_array(d)
    return d


def _sim_array(d):
    """The simulator's device arrays refuse ``shape[-1]`` on the host (real ones allow it); give a plain tuple."""
    global _SimArray
    if _SimArray is None:

        class _SimArray(type(d)):
            @property
            def shape(self):
                return tuple(self._ary.shape)

    return _SimArray(d._ary, d.stream)


_SimArray = None


def device_empty(shape: tuple[int, ...], dtype):
    """A new device array for a result, allocated on the current stream."""
    return cuda.device_array(shape, np.dtype(dtype), stream=current_stream())


def _span(a) -> tuple[int, int]:
    if SIMULATOR:
        ptr = a.__array_interface__["data"][0] if hasattr(a, "__array_interface__") else 0
    else:
        ptr = a.__cuda_array_interface__["data"][0]
    return ptr, ptr + int(a.size) * a.dtype.itemsize


def check_device_out(out, shape: tuple[int, ...], dtype, inputs=()):
    """Check a device ``out=`` array (exact shape and dtype, C-contiguous, no overlap with device inputs)."""
    d = as_device_array(out)
    if d is None:
        raise TypeError(f"out must be a CUDA device array when the input is one, got {type(out).__name__}")
    if tuple(d.shape) != tuple(shape) or d.dtype != np.dtype(dtype):
        raise ValueError(f"out has shape {tuple(d.shape)} and dtype {d.dtype}; this call needs shape {tuple(shape)} "
                         f"and dtype {np.dtype(dtype)}")
    _contiguous(d, "out")
    lo, hi = _span(d)
    for a in inputs:
        if is_device(a) and a.size and d.size:
            alo, ahi = _span(as_device_array(a))
            if lo < ahi and alo < hi:
                raise ValueError("out shares memory with an input; nbquant never modifies its inputs, "
                                 "so pass a separate array")
    return d


# ---------------------------------------------------------------------------------------------
# Backend entry points.
# ---------------------------------------------------------------------------------------------


def _numba_or_host(a):
    d = as_device_array(a)
    return a if d is None else d


def _to_device(a, stream):
    d = as_device_array(a)
    return cuda.to_device(np.ascontiguousarray(a), stream=stream) if d is None else d


def _launch(kernel: str, config, stream, args, data, out) -> None:
    sig = kernel_signature(kernel, data.dtype, out.dtype)
    launched.add((kernel, sig))
    (grid, threads) = config
    with warnings.catch_warnings():  # small inputs give small grids; Numba's occupancy warning is noise here
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        _compiled(kernel, sig)[grid, threads, stream](*args)


def _run(kernel_name: str, data, params, out, spec, last_divisors, make_args) -> None:
    stream = current_stream()
    host_out = None if is_device(out) else out
    d_data = _to_device(data, stream)
    d_out = cuda.device_array(out.shape, out.dtype, stream=stream) if host_out is not None else as_device_array(out)
    d_params = [_to_device(p, stream) for p in params]
    group_bytes = max(g[1] if isinstance(g, tuple) else 1 for g in last_divisors)
    for (a3, o3), (s3, *z3), blocks in canonical_views(spec.layout, [d_data, d_out], d_params, last_divisors):
        has_zp = bool(z3)
        zp3 = z3[0] if has_zp else s3
        items = min(a3.shape[2], o3.shape[2]) // group_bytes  # columns, or packed groups
        config = launch_config(a3.shape[0] * a3.shape[1], items)
        _launch(kernel_name, config, stream, make_args(a3, s3, zp3, has_zp, blocks, o3), a3, o3)
    if host_out is not None:
        d_out.copy_to_host(host_out, stream=stream)
        stream.synchronize()


def quantize(x, scale, zero_point, spec, out) -> None:
    """Quantize ``x`` (NumPy or device) into ``out`` (code storage, NumPy or device) on the GPU."""
    fmt = spec.format
    group = fmt.pack_group if spec.packed else (1, 1)
    params = [scale] if zero_point is None else [scale, zero_point]
    lo, hi = np.float32(spec.qmin), np.float32(spec.qmax)
    last = np.int64(fmt.bits if spec.packed else fmt.mask)

    def make_args(x3, s3, zp3, has_zp, blocks, o3):
        if fmt.is_float:
            return (x3, s3, spec.scale_op, fp, spec.saturate, *blocks, o3)
        return (x3, s3, zp3, has_zp, spec.scale_op, spec.zero_point_before, lo, hi, last, *blocks, o3)

    fp = tuple(int(v) for v in fmt.fp_params) if fmt.is_float else None
    name_ = ("quantize_float" if fmt.is_float else "quantize") + ("_packed" if spec.packed else "")
    _run(name_, kernel_float_view(_numba_or_host(x)), params, out, spec, [1, group], make_args)


def dequantize(q, scale, zero_point, spec, out) -> None:
    """Dequantize ``q`` (code storage, NumPy or device) into ``out`` (NumPy or device) on the GPU."""
    fmt = spec.format
    group = fmt.pack_group if spec.packed else (1, 1)
    params = [scale] if zero_point is None else [scale, zero_point]
    like = output_float_like(spec.out_dtype)

    def make_args(q3, s3, zp3, has_zp, blocks, o3):
        if fmt.is_float:
            return (q3, s3, fp, *blocks, like, o3)
        return (q3, s3, zp3, has_zp, fmt.bits, fmt.signed, *blocks, like, o3)

    fp = tuple(int(v) for v in fmt.fp_params) if fmt.is_float else None
    name_ = ("dequantize_float" if fmt.is_float else "dequantize") + ("_packed" if spec.packed else "")
    _run(name_, _numba_or_host(q), params, kernel_float_view(_numba_or_host(out)), spec, [group, 1], make_args)


# ---------------------------------------------------------------------------------------------
# Scaled block formats (OCP MX, NVFP4) and amax: kernels and entry points in _cuda_blocks.
# ---------------------------------------------------------------------------------------------

from . import _cuda_blocks  # noqa: E402  (it uses the helpers above through this module)
from ._cuda_blocks import (  # noqa: E402
    amax,
    mx_dequantize,
    mx_quantize,
    nf4_dequantize,
    nf4_quantize,
    nvfp4_dequantize,
    nvfp4_quantize,
)

_KERNELS.update(_cuda_blocks.KERNELS)
__all__ += ["mx_quantize", "mx_dequantize", "nvfp4_quantize", "nvfp4_dequantize", "nf4_quantize", "nf4_dequantize",
            "amax"]

# ---------------------------------------------------------------------------------------------
# Dynamic quantization (issue 5): kernels and entry points in _cuda_dynamic.
# ---------------------------------------------------------------------------------------------

from . import _cuda_dynamic  # noqa: E402  (it uses the helpers above through this module)
from ._cuda_dynamic import (  # noqa: E402, F401
    _reduce_grid,
    abs_histogram,
    choose_qparams,
    fake_affine,
    fake_quant_amax,
    quantize_dynamic,
    ste_backward,
)

_KERNELS.update(_cuda_dynamic.KERNELS)
__all__ += ["choose_qparams", "quantize_dynamic", "fake_quant_amax", "fake_affine", "ste_backward",
            "abs_histogram"]
