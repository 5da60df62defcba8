"""The cuda backend's modelopt operations and the calibrator's histogram.

Fake quantization from a block-grid amax, the legacy FakeAffine and the
straight-through gradient run the kernels of :mod:`.elementwise`;
:func:`histogram_kernel` counts ``|x|`` in shared memory per thread block (up to
:data:`SHARED_BINS` bins) and adds them to the global counts once per block.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from ...element import (
    histogram_bin,
)
from ...layout import canonical_views
from .._views import kernel_float_view, output_float_like
from . import runtime
from ._loops import thread_start
from .elementwise import fake_affine_kernel, fake_amax_kernel, ste_kernel
from .runtime import F32, I64, INPUT_DTYPES, array_type, cuda_kernel

_PARAM = array_type(np.float32, 3)
#: Bins that :func:`histogram_kernel` counts in shared memory (uint32, 16 KiB); more use global atomics.
SHARED_BINS = 4096
#: Histogram thread blocks at most (each adds its shared counts to the global ones once), and elements per thread.
_HIST_MAX_BLOCKS, _HIST_PER_THREAD = 1024, 16


@cuda_kernel(lambda d: types.void(array_type(d, 1), I64, F32, array_type(np.uint64, 1)), [(d,) for d in INPUT_DTYPES])
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
    i, stride = thread_start()
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


class ModeloptOps:
    """modelopt operations and the calibrator's histogram (:class:`~nbquant.backends.interface.Backend`)."""

    def fake_quant_amax(self, x, amax_grid, mspec, out, codes=None) -> None:
        """modelopt fake quant (integer or minifloat) with ``amax_grid`` over ``mspec.layout``."""
        stream = runtime.current_stream()
        xd = runtime.device_float(x, stream)
        do = runtime.result_on_device(out, stream)
        dc = runtime.result_on_device(codes, stream) if codes is not None else runtime.device_empty((1, 1, 1),
                                                                                                    np.float32)
        data = [xd, kernel_float_view(do)] + ([dc] if codes is not None else [])
        da = runtime.to_device(np.ascontiguousarray(amax_grid, np.float32), stream)
        like = output_float_like(out.dtype)
        consts = (bool(mspec.is_float), np.float32(mspec.maxbound), np.float32(mspec.qmin), np.float32(mspec.qmax),
                  tuple(int(v) for v in mspec.fp))
        for views, (a3,), blocks in canonical_views(mspec.layout, data, [da], [1] * len(data)):
            x3, o3 = views[0], views[1]
            c3 = views[2] if codes is not None else dc
            grid, threads = runtime.grid_for_rows(x3.shape[0] * x3.shape[1], x3.shape[2])
            fake_amax_kernel.launch(grid, threads, stream, (x3, a3, *consts, *blocks, like, o3, codes is not None, c3),
                                    x3.dtype, o3.dtype)
        runtime.copy_back([(out, do)] + ([(codes, dc)] if codes is not None else []), stream)

    def fake_affine(self, x, step, qz, minb, maxb, out) -> None:
        """Legacy FakeAffine (per tensor) of ``x`` into ``out``."""
        stream = runtime.current_stream()
        cols = x.shape[-1] if x.ndim else 1
        xd = runtime.device_float(x, stream)
        x2 = xd.reshape((int(xd.size) // cols, cols))
        do = runtime.result_on_device(out, stream)
        o2 = kernel_float_view(do).reshape(x2.shape)
        grid, threads = runtime.grid_for_rows(x2.shape[0], cols)
        args = (x2, np.float32(step), np.float32(qz), np.float32(minb), np.float32(maxb), output_float_like(out.dtype),
                o2)
        fake_affine_kernel.launch(grid, threads, stream, args, x2.dtype, o2.dtype)
        runtime.copy_back([(out, do)], stream)

    def ste_backward(self, grad, x, lo_grid, hi_grid, layout, out) -> None:
        """``out = grad where lo <= x <= hi else 0`` with block-grid bounds over ``layout``."""
        stream = runtime.current_stream()
        do = runtime.result_on_device(out, stream)
        data = [runtime.device_float(grad, stream), runtime.device_float(x, stream), kernel_float_view(do)]
        params = [runtime.to_device(np.ascontiguousarray(a, np.float32), stream) for a in (lo_grid, hi_grid)]
        like = output_float_like(out.dtype)
        for (g3, x3, o3), (l3, h3), blocks in canonical_views(layout, data, params, [1, 1, 1]):
            grid, threads = runtime.grid_for_rows(x3.shape[0] * x3.shape[1], x3.shape[2])
            ste_kernel.launch(grid, threads, stream, (g3, x3, l3, h3, *blocks, like, o3), g3.dtype, x3.dtype,
                              o3.dtype)
        runtime.copy_back([(out, do)], stream)

    def abs_histogram(self, x, nbins: int, top) -> np.ndarray:
        """int64 counts of ``|x|`` in ``nbins`` bins over ``[0, top]``."""
        stream = runtime.current_stream()
        xd = runtime.device_float(x, stream)
        flat = xd.reshape(int(xd.size))
        counts = runtime.to_device(np.zeros(int(nbins), np.uint64), stream)
        n = int(flat.size)
        # fewer, fuller blocks than one per 256 elements: each adds up to nbins shared counts at its end
        blocks, threads = runtime.reduction_grid(-(-n // _HIST_PER_THREAD), _HIST_MAX_BLOCKS)
        histogram_kernel.launch(blocks, threads, stream, (flat, int(nbins), np.float32(top), counts), flat.dtype)
        return runtime.to_host(counts).astype(np.int64)
