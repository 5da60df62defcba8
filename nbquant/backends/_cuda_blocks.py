"""CUDA kernels for the scaled block formats (OCP MX, NVFP4) and the ``amax`` reduction.

Private sibling of :mod:`nbquant.backends._cuda`, imported only from it (so ``numba.cuda``
stays behind the lazy import of the cuda backend). The entry points ``mx_quantize``,
``mx_dequantize``, ``nvfp4_quantize``, ``nvfp4_dequantize`` and ``amax`` have the
signatures of :mod:`nbquant.backends.cpu_blocks` and are re-exported by ``_cuda``.

Kernels
-------
* :func:`mx_quantize_kernel`: fused, one thread per scale block. The thread reduces the
  block's ``amax`` over the float bits (an integer max: NaN bits sort above inf, so a NaN
  or inf block gets the NaN scale), writes the E8M0 code (``mx_scale_code``), then
  encodes the block's elements (``encode_minifloat`` saturating, or MXINT8's
  ``rne(v * 64)``), packing mxfp4 two per byte, low nibble first.
* :func:`mx_dequantize_kernel`: one thread per block, ``element * decode_e8m0(scale)``.
* :func:`nvfp4_quantize_kernel`: fused, one thread per block: amax, the E4M3 block scale
  (``nvfp4_block_scale``), then e2m1 codes of ``x / (scale * global)`` packed two per byte.
  The global scale is an argument (the host computes it from :func:`amax`).
* :func:`nvfp4_dequantize_kernel`: ``e2m1 * (e4m3 scale * global)``.
* :func:`amax_kernel`: ``max |x|`` as float32 bits: a grid-stride max per thread, a
  shared-memory tree per thread block, then one ``atomic.max`` on a ``uint32`` per block.

All numerics are the element functions of :mod:`nbquant.element` and the block helpers of
:mod:`nbquant.backends.cpu_blocks` (``nvfp4_block_scale``, ``_mx_int8``), the very ones the
CPU kernels inline; these kernels are loops only.

Launch shape: the (rows, n) operand is walked like the element kernels walk a canonical
view: ``blockIdx.y`` strides over rows, and along a row thread ``t`` takes scale blocks
``t, t + S, ...`` (``S = gridDim.x * blockDim.x``). A thread reads its block twice (amax,
then encode); the second read hits L1/L2. Indices are unsigned 64-bit.
"""

from __future__ import annotations

import warnings

import numpy as np
from numba import cuda, types
from numba.core.errors import NumbaPerformanceWarning
from numba.np.numpy_support import from_dtype

from ..element import (
    NF4_VALUES,
    abs_bits,
    bits_f32,
    code_value,
    decode_e8m0,
    decode_minifloat,
    encode_minifloat,
    load_f32,
    mx_inverse_scale,
    mx_scale_code,
    nf4_code,
    store_float,
)
from ._views import kernel_float_view, output_float_like
from .cpu_blocks import _E4M3, _mx_int8, bits_to_float, nvfp4_block_scale

__all__ = [
    "mx_quantize",
    "mx_dequantize",
    "nvfp4_quantize",
    "nvfp4_dequantize",
    "nf4_quantize",
    "nf4_dequantize",
    "amax",
    "mx_quantize_kernel",
    "mx_dequantize_kernel",
    "nvfp4_quantize_kernel",
    "nvfp4_dequantize_kernel",
    "amax_kernel",
    "block_signature",
    "all_block_signatures",
    "KERNELS",
]

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U2 = np.uint64(2)
#: Threads per block of the amax reduction (a power of two: the shared-memory tree halves it).
AMAX_THREADS = 256
_AMAX_MAX_BLOCKS = 4096
_SIM_AMAX_THREADS, _SIM_AMAX_BLOCKS = 4, 2

# ---------------------------------------------------------------------------------------------
# Kernels (plain Python functions, compiled per signature by _cuda._compiled and the PTX check).
# ---------------------------------------------------------------------------------------------


