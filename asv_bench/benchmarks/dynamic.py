"""Dynamic quantization: ``nbquant.quantize_dynamic`` (qparams chosen from the data and codes in one fused pass).

Schemes follow torchao 0.18 and the issue-16 table: symmetric int8 per tensor, per
row (per-channel axis 0, dynamic activations), per column (axis 1) and in groups of
32; asymmetric uint8 per row; asymmetric uint4 in ``[0, 15]`` in groups of 16, 32
and 128, packed two codes per byte (int4 weight-only's codes) and unpacked (one code
per byte); symmetric int4 and int2 in groups of 32, packed. The numerics are tracked
in :mod:`.numerics`.
"""

from __future__ import annotations

import numpy as np

import nbquant

from .common import BACKENDS, SIZES, Device, layout_kwargs, schemes, shape

#: name -> (dtype, granularity token of :func:`.common.layout_kwargs`, mapping, packed).
DYNAMIC_SCHEMES = {
    "uint4_asym_g32_packed": ("uint4", "g32", "asymmetric", True),
    "int8_per_row": ("int8", "axis0", "symmetric", False),
    "uint4_asym_g128_packed": ("uint4", "g128", "asymmetric", True),
    "uint4_asym_g32": ("uint4", "g32", "asymmetric", False),
    "uint4_asym_g128": ("uint4", "g128", "asymmetric", False),
    "uint4_asym_g16_packed": ("uint4", "g16", "asymmetric", True),
    "int8_per_tensor": ("int8", "tensor", "symmetric", False),
    "int8_per_channel_axis1": ("int8", "axis1", "symmetric", False),
    "int8_g32": ("int8", "g32", "symmetric", False),
    "uint8_asym_per_row": ("uint8", "axis0", "asymmetric", False),
    "int4_sym_g32_packed": ("int4", "g32", "symmetric", True),
    "int2_sym_g32_packed": ("int2", "g32", "symmetric", True),
}


class DynamicProblem:
    """One dynamic scheme on ``x``: ``quantize()`` and ``dequantize(codes, scale, zero_point)`` (on the host)."""

    def __init__(self, scheme: str, x: np.ndarray, backend: str):
        self.dtype, granularity, mapping, self.packed = DYNAMIC_SCHEMES[scheme]
        self.layout, _ = layout_kwargs(granularity, x.shape)
        self.kw = dict(self.layout, mapping=mapping, packed=self.packed, backend=backend)

    def quantize(self, x):
        """``(codes, scale, zero_point)`` of ``quantize_dynamic``."""
        return nbquant.quantize_dynamic(x, self.dtype, **self.kw)

    def dequantize(self, q, s, zp) -> np.ndarray:
        """The float32 values of host codes and qparams, on the cpu backend."""
        return nbquant.dequantize(q, s, zero_point=zp, dtype=self.dtype if self.packed else None, backend="cpu",
                                  **self.layout)


class QuantizeDynamic:
    """``nbquant.quantize_dynamic`` of one scheme: time and peak memory."""

    params = (BACKENDS, SIZES, schemes(list(DYNAMIC_SCHEMES)))
    param_names = ["backend", "n", "scheme"]
    timeout = 300

    def setup(self, backend, n, scheme):
        self.dev = Device(backend, n)
        host_x = np.random.default_rng(0).standard_normal(shape(n), dtype=np.float32)
        self.p = DynamicProblem(scheme, host_x, backend)
        self.x = self.dev.put(host_x)
        self.time_quantize_dynamic(backend, n, scheme)

    def time_quantize_dynamic(self, backend, n, scheme):
        """Allocating call (codes, scales and zero points)."""
        self.p.quantize(self.x)
        self.dev.sync()

    def peakmem_quantize_dynamic(self, backend, n, scheme):
        """Peak RSS of the process around an allocating call (includes the input)."""
        self.p.quantize(self.x)
