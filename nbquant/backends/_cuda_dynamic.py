"""CUDA kernels for dynamic quantization (issue 5): ``choose_qparams`` and the fused ``quantize_dynamic``.

Private sibling of :mod:`nbquant.backends._cuda`, imported only from it (so ``numba.cuda``
stays behind the lazy import of the cuda backend). The entry points have the signatures
of :mod:`nbquant.backends.cpu_dynamic` and are re-exported by ``_cuda``; they take NumPy
or CUDA device arrays.

Kernels
-------
* :func:`dynamic_rows_kernel`: fused, for blocks that lie inside one row (per-row, per-group,
  ONNX blocked along the last axis). A *team* of :func:`team_size` threads (a power of two,
  at most a warp) takes one block: the lanes reduce it with coalesced strided reads
  (min/max :func:`~nbquant.element.order_key` keys or the absmax bits), combine their keys
  through shared memory (:func:`_team_keys`), compute the scale and zero point
  (``block_qparams``, i.e. :func:`~nbquant.element.affine_qparams` /
  :func:`~nbquant.element.amax_scales`), then quantize the block (packed sub-byte codes low
  bits first), a byte or an element per lane at a time.
* :func:`block_reduce_kernel`: a team per block-grid cell of a canonical (P, R, C) view,
  reducing its (bp, br, bc) block to keys (the lanes stride along C).
* :func:`flat_reduce_kernel`: per-tensor keys: a grid-stride reduction per thread, a
  shared-memory tree per thread block, one ``atomic.min``/``atomic.max`` per block.
* :func:`qparams_kernel`: scale and zero point of every cell from its keys.
* :func:`histogram_kernel`: counts in shared memory per thread block (up to
  :data:`SHARED_BINS` bins), added to the global counts once per block.

All numerics are the element functions of :mod:`nbquant.element` and the inline helpers of
:mod:`nbquant.backends.cpu_dynamic` (``block_qparams``), the ones the CPU kernels inline;
these kernels are loops only. Team kernels walk a flat list of blocks (or cells), a team
per item, in rounds that every thread of a thread block takes together (the shared-memory
combine has barriers). Indices are unsigned 64-bit.
"""

from __future__ import annotations

import warnings

import numpy as np
from numba import cuda, njit, types
from numba.core.errors import NumbaPerformanceWarning
from numba.cuda.core import config as _cuda_config
from numba.np.numpy_support import from_dtype

from ..element import (
    SCALE_DIVIDE,
    SCALE_MULTIPLY,
    abs_bits,
    amax_code,
    amax_scales,
    code_bits,
    e4m3_scales,
    order_key,
    quantize_value,
    scaled_minifloat_fake,
    store_float,
)
from ..layout import canonical_dims, canonical_views
from ._views import kernel_float_view, output_float_like
from .cpu_dynamic import _kernel_args, _rows_view, affine_fake_value, block_qparams, histogram_bin, ste_value

__all__ = [
    "choose_qparams",
    "quantize_dynamic",
    "dynamic_rows_kernel",
    "block_reduce_kernel",
    "flat_reduce_kernel",
    "qparams_kernel",
    "fake_quant_amax",
    "fake_affine",
    "ste_backward",
    "fake_amax_kernel",
    "fake_affine_kernel",
    "ste_kernel",
    "abs_histogram",
    "histogram_kernel",
    "dynamic_signature",
    "all_dynamic_signatures",
    "team_size",
    "KERNELS",
]


def _sim_safe(fn):
    """``fn`` itself, or under the simulator ``fn`` recompiled with ``error_model="numpy"``.

    The simulator runs kernel bodies as Python and calls these helpers as CPU njit functions,
    whose default error model raises on ``x / 0``; the CPU kernels compile them with numpy's
    (IEEE inf/NaN, as on the GPU). Same source (``py_func``), so no numerics change.
    """
    return njit(error_model="numpy")(fn.py_func) if _cuda_config.ENABLE_CUDASIM else fn


