"""The float formats with a scale per row, block or group: ``float-quantized`` (FP8) and the OCP MX ones.

* ``float-quantized``: ``s = h(amax / 448)`` per row or 128 x 128 block, ``0 → eps(h)``;
  ``q = e4m3(h(x / s))``.
* ``mxfp4-pack-quantized``, ``mxfp8-quantized``: the E8M0 code ``127 + floor(log2(p2(amax))) - emax``,
  where ``p2`` rounds the amax's mantissa up at 0.75 (compressed-tensors' ``round_to_power_2``),
  clamped to [0, 255]; ``q = e2m1 or e4m3(h(x / 2**(code - 127)))``.

The element facts (448, 6, ``emax``) are the :class:`~nbquant.formats.QuantFormat` rows'. The
helpers :func:`element_codes`, :func:`codes_entry` and :func:`decode_codes` write, declare and read
the codes of an element format per block, packed when the format packs (e2m1), and are shared with
:mod:`.nvfp4`.

Examples
--------
>>> from nbquant.convert.schemes import get_scheme
>>> x = np.linspace(-1, 1, 4 * 32, dtype=np.float32).reshape(4, 32).astype(ml_dtypes.bfloat16)
>>> MXFP4PackQuantized(get_scheme("MXFP4A16")).quantize(x, Context())["weight_scale"].ravel().tolist()
[125, 124, 124, 125]
"""

from __future__ import annotations

from collections.abc import Mapping

import ml_dtypes
import numpy as np

import nbquant
from nbquant.formats import QuantFormat, get_format

from ..safetensors import dtype_name
from ..schemes import Scheme
from .base import WEIGHT_DTYPES, Codec, Context, Entry, eps_of, in_dtype, non_finite, weight_amax

__all__ = ["FloatQuantized", "MXFP4PackQuantized", "MXFP8Quantized", "element_codes", "codes_entry", "decode_codes"]

#: compressed-tensors' FP8 element.
E4M3 = get_format("float8_e4m3fn")


def codes_entry(element: QuantFormat, shape: tuple[int, int]) -> Entry:
    """The codes' entry: ``weight_packed`` (uint8) for a packing element format, else ``weight`` in its own dtype."""
    n, k = shape
    if element.packable:
        return ("weight_packed", dtype_name(np.uint8), (n, element.packed_length(k)))
    return ("weight", dtype_name(element.dtype), (n, k))


def element_codes(x: np.ndarray, divisors: np.ndarray, element: QuantFormat, block: tuple[int, int], ctx: Context,
                  compute_dtype: str | None = None) -> tuple[str, np.ndarray]:
    """The suffix and codes of ``x / divisors`` (one divisor per ``block``) in ``element`` (:func:`codes_entry`).

    Packed e2m1 codes of ``-0.0`` weights are +0, as compressed-tensors writes them.
    """
    kw = {} if compute_dtype is None else {"compute_dtype": compute_dtype}
    suffix, _, shape = codes_entry(element, x.shape)
    if element.packable:
        q = np.asarray(nbquant.quantize(x, divisors, element.name, block_size=block, packed=True,
                                        out=ctx.view(np.uint8, shape), **kw)).view(np.uint8)
        return suffix, _signed_zero_codes(x, q)
    return suffix, nbquant.quantize(x, divisors, element.name, block_size=block, out=ctx.view(element.dtype, shape),
                                    **kw)


def decode_codes(tensors: Mapping[str, np.ndarray], divisors: np.ndarray, element: QuantFormat,
                 block: tuple[int, int], dtype: np.dtype, rows: slice) -> np.ndarray:
    """``element(code) * divisor`` of rows ``rows``, rounded once to ``dtype`` (inverse of :func:`element_codes`)."""
    if element.packable:
        return nbquant.dequantize(np.asarray(tensors["weight_packed"][rows]), divisors, dtype=element.name,
                                  block_size=block, out_dtype=np.dtype(dtype))
    return nbquant.dequantize(tensors["weight"][rows], divisors, block_size=block, out_dtype=np.dtype(dtype))


