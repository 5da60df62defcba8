"""The roofline row of the ratio benchmark: the same bytes moved by the simplest kernel there is.

On the CPU, a numba ``parallel=True`` cast of the case's shapes and dtypes into a
preallocated buffer (float32 -> int8, float32 -> packed nibbles, codes -> float32), or
a ``max |x|`` over the input for a case that only reads it (calibrators). On the GPU,
a device-to-device copy of the same number of bytes.
"""

from __future__ import annotations

import numpy as np

from .problems import Bench, Problem


def _roof_kernels():
    """Numba parallel casts of 2-D arrays (same shape, 2:1 packing, 1:2 unpacking) and a ``max |x|``."""
    from numba import njit, prange

    @njit(parallel=True, cache=False)
    def cast(src, out):
        for r in prange(src.shape[0]):
            s, o = src[r], out[r]
            for c in range(s.size):
                o[c] = s[c]

    @njit(parallel=True, cache=False)
    def pack2(src, out):
        for r in prange(src.shape[0]):
            s, o = src[r], out[r]
            for j in range(o.size):
                o[j] = (np.int32(s[2 * j]) & 15) | (np.int32(s[2 * j + 1]) << 4)

    @njit(parallel=True, cache=False)
    def unpack2(src, out):
        for r in prange(src.shape[0]):
            s, o = src[r], out[r]
            for j in range(s.size):
                o[2 * j] = np.float32(s[j] & 15)
                o[2 * j + 1] = np.float32(s[j] >> 4)

    @njit(inline="always")
    def row_abs_bits_max(s):
        m = np.int32(0)
        for c in range(s.size):
            m = np.int32(max(m, s[c] & 0x7FFFFFFF))
        return m

    @njit(parallel=True, cache=False)
    def absmax(src, out):
        # |x| of a float32 orders as its bits with the sign cleared; int32 lanes vectorize 8 wide.
        m = np.int32(0)
        for r in prange(src.shape[0]):
            m = max(m, row_abs_bits_max(src[r].view(np.int32)))
        out.view(np.int32)[0] = m

    return cast, pack2, unpack2, absmax


#: The kernels of :func:`_roof_kernels`, compiled on the first :func:`cpu_roofline` (numba loads lazily).
_ROOF = []


def _numba_view(a: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays (fp8, ...) as same-width unsigned integers, which numba can type."""
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "V" else a


def cpu_roofline(p: Problem) -> Bench:
    """A numba parallel cast from ``p.src`` into ``p.out`` (same bytes as the case), or ``max |x|`` of a reduction.

    Parameters
    ----------
    p : Problem
        The case's arrays; the kernel is chosen from their shapes (same shape: a cast;
        half the columns out: packing; twice the columns out: unpacking; fewer
        dimensions out: ``max |x|``).

    Returns
    -------
    callable
        The zero-argument call to time.
    """
    if not _ROOF:
        _ROOF.extend(_roof_kernels())
    cast, pack2, unpack2, absmax = _ROOF
    src, out = _numba_view(p.src), _numba_view(p.out)
    if p.reduces:
        kernel = absmax
    elif src.shape == out.shape:
        kernel = cast
    else:
        kernel = pack2 if src.shape[1] > out.shape[1] else unpack2
    return lambda: kernel(src, out)


def cuda_roofline(p: Problem) -> Bench:
    """A device-to-device copy moving the case's bytes (``nbytes / 2`` read and written)."""
    from numba import cuda

    half = max(p.nbytes // 2, 1)
    a = cuda.device_array(half, np.uint8)
    b = cuda.device_array(half, np.uint8)
    return lambda: b.copy_to_device(a)