(abs_bits, amax_code, amax_scales, code_bits, e4m3_scales, order_key, quantize_value, scaled_minifloat_fake,
 store_float, affine_fake_value, block_qparams, ste_value, histogram_bin) = map(_sim_safe, (
    abs_bits, amax_code, amax_scales, code_bits, e4m3_scales, order_key, quantize_value, scaled_minifloat_fake,
    store_float, affine_fake_value, block_qparams, ste_value, histogram_bin))

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_KEY_HI = np.int64(1 << 62)
_KEY_LO = np.int64(-(1 << 62))
_ZERO_KEY = np.int64(0)
#: Threads per block of the per-tensor reduction (a power of two: the shared-memory tree halves it).
REDUCE_THREADS = 256
#: Threads per block of the team kernels (``dynamic_rows``, ``block_reduce``): their shared key arrays.
TEAM_THREADS = 256
#: The largest team: a warp, so a team's lanes read one contiguous 128-byte line of float32 at a time.
MAX_TEAM = 32
#: Bins that :func:`histogram_kernel` counts in shared memory (uint32, 16 KiB); more use global atomics.
SHARED_BINS = 4096
#: Histogram thread blocks at most (each adds its shared counts to the global ones once), and elements per thread.
_HIST_MAX_BLOCKS, _HIST_PER_THREAD = 1024, 16
# Simulator: threads per team-kernel block and the largest team (several teams per block, several blocks).
_SIM_TEAM_THREADS, _SIM_MAX_TEAM, _SIM_TEAM_BLOCKS = 8, 4, 2
_REDUCE_MAX_BLOCKS = 4096
_SIM_REDUCE_THREADS, _SIM_REDUCE_BLOCKS = 4, 2

# ---------------------------------------------------------------------------------------------
# Kernels (plain Python functions, compiled per signature by _cuda._compiled and the PTX check).
# ---------------------------------------------------------------------------------------------


@cuda.jit(device=True, inline="always")
def _team_coords(team):
    """``(tid, lane, first, teams)``: this thread, its lane in its team, the team's lane 0, teams per thread block."""
    tid = np.uint64(cuda.threadIdx.x)
    lane = tid % team
    return tid, lane, tid - lane, np.uint64(cuda.blockDim.x) // team


@cuda.jit(device=True, inline="always")
def _fold_keys(xs, c, end, step, use_minmax, lo, hi):
    """``lo``/``hi`` folded with the keys of ``xs[c], xs[c + step], ...`` below ``end`` (min/max keys or absmax)."""
    if use_minmax:
        while c < end:
            key = order_key(xs[c])
            lo = min(lo, key)
            hi = max(hi, key)
            c += step
    else:
        while c < end:
            hi = max(hi, abs_bits(xs[c]))
            c += step
    return lo, hi


@cuda.jit(device=True, inline="always")
def _team_keys(lo, hi, tid, first, team, slo, shi):
    """The min of ``lo`` and max of ``hi`` over the ``team`` lanes from thread ``first`` (a barrier for all).

    Each thread writes its keys to shared memory, then every lane reads its team's (the same
    addresses for a team: broadcast reads, no bank conflicts). The second barrier keeps the
    next round from overwriting keys a slower team is still reading.
    """
    slo[tid] = lo
    shi[tid] = hi
    cuda.syncthreads()
    i = first
    end = first + team
    while i < end:
        lo = min(lo, slo[i])
        hi = max(hi, shi[i])
        i += _U1
    cuda.syncthreads()
    return lo, hi