def _signed_zero_codes(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """compressed-tensors codes ``-0.0`` weights as +0 (``x * sign(x)``); nbquant's e2m1 keeps the sign."""
    bits = x.view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])
    where = np.flatnonzero(bits == np.array(1 << (8 * x.dtype.itemsize - 1), bits.dtype))
    if where.size:
        flat = q.reshape(-1)
        np.bitwise_and.at(flat, where // 2, np.where(where % 2 == 0, 0xF7, 0x7F).astype(np.uint8))  # both nibbles
    return q


@Codec.register("float-quantized")
class FloatQuantized(Codec):
    """E4M3 codes with an ``h`` scale per row (``FP8_DYNAMIC``) or per block of the weight (``FP8_BLOCK``).

    Examples
    --------
    >>> from nbquant.convert.schemes import get_scheme
    >>> FloatQuantized(get_scheme("FP8_BLOCK")).entries((300, 200), np.dtype(np.float32))
    [('weight', 'F8_E4M3', (300, 200)), ('weight_scale', 'F32', (3, 2))]
    """

    element: QuantFormat = E4M3

    def __init__(self, scheme: Scheme) -> None:
        super().__init__(scheme)
        self.block = scheme.block  # None: one scale per row

    def entries(self, shape: tuple[int, int], dtype: np.dtype) -> list[Entry]:
        n, k = shape
        grid = (-(-n // self.block[0]), -(-k // self.block[1])) if self.block else (n, 1)
        return [codes_entry(self.element, shape), ("weight_scale", dtype_name(dtype), grid)]

    def quantize(self, x: np.ndarray, ctx: Context) -> dict[str, np.ndarray]:
        h, hname = x.dtype, WEIGHT_DTYPES[x.dtype]
        n, k = x.shape
        with np.errstate(all="ignore"):
            if self.block is None:
                a = weight_amax(ctx.name, x, (1, k)).reshape(n)
            else:
                a = self._block_amax(ctx.name, x)
            s = (in_dtype(h, a) / in_dtype(h, self.element.max_value)).astype(h)
        s = np.where(s == 0, eps_of(h), s).astype(h)
        out = ctx.view(self.element.dtype, x.shape)
        if self.block is None:
            q = nbquant.quantize(x, s.astype(np.float32), self.element.name, axis=0, compute_dtype=hname, out=out)
            return {"weight": q, "weight_scale": s.reshape(n, 1)}
        q = nbquant.quantize(x, self._row_scales(s, n), self.element.name, axis=1, block_size=min(self.block[1], k),
                             compute_dtype=hname, out=out)
        return {"weight": q, "weight_scale": s}

    def _block_amax(self, name: str, x: np.ndarray) -> np.ndarray:
        """``max |x|`` per block; the last blocks of rows and columns partial."""
        br, bc = self.block
        rows = nbquant.reduce_amax(x, axis=1, block_size=min(bc, x.shape[1]))  # per row, ONNX blocking
        if not np.isfinite(rows).all():
            raise non_finite(name)
        rb = -(-x.shape[0] // br)
        pad = np.zeros((rb * br, rows.shape[1]), np.float32)
        pad[:x.shape[0]] = rows
        return pad.reshape(rb, br, -1).max(axis=1)

    def _row_scales(self, s: np.ndarray, n: int) -> np.ndarray:
        """Block scales repeated down their rows, float32 ``(n, column blocks)``."""
        return np.repeat(s.astype(np.float32), self.block[0], axis=0)[:n]

    def dequantize(self, tensors: Mapping[str, np.ndarray], dtype: np.dtype,
                   rows: slice = slice(None)) -> np.ndarray:
        w = tensors["weight"][rows]
        if self.block is None:
            s = tensors["weight_scale"][rows].astype(np.float32).reshape(-1)
            return nbquant.dequantize(w, s, axis=0, out_dtype=np.dtype(dtype))
        full = self._row_scales(tensors["weight_scale"], tensors["weight"].shape[0])
        return nbquant.dequantize(w, full[rows], axis=1, block_size=min(self.block[1], w.shape[1]),
                                  out_dtype=np.dtype(dtype))


class _MXCodec(Codec):
    """OCP MX: ``element`` codes with an E8M0 scale (uint8) per group of ``scheme.group_size`` along K."""

    element: QuantFormat

    def __init__(self, scheme: Scheme) -> None:
        super().__init__(scheme)
        self.block = (1, scheme.group_size)

    def entries(self, shape: tuple[int, int], dtype: np.dtype) -> list[Entry]:
        n, k = shape
        return [codes_entry(self.element, shape), ("weight_scale", dtype_name(np.uint8), (n, k // self.block[1]))]

    def quantize(self, x: np.ndarray, ctx: Context) -> dict[str, np.ndarray]:
        s32 = self._scales(weight_amax(ctx.name, x, self.block), x.dtype).astype(np.float32)
        code = (127 + np.floor(np.log2(s32))).astype(np.uint8)
        suffix, q = element_codes(x, s32, self.element, self.block, ctx, WEIGHT_DTYPES[x.dtype])
        return {suffix: q, "weight_scale": code}

    def _scales(self, a: np.ndarray, h: np.dtype) -> np.ndarray:
        """The power-of-two scales (in ``h``) of the block amax ``a`` (float32, exact in ``h``), compressed-tensors'
        rounding."""
        fi = ml_dtypes.finfo(h)
        mbits, ebits = fi.nmant, fi.nexp
        store = {2: np.uint16, 4: np.uint32}[h.itemsize]
        u = a.astype(h).view(store).astype(np.int64)
        p2 = (u + (1 << (mbits - 2))) & (((1 << (ebits + 1)) - 1) << mbits)  # the mantissa rounds up at 0.75
        e = (p2 >> mbits) & ((1 << ebits) - 1)
        code = np.where(e == 0, 0, np.clip(e - (1 << (ebits - 1)) + 1 + 127 - self.element.emax, 0, 255))
        scale = np.ldexp(np.float32(1), (code - 127).astype(np.int32)).astype(np.float32).astype(h)
        return np.where(scale == 0, in_dtype(h, 1.0), scale).astype(h)  # compressed-tensors' eps for uint8 scales

    def dequantize(self, tensors: Mapping[str, np.ndarray], dtype: np.dtype,
                   rows: slice = slice(None)) -> np.ndarray:
        d = np.ldexp(np.float32(1), tensors["weight_scale"][rows].astype(np.int32) - 127).astype(np.float32)
        return decode_codes(tensors, d, self.element, self.block, dtype, rows)


@Codec.register("mxfp4-pack-quantized")
class MXFP4PackQuantized(_MXCodec):
    """MXFP4: e2m1 codes packed two per byte, an E8M0 scale per 32 (``MXFP4A16``, ``MXFP4``).

    Examples
    --------
    >>> from nbquant.convert.schemes import get_scheme
    >>> out = MXFP4PackQuantized(get_scheme("MXFP4")).quantize(np.array([[0.5, -1, 3, 6] * 8], np.float32), Context())
    >>> out["weight_scale"], out["weight_packed"][0, :2]  # 2**0; codes 1 and 2 of 0.5, -1 in a byte, first one low
    (array([[127]], dtype=uint8), array([161, 117], dtype=uint8))
    """

    element = get_format("float4_e2m1fn")


@Codec.register("mxfp8-quantized")
class MXFP8Quantized(_MXCodec):
    """MXFP8: E4M3 codes, an E8M0 scale per 32 (``MXFP8A16``, ``MXFP8``).

    Examples
    --------
    >>> from nbquant.convert.schemes import get_scheme
    >>> c, x = MXFP8Quantized(get_scheme("MXFP8")), np.array([[0.5, -1.0, 3.0, 448.0] * 8], np.float32)
    >>> c.dequantize(c.quantize(x, Context()), np.float32)[0, :4]  # E4M3 values in range come back
    array([  0.5,  -1. ,   3. , 448. ], dtype=float32)
    """

    element = E4M3
