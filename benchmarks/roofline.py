"""The roofline row of the ratio benchmark: the same bytes moved by the simplest kernel there is.

On the CPU, a numba ``parallel=True`` cast of the case's shapes and dtypes into a
preallocated buffer (float32 -> int8, float32 -> packed codes, codes -> float32), or
a ``max |x|`` over the input for a case that only reads it (calibrators). The kernel
follows from the column ratio of ``out`` to ``src`` (:func:`roofline_kind`): the same
columns are a cast, 1/2 and 1/4 pack 4- and 2-bit codes, 3/4 packs 6-bit codes (4 in
3 bytes), 2 and 4 unpack 4- and 2-bit codes. On the GPU, a device-to-device copy of
the same number of bytes.
"""

from __future__ import annotations

import math

import numpy as np

from .problems import Bench, Problem

#: Roofline kernels by the ratio ``out`` columns / ``src`` columns (see :func:`roofline_kind`).
_BY_RATIO = {(1, 1): "cast", (1, 2): "pack2", (1, 4): "pack4", (3, 4): "pack43", (2, 1): "unpack2",
             (4, 1): "unpack4"}


def _roof_kernels():
    """Numba parallel casts of 2-D arrays and a ``max |x|``, by the names of :data:`_BY_RATIO` and ``"absmax"``.

    Same shape; 2:1 and 4:1 packing; 4 6-bit codes into 3 bytes; 1:2 and 1:4 unpacking.
    """
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
    def pack4(src, out):
        for r in prange(src.shape[0]):
            s, o = src[r], out[r]
            for j in range(o.size):
                o[j] = ((np.int32(s[4 * j]) & 3) | ((np.int32(s[4 * j + 1]) & 3) << 2)
                        | ((np.int32(s[4 * j + 2]) & 3) << 4) | (np.int32(s[4 * j + 3]) << 6))

    @njit(parallel=True, cache=False)
    def pack43(src, out):
        for r in prange(src.shape[0]):
            s, o = src[r], out[r]
            for j in range(o.size // 3):
                a, b = np.int32(s[4 * j]), np.int32(s[4 * j + 1])
                c, d = np.int32(s[4 * j + 2]), np.int32(s[4 * j + 3])
                o[3 * j] = (a & 63) | (b << 6)
                o[3 * j + 1] = ((b >> 2) & 15) | (c << 4)
                o[3 * j + 2] = ((c >> 4) & 3) | (d << 2)

    @njit(parallel=True, cache=False)
    def unpack2(src, out):
        for r in prange(src.shape[0]):
            s, o = src[r], out[r]
            for j in range(s.size):
                o[2 * j] = np.float32(s[j] & 15)
                o[2 * j + 1] = np.float32(s[j] >> 4)

    @njit(parallel=True, cache=False)
    def unpack4(src, out):
        for r in prange(src.shape[0]):
            s, o = src[r], out[r]
            for j in range(s.size):
                o[4 * j] = np.float32(s[j] & 3)
                o[4 * j + 1] = np.float32((s[j] >> 2) & 3)
                o[4 * j + 2] = np.float32((s[j] >> 4) & 3)
                o[4 * j + 3] = np.float32(s[j] >> 6)

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

    return {"cast": cast, "pack2": pack2, "pack4": pack4, "pack43": pack43, "unpack2": unpack2,
            "unpack4": unpack4, "absmax": absmax}


#: The kernels of :func:`_roof_kernels`, compiled on the first :func:`cpu_roofline` (numba loads lazily).
_ROOF: dict = {}


def _numba_view(a: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays (fp8, fp6, fp4, ...) as same-width unsigned integers, which numba can type.

    ml_dtypes' types are user-defined dtypes (``isbuiltin == 2``); their kind is ``"V"``
    except for float8_e5m2, whose kind is ``"f"``.
    """
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.isbuiltin == 2 else a


def roofline_kind(p: Problem) -> str:
    """The name of the roofline kernel of ``p``: ``"absmax"`` for a reduction, else by the column ratio out / src.

    Parameters
    ----------
    p : Problem
        The case's arrays (2-D ``src`` and ``out`` with the same rows, or a reduction).

    Returns
    -------
    str
        ``"cast"``, ``"pack2"``, ``"pack4"``, ``"pack43"``, ``"unpack2"``, ``"unpack4"`` or ``"absmax"``.

    Raises
    ------
    ValueError
        If no roofline kernel moves the bytes of these shapes.

    Examples
    --------
    >>> import numpy as np
    >>> from benchmarks.problems import Problem
    >>> p = Problem(np.zeros((2, 64), np.float32), np.zeros((2, 48), np.uint8), np.ones((1, 1), np.float32),
    ...             (2, 64), (0, 0), {})
    >>> roofline_kind(p)
    'pack43'
    """
    if p.reduces:
        return "absmax"
    (rs, cs), (ro, co) = p.src.shape, p.out.shape
    g = math.gcd(cs, co)
    kind = _BY_RATIO.get((co // g, cs // g)) if rs == ro else None
    if kind is None:
        raise ValueError(f"no roofline kernel writes {p.out.shape} from {p.src.shape}")
    return kind


def cpu_roofline(p: Problem) -> Bench:
    """A numba parallel cast from ``p.src`` into ``p.out`` (same bytes as the case), or ``max |x|`` of a reduction.

    Parameters
    ----------
    p : Problem
        The case's arrays; the kernel is chosen from their shapes (:func:`roofline_kind`:
        same shape, a cast; 1/2, 1/4 or 3/4 of the columns out, packing; 2 or 4 times
        the columns out, unpacking; fewer dimensions out, ``max |x|``).

    Returns
    -------
    callable
        The zero-argument call to time.
    """
    kind = roofline_kind(p)
    if not _ROOF:
        _ROOF.update(_roof_kernels())
    kernel = _ROOF[kind]
    src, out = _numba_view(p.src), _numba_view(p.out)
    return lambda: kernel(src, out)


def cuda_roofline(p: Problem) -> Bench:
    """A device-to-device copy moving the case's bytes (``nbytes / 2`` read and written)."""
    from numba import cuda

    half = max(p.nbytes // 2, 1)
    a = cuda.device_array(half, np.uint8)
    b = cuda.device_array(half, np.uint8)
    return lambda: b.copy_to_device(a)
