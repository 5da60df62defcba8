"""The roofline of the machine, next to nbquant's timings: the same bytes moved by the simplest kernel there is.

A numba ``parallel=True`` float32 -> int8 cast into a preallocated buffer (what
``python -m benchmarks`` divides by for its %roof column) and a read-only ``max |x|``
(the calibrators' roofline). Neither depends on nbquant: between two commits they
should not move, so a change here in ``asv compare`` measures the machine's noise,
not the code's.
"""

from __future__ import annotations

import numpy as np

from .common import SIZES, shape

_KERNELS = []


def _kernels():
    """The compiled cast and ``max |x|`` (compiled on first use; numba loads lazily)."""
    if not _KERNELS:
        from numba import njit, prange

        @njit(parallel=True, cache=False)
        def cast(src, out):
            for r in prange(src.shape[0]):
                s, o = src[r], out[r]
                for c in range(s.size):
                    o[c] = s[c]

        @njit(parallel=True, cache=False)
        def absmax(src):
            # |x| of a float32 orders as its bits with the sign cleared; int32 lanes vectorize.
            m = np.int32(0)
            for r in prange(src.shape[0]):
                s = src[r]
                k = np.int32(0)
                for c in range(s.size):
                    k = max(k, s[c] & np.int32(0x7FFFFFFF))
                m = max(m, k)
            return m

        _KERNELS.extend([cast, absmax])
    return _KERNELS


class Roofline:
    """Machine references: the float32 -> int8 cast (``out=``) and a read-only ``max |x|``."""

    params = (SIZES,)
    param_names = ["n"]
    timeout = 300

    def setup(self, n):
        self.cast, self.absmax = _kernels()
        self.x = np.random.default_rng(0).standard_normal(shape(n), dtype=np.float32)
        self.bits = self.x.view(np.int32)
        self.out = np.empty(self.x.shape, np.int8)
        self.cast(self.x, self.out)
        self.absmax(self.bits)

    def time_cast_float32_to_int8(self, n):
        """Reads 4 bytes and writes 1 per element, into a preallocated buffer."""
        self.cast(self.x, self.out)

    def time_absmax(self, n):
        """Reads 4 bytes per element."""
        self.absmax(self.bits)
