"""Benchmark base classes shared by the capability modules (no benchmarks here)."""

from __future__ import annotations

import numpy as np

import nbquant

from .common import Device, Problem


class _QuantizeBase:
    """``nbquant.quantize`` of one scheme: time (allocating and ``out=``) and peak memory.

    ``setup`` makes the first call, so JIT compilation is not timed. Subclasses set
    ``params`` as ``(backends, sizes, schemes)``. The numerics (SQNR, bits against the
    reference backend) are tracked on a fixed matrix in :mod:`.numerics`.
    """

    param_names = ["backend", "n", "scheme"]
    timeout = 300

    def setup(self, backend, n, scheme):
        self.dev = Device(backend, n)
        self.p = Problem(scheme, n)
        self.x = self.dev.put(self.p.x)
        self.out = self.dev.put(np.empty_like(self.p.codes()))
        self.kw = dict(self.p.qkwargs, backend=backend)
        self.time_quantize(backend, n, scheme)
        self.time_quantize_out(backend, n, scheme)

    def time_quantize(self, backend, n, scheme):
        """Allocating call."""
        nbquant.quantize(self.x, self.p.scale, self.p.dtype, **self.kw)
        self.dev.sync()

    def time_quantize_out(self, backend, n, scheme):
        """Into a preallocated ``out=``."""
        nbquant.quantize(self.x, self.p.scale, self.p.dtype, out=self.out, **self.kw)
        self.dev.sync()

    def peakmem_quantize(self, backend, n, scheme):
        """Peak RSS of the process around an allocating call (includes the inputs)."""
        nbquant.quantize(self.x, self.p.scale, self.p.dtype, **self.kw)


class _DequantizeBase:
    """``nbquant.dequantize`` of one scheme's codes into a fresh array and into ``out=``."""

    param_names = ["backend", "n", "scheme"]
    timeout = 300

    def setup(self, backend, n, scheme):
        self.dev = Device(backend, n)
        self.p = Problem(scheme, n)
        self.q = self.dev.put(self.p.codes())
        self.out = self.dev.put(np.empty(self.p.x.shape, np.float32))
        self.kw = dict(self.p.dqkwargs, backend=backend)
        self.time_dequantize(backend, n, scheme)
        self.time_dequantize_out(backend, n, scheme)

    def time_dequantize(self, backend, n, scheme):
        """Into a fresh float32 array (bound by first-touch page zeroing on the CPU)."""
        nbquant.dequantize(self.q, self.p.scale, **self.kw)
        self.dev.sync()

    def time_dequantize_out(self, backend, n, scheme):
        """Into a preallocated ``out=``."""
        nbquant.dequantize(self.q, self.p.scale, out=self.out, **self.kw)
        self.dev.sync()

    def peakmem_dequantize(self, backend, n, scheme):
        """Peak RSS of the process around an allocating call (includes the inputs)."""
        nbquant.dequantize(self.q, self.p.scale, **self.kw)
