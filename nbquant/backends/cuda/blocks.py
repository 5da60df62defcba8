"""CUDA kernels for the scaled block formats (OCP MX, NVFP4, NF4) and the ``amax`` reduction.

* :func:`mx_quantize_kernel`: fused, one thread per scale block. The thread reduces the
  block's ``amax`` over the float bits (an integer max: NaN bits sort above inf, so a NaN
  or inf block gets the NaN scale), writes the E8M0 code, then encodes the block's
  elements (saturating minifloat, or MXINT8's ``rne(v * 64)``), packing mxfp4 two per byte.
* :func:`nvfp4_quantize_kernel` / :func:`nf4_quantize_kernel`: the same with NVFP4's element.E4M3
  block scale (the global scale is an argument: the host computes it from ``amax``) and
  NF4's amax scale and table indices.
* the dequantize kernels: one thread per block, ``element * scale``.
* :func:`amax_kernel`: ``max |x|`` as float32 bits: a grid-stride max per thread, a
  shared-memory tree per thread block, then one ``atomic.max`` on a ``uint32`` per block.

The (rows, n) operand is walked like the element kernels walk a canonical view:
``blockIdx.y`` strides over rows, and along a row thread ``t`` takes scale blocks
``t, t + S, ...``. A thread reads its block twice (amax, then encode); the second read
hits L1/L2. All numerics are :mod:`nbquant.element` calls. Each format family's host side
registers with :func:`~nbquant.blocks.block_kernel`; a ``blocks_<family>.py`` module
beside this one registers more (imported at the end).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from ... import element
from ...blocks._format import BlockKernelOps, block_kernel, import_kernel_modules
from .._views import float32_from_bits, kernel_float_view, output_float_like
from . import runtime
from ._loops import U1, thread_start
from .runtime import (
    B1,
    F32,
    FP_TUPLE,
    I64,
    INPUT_DTYPES,
    OUTPUT_DTYPES,
    REDUCE_THREADS,
    array_type,
    cuda_kernel,
    scalar_type,
)

_U8 = array_type(np.uint8, 2)
_U2 = np.uint64(2)

_FROM_FLOATS = [(d,) for d in INPUT_DTYPES]
_TO_FLOATS = [(o,) for o in OUTPUT_DTYPES]


@cuda.jit(device=True, inline="always")
def _absmax_bits(xs, c, end):
    """The largest ``element.abs_bits`` of ``xs[c:end]`` (0 when empty)."""
    amax = np.int64(0)
    while c < end:
        amax = max(amax, element.abs_bits(xs[c]))
        c += U1
    return amax


def _block_frame(body):
    """The walk of a block kernel over its (rows, ...) arrays, around one block operation.

    ``body(args, views, b, c, c1)`` is a ``cuda.jit(device=True, inline="always")``
    function: it does scale block ``b``, columns ``c:c1``, of one row, with ``views`` the
    row views of ``args[0:3]`` (read once per row; the rest of ``args`` are its parameters).
    Returns ``walk(block, scales, args)``: ``scales`` (rows, n / block) gives the block count.
    """

    @cuda.jit(device=True, inline="always")
    def walk(block, scales, args):
        rows = np.uint64(scales.shape[0])
        nblocks = np.uint64(scales.shape[1])
        ub = np.uint64(block)
        start, stride = thread_start()
        row = np.uint64(cuda.blockIdx.y)
        while row < rows:
            views = (args[0][row], args[1][row], args[2][row])
            b = start
            while b < nblocks:
                c = b * ub
                body(args, views, b, c, c + ub)
                b += stride
            row += np.uint64(cuda.gridDim.y)

    return walk


# Each format: what one block does (``args`` is the arrays, then the kernel's parameters), the walk
# :func:`_block_frame` builds around it, and the kernel: its signature and one call.


@cuda.jit(device=True, inline="always")
def _mx_quantize_block(args, views, b, c, c1):
    emax, max_mantissa, round_up, fp, is_int, packed = args[3:9]
    xs, cs, ss = views
    code = element.mx_scale_code(_absmax_bits(xs, c, c1), emax, max_mantissa, round_up)
    ss[b] = code
    inv = element.mx_inverse_scale(code)
    if packed:
        j = c // _U2
        while c < c1:
            cs[j] = element.pack_pair(element.encode_product(xs[c], inv, fp),
                                      element.encode_product(xs[c + U1], inv, fp))
            j += U1
            c += _U2
    elif is_int:
        while c < c1:
            cs[c] = element.mx_int8(element.load_f32(xs[c]) * inv)
            c += U1
    else:
        while c < c1:
            cs[c] = element.encode_product(xs[c], inv, fp)
            c += U1


_MX_QUANTIZE = _block_frame(_mx_quantize_block)


@cuda_kernel(lambda d: types.void(array_type(d, 2), I64, I64, I64, B1, FP_TUPLE, B1, B1, _U8, _U8), _FROM_FLOATS)
def mx_quantize_kernel(x, block, emax, max_mantissa, round_up, fp, is_int, packed, codes, scales):
    """MX quantize ``x`` (rows, n): E8M0 ``scales`` (rows, n / block) and ``codes`` (rows, n or n / 2)."""
    _MX_QUANTIZE(block, scales, (x, codes, scales, emax, max_mantissa, round_up, fp, is_int, packed))


@cuda.jit(device=True, inline="always")
def _mx_dequantize_block(args, views, b, c, c1):
    fp, is_int, packed, like = args[3:7]
    qs, ss, os = views
    s = element.decode_e8m0(ss[b])
    if packed:
        j = c // _U2
        while c < c1:
            byte = np.int32(qs[j])
            os[c] = element.store_float(element.decode_fp(element.unpack_field(byte, 0, 4), fp) * s, like)
            os[c + U1] = element.store_float(element.decode_fp(element.unpack_field(byte, 1, 4), fp) * s, like)
            j += U1
            c += _U2
    elif is_int:
        while c < c1:
            os[c] = element.store_float(element.code_value(qs[c], 8, True) * element.MXINT8_STEP * s, like)
            c += U1
    else:
        while c < c1:
            os[c] = element.store_float(element.decode_fp(qs[c], fp) * s, like)
            c += U1


_MX_DEQUANTIZE = _block_frame(_mx_dequantize_block)


@cuda_kernel(lambda o: types.void(_U8, _U8, I64, FP_TUPLE, B1, B1, scalar_type(o), array_type(o, 2)), _TO_FLOATS)
def mx_dequantize_kernel(codes, scales, block, fp, is_int, packed, like, out):
    """MX dequantize ``codes`` with E8M0 ``scales`` into ``out`` (rows, n): ``element * 2**(scale - 127)``."""
    _MX_DEQUANTIZE(block, scales, (codes, scales, out, fp, is_int, packed, like))


@cuda.jit(device=True, inline="always")
def _nvfp4_quantize_block(args, views, b, c, c1):
    global_scale, six_global = args[3:5]
    xs, cs, ss = views
    code = element.nvfp4_block_scale(element.bits_f32(_absmax_bits(xs, c, c1)), six_global)
    ss[b] = code
    denom = element.decode_fp(code, element.E4M3) * global_scale
    j = c // _U2
    while c < c1:
        cs[j] = element.pack_pair(element.encode_quotient(xs[c], denom, element.E2M1),
                                  element.encode_quotient(xs[c + U1], denom, element.E2M1))
        j += U1
        c += _U2


_NVFP4_QUANTIZE = _block_frame(_nvfp4_quantize_block)


@cuda_kernel(lambda d: types.void(array_type(d, 2), I64, F32, F32, _U8, _U8), _FROM_FLOATS)
def nvfp4_quantize_kernel(x, block, global_scale, six_global, codes, scales):
    """NVFP4 quantize ``x`` (rows, n): e4m3 ``scales`` (rows, n / block), packed e2m1 ``codes`` (rows, n / 2)."""
    _NVFP4_QUANTIZE(block, scales, (x, codes, scales, global_scale, six_global))


@cuda.jit(device=True, inline="always")
def _nvfp4_dequantize_block(args, views, b, c, c1):
    global_scale, like = args[3:5]
    qs, ss, os = views
    s = element.decode_fp(ss[b], element.E4M3) * global_scale
    j = c // _U2
    while c < c1:
        byte = np.int32(qs[j])
        for t in range(2):
            value = element.decode_fp(element.unpack_field(byte, t, 4), element.E2M1) * s
            os[c + np.uint64(t)] = element.store_float(value, like)
        j += U1
        c += _U2


_NVFP4_DEQUANTIZE = _block_frame(_nvfp4_dequantize_block)


@cuda_kernel(lambda o: types.void(_U8, _U8, I64, F32, scalar_type(o), array_type(o, 2)), _TO_FLOATS)
def nvfp4_dequantize_kernel(codes, scales, block, global_scale, like, out):
    """NVFP4 dequantize into ``out`` (rows, n): ``e2m1 * (e4m3 scale * global_scale)``."""
    _NVFP4_DEQUANTIZE(block, scales, (codes, scales, out, global_scale, like))


@cuda.jit(device=True, inline="always")
def _nf4_quantize_block(args, views, b, c, c1):
    xs, cs, ss = views
    amax = np.float32(element.bits_f32(_absmax_bits(xs, c, c1)))  # a NumPy scalar: 0/0 is NaN on every target
    ss[b] = amax
    j = c // _U2
    while c < c1:
        cs[j] = element.pack_nf4_pair(element.nf4_code(np.float32(element.load_f32(xs[c])) / amax),
                                      element.nf4_code(np.float32(element.load_f32(xs[c + U1])) / amax))
        j += U1
        c += _U2


_NF4_QUANTIZE = _block_frame(_nf4_quantize_block)


@cuda_kernel(lambda d: types.void(array_type(d, 2), I64, _U8, array_type(np.float32, 2)), _FROM_FLOATS)
def nf4_quantize_kernel(x, block, codes, scales):
    """NF4 quantize ``x`` (rows, n): float32 block ``scales`` (amax) and table indices packed high nibble first."""
    _NF4_QUANTIZE(block, scales, (x, codes, scales))


@cuda.jit(device=True, inline="always")
def _nf4_dequantize_block(args, views, b, c, c1):
    like = args[3]
    qs, ss, os = views
    s = np.float32(ss[b])
    j = c // _U2
    while c < c1:
        byte = np.int64(qs[j])
        os[c] = element.store_float(element.NF4_VALUES[element.unpack_field(byte, 1, 4)] * s, like)
        os[c + U1] = element.store_float(element.NF4_VALUES[element.unpack_field(byte, 0, 4)] * s, like)
        j += U1
        c += _U2


_NF4_DEQUANTIZE = _block_frame(_nf4_dequantize_block)


@cuda_kernel(lambda o: types.void(_U8, array_type(np.float32, 2), I64, scalar_type(o), array_type(o, 2)),
             _TO_FLOATS)
def nf4_dequantize_kernel(codes, scales, block, like, out):
    """NF4 dequantize into ``out`` (rows, n): ``table[index] * scale`` per block."""
    _NF4_DEQUANTIZE(block, scales, (codes, scales, out, like))


@cuda_kernel(lambda d: types.void(array_type(d, 1), array_type(np.uint32, 1)), _FROM_FLOATS)
def amax_kernel(x, out):
    """``out[0] = max(out[0], bits of max |x|)`` over a 1-D ``x`` (NaN bits win over every number)."""
    shared = cuda.shared.array(REDUCE_THREADS, np.uint32)
    n = np.uint64(x.shape[0])
    tid = cuda.threadIdx.x
    i, stride = thread_start()
    m = np.int64(0)
    while i < n:
        m = max(m, element.abs_bits(x[i]))
        i += stride
    shared[tid] = np.uint32(m)
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if tid < half:
            shared[tid] = max(shared[tid], shared[tid + half])
        cuda.syncthreads()
        half //= 2
    if tid == 0:
        cuda.atomic.max(out, 0, shared[0])


def _run_rows(kernel, inputs, outputs, make_args, dtype, rows: int, nblocks: int) -> None:
    """Copy host ``inputs`` in, launch one thread per scale block, copy host ``outputs`` back."""
    stream = runtime.current_stream()
    d_in = [runtime.to_device(a, stream) for a in inputs]
    d_out = [runtime.result_on_device(o, stream) for o in outputs]
    grid, threads = runtime.grid_for_rows(rows, nblocks)
    kernel.launch(grid, threads, stream, make_args(*d_in, *d_out), dtype)
    runtime.copy_back(list(zip(outputs, d_out, strict=True)), stream)


def _dequantize_rows(kernel, inputs, args, out) -> None:
    """Launch a dequantize ``kernel`` over the (codes, scales) ``inputs`` into ``out``, ``args`` between them."""
    ov = kernel_float_view(runtime.device_or_host(out))
    _run_rows(kernel, list(inputs), [ov], lambda q2, s2, o2: (q2, s2, *args, o2), ov.dtype, *inputs[1].shape)


@block_kernel("cuda", "mx", "quantize")
def _mx_quantize(x, spec, outputs) -> None:
    """Fused MX quantize of ``x`` (rows, n) into the codes and E8M0 scales (uint8)."""
    fmt = spec.format
    xv = runtime.device_float(x, runtime.current_stream())
    args = (spec.block_size, fmt.emax, fmt.max_mantissa, bool(spec.params.round_up), fmt.fp, fmt.is_int,
            bool(spec.params.packed))
    _run_rows(mx_quantize_kernel, [xv], list(outputs), lambda x2, c2, s2: (x2, *args, c2, s2), xv.dtype,
              *outputs[1].shape)


@block_kernel("cuda", "mx", "dequantize")
def _mx_dequantize(inputs, spec, out) -> None:
    """MX dequantize of the codes with E8M0 scales (uint8) into ``out`` (rows, n)."""
    fmt = spec.format
    args = (spec.block_size, fmt.fp, fmt.is_int, bool(spec.params.packed), output_float_like(spec.out_dtype))
    _dequantize_rows(mx_dequantize_kernel, inputs, args, out)


@block_kernel("cuda", "nvfp4", "quantize")
def _nvfp4_quantize(x, spec, outputs) -> None:
    """Fused NVFP4 quantize of ``x`` (rows, n) with the spec's global scale."""
    g = np.float32(spec.params.global_scale)
    xv = runtime.device_float(x, runtime.current_stream())
    args = (spec.block_size, g, np.float32(6) * g)
    _run_rows(nvfp4_quantize_kernel, [xv], list(outputs), lambda x2, c2, s2: (x2, *args, c2, s2), xv.dtype,
              *outputs[1].shape)