def mx_quantize_kernel(x, block, emax, max_mantissa, round_up, fp, is_int, packed, codes, scales):
    """MX quantize ``x`` (rows, n): E8M0 ``scales`` (rows, n / block) and ``codes`` (rows, n or n / 2)."""
    rows = np.uint64(x.shape[0])
    nblocks = np.uint64(scales.shape[1])
    ub = np.uint64(block)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        xs, cs, ss = x[row], codes[row], scales[row]
        b = start
        while b < nblocks:
            c0 = b * ub
            c1 = c0 + ub
            amax = np.int64(0)
            c = c0
            while c < c1:
                amax = max(amax, abs_bits(xs[c]))
                c += _U1
            code = mx_scale_code(amax, emax, max_mantissa, round_up)
            ss[b] = code
            inv = mx_inverse_scale(code)
            c = c0
            if packed:
                j = c0 // _U2
                while c < c1:
                    e0 = encode_minifloat(load_f32(xs[c]) * inv, fp[0], fp[1], fp[2], fp[3], fp[4], fp[5], True)
                    e1 = encode_minifloat(load_f32(xs[c + _U1]) * inv, fp[0], fp[1], fp[2], fp[3], fp[4], fp[5],
                                          True)
                    cs[j] = (e0 & 15) | ((e1 & 15) << 4)
                    j += _U1
                    c += _U2
            elif is_int:
                while c < c1:
                    cs[c] = _mx_int8(load_f32(xs[c]) * inv)
                    c += _U1
            else:
                while c < c1:
                    cs[c] = encode_minifloat(load_f32(xs[c]) * inv, fp[0], fp[1], fp[2], fp[3], fp[4], fp[5], True)
                    c += _U1
            b += stride
        row += np.uint64(cuda.gridDim.y)


def mx_dequantize_kernel(codes, scales, block, fp, is_int, packed, like, out):
    """MX dequantize ``codes`` with E8M0 ``scales`` into ``out`` (rows, n): ``element * 2**(scale - 127)``."""
    rows = np.uint64(out.shape[0])
    nblocks = np.uint64(scales.shape[1])
    ub = np.uint64(block)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        qs, ss, os = codes[row], scales[row], out[row]
        b = start
        while b < nblocks:
            s = decode_e8m0(ss[b])
            c = b * ub
            c1 = c + ub
            if packed:
                j = c // _U2
                while c < c1:
                    byte = np.int32(qs[j])
                    os[c] = store_float(decode_minifloat(byte & 15, fp[0], fp[1], fp[6]) * s, like)
                    os[c + _U1] = store_float(decode_minifloat(byte >> 4, fp[0], fp[1], fp[6]) * s, like)
                    j += _U1
                    c += _U2
            elif is_int:
                while c < c1:
                    os[c] = store_float(code_value(qs[c], 8, True) * np.float32(0.015625) * s, like)
                    c += _U1
            else:
                while c < c1:
                    os[c] = store_float(decode_minifloat(qs[c], fp[0], fp[1], fp[6]) * s, like)
                    c += _U1
            b += stride
        row += np.uint64(cuda.gridDim.y)


def nvfp4_quantize_kernel(x, block, global_scale, six_global, codes, scales):
    """NVFP4 quantize ``x`` (rows, n): e4m3 ``scales`` (rows, n / block), packed e2m1 ``codes`` (rows, n / 2)."""
    rows = np.uint64(x.shape[0])
    nblocks = np.uint64(scales.shape[1])
    ub = np.uint64(block)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        xs, cs, ss = x[row], codes[row], scales[row]
        b = start
        while b < nblocks:
            c = b * ub
            c1 = c + ub
            amax = np.int64(0)
            while c < c1:
                amax = max(amax, abs_bits(xs[c]))
                c += _U1
            code = nvfp4_block_scale(bits_f32(amax), six_global)
            ss[b] = code
            denom = decode_minifloat(code, _E4M3[0], _E4M3[1], _E4M3[6]) * global_scale
            c = b * ub
            j = c // _U2
            while c < c1:
                e0 = encode_minifloat(load_f32(xs[c]) / denom, 2, 1, 0x7, 0x7, 0, 1, True)
                e1 = encode_minifloat(load_f32(xs[c + _U1]) / denom, 2, 1, 0x7, 0x7, 0, 1, True)
                cs[j] = (e0 & 15) | ((e1 & 15) << 4)
                j += _U1
                c += _U2
            b += stride
        row += np.uint64(cuda.gridDim.y)