def dynamic_rows_kernel(x, use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound, reciprocal, scale_op,
                        mask, nbits, packed, bc, team, out, scale, zp):
    """Fused dynamic quantize of ``x`` (rows, C), blocks of ``bc``: ``scale``/``zp`` (rows, nblocks) and ``out``.

    A team of ``team`` threads per block; ``out`` holds (rows, C / k) bytes when ``packed``
    (``k = 8 // nbits`` codes per byte, whole bytes per block).
    """
    slo = cuda.shared.array(TEAM_THREADS, np.int64)
    shi = cuda.shared.array(TEAM_THREADS, np.int64)
    C = np.uint64(x.shape[1])
    nblocks = np.uint64(scale.shape[1])
    total = np.uint64(x.shape[0]) * nblocks
    ub = np.uint64(bc)
    ut = np.uint64(team)
    k = np.uint64(8 // nbits)
    shift = np.int32(nbits)
    tid, lane, first, teams = _team_coords(ut)
    base = np.uint64(cuda.blockIdx.x) * teams
    while base < total:  # the same rounds for every thread of the block (barriers inside)
        item = base + tid // ut
        active = item < total
        row = item // nblocks if active else _U0
        b = item - row * nblocks
        c0 = b * ub
        c1 = min(c0 + ub, C)
        xs = x[row]
        lo, hi = _fold_keys(xs, c0 + lane, c1 if active else _U0, ut, use_minmax, _KEY_HI,
                            _KEY_LO if use_minmax else _ZERO_KEY)
        lo, hi = _team_keys(lo, hi, tid, first, ut, slo, shi)
        if active:
            s, z = block_qparams(lo, hi, use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound)
            if lane == _U0:
                scale[row, b] = s
                zp[row, b] = np.int32(z)
            m = np.float32(1.0) / s if reciprocal else s
            os = out[row]
            if packed:
                j = c0 // k + lane
                while j * k < c1:
                    byte = np.int32(0)
                    sh = np.int32(0)
                    c = j * k
                    end = c + k
                    while c < end:
                        byte |= code_bits(quantize_value(xs[c], m, z, scale_op, False, qmin, qmax), mask) << sh
                        sh += shift
                        c += _U1
                    os[j] = byte
                    j += ut
            else:
                c = c0 + lane
                while c < c1:
                    os[c] = code_bits(quantize_value(xs[c], m, z, scale_op, False, qmin, qmax), mask)
                    c += ut
        base += np.uint64(cuda.gridDim.x) * teams


def block_reduce_kernel(x, use_minmax, bp, br, bc, team, lo, hi):
    """Reduce ``x`` (P, R, C) over blocks (bp, br, bc) into key grids ``lo``/``hi`` (GP, GR, GC), a team per cell."""
    slo = cuda.shared.array(TEAM_THREADS, np.int64)
    shi = cuda.shared.array(TEAM_THREADS, np.int64)
    P = np.uint64(x.shape[0])
    R = np.uint64(x.shape[1])
    C = np.uint64(x.shape[2])
    GR = np.uint64(hi.shape[1])
    GC = np.uint64(hi.shape[2])
    total = np.uint64(hi.shape[0]) * GR * GC
    ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
    ut = np.uint64(team)
    tid, lane, first, teams = _team_coords(ut)
    base = np.uint64(cuda.blockIdx.x) * teams
    while base < total:  # the same rounds for every thread of the block (barriers inside)
        cell = base + tid // ut
        active = cell < total
        rest = cell // GC if active else _U0
        g = cell - rest * GC
        sp = rest // GR
        sr = rest - sp * GR
        c0 = g * ubc
        c1 = min(c0 + ubc, C)
        a = _KEY_HI
        b = _KEY_LO if use_minmax else _ZERO_KEY
        p = sp * ubp if active else P
        p1 = min(sp * ubp + ubp, P)
        while p < p1:
            r = sr * ubr
            r1 = min(r + ubr, R)
            while r < r1:
                a, b = _fold_keys(x[p, r], c0 + lane, c1, ut, use_minmax, a, b)
                r += _U1
            p += _U1
        a, b = _team_keys(a, b, tid, first, ut, slo, shi)
        if active and lane == _U0:
            lo[sp, sr, g] = a
            hi[sp, sr, g] = b
        base += np.uint64(cuda.gridDim.x) * teams


def flat_reduce_kernel(x, use_minmax, lo, hi):
    """``lo[0] = min(lo[0], min key)``, ``hi[0] = max(hi[0], max key (or absmax bits))`` over a 1-D ``x``."""
    slo = cuda.shared.array(REDUCE_THREADS, np.int64)
    shi = cuda.shared.array(REDUCE_THREADS, np.int64)
    n = np.uint64(x.shape[0])
    tid = cuda.threadIdx.x
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    i = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(tid)
    a, b = _fold_keys(x, i, n, stride, use_minmax, _KEY_HI, _KEY_LO if use_minmax else _ZERO_KEY)
    slo[tid] = a
    shi[tid] = b
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if tid < half:
            slo[tid] = min(slo[tid], slo[tid + half])
            shi[tid] = max(shi[tid], shi[tid + half])
        cuda.syncthreads()
        half //= 2
    if tid == 0:
        cuda.atomic.min(lo, 0, slo[0])
        cuda.atomic.max(hi, 0, shi[0])


def qparams_kernel(lo, hi, use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound, scale, zp):
    """``scale``/``zp`` (flat) from reduced keys ``lo``/``hi`` (flat)."""
    n = np.uint64(hi.shape[0])
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    i = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    while i < n:
        s, z = block_qparams(lo[i], hi[i], use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound)
        scale[i] = s
        zp[i] = np.int32(z)
        i += stride


def fake_amax_kernel(x, amax, is_float, maxbound, qmin, qmax, fp, bp, br, bc, like, out, store_codes, codes):
    """modelopt fake quant of ``x`` (P, R, C) with a block-grid ``amax`` (GP, GR, GC) into ``out``.

    Integer path ``amax_code(x, S) / S`` (codes to ``codes`` with ``store_codes``); float
    path ``scaled_minifloat_fake`` with the ``e4m3_scales`` of the block's amax.
    """
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
        xs, am, os = x[p, r], amax[p // ubp, r // ubr], out[p, r]
        cs = codes[p, r] if store_codes else codes[0, 0]
        c = start
        g = g_start
        off = o_start
        while c < C:
            if is_float:
                s, inv = e4m3_scales(am[g], maxbound)
                os[c] = store_float(scaled_minifloat_fake(xs[c], s, inv, maxbound, fp), like)
            else:
                sq, sdq = amax_scales(am[g], maxbound)
                q = amax_code(xs[c], sq, qmin, qmax)
                if store_codes:
                    cs[c] = q
                # float32 casts: no-ops on the GPU; in the simulator they keep a 0 divisor inf/NaN, not an error
                os[c] = store_float(np.float32(q) / np.float32(sdq), like)
            c += stride
            g += g_step
            off += o_step
            if off >= ubc:
                off -= ubc
                g += _U1
        row += np.uint64(cuda.gridDim.y)


def ste_kernel(grad, x, lo, hi, bp, br, bc, like, out):
    """``out = grad where lo <= x <= hi else 0`` over (P, R, C) with block-grid bounds ``lo``/``hi``."""
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
        gs, xs, ls, hs, os = grad[p, r], x[p, r], lo[sp, sr], hi[sp, sr], out[p, r]
        c = start
        g = g_start
        off = o_start
        while c < C:
            os[c] = store_float(ste_value(gs[c], xs[c], ls[g], hs[g]), like)
            c += stride
            g += g_step
            off += o_step
            if off >= ubc:
                off -= ubc
                g += _U1
        row += np.uint64(cuda.gridDim.y)


def fake_affine_kernel(x, step, qz, minb, maxb, like, out):
    """Legacy FakeAffine over ``x`` (rows, n): ``affine_fake_value`` per element."""
    rows = np.uint64(x.shape[0])
    n = np.uint64(x.shape[1])
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    row = np.uint64(cuda.blockIdx.y)
    while row < rows:
        xs, os = x[row], out[row]
        c = start
        while c < n:
            os[c] = store_float(affine_fake_value(xs[c], step, qz, minb, maxb), like)
            c += stride
        row += np.uint64(cuda.gridDim.y)


def histogram_kernel(x, nbins, top, counts):
    """``counts[histogram_bin(|x|)] += 1`` over a 1-D ``x`` (NaN and values above ``top`` skipped).

    With ``nbins <= SHARED_BINS`` each thread block counts in shared memory (uint32: a block
    sees far fewer than 2**32 elements) and adds its non-zero bins to ``counts`` at the end;
    otherwise every element is a global ``atomic.add``.
    """
    local = cuda.shared.array(SHARED_BINS, np.uint32)
    private = nbins <= SHARED_BINS  # the same for every thread: the barriers below are safe
    ubins = np.uint64(nbins)
    tid = np.uint64(cuda.threadIdx.x)
    width = np.uint64(cuda.blockDim.x)
    if private:
        j = tid
        while j < ubins:
            local[j] = np.uint32(0)
            j += width
        cuda.syncthreads()
    n = np.uint64(x.shape[0])
    fn = np.float32(nbins)
    stride = np.uint64(cuda.gridDim.x) * width
    i = np.uint64(cuda.blockIdx.x) * width + tid
    while i < n:
        b = histogram_bin(x[i], fn, top, nbins)
        if b >= 0 and private:
            cuda.atomic.add(local, b, np.uint32(1))
        elif b >= 0:
            cuda.atomic.add(counts, b, np.uint64(1))
        i += stride
    if private:
        cuda.syncthreads()
        j = tid
        while j < ubins:
            v = local[j]
            if v:
                cuda.atomic.add(counts, j, np.uint64(v))
            j += width


# ---------------------------------------------------------------------------------------------
# Signatures (merged into _cuda.all_signatures(), which the PTX check compiles).
# ---------------------------------------------------------------------------------------------

KERNELS = {
    "dynamic_rows": dynamic_rows_kernel,
    "block_reduce": block_reduce_kernel,
    "flat_reduce": flat_reduce_kernel,
    "qparams": qparams_kernel,
    "fake_amax": fake_amax_kernel,
    "ste": ste_kernel,
    "fake_affine": fake_affine_kernel,
    "histogram": histogram_kernel,
}

#: Kernel-side inputs: float32, float64, float16 bits (uint16), bfloat16 bits (int16).
INPUT_DTYPES = tuple(map(np.dtype, (np.float32, np.float64, np.uint16, np.int16)))
#: Unpacked code storage (packed codes are uint8).
CODE_DTYPES = tuple(map(np.dtype, (np.uint8, np.uint16)))
#: The kernel-side output of each kernel-side input (float64 inputs give float32 results).
_OUT_OF = {np.dtype(np.float64): np.dtype(np.float32)}


def _out_of(dtype) -> np.dtype:
    return _OUT_OF.get(np.dtype(dtype), np.dtype(dtype))


def _arr(dtype, ndim: int) -> types.Array:
    return types.Array(from_dtype(np.dtype(dtype)), ndim, "C")


def dynamic_signature(kernel: str, data_dtype, out_dtype=None):
    """The Numba signature of a dynamic kernel for its input element type (and code storage type)."""
    i64, f32, b1 = types.int64, types.float32, types.boolean
    qp = (b1, i64, f32, f32, f32, f32, f32, f32)  # use_minmax, mapping, qmin, qmax, half_range, eps, zp_sym, maxbound
    if kernel == "dynamic_rows":
        args = (_arr(data_dtype, 2), *qp, b1, i64, i64, i64, b1, i64, i64, _arr(out_dtype, 2),
                _arr(np.float32, 2), _arr(np.int32, 2))
    elif kernel == "block_reduce":
        args = (_arr(data_dtype, 3), b1, i64, i64, i64, i64, _arr(np.int64, 3), _arr(np.int64, 3))
    elif kernel == "flat_reduce":
        args = (_arr(data_dtype, 1), b1, _arr(np.int64, 1), _arr(np.int64, 1))
    elif kernel == "qparams":
        args = (_arr(np.int64, 1), _arr(np.int64, 1), *qp, _arr(np.float32, 1), _arr(np.int32, 1))
    elif kernel == "fake_amax":
        like = from_dtype(np.dtype(out_dtype))
        args = (_arr(data_dtype, 3), _arr(np.float32, 3), b1, f32, f32, f32, types.UniTuple(i64, 7), i64, i64, i64,
                like, _arr(out_dtype, 3), b1, _arr(np.float32, 3))
    elif kernel == "fake_affine":
        args = (_arr(data_dtype, 2), f32, f32, f32, f32, from_dtype(np.dtype(out_dtype)), _arr(out_dtype, 2))
    elif kernel == "ste":  # data_dtype: (grad, x) kernel-side dtypes; out_dtype follows grad
        g, xd = data_dtype
        par = _arr(np.float32, 3)
        args = (_arr(g, 3), _arr(xd, 3), par, par, i64, i64, i64, from_dtype(np.dtype(out_dtype)), _arr(out_dtype, 3))
    elif kernel == "histogram":
        args = (_arr(data_dtype, 1), i64, f32, _arr(np.uint64, 1))
    else:
        raise KeyError(kernel)
    return types.void(*args)


def all_dynamic_signatures() -> list[tuple[str, object]]:
    """Every ``(kernel, signature)`` the dynamic entry points launch."""
    sigs = []
    for d in INPUT_DTYPES:
        sigs += [("dynamic_rows", dynamic_signature("dynamic_rows", d, c)) for c in CODE_DTYPES]
        sigs += [(k, dynamic_signature(k, d)) for k in ("block_reduce", "flat_reduce")]
    sigs.append(("qparams", dynamic_signature("qparams", np.int64)))
    for d in INPUT_DTYPES:
        sigs += [(k, dynamic_signature(k, d, _out_of(d))) for k in ("fake_amax", "fake_affine")]
        sigs += [("ste", dynamic_signature("ste", (d, xd), _out_of(d))) for xd in INPUT_DTYPES]
        sigs.append(("histogram", dynamic_signature("histogram", d)))
    return sigs


# ---------------------------------------------------------------------------------------------
# Entry points (cpu_dynamic signatures; NumPy or CUDA device arrays).
# ---------------------------------------------------------------------------------------------


def _backend():
    from . import _cuda

    return _cuda


def _launch(kernel: str, grid, threads, stream, args, sig) -> None:
    be = _backend()
    be.launched.add((kernel, sig))
    with warnings.catch_warnings():  # small inputs give small grids; Numba's occupancy warning is noise here
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        be._compiled(kernel, sig)[grid, threads, stream](*args)


def _device_out(o, stream):
    be = _backend()
    return be.as_device_array(o) if be.is_device(o) else cuda.device_array(o.shape, o.dtype, stream=stream)


def _copy_back(pairs, stream) -> None:
    be = _backend()
    host = [(o, d) for o, d in pairs if not be.is_device(o)]
    for o, d in host:
        d.copy_to_host(o, stream=stream)
    if host:
        stream.synchronize()


def _float_input(x, stream):
    """``x`` as a device kernel-float array (float16/bfloat16 as their bits)."""
    be = _backend()
    d = be.as_device_array(x)
    if d is None:
        return cuda.to_device(np.ascontiguousarray(kernel_float_view(np.asarray(x))), stream=stream)
    return kernel_float_view(be.device_float_input(d))


def team_size(block_len: int, simulator: bool | None = None) -> int:
    """Threads that share a block of ``block_len`` elements along a row: about four elements each.

    A power of two, at most :data:`MAX_TEAM` (a warp; the simulator: 4), so that a block's
    reads are coalesced and a long block (a whole row) is not one thread's serial loop.

    Examples
    --------
    >>> [team_size(n, simulator=False) for n in (1, 5, 8, 32, 128, 4096)]
    [1, 1, 2, 8, 32, 32]
    """
    cap = _SIM_MAX_TEAM if (_backend().SIMULATOR if simulator is None else simulator) else MAX_TEAM
    team = 1
    while team < cap and 8 * team <= block_len:
        team *= 2
    return team


def _team_launch(items: int, team: int) -> tuple[int, int]:
    """``(blocks, threads)`` for ``items`` team items (grid-stride rounds beyond the block cap)."""
    if _backend().SIMULATOR:
        threads = _SIM_TEAM_THREADS
        return min(_SIM_TEAM_BLOCKS, -(-items // (threads // team))), threads
    blocks = -(-items // (TEAM_THREADS // team))
    return max(1, min(blocks, _backend().MAX_BLOCKS)), TEAM_THREADS


def _flat_grid(n: int) -> tuple[int, int]:
    (gx, _), threads = _backend().launch_config(1, n)
    return gx, threads


def _reduce_device(x, spec, stream):
    """Reduced keys ``(lo, hi)`` as flat device arrays over the block grid (row-major)."""
    layout = spec.layout
    be = _backend()
    xd = _float_input(x, stream)
    if layout.num_blocks == 1:
        flat = xd.reshape(int(xd.size))
        lo = cuda.to_device(np.array([_KEY_HI]), stream=stream)
        hi = cuda.to_device(np.array([_KEY_LO if spec.use_minmax else 0], np.int64), stream=stream)
        n = int(flat.size)
        if be.SIMULATOR:
            threads, blocks = _SIM_REDUCE_THREADS, min(_SIM_REDUCE_BLOCKS, -(-n // _SIM_REDUCE_THREADS))
        else:
            threads, blocks = REDUCE_THREADS, min(_REDUCE_MAX_BLOCKS, -(-n // REDUCE_THREADS))
        _launch("flat_reduce", blocks, threads, stream, (flat, spec.use_minmax, lo, hi),
                dynamic_signature("flat_reduce", flat.dtype))
        return lo, hi
    dims = canonical_dims(layout.shape, layout.block)
    if len(dims) > 3:  # rare: more than three unmergeable block dims; reduce with the NumPy oracle
        from .reference_dynamic import reduce_keys

        xh = x if not be.is_device(x) else be.as_device_array(x).copy_to_host(stream=stream)
        lo, hi = reduce_keys(xh, spec)
        return (cuda.to_device(np.ascontiguousarray(lo, np.int64), stream=stream),
                cuda.to_device(np.ascontiguousarray(hi, np.int64), stream=stream))
    dims = [(1, 1)] * (3 - len(dims)) + dims
    x3 = xd.reshape(tuple(n for n, _ in dims))
    grid = tuple(-(-n // b) for n, b in dims)
    lo = cuda.device_array(grid, np.int64, stream=stream)
    hi = cuda.device_array(grid, np.int64, stream=stream)
    team = team_size(dims[2][1])
    blocks, threads = _team_launch(int(np.prod(grid)), team)
    _launch("block_reduce", blocks, threads, stream, (x3, spec.use_minmax, *(b for _, b in dims), team, lo, hi),
            dynamic_signature("block_reduce", x3.dtype))
    size = int(np.prod(grid))
    return lo.reshape(size), hi.reshape(size)


def _reduce_grid(x, spec):
    """Reduced keys ``(lo, hi)`` as flat host arrays over the block grid (as :func:`cpu_dynamic._reduce_grid`)."""
    stream = _backend().current_stream()
    lo, hi = _reduce_device(x, spec, stream)
    lo_h, hi_h = lo.copy_to_host(stream=stream), hi.copy_to_host(stream=stream)
    stream.synchronize()
    return lo_h, hi_h


def choose_qparams(x, spec, scale, zp) -> None:
    """Fill the flat block-grid ``scale`` (float32) and ``zp`` (int32)."""
    stream = _backend().current_stream()
    lo, hi = _reduce_device(x, spec, stream)
    n = int(hi.size)
    ds, dz = _device_out(scale, stream), _device_out(zp, stream)
    grid, threads = _flat_grid(n)
    _launch("qparams", grid, threads, stream, (lo, hi, *_kernel_args(spec), ds.reshape(n), dz.reshape(n)),
            dynamic_signature("qparams", np.int64))
    _copy_back([(scale, ds), (zp, dz)], stream)


def quantize_dynamic(x, spec, out, scale, zp) -> bool:
    """Fused one-pass dynamic quantize when the layout allows it; returns False if the caller must use two passes."""
    fmt = spec.format
    rv = _rows_view(spec.layout)
    if rv is None or spec.layout.num_blocks == 1:
        return False
    rows, C, bc = rv
    k = fmt.codes_per_byte if spec.packed else 1
    if spec.packed and bc % k and bc < C:
        return False
    stream = _backend().current_stream()
    x2 = _float_input(x, stream).reshape((rows, C))
    do, ds, dz = _device_out(out, stream), _device_out(scale, stream), _device_out(zp, stream)
    nblocks = int(ds.size) // rows
    o2, s2, z2 = do.reshape((rows, C // k)), ds.reshape((rows, nblocks)), dz.reshape((rows, nblocks))
    op = SCALE_DIVIDE if spec.scale_op == SCALE_DIVIDE and not spec.reciprocal else SCALE_MULTIPLY
    team = team_size(bc)
    args = (x2, *_kernel_args(spec), bool(spec.reciprocal), int(op), int(fmt.mask), int(fmt.bits), bool(spec.packed),
            int(bc), team, o2, s2, z2)
    blocks, threads = _team_launch(rows * nblocks, team)
    _launch("dynamic_rows", blocks, threads, stream, args, dynamic_signature("dynamic_rows", x2.dtype, o2.dtype))
    _copy_back([(out, do), (scale, ds), (zp, dz)], stream)
    return True


def fake_quant_amax(x, amax_grid, mspec, out, codes=None) -> None:
    """modelopt fake quant (integer or minifloat) with ``amax_grid`` over ``mspec.layout``."""
    be = _backend()
    stream = be.current_stream()
    xd = _float_input(x, stream)
    do = _device_out(out, stream)
    ok = kernel_float_view(do)
    dc = _device_out(codes, stream) if codes is not None else cuda.device_array((1, 1, 1), np.float32, stream=stream)
    data = [xd, ok] + ([dc] if codes is not None else [])
    da = be._to_device(np.ascontiguousarray(amax_grid, np.float32), stream)
    like = output_float_like(out.dtype)
    fp = tuple(int(v) for v in mspec.fp)
    consts = (bool(mspec.is_float), np.float32(mspec.maxbound), np.float32(mspec.qmin), np.float32(mspec.qmax), fp)
    for views, (a3,), blocks in canonical_views(mspec.layout, data, [da], [1] * len(data)):
        x3, o3 = views[0], views[1]
        c3 = views[2] if codes is not None else dc
        grid, threads = be.launch_config(x3.shape[0] * x3.shape[1], x3.shape[2])
        _launch("fake_amax", grid, threads, stream, (x3, a3, *consts, *blocks, like, o3, codes is not None, c3),
                dynamic_signature("fake_amax", x3.dtype, o3.dtype))
    _copy_back([(out, do)] + ([(codes, dc)] if codes is not None else []), stream)


def fake_affine(x, step, qz, minb, maxb, out) -> None:
    """Legacy FakeAffine (per tensor) of ``x`` into ``out``."""
    be = _backend()
    stream = be.current_stream()
    cols = x.shape[-1] if x.ndim else 1
    xd = _float_input(x, stream)
    x2 = xd.reshape((int(xd.size) // cols, cols))
    do = _device_out(out, stream)
    o2 = kernel_float_view(do).reshape(x2.shape)
    grid, threads = be.launch_config(x2.shape[0], cols)
    args = (x2, np.float32(step), np.float32(qz), np.float32(minb), np.float32(maxb), output_float_like(out.dtype), o2)
    _launch("fake_affine", grid, threads, stream, args, dynamic_signature("fake_affine", x2.dtype, o2.dtype))
    _copy_back([(out, do)], stream)


def ste_backward(grad, x, lo_grid, hi_grid, layout, out) -> None:
    """``out = grad where lo <= x <= hi else 0`` with block-grid bounds over ``layout``."""
    be = _backend()
    stream = be.current_stream()
    do = _device_out(out, stream)
    data = [_float_input(grad, stream), _float_input(x, stream), kernel_float_view(do)]
    params = [be._to_device(np.ascontiguousarray(a, np.float32), stream) for a in (lo_grid, hi_grid)]
    like = output_float_like(out.dtype)
    for (g3, x3, o3), (l3, h3), blocks in canonical_views(layout, data, params, [1, 1, 1]):
        grid, threads = be.launch_config(x3.shape[0] * x3.shape[1], x3.shape[2])
        _launch("ste", grid, threads, stream, (g3, x3, l3, h3, *blocks, like, o3),
                dynamic_signature("ste", (g3.dtype, x3.dtype), o3.dtype))
    _copy_back([(out, do)], stream)


def abs_histogram(x, nbins: int, top) -> np.ndarray:
    """int64 counts of ``|x|`` in ``nbins`` bins over ``[0, top]``."""
    be = _backend()
    stream = be.current_stream()
    xd = _float_input(x, stream)
    flat = xd.reshape(int(xd.size))
    counts = cuda.to_device(np.zeros(int(nbins), np.uint64), stream=stream)
    grid, threads = _flat_grid(int(flat.size))
    if not be.SIMULATOR:  # fewer, fuller blocks: each one adds up to nbins shared counts at its end
        grid = max(1, min(grid, _HIST_MAX_BLOCKS, -(-int(flat.size) // (threads * _HIST_PER_THREAD))))
    _launch("histogram", grid, threads, stream, (flat, int(nbins), np.float32(top), counts),
            dynamic_signature("histogram", flat.dtype))
    host = counts.copy_to_host(stream=stream)
    stream.synchronize()
    return host.astype(np.int64)
