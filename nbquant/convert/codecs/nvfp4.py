"""``nvfp4-pack-quantized``: e2m1 codes, an E4M3 scale per 16, and a float32 global scale shared by a fused set.

* global ``gs = h(h(1 / amax(fused weights)) * 2688)`` as float32 (the reciprocal of modelopt's),
  ``2688 = 6 * 448`` (the e2m1 and E4M3 maxima); q/k/v and gate/up share one (:meth:`prepare`);
* block scale ``e4m3(min(fl32(gs * h(amax_b / 6)), 448))``, ``0 → 0.125`` (E4M3's eps);
* ``q = e2m1(fl32(x / fl32(scale / gs)))``.

Examples
--------
>>> import numpy as np
>>> from nbquant.convert.codecs import codec_for
>>> from nbquant.convert.schemes import get_scheme
>>> c = codec_for(get_scheme("NVFP4A16"))
>>> c.fused, c.entries((32, 64), np.dtype(np.float16))  # doctest: +NORMALIZE_WHITESPACE
(True, [('weight_packed', 'U8', (32, 32)), ('weight_scale', 'F8_E4M3', (32, 4)),
        ('weight_global_scale', 'F32', (1,))])
"""

from __future__ import annotations

from collections.abc import Mapping

import ml_dtypes
import numpy as np

import nbquant
from nbquant.formats import QuantFormat, get_format

from ..safetensors import dtype_name
from ..schemes import Scheme
from .base import Codec, Context, Entry, in_dtype, weight_amax
from .floating import E4M3, codes_entry, decode_codes, element_codes

__all__ = ["NVFP4PackQuantized", "global_scale"]

E2M1 = get_format("float4_e2m1fn")


def global_scale(amax: float, dtype: np.dtype) -> np.float32:
    """NVFP4's ``weight_global_scale`` from the fused weights' amax: ``h(h(1 / max(amax, tiny(h))) * 2688)``; inf → 1.

    torch evaluates compressed-tensors' ``2688.0 / amax`` (a Python number over a tensor) as
    ``amax.reciprocal() * 2688.0``: two roundings to the weight's dtype ``h``.

    Examples
    --------
    >>> import ml_dtypes
    >>> float(global_scale(1.0, ml_dtypes.bfloat16)), float(global_scale(0.0, ml_dtypes.bfloat16))
    (2688.0, 1.0)
    """
    h = np.dtype(dtype)
    a = max(np.float32(amax), np.float32(ml_dtypes.finfo(h).tiny))
    with np.errstate(over="ignore", divide="ignore"):
        r = np.float32(np.float32(1) / np.float32(a)).astype(h).astype(np.float32)
        g = np.float32(r * np.float32(E2M1.max_value * E4M3.max_value)).astype(h).astype(np.float32)
    return np.float32(1.0) if not np.isfinite(g) else g


@Codec.register("nvfp4-pack-quantized")
class NVFP4PackQuantized(Codec):
    """NVFP4 (``NVFP4A16``): the weights of a fused set share the global scale :meth:`prepare` computes.

    ``Context.prepared`` is ``(global scale, block amax)``; without it a weight is a set of its own.
    """

    fused = True
    element: QuantFormat = E2M1
    scale: QuantFormat = E4M3
    #: The code of E4M3's eps (0.125), which compressed-tensors writes where a block scale would be 0.
    EPS_CODE = np.asarray(ml_dtypes.finfo(E4M3.dtype).eps, E4M3.dtype).view(np.uint8)

    def __init__(self, scheme: Scheme) -> None:
        super().__init__(scheme)
        self.block = (1, scheme.group_size)

    def entries(self, shape: tuple[int, int], dtype: np.dtype) -> list[Entry]:
        n, k = shape
        return [codes_entry(self.element, shape),
                ("weight_scale", dtype_name(self.scale.dtype), (n, k // self.block[1])),
                ("weight_global_scale", dtype_name(np.float32), (1,))]

    def prepare(self, group: Mapping[str, np.ndarray]) -> dict[str, tuple[np.float32, np.ndarray]]:
        """Each member's block amax, and the global scale of their maximum (in the first member's dtype)."""
        amax = {name: weight_amax(name, w, self.block) for name, w in group.items()}
        if not amax:
            return {}
        gs = global_scale(max(float(a.max()) for a in amax.values()), next(iter(group.values())).dtype)
        return {name: (gs, a) for name, a in amax.items()}

    def quantize(self, x: np.ndarray, ctx: Context) -> dict[str, np.ndarray]:
        gs, amax = ctx.prepared if ctx.prepared is not None else self.prepare({ctx.name: x})[ctx.name]
        h = x.dtype
        with np.errstate(all="ignore"):
            local = (in_dtype(h, amax) / in_dtype(h, self.element.max_value)).astype(h).astype(np.float32)
            scale = np.minimum(np.float32(gs) * local, np.float32(self.scale.max_value))
        code = np.asarray(nbquant.quantize(scale, 1.0, self.scale.name)).view(np.uint8)
        code = np.where(code == 0, self.EPS_CODE, code).view(self.scale.dtype)
        divisor = nbquant.dequantize(code, 1.0) / np.float32(gs)  # e4m3 values are exact in h, and in float32
        suffix, q = element_codes(x, divisor, self.element, self.block, ctx)
        return {suffix: q, "weight_scale": code, "weight_global_scale": np.array([gs], np.float32)}

    def dequantize(self, tensors: Mapping[str, np.ndarray], dtype: np.dtype,
                   rows: slice = slice(None)) -> np.ndarray:
        d = tensors["weight_scale"][rows].astype(np.float32) / np.float32(tensors["weight_global_scale"][0])
        return decode_codes(tensors, d, self.element, self.block, dtype, rows)