def nvfp4_dequantize_kernel(codes, scales, block, global_scale, like, out):
    """NVFP4 dequantize into ``out`` (rows, n): ``e2m1 * (e4m3 scale * global_scale)``."""
    rows = np.uint64(out.shape[0])
    nblocks = np.uint64(scales.shape[1])
    ub = np.uint64(block)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        qs, ss, os = codes[row], scales[row], out[row]
        b = start
        while b < nblocks:
            s = decode_minifloat(ss[b], _E4M3[0], _E4M3[1], _E4M3[6]) * global_scale
            c = b * ub
            c1 = c + ub
            j = c // _U2
            while c < c1:
                byte = np.int32(qs[j])
                os[c] = store_float(decode_minifloat(byte & 15, 2, 1, 0) * s, like)
                os[c + _U1] = store_float(decode_minifloat(byte >> 4, 2, 1, 0) * s, like)
                j += _U1
                c += _U2
            b += stride
        row += np.uint64(cuda.gridDim.y)


def nf4_quantize_kernel(x, block, codes, scales):
    """NF4 quantize ``x`` (rows, n): float32 block ``scales`` (amax) and table indices packed high nibble first."""
    rows = np.uint64(x.shape[0])
    nblocks = np.uint64(scales.shape[1])
    ub = np.uint64(block)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        xs, cs, ss = x[row], codes[row], scales[row]
        b = start
        while b < nblocks:
            c = b * ub
            c1 = c + ub
            amax_bits = np.int64(0)
            while c < c1:
                amax_bits = max(amax_bits, abs_bits(xs[c]))
                c += _U1
            amax = np.float32(bits_f32(amax_bits))  # a NumPy scalar: 0/0 is NaN in the simulator too
            ss[b] = amax
            c = b * ub
            j = c // _U2
            while c < c1:
                hi = nf4_code(np.float32(load_f32(xs[c])) / amax)
                lo = nf4_code(np.float32(load_f32(xs[c + _U1])) / amax)
                cs[j] = (hi << 4) | lo
                j += _U1
                c += _U2
            b += stride
        row += np.uint64(cuda.gridDim.y)


def nf4_dequantize_kernel(codes, scales, block, like, out):
    """NF4 dequantize into ``out`` (rows, n): ``table[index] * scale`` per block."""
    rows = np.uint64(out.shape[0])
    nblocks = np.uint64(scales.shape[1])
    ub = np.uint64(block)
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        qs, ss, os = codes[row], scales[row], out[row]
        b = start
        while b < nblocks:
            s = np.float32(ss[b])
            c = b * ub
            c1 = c + ub
            j = c // _U2
            while c < c1:
                byte = np.int64(qs[j])
                os[c] = store_float(NF4_VALUES[byte >> 4] * s, like)
                os[c + _U1] = store_float(NF4_VALUES[byte & 15] * s, like)
                j += _U1
                c += _U2
            b += stride
        row += np.uint64(cuda.gridDim.y)


def amax_kernel(x, out):
    """``out[0] = max(out[0], bits of max |x|)`` over a 1-D ``x`` (NaN bits win over every number)."""
    shared = cuda.shared.array(AMAX_THREADS, np.uint32)
    n = np.uint64(x.shape[0])
    tid = cuda.threadIdx.x
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    i = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(tid)
    m = np.int64(0)
    while i < n:
        m = max(m, abs_bits(x[i]))
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


# ---------------------------------------------------------------------------------------------
# Signatures (merged into _cuda.all_signatures(), which the PTX check compiles).
# ---------------------------------------------------------------------------------------------

KERNELS = {
    "mx_quantize": mx_quantize_kernel,
    "mx_dequantize": mx_dequantize_kernel,
    "nvfp4_quantize": nvfp4_quantize_kernel,
    "nvfp4_dequantize": nvfp4_dequantize_kernel,
    "nf4_quantize": nf4_quantize_kernel,
    "nf4_dequantize": nf4_dequantize_kernel,
    "amax": amax_kernel,
}

#: Kernel-side inputs: float32, float64, float16 bits (uint16), bfloat16 bits (int16).
INPUT_DTYPES = tuple(map(np.dtype, (np.float32, np.float64, np.uint16, np.int16)))
#: Kernel-side outputs: float32, float16 bits, bfloat16 bits.
OUTPUT_DTYPES = tuple(map(np.dtype, (np.float32, np.uint16, np.int16)))