@block_kernel("cuda", "nvfp4", "dequantize")
def _nvfp4_dequantize(inputs, spec, out) -> None:
    """NVFP4 dequantize into ``out`` (rows, n)."""
    args = (spec.block_size, np.float32(spec.params.global_scale), output_float_like(spec.out_dtype))
    _dequantize_rows(nvfp4_dequantize_kernel, inputs, args, out)


@block_kernel("cuda", "nf4", "quantize")
def _nf4_quantize(x, spec, outputs) -> None:
    """Fused NF4 quantize of ``x`` (rows, n): packed table indices and float32 block scales."""
    xv = runtime.device_float(x, runtime.current_stream())
    _run_rows(nf4_quantize_kernel, [xv], list(outputs), lambda x2, c2, s2: (x2, spec.block_size, c2, s2), xv.dtype,
              *outputs[1].shape)


@block_kernel("cuda", "nf4", "dequantize")
def _nf4_dequantize(inputs, spec, out) -> None:
    """NF4 dequantize into ``out`` (rows, n) with float32 block scales."""
    _dequantize_rows(nf4_dequantize_kernel, inputs, (spec.block_size, output_float_like(spec.out_dtype)), out)


class BlockOps(BlockKernelOps):
    """Every registered block format, and amax (:class:`~nbquant.backends.interface.Backend`); NumPy or CUDA
    device arrays."""

    target = "cuda"

    def amax(self, x) -> np.float32:
        """``max |x|`` (NaN if any element is NaN) of a NumPy or CUDA array, computed on the GPU."""
        if x.size == 0:
            return np.float32(0)
        stream = runtime.current_stream()
        d = runtime.device_float(x, stream)
        d = d.reshape(int(d.size))
        result = runtime.to_device(np.zeros(1, np.uint32), stream)
        blocks, threads = runtime.reduction_grid(int(d.size))
        amax_kernel.launch(blocks, threads, stream, (d, result), d.dtype)
        return float32_from_bits(int(runtime.to_host(result)[0]))


import_kernel_modules(__package__)
