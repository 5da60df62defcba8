"""Dynamic quantization: ``nbquant.quantize_dynamic`` (qparams chosen from the data and codes in one fused pass).

Schemes follow torchao 0.18: per-row symmetric int8 (dynamic activations) and
group-wise asymmetric uint4 in ``[0, 15]`` in groups of 32 and 128, packed two codes
per byte (int4 weight-only's codes) and unpacked (one code per byte).
"""

from __future__ import annotations

import numpy as np

import nbquant

from .common import BACKENDS, SIZES, Device, schemes, shape, sqnr_db

#: name -> (dtype, group along the last axis (None: the whole row), mapping, packed).
DYNAMIC_SCHEMES = {
    "uint4_asym_g32_packed": ("uint4", 32, "asymmetric", True),
    "int8_per_row": ("int8", None, "symmetric", False),
    "uint4_asym_g128_packed": ("uint4", 128, "asymmetric", True),
    "uint4_asym_g32": ("uint4", 32, "asymmetric", False),
    "uint4_asym_g128": ("uint4", 128, "asymmetric", False),
}


class QuantizeDynamic:
    """``nbquant.quantize_dynamic`` of one scheme: time and SQNR (dB) of the round trip."""

    params = (BACKENDS, SIZES, schemes(list(DYNAMIC_SCHEMES)))
    param_names = ["backend", "n", "scheme"]
    timeout = 300

    def setup(self, backend, n, scheme):
        self.dev = Device(backend)
        self.dtype, group, mapping, packed = DYNAMIC_SCHEMES[scheme]
        self.host_x = np.random.default_rng(0).standard_normal(shape(n), dtype=np.float32)
        r, c = self.host_x.shape
        self.block = (1, c if group is None else min(group, c))
        self.kw = dict(block_size=self.block, mapping=mapping, packed=packed, backend=backend)
        self.x = self.dev.put(self.host_x)
        self.time_quantize_dynamic(backend, n, scheme)

    def _quantize(self):
        return nbquant.quantize_dynamic(self.x, self.dtype, **self.kw)

    def time_quantize_dynamic(self, backend, n, scheme):
        """Allocating call (codes, scales and zero points)."""
        self._quantize()
        self.dev.sync()

    def track_sqnr(self, backend, n, scheme):
        """SQNR of dequantize(quantize_dynamic(x)) against x (dequantized on the CPU)."""
        q, s, zp = (self.dev.get(a) for a in self._quantize())
        r, c = self.host_x.shape
        grid = (r, c // self.block[1])
        y = nbquant.dequantize(q, s.reshape(grid), zero_point=zp.reshape(grid), block_size=self.block,
                               dtype=self.dtype if self.kw["packed"] else None, backend="cpu")
        return sqnr_db(self.host_x, y)

    track_sqnr.unit = "dB"