def _arr(dtype, ndim: int = 2) -> types.Array:
    return types.Array(from_dtype(np.dtype(dtype)), ndim, "C")


def block_signature(kernel: str, data_dtype, out_dtype):
    """The Numba signature of a block kernel for its float element type (input or output).

    ``data_dtype`` is the input's kernel-side dtype for the quantize kernels and ``amax``,
    ``out_dtype`` the output's for the dequantize kernels (the other is uint8 / uint32).
    """
    i64, f32, b1 = types.int64, types.float32, types.boolean
    u8 = _arr(np.uint8)
    fp = types.UniTuple(i64, 7)
    if kernel == "mx_quantize":
        args = (_arr(data_dtype), i64, i64, i64, b1, fp, b1, b1, u8, u8)
    elif kernel == "mx_dequantize":
        args = (u8, u8, i64, fp, b1, b1, from_dtype(np.dtype(out_dtype)), _arr(out_dtype))
    elif kernel == "nvfp4_quantize":
        args = (_arr(data_dtype), i64, f32, f32, u8, u8)
    elif kernel == "nvfp4_dequantize":
        args = (u8, u8, i64, f32, from_dtype(np.dtype(out_dtype)), _arr(out_dtype))
    elif kernel == "nf4_quantize":
        args = (_arr(data_dtype), i64, u8, _arr(np.float32))
    elif kernel == "nf4_dequantize":
        args = (u8, _arr(np.float32), i64, from_dtype(np.dtype(out_dtype)), _arr(out_dtype))
    elif kernel == "amax":
        args = (_arr(data_dtype, 1), _arr(np.uint32, 1))
    else:
        raise KeyError(kernel)
    return types.void(*args)


def all_block_signatures() -> list[tuple[str, object]]:
    """Every ``(kernel, signature)`` the block entry points launch (25)."""
    sigs = []
    for d in INPUT_DTYPES:
        sigs += [(k, block_signature(k, d, np.uint8)) for k in ("mx_quantize", "nvfp4_quantize", "nf4_quantize")]
        sigs.append(("amax", block_signature("amax", d, np.uint32)))
    for o in OUTPUT_DTYPES:
        sigs += [(k, block_signature(k, np.uint8, o)) for k in ("mx_dequantize", "nvfp4_dequantize",
                                                                 "nf4_dequantize")]
    return sigs


# ---------------------------------------------------------------------------------------------
# Entry points (cpu_blocks signatures; NumPy or CUDA device arrays).
# ---------------------------------------------------------------------------------------------


def _backend():
    from . import _cuda

    return _cuda


def _launch(kernel: str, grid, threads, stream, args, data_dtype, out_dtype) -> None:
    be = _backend()
    sig = block_signature(kernel, data_dtype, out_dtype)
    be.launched.add((kernel, sig))
    with warnings.catch_warnings():  # small inputs give small grids; Numba's occupancy warning is noise here
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        be._compiled(kernel, sig)[grid, threads, stream](*args)


def _run_rows(kernel: str, inputs, outputs, make_args, data_dtype, out_dtype, rows: int, nblocks: int) -> None:
    """Copy host ``inputs`` in, launch one thread per scale block, copy host ``outputs`` back."""
    be = _backend()
    stream = be.current_stream()
    d_in = [be._to_device(a, stream) for a in inputs]
    d_out = [be.as_device_array(o) if be.is_device(o) else cuda.device_array(o.shape, o.dtype, stream=stream)
             for o in outputs]
    grid, threads = be.launch_config(rows, nblocks)
    _launch(kernel, grid, threads, stream, make_args(*d_in, *d_out), data_dtype, out_dtype)
    host = [(o, d) for o, d in zip(outputs, d_out, strict=True) if not be.is_device(o)]
    for o, d in host:
        d.copy_to_host(o, stream=stream)
    if host:
        stream.synchronize()


def _fp(fmt) -> tuple[int, ...]:
    return tuple(int(v) for v in fmt.fp_params) if fmt.is_float else (0, 0, 0, 0, 0, 0, 0)


def _host_or_device(a):
    d = _backend().as_device_array(a)
    return a if d is None else d


