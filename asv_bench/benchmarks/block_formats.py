"""Fused block formats (scales computed in the kernel): OCP MX (mxfp4, mxfp8, mxint8) and NVFP4."""

from __future__ import annotations

import numpy as np

import nbquant

from .common import BACKENDS, SIZES, Device, schemes, shape, sqnr_db


def _quantize(x, fmt: str, backend: str):
    if fmt == "nvfp4":
        return nbquant.quantize_nvfp4(x, backend=backend)
    return nbquant.quantize_mx(x, fmt, backend=backend)


def _dequantize(r, backend: str):
    if r.format == "nvfp4":
        return nbquant.dequantize_nvfp4(r.data, r.scales, r.global_scale, backend=backend)
    return nbquant.dequantize_mx(r.data, r.scales, r.format, backend=backend)


class BlockFormats:
    """Quantize (fused amax, scale, encode) and dequantize along the last axis; SQNR of the round trip."""

    params = (BACKENDS, SIZES, schemes(["mxfp4", "nvfp4", "mxfp8_e4m3", "mxint8"]))
    param_names = ["backend", "n", "format"]
    timeout = 300

    def setup(self, backend, n, fmt):
        self.dev = Device(backend)
        self.host_x = np.random.default_rng(0).standard_normal(shape(n), dtype=np.float32)
        self.x = self.dev.put(self.host_x)
        self.r = _quantize(self.x, fmt, backend)
        _dequantize(self.r, backend)
        self.dev.sync()

    def time_quantize(self, backend, n, fmt):
        _quantize(self.x, fmt, backend)
        self.dev.sync()

    def time_dequantize(self, backend, n, fmt):
        _dequantize(self.r, backend)
        self.dev.sync()

    def peakmem_quantize(self, backend, n, fmt):
        _quantize(self.x, fmt, backend)

    def track_sqnr(self, backend, n, fmt):
        """SQNR (dB) of dequantize(quantize(x)) against x."""
        return sqnr_db(self.host_x, self.dev.get(_dequantize(self.r, backend)))

    track_sqnr.unit = "dB"
