"""Fused block formats (scales computed in the kernel): OCP MX, NVFP4 and NF4.

MX: mxfp8 (e4m3, e5m2), mxfp6 (e2m3, e3m2), mxfp4 (packed) and mxint8 in blocks of
32 along the last axis; NVFP4 in blocks of 16 (fp8 e4m3 block scales under a float32
global scale); NF4 (``quantize_nf4``) in blocks of 64, with and without the double
quantization of its scales. The numerics are tracked in :mod:`.numerics`.
"""

from __future__ import annotations

import numpy as np

import nbquant

from .common import BACKENDS, SIZES, Device, schemes, shape

#: The MX formats and NVFP4; quick mode runs the first two.
BLOCK_FORMATS = ["mxfp4", "nvfp4", "mxfp8_e4m3", "mxint8", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2"]


def quantize_block(x, fmt: str, backend: str):
    """``quantize_nvfp4`` or ``quantize_mx`` (a :class:`nbquant.BlockQuantized`)."""
    if fmt == "nvfp4":
        return nbquant.quantize_nvfp4(x, backend=backend)
    return nbquant.quantize_mx(x, fmt, backend=backend)


def dequantize_block(r, backend: str):
    """The float32 values of a :class:`nbquant.BlockQuantized` on ``backend``."""
    if r.format == "nvfp4":
        return nbquant.dequantize_nvfp4(r.data, r.scales, r.global_scale, backend=backend)
    return nbquant.dequantize_mx(r.data, r.scales, r.format, backend=backend)


class BlockFormats:
    """Quantize (fused amax, scale, encode) and dequantize along the last axis: time and peak memory."""

    params = (BACKENDS, SIZES, schemes(BLOCK_FORMATS))
    param_names = ["backend", "n", "format"]
    timeout = 300

    def setup(self, backend, n, fmt):
        self.dev = Device(backend, n)
        self.x = self.dev.put(np.random.default_rng(0).standard_normal(shape(n), dtype=np.float32))
        self.r = quantize_block(self.x, fmt, backend)
        dequantize_block(self.r, backend)
        self.dev.sync()

    def time_quantize(self, backend, n, fmt):
        quantize_block(self.x, fmt, backend)
        self.dev.sync()

    def time_dequantize(self, backend, n, fmt):
        dequantize_block(self.r, backend)
        self.dev.sync()

    def peakmem_quantize(self, backend, n, fmt):
        quantize_block(self.x, fmt, backend)


#: NF4 variants: name -> (block size, double quantization of the scales).
NF4_VARIANTS = {"block64": (64, False), "block64_double_quant": (64, True)}


def quantize_nf4(x, variant: str, backend: str):
    """``quantize_nf4`` of a variant; double quantization in groups of 256 scales (fewer for tiny inputs)."""
    block, double = NF4_VARIANTS[variant]
    sbs = min(256, x.size // block) if double else None
    return nbquant.quantize_nf4(x, block_size=block, scale_block_size=sbs, backend=backend)


class NF4:
    """``quantize_nf4`` (nearest of 16 levels, block absmax) and its dequantize: time and peak memory."""

    params = (BACKENDS, SIZES, list(NF4_VARIANTS))
    param_names = ["backend", "n", "variant"]
    timeout = 300

    def setup(self, backend, n, variant):
        self.dev = Device(backend, n)
        self.x = self.dev.put(np.random.default_rng(0).standard_normal(shape(n), dtype=np.float32))
        self.r = quantize_nf4(self.x, variant, backend)
        self.r.dequantize(backend=backend)
        self.dev.sync()

    def time_quantize(self, backend, n, variant):
        quantize_nf4(self.x, variant, backend)
        self.dev.sync()

    def time_dequantize(self, backend, n, variant):
        self.r.dequantize(backend=backend)
        self.dev.sync()

    def peakmem_quantize(self, backend, n, variant):
        quantize_nf4(self.x, variant, backend)