def mx_quantize(x, spec, codes, scales) -> None:
    """Fused MX quantize of ``x`` (rows, n) into ``codes`` and E8M0 ``scales`` (uint8)."""
    fmt = spec.element
    xv = kernel_float_view(_host_or_device(x))
    rows, nblocks = scales.shape
    args = (spec.block_size, spec.emax, spec.max_mantissa, bool(spec.round_up), _fp(fmt), not fmt.is_float,
            bool(spec.packed))
    _run_rows("mx_quantize", [xv], [codes, scales], lambda x2, c2, s2: (x2, *args, c2, s2), xv.dtype, np.uint8,
              rows, nblocks)


def mx_dequantize(codes, scales, spec, out) -> None:
    """MX dequantize ``codes`` with E8M0 ``scales`` (uint8) into ``out`` (rows, n)."""
    fmt = spec.element
    ov = kernel_float_view(_host_or_device(out))
    rows, nblocks = scales.shape
    like = output_float_like(spec.out_dtype)
    args = (spec.block_size, _fp(fmt), not fmt.is_float, bool(spec.packed), like)
    _run_rows("mx_dequantize", [codes, scales], [ov], lambda q2, s2, o2: (q2, s2, *args, o2), np.uint8, ov.dtype,
              rows, nblocks)


def nvfp4_quantize(x, spec, codes, scales) -> None:
    """Fused NVFP4 quantize of ``x`` (rows, n) with the global scale in ``spec``."""
    g = np.float32(spec.global_scale)
    xv = kernel_float_view(_host_or_device(x))
    rows, nblocks = scales.shape
    args = (spec.block_size, g, np.float32(6) * g)
    _run_rows("nvfp4_quantize", [xv], [codes, scales], lambda x2, c2, s2: (x2, *args, c2, s2), xv.dtype, np.uint8,
              rows, nblocks)


def nvfp4_dequantize(codes, scales, spec, out) -> None:
    """NVFP4 dequantize into ``out`` (rows, n)."""
    ov = kernel_float_view(_host_or_device(out))
    rows, nblocks = scales.shape
    args = (spec.block_size, np.float32(spec.global_scale), output_float_like(spec.out_dtype))
    _run_rows("nvfp4_dequantize", [codes, scales], [ov], lambda q2, s2, o2: (q2, s2, *args, o2), np.uint8,
              ov.dtype, rows, nblocks)


def nf4_quantize(x, spec, codes, scales) -> None:
    """Fused NF4 quantize of ``x`` (rows, n): packed table indices and float32 block scales."""
    xv = kernel_float_view(_host_or_device(x))
    rows, nblocks = scales.shape
    _run_rows("nf4_quantize", [xv], [codes, scales], lambda x2, c2, s2: (x2, spec.block_size, c2, s2), xv.dtype,
              np.uint8, rows, nblocks)


def nf4_dequantize(codes, scales, spec, out) -> None:
    """NF4 dequantize into ``out`` (rows, n) with float32 block ``scales``."""
    ov = kernel_float_view(_host_or_device(out))
    rows, nblocks = scales.shape
    args = (spec.block_size, output_float_like(spec.out_dtype))
    _run_rows("nf4_dequantize", [codes, scales], [ov], lambda q2, s2, o2: (q2, s2, *args, o2), np.uint8, ov.dtype,
              rows, nblocks)


def amax(x) -> np.float32:
    """``max |x|`` (NaN if any element is NaN) of a NumPy or CUDA array, computed on the GPU."""
    be = _backend()
    if x.size == 0:
        return np.float32(0)
    stream = be.current_stream()
    d = be.as_device_array(x)
    if d is None:
        flat = np.ascontiguousarray(kernel_float_view(np.asarray(x))).reshape(-1)
        d = cuda.to_device(flat, stream=stream)
    else:
        d = kernel_float_view(be.device_float_input(d)).reshape(int(d.size))
    result = cuda.to_device(np.zeros(1, np.uint32), stream=stream)
    n = int(d.size)
    if be.SIMULATOR:
        threads, blocks = _SIM_AMAX_THREADS, min(_SIM_AMAX_BLOCKS, -(-n // _SIM_AMAX_THREADS))
    else:
        threads, blocks = AMAX_THREADS, min(_AMAX_MAX_BLOCKS, -(-n // AMAX_THREADS))
    _launch("amax", blocks, threads, stream, (d, result), d.dtype, np.uint32)
    bits = result.copy_to_host(stream=stream)
    stream.synchronize()
    return bits_to_float(int(bits[0]))
