"""The integer formats: ``pack-quantized`` (codes packed into int32 words) and ``int-quantized`` (one int8 each).

The scales are compressed-tensors' formula evaluated in the weight's dtype ``h`` (each operation
rounded to ``h``), on nbquant's reductions; the codes are nbquant's :func:`nbquant.quantize` with
``compute_dtype=h``:

* symmetric: ``s = h(amax / h((2**b - 1) / 2))``, ``0 → eps(h)``; ``q = clamp(rne(h(x / s)))``;
* asymmetric: ``s = h(h(max⁺ - min⁻) / h(2**b - 1))``, ``zp = rne(clamp(h(qmin - h(min⁻ / s))))``
  (NaN → 0), ``q = clamp(rne(h(h(x / s) + zp)))``.

``pack-quantized`` stores ``q + 2**(b-1)`` densely in little-endian int32 words: nbquant's packed
unsigned codes with zero point ``2**(b-1)`` added after rounding (symmetric), or its packed signed
codes with the sign bit of every code flipped (asymmetric). Its zero points are packed the same
way, along rows.

Examples
--------
>>> from nbquant.convert.schemes import get_scheme
>>> c = PackQuantized(get_scheme("W4A16_ASYM"))
>>> x = np.linspace(-1, 3, 2 * 128, dtype=np.float32).reshape(2, 128).astype(ml_dtypes.bfloat16)
>>> [(k, v.dtype.name, v.shape) for k, v in c.quantize(x, Context()).items()]  # doctest: +NORMALIZE_WHITESPACE
[('weight_packed', 'int32', (2, 16)), ('weight_scale', 'bfloat16', (2, 1)), ('weight_shape', 'int64', (2,)),
 ('weight_zero_point', 'int32', (1, 1))]
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import ml_dtypes
import numpy as np

import nbquant
from nbquant.formats import QuantFormat, get_format

from ..safetensors import ConvertError, dtype_name
from ..schemes import Scheme
from .base import WEIGHT_DTYPES, Codec, Context, Entry, eps_of, in_dtype, non_finite, weight_amax

__all__ = ["IntQuantized", "PackQuantized"]


class _IntegerCodec(Codec):
    """The scales (and zero points) of ``b``-bit integer codes, per row (channel) or per group along K."""

    def __init__(self, scheme: Scheme) -> None:
        super().__init__(scheme)
        b = scheme.bits
        self.bits = b
        self.qmin, self.qmax = -(1 << (b - 1)), (1 << (b - 1)) - 1  # compressed-tensors' b-bit range
        g = scheme.group_size
        self.block = (1, g) if g else None  # None: one scale per row

    def _layout(self) -> dict:
        """The scale layout keywords of :func:`nbquant.quantize` / :func:`nbquant.dequantize`."""
        return {"block_size": self.block} if self.block else {"axis": 0}

    def _flat(self, s: np.ndarray) -> np.ndarray:
        """Scales ``(n, groups)`` as the kernels take them: float32, one per row flattened for ``axis=0``."""
        return s.astype(np.float32) if self.block else s.astype(np.float32).reshape(-1)

    def _scale_entry(self, shape: tuple[int, int], dtype: np.dtype) -> Entry:
        n, k = shape
        return ("weight_scale", dtype_name(dtype), (n, k // self.block[1] if self.block else 1))

    def _scales(self, name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The ``h`` scales ``(n, groups)`` and, if asymmetric, the float32 zero points."""
        h, b = x.dtype, self.bits
        block = self.block or (1, x.shape[1])
        zp = None
        with np.errstate(all="ignore"):
            if self.scheme.symmetric:
                a = in_dtype(h, weight_amax(name, x, block))
                s = (a / in_dtype(h, (2 ** b - 1) / 2)).astype(h)
            else:
                lo, hi = nbquant.reduce_min_max(x, block_size=block)
                if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
                    raise non_finite(name)
                lo, hi = np.minimum(in_dtype(h, lo), in_dtype(h, 0)), np.maximum(in_dtype(h, hi), in_dtype(h, 0))
                s = ((hi - lo).astype(h) / in_dtype(h, 2 ** b - 1)).astype(h)
                if not np.isfinite(s).all():
                    raise self._range_overflow(name, lo, hi, s)
                z = (in_dtype(h, self.qmin) - (lo / s).astype(h)).astype(h).astype(np.float32)
                z = np.rint(np.clip(z, self.qmin, self.qmax))
                zp = np.where(np.isnan(z), 0, z).astype(np.float32)  # torch's int8 cast of NaN (0 / 0) gives 0
        return np.where(s == 0, eps_of(h), s).astype(h), zp

    def _range_overflow(self, name: str, lo: np.ndarray, hi: np.ndarray, s: np.ndarray) -> ConvertError:
        """The error of an asymmetric weight whose range ``max - min`` overflows its scales' dtype (the weight's)."""
        at = int(np.flatnonzero(~np.isfinite(s))[0])
        row, group = divmod(at, s.size // s.shape[0])
        cols = f", columns {group * self.block[1]}-{(group + 1) * self.block[1] - 1}" if self.block else ""
        module = name.rpartition(".")[0] or name
        return ConvertError(f"tensor {name}: row {row}{cols} spans {float(lo.flat[at]):g} to {float(hi.flat[at]):g}, "
                            f"so its {self.scheme.name} scale (max - min) / {2 ** self.bits - 1} overflows "
                            f"{WEIGHT_DTYPES[s.dtype]} (largest {float(ml_dtypes.finfo(s.dtype).max):g}); exclude "
                            f"it with --ignore {module} (and --overwrite) or use a symmetric scheme such as W4A16")


@Codec.register("int-quantized")
class IntQuantized(_IntegerCodec):
    """Symmetric integer codes of up to 8 bits, one int8 per weight (``W8A8``, ``W4A8``, ``W3A4`` ...).

    Examples
    --------
    >>> from nbquant.convert.schemes import get_scheme
    >>> out = IntQuantized(get_scheme("W8A8")).quantize(np.array([[0.5, -1.0, 0.25, 2.0]], np.float32), Context())
    >>> out["weight"], out["weight_scale"]  # s = 2 / 127.5
    (array([[ 32, -64,  16, 127]], dtype=int8), array([[0.01568628]], dtype=float32))
    """

    #: The stored codes.
    codes: QuantFormat = get_format("int8")

    def __init__(self, scheme: Scheme) -> None:
        super().__init__(scheme)
        if not scheme.symmetric:
            raise ConvertError(f"scheme {scheme.name}: int-quantized weights are written symmetric only")

    def entries(self, shape: tuple[int, int], dtype: np.dtype) -> list[Entry]:
        return [("weight", dtype_name(self.codes.dtype), tuple(shape)), self._scale_entry(shape, dtype)]

    def quantize(self, x: np.ndarray, ctx: Context) -> dict[str, np.ndarray]:
        s, _ = self._scales(ctx.name, x)
        q = nbquant.quantize(x, self._flat(s), self.codes.name, quant_min=self.qmin, quant_max=self.qmax,
                             out=ctx.view(self.codes.dtype, x.shape), compute_dtype=WEIGHT_DTYPES[x.dtype],
                             **self._layout())
        return {"weight": q, "weight_scale": s.reshape(x.shape[0], -1)}

    def dequantize(self, tensors: Mapping[str, np.ndarray], dtype: np.dtype,
                   rows: slice = slice(None)) -> np.ndarray:
        s = self._flat(tensors["weight_scale"][rows])
        return nbquant.dequantize(tensors["weight"][rows], s, out_dtype=np.dtype(dtype), **self._layout())


@Codec.register("pack-quantized")
class PackQuantized(_IntegerCodec):
    """2-, 4- or 8-bit codes ``q + 2**(b-1)`` packed into int32 words, optionally with zero points (``W4A16`` ...).

    Examples
    --------
    >>> from nbquant.convert.schemes import get_scheme
    >>> PackQuantized(get_scheme("W4A16_ASYM")).entries((8, 256), np.dtype(np.float16))[::3]
    [('weight_packed', 'I32', (8, 32)), ('weight_zero_point', 'I32', (1, 2))]
    """

    def __init__(self, scheme: Scheme) -> None:
        super().__init__(scheme)
        self.signed = get_format(f"int{self.bits}")
        self.unsigned = get_format(f"uint{self.bits}")
        #: The sign bit of every code in a byte: flipping them turns two's complement into ``q + 2**(b - 1)``.
        self.sign_bits = sum(1 << (i * self.bits + self.bits - 1) for i in range(self.signed.codes_per_byte))

    def entries(self, shape: tuple[int, int], dtype: np.dtype) -> list[Entry]:
        n, k = shape
        out = [("weight_packed", dtype_name(np.int32), (n, k * self.bits // 32)), self._scale_entry(shape, dtype),
               ("weight_shape", dtype_name(np.int64), (2,))]
        if not self.scheme.symmetric:
            groups = out[1][2][1]
            out.append(("weight_zero_point", dtype_name(np.int32), (math.ceil(n * self.bits / 32), groups)))
        return out

    def quantize(self, x: np.ndarray, ctx: Context) -> dict[str, np.ndarray]:
        n, k = x.shape
        s, zp = self._scales(ctx.name, x)
        s32 = self._flat(s)
        packed = self.signed.packable
        kw = dict(self._layout(), compute_dtype=WEIGHT_DTYPES[x.dtype], packed=packed)
        shape = (n, self.signed.packed_length(k))
        if zp is None:  # clamp(rne(v), qmin, qmax) + 2**(b-1) is the unsigned code with that zero point after rounding
            offset = np.full(s32.shape, 1 << (self.bits - 1), np.float32)
            q = np.asarray(nbquant.quantize(x, s32, self.unsigned.name, zero_point=offset,
                                            out=ctx.view(np.uint8, shape), **kw))
        else:  # the zero point is added before rounding, in h: codes are signed, their sign bits flipped after
            dest = ctx.view(np.uint8 if packed else self.signed.dtype, shape)
            q = self._flip_sign_bits(nbquant.quantize(x, s32, self.signed.name, out=dest, zero_point=zp,
                                                      zero_point_order="before_rounding", **kw))
        out = {"weight_packed": q.view(np.uint8).view(np.int32).reshape(n, -1), "weight_scale": s,
               "weight_shape": np.array(x.shape, np.int64)}
        if zp is not None:
            out["weight_zero_point"] = self._pack_rows(zp)
        return out

    def dequantize(self, tensors: Mapping[str, np.ndarray], dtype: np.dtype,
                   rows: slice = slice(None)) -> np.ndarray:
        s = self._flat(tensors["weight_scale"][rows])
        codes = self._flip_sign_bits(np.array(tensors["weight_packed"][rows]))
        zp = None
        if not self.scheme.symmetric:
            zp = self._unpack_rows(tensors["weight_zero_point"], int(tensors["weight_shape"][0]))[rows]
        if self.signed.packable:
            return nbquant.dequantize(codes, s, zero_point=zp, dtype=self.signed.name, out_dtype=np.dtype(dtype),
                                      **self._layout())
        return nbquant.dequantize(codes.view(self.signed.dtype), s, zero_point=zp, out_dtype=np.dtype(dtype),
                                  **self._layout())

    def _flip_sign_bits(self, codes: np.ndarray) -> np.ndarray:
        """The bytes of ``codes`` with :attr:`sign_bits` flipped in place (eight bytes at a time where they fit)."""
        u8 = np.asarray(codes).view(np.uint8)
        wide = u8.reshape(-1).view(np.uint64) if u8.size % 8 == 0 else u8
        np.bitwise_xor(wide, np.array(self.sign_bits * (0x0101010101010101 if wide.dtype == np.uint64 else 1),
                                      wide.dtype), out=wide)
        return u8

    def _pack_rows(self, zp: np.ndarray) -> np.ndarray:
        """Zero points ``(n, groups)`` stored as compressed-tensors packs them: ``zp + 2**(b-1)`` along rows, int32."""
        n = zp.shape[0]
        per_word = 32 // self.bits
        t = np.zeros((zp.shape[1], -(-n // per_word) * per_word), np.float32)
        t[:, :n] = zp.T + (1 << (self.bits - 1))
        packed = nbquant.quantize(t, 1.0, self.unsigned.name, packed=self.unsigned.packable)
        return np.ascontiguousarray(np.asarray(packed).view(np.uint8).view(np.int32).T)

    def _unpack_rows(self, packed: np.ndarray, n: int) -> np.ndarray:
        """The float32 zero points ``(n, groups)`` of :meth:`_pack_rows`' int32 words."""
        t = np.ascontiguousarray(np.asarray(packed).T).view(np.uint8)
        z = nbquant.dequantize(t, 1.0, dtype=self.unsigned.name) if self.unsigned.packable else t.astype(np.float32)
        return (z[:, :n] - (1 << (self.bits - 1))).T
