"""CUDA kernels for the scaled block formats (OCP MX, NVFP4, NF4) and the ``amax`` reduction.

* :func:`mx_quantize_kernel`: fused, a team of threads per scale block
  (:func:`~.runtime.team_size`: a power of two, at most a warp, about four elements per lane). The
  lanes reduce the block's ``amax`` over the float bits with coalesced strided reads (an integer
  max: NaN bits sort above inf, so a NaN or inf block gets the NaN scale) and combine it through
  shared memory; every lane computes the E8M0 code, lane 0 writes it, and the lanes encode the
  block's elements (saturating minifloat, or MXINT8's ``rne(v * 64)``), packing mxfp4 two per byte.
* :func:`nvfp4_quantize_kernel` / :func:`nf4_quantize_kernel`: the same with NVFP4's E4M3
  block scale (the global scale is an argument: the host computes it from ``amax``) and
  NF4's amax scale and table indices.
* the dequantize kernels: ``element * scale``, one thread per code byte (the element
  kernels' coalesced column walk), each byte's scale block carried along the walk.
* :func:`amax_kernel`: ``max |x|`` as float32 bits: a grid-stride max per thread, a
  shared-memory tree per thread block, then one ``atomic.max`` on a ``uint32`` per block.

All numerics are :mod:`nbquant.element` calls. Each format family's host side
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
from ._loops import U0, U1, column_frame, team_coords, team_item, team_keys, thread_start
from .dynamic import fold_keys
from .runtime import (
    B1,
    F32,
    FP_TUPLE,
    I64,
    INPUT_DTYPES,
    OUTPUT_DTYPES,
    REDUCE_THREADS,
    TEAM_THREADS,
    array_type,
    cuda_kernel,
    scalar_type,
)

_U8 = array_type(np.uint8, 2)
_U8_3 = array_type(np.uint8, 3)
_U2 = np.uint64(2)
_NO_KEY = np.int64(0)  # the min key fold_keys and team_keys also carry; the block kernels use only the max

_FROM_FLOATS = [(d,) for d in INPUT_DTYPES]
_TO_FLOATS = [(o,) for o in OUTPUT_DTYPES]


def _team_frame(body):
    """The walk of a block quantize kernel over its (rows, n) arrays: a team of threads per scale block.

    The lanes of a team read the block's elements with a stride of the team (coalesced), fold their
    absmax bits (:func:`~.dynamic.fold_keys`, as the dynamic kernels do), combine them through shared
    memory (:func:`~._loops.team_keys`), then each lane encodes its share.
    ``body(args, views, b, c, c1, lane, team, amax)`` is a ``cuda.jit(device=True, inline="always")``
    function: block ``b``, columns ``c:c1``, of one row, ``views`` the row views of ``args[0:3]``
    (input, codes, scales) and ``amax`` the block's largest absolute-value bits; lane 0 writes the
    scale. Returns ``walk(block, team, keys, args)``, ``keys`` the kernel's two shared int64 arrays
    (``TEAM_THREADS`` each) that the teams combine through.
    """

    @cuda.jit(device=True, inline="always")
    def walk(block, team, keys, args):
        x, codes, scales = args[0], args[1], args[2]
        nblocks = np.uint64(scales.shape[1])
        total = np.uint64(scales.shape[0]) * nblocks
        ub, ut = np.uint64(block), np.uint64(team)
        tid, lane, first, teams = team_coords(ut)
        base = np.uint64(cuda.blockIdx.x) * teams
        while base < total:  # the same rounds for every thread of the block (barriers inside)
            row, b, active = team_item(base, tid, ut, total, nblocks)
            c = b * ub
            xs = x[row]
            _, amax = fold_keys(xs, c + lane, c + ub if active else U0, ut, False, _NO_KEY, _NO_KEY)
            _, amax = team_keys(_NO_KEY, amax, tid, first, ut, keys[0], keys[1])
            if active:
                body(args, (xs, codes[row], scales[row]), b, c, c + ub, lane, ut, amax)
            base += np.uint64(cuda.gridDim.x) * teams

    return walk


# The dequantize kernels walk the code bytes of (1, rows, n) views as the element kernels walk theirs
# (:func:`~._loops.column_frame`): consecutive threads take consecutive bytes, so reads and writes are
# coalesced, and each byte's scale block comes from the walk, not a division.


@cuda.jit(device=True, inline="always")
def _packed_codes(args):
    """Walk the code bytes ``args[0]`` (1, rows, n / 2): two codes per byte."""
    q = args[0]
    return q, np.uint64(q.shape[2]), _U2


@cuda.jit(device=True, inline="always")
def _block_views(args, p, r, sp, sr):
    """``(codes, scales, out)`` rows of ``args = (codes, scales, out, ...)``."""
    return args[0][p, r], args[1][sp, sr], args[2][p, r]


# Each format: what one block (quantize) or one code byte (dequantize) takes, with ``args`` the arrays and
# then the kernel's parameters; the walk :func:`_team_frame` or :func:`~._loops.column_frame` builds
# around it; and the kernel: its signature and one call.


@cuda.jit(device=True, inline="always")
def _mx_quantize_block(args, views, b, c, c1, lane, team, amax):
    emax, max_mantissa, round_up, fp, is_int, packed = args[3:9]
    xs, cs, ss = views
    code = element.mx_scale_code(amax, emax, max_mantissa, round_up)
    if lane == U0:
        ss[b] = code
    inv = element.mx_inverse_scale(code)
    if packed:
        j = c // _U2 + lane
        c += _U2 * lane
        while c < c1:
            cs[j] = element.pack_pair(element.encode_product(xs[c], inv, fp),
                                      element.encode_product(xs[c + U1], inv, fp))
            j += team
            c += _U2 * team
    elif is_int:
        c += lane
        while c < c1:
            cs[c] = element.mx_int8(element.load_f32(xs[c]) * inv)
            c += team
    else:
        c += lane
        while c < c1:
            cs[c] = element.encode_product(xs[c], inv, fp)
            c += team


_MX_QUANTIZE = _team_frame(_mx_quantize_block)


@cuda_kernel(lambda d: types.void(array_type(d, 2), I64, I64, I64, B1, FP_TUPLE, B1, B1, I64, _U8, _U8),
             _FROM_FLOATS)
def mx_quantize_kernel(x, block, emax, max_mantissa, round_up, fp, is_int, packed, team, codes, scales):
    """MX quantize ``x`` (rows, n): E8M0 ``scales`` (rows, n / block) and ``codes`` (rows, n or n / 2)."""
    keys = cuda.shared.array(TEAM_THREADS, np.int64), cuda.shared.array(TEAM_THREADS, np.int64)
    _MX_QUANTIZE(block, team, keys, (x, codes, scales, emax, max_mantissa, round_up, fp, is_int, packed))


@cuda.jit(device=True, inline="always")
def _mx_dequantize_item(args, views, j, k, g, off, bc):
    fp, is_int, packed, like = args[3:7]
    qs, ss, os = views
    s = element.decode_e8m0(ss[g])
    if packed:
        byte = np.int32(qs[j])
        c = j * _U2
        os[c] = element.store_float(element.decode_fp(element.unpack_field(byte, 0, 4), fp) * s, like)
        os[c + U1] = element.store_float(element.decode_fp(element.unpack_field(byte, 1, 4), fp) * s, like)
    elif is_int:
        os[j] = element.store_float(element.code_value(qs[j], 8, True) * element.MXINT8_STEP * s, like)
    else:
        os[j] = element.store_float(element.decode_fp(qs[j], fp) * s, like)


@cuda.jit(device=True, inline="always")
def _mx_codes(args):
    """Walk the code bytes: two codes per byte when packed (mxfp4), else one."""
    q = args[0]
    return q, np.uint64(q.shape[2]), _U2 if args[5] else U1


_MX_DEQUANTIZE = column_frame(_mx_codes, _block_views, _mx_dequantize_item)


@cuda_kernel(lambda o: types.void(_U8_3, _U8_3, I64, FP_TUPLE, B1, B1, scalar_type(o), array_type(o, 3)), _TO_FLOATS)
def mx_dequantize_kernel(codes, scales, block, fp, is_int, packed, like, out):
    """MX dequantize ``codes`` with E8M0 ``scales`` into ``out`` (1, rows, n): ``element * 2**(scale - 127)``."""
    _MX_DEQUANTIZE(1, 1, block, (codes, scales, out, fp, is_int, packed, like))


@cuda.jit(device=True, inline="always")
def _nvfp4_quantize_block(args, views, b, c, c1, lane, team, amax):
    global_scale, six_global = args[3:5]
    xs, cs, ss = views
    code = element.nvfp4_block_scale(element.bits_f32(amax), six_global)
    if lane == U0:
        ss[b] = code
    denom = element.decode_fp(code, element.E4M3) * global_scale
    j = c // _U2 + lane
    c += _U2 * lane
    while c < c1:
        cs[j] = element.pack_pair(element.encode_quotient(xs[c], denom, element.E2M1),
                                  element.encode_quotient(xs[c + U1], denom, element.E2M1))
        j += team
        c += _U2 * team


_NVFP4_QUANTIZE = _team_frame(_nvfp4_quantize_block)


@cuda_kernel(lambda d: types.void(array_type(d, 2), I64, F32, F32, I64, _U8, _U8), _FROM_FLOATS)
def nvfp4_quantize_kernel(x, block, global_scale, six_global, team, codes, scales):
    """NVFP4 quantize ``x`` (rows, n): e4m3 ``scales`` (rows, n / block), packed e2m1 ``codes`` (rows, n / 2)."""
    keys = cuda.shared.array(TEAM_THREADS, np.int64), cuda.shared.array(TEAM_THREADS, np.int64)
    _NVFP4_QUANTIZE(block, team, keys, (x, codes, scales, global_scale, six_global))


@cuda.jit(device=True, inline="always")
def _nvfp4_dequantize_item(args, views, j, k, g, off, bc):
    global_scale, like = args[3:5]
    qs, ss, os = views
    s = element.decode_fp(ss[g], element.E4M3) * global_scale
    byte = np.int32(qs[j])
    c = j * _U2
    for t in range(2):
        value = element.decode_fp(element.unpack_field(byte, t, 4), element.E2M1) * s
        os[c + np.uint64(t)] = element.store_float(value, like)


_NVFP4_DEQUANTIZE = column_frame(_packed_codes, _block_views, _nvfp4_dequantize_item)


@cuda_kernel(lambda o: types.void(_U8_3, _U8_3, I64, F32, scalar_type(o), array_type(o, 3)), _TO_FLOATS)
def nvfp4_dequantize_kernel(codes, scales, block, global_scale, like, out):
    """NVFP4 dequantize into ``out`` (1, rows, n): ``e2m1 * (e4m3 scale * global_scale)``."""
    _NVFP4_DEQUANTIZE(1, 1, block, (codes, scales, out, global_scale, like))


@cuda.jit(device=True, inline="always")
def _nf4_quantize_block(args, views, b, c, c1, lane, team, amax_bits):
    xs, cs, ss = views
    amax = np.float32(element.bits_f32(amax_bits))  # a NumPy scalar: 0/0 is NaN on every target
    if lane == U0:
        ss[b] = amax
    j = c // _U2 + lane
    c += _U2 * lane
    while c < c1:
        cs[j] = element.pack_nf4_pair(element.nf4_code(np.float32(element.load_f32(xs[c])) / amax),
                                      element.nf4_code(np.float32(element.load_f32(xs[c + U1])) / amax))
        j += team
        c += _U2 * team


_NF4_QUANTIZE = _team_frame(_nf4_quantize_block)


@cuda_kernel(lambda d: types.void(array_type(d, 2), I64, I64, _U8, array_type(np.float32, 2)), _FROM_FLOATS)
def nf4_quantize_kernel(x, block, team, codes, scales):
    """NF4 quantize ``x`` (rows, n): float32 block ``scales`` (amax) and table indices packed high nibble first."""
    keys = cuda.shared.array(TEAM_THREADS, np.int64), cuda.shared.array(TEAM_THREADS, np.int64)
    _NF4_QUANTIZE(block, team, keys, (x, codes, scales))


@cuda.jit(device=True, inline="always")
def _nf4_dequantize_item(args, views, j, k, g, off, bc):
    like = args[3]
    qs, ss, os = views
    s = np.float32(ss[g])
    byte = np.int64(qs[j])
    c = j * _U2
    os[c] = element.store_float(element.NF4_VALUES[element.unpack_field(byte, 1, 4)] * s, like)
    os[c + U1] = element.store_float(element.NF4_VALUES[element.unpack_field(byte, 0, 4)] * s, like)


_NF4_DEQUANTIZE = column_frame(_packed_codes, _block_views, _nf4_dequantize_item)


@cuda_kernel(lambda o: types.void(_U8_3, array_type(np.float32, 3), I64, scalar_type(o), array_type(o, 3)),
             _TO_FLOATS)
def nf4_dequantize_kernel(codes, scales, block, like, out):
    """NF4 dequantize into ``out`` (1, rows, n): ``table[index] * scale`` per block."""
    _NF4_DEQUANTIZE(1, 1, block, (codes, scales, out, like))


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


def _quantize_rows(kernel, x, spec, outputs, args) -> None:
    """Launch a block quantize ``kernel`` on ``x`` (rows, n), a team per scale block, into host or device ``outputs``.

    The kernel takes ``(x, block, *args, team, codes, scales)``.
    """
    stream = runtime.current_stream()
    xv = runtime.device_float(x, stream)
    d_out = [runtime.result_on_device(o, stream) for o in outputs]
    team = runtime.team_size(spec.block_size)
    grid, threads = runtime.team_grid(int(np.prod(outputs[1].shape)), team)
    kernel.launch(grid, threads, stream, (xv, spec.block_size, *args, team, *d_out), xv.dtype)
    runtime.copy_back(list(zip(outputs, d_out, strict=True)), stream)


def _dequantize_rows(kernel, inputs, args, out) -> None:
    """Launch a dequantize ``kernel`` over the (codes, scales) ``inputs`` into ``out``, ``args`` between them.

    The arrays go in as (1, rows, n) views; one work item per code byte.
    """
    stream = runtime.current_stream()
    ov = kernel_float_view(runtime.device_or_host(out))
    d_out = runtime.result_on_device(ov, stream)
    q2, s2 = (runtime.to_device(a, stream) for a in inputs)
    q3, s3, o3 = (a.reshape((1, *a.shape)) for a in (q2, s2, d_out))
    grid, threads = runtime.grid_for_rows(q3.shape[1], q3.shape[2])
    kernel.launch(grid, threads, stream, (q3, s3, *args, o3), ov.dtype)
    runtime.copy_back([(ov, d_out)], stream)


@block_kernel("cuda", "mx", "quantize")
def _mx_quantize(x, spec, outputs) -> None:
    """Fused MX quantize of ``x`` (rows, n) into the codes and E8M0 scales (uint8)."""
    fmt = spec.format
    args = (fmt.emax, fmt.max_mantissa, bool(spec.params.round_up), fmt.fp, fmt.is_int, bool(spec.params.packed))
    _quantize_rows(mx_quantize_kernel, x, spec, outputs, args)


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
    _quantize_rows(nvfp4_quantize_kernel, x, spec, outputs, (g, np.float32(6) * g))


@block_kernel("cuda", "nvfp4", "dequantize")
def _nvfp4_dequantize(inputs, spec, out) -> None:
    """NVFP4 dequantize into ``out`` (rows, n)."""
    args = (spec.block_size, np.float32(spec.params.global_scale), output_float_like(spec.out_dtype))
    _dequantize_rows(nvfp4_dequantize_kernel, inputs, args, out)


@block_kernel("cuda", "nf4", "quantize")
def _nf4_quantize(x, spec, outputs) -> None:
    """Fused NF4 quantize of ``x`` (rows, n): packed table indices and float32 block scales."""
    _quantize_rows(nf4_quantize_kernel, x, spec, outputs, ())


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
