"""compressed-tensors' weight numerics on nbquant's kernels: the tensors one ``Linear`` weight becomes, and back.

The element work (reductions, quantization, packing, dequantization) runs in nbquant's
kernels (:func:`nbquant.reduce_amax`, :func:`nbquant.reduce_min_max`, :func:`nbquant.quantize`,
:func:`nbquant.dequantize`). What is compressed-tensors' own is the scale formula on the
block grid (1/16 to 1/16384 of the data), evaluated here as llm-compressor evaluates it:
in the weight's dtype ``h`` (bfloat16, float16 or float32), each operation rounded to ``h``.
See docs/convert.md for the formulas.

* **int** (``W4A16`` ...): ``s = h(amax / h((2**b - 1) / 2))``, ``0 → eps(h)``;
  ``q = clamp(rne(h(x / s)))`` (``compute_dtype=h``). Asymmetric: ``s = h(h(max⁺ - min⁻) / h(2**b - 1))``,
  ``zp = rne(clamp(h(qmin - h(min⁻ / s))))`` (NaN → 0), ``q = clamp(rne(h(h(x / s) + zp)))``.
  ``pack-quantized`` stores ``q + 2**(b-1)`` densely in little-endian int32 words: nbquant's
  packed unsigned codes with zero point ``2**(b-1)`` added after rounding (symmetric), or its
  packed signed codes with the sign bit of every code flipped (asymmetric).
* **fp8**: ``s = h(amax / 448)`` per row or 128 x 128 block, ``q = e4m3(h(x / s))``.
* **nvfp4**: global ``gs = h(h(1 / amax(fused weights)) * 2688)`` as float32 (the reciprocal of modelopt's);
  block scale ``e4m3(min(fl32(gs * h(amax_b / 6)), 448))``, ``0 → 0.125``;
  ``q = e2m1(fl32(x / fl32(scale / gs)))``.
* **mx**: E8M0 code ``127 + floor(log2(p2(amax))) - emax`` where ``p2`` rounds the amax's
  mantissa up at 0.75 (compressed-tensors' ``round_to_power_2``), clamped to [0, 255];
  ``q = e2m1 or e4m3(h(x / 2**(code - 127)))``.

Examples
--------
>>> import numpy as np, ml_dtypes
>>> from nbquant.convert.numerics import quantize_weight, dequantize_weight
>>> from nbquant.convert.schemes import get_scheme
>>> x = np.linspace(-1, 1, 2 * 128, dtype=np.float32).reshape(2, 128).astype(ml_dtypes.bfloat16)
>>> out = quantize_weight(x, get_scheme("W4A16"))
>>> sorted(out), out["weight_packed"].dtype, out["weight_packed"].shape
(['weight_packed', 'weight_scale', 'weight_shape'], dtype('int32'), (2, 16))
>>> y = dequantize_weight(out, get_scheme("W4A16"), x.dtype)
>>> float(np.abs(y.astype(np.float32) - x.astype(np.float32)).max()) < 0.08
True
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

import nbquant

from .safetensors import ConvertError, dtype_name
from .schemes import Scheme

__all__ = ["WEIGHT_DTYPES", "check_weight", "output_entries", "quantize_weight", "dequantize_weight",
           "global_scale", "weight_amax", "nvfp4_block_amax"]

#: The weight dtypes a scheme quantizes, with nbquant's ``compute_dtype`` name.
WEIGHT_DTYPES = {np.dtype(ml_dtypes.bfloat16): "bfloat16", np.dtype(np.float16): "float16",
                 np.dtype(np.float32): "float32"}
_FORMATS = {2: "int2", 4: "int4", 8: "int8"}
#: The sign bits of the codes in a byte (flipping them turns two's complement into ``q + 2**(b - 1)``).
_SIGN_BITS = {2: 0xAA, 4: 0x88, 8: 0x80}
_E2M1_MAX, _E4M3_MAX = 6.0, 448.0


def check_weight(name: str, dtype: np.dtype, shape: tuple[int, ...], scheme: Scheme) -> None:
    """Raise :class:`ConvertError` (naming ``name`` and the rule) if ``scheme`` cannot quantize this weight."""
    if not isinstance(dtype, np.dtype) or dtype not in WEIGHT_DTYPES:  # a str: a dtype NumPy has no type for
        raise ConvertError(f"tensor {name}: dtype {dtype} is not supported for {scheme.name} (weights must be "
                           "bfloat16, float16 or float32); exclude it with --ignore")
    if len(shape) != 2:
        raise ConvertError(f"tensor {name}: expected a 2-D Linear weight, got shape {tuple(shape)}; exclude it "
                           "with --ignore")
    if 0 in shape:
        raise ConvertError(f"tensor {name}: shape {tuple(shape)} is empty")
    g = scheme.group_size
    if g and shape[1] % g:
        raise ConvertError(f"tensor {name}: shape {tuple(shape)}: K={shape[1]} is not a multiple of the group size "
                           f"{g} of {scheme.name}; exclude it with --ignore")


def output_entries(scheme: Scheme, shape: tuple[int, int], dtype: np.dtype) -> list[tuple[str, str, tuple]]:
    """``(suffix, safetensors dtype, shape)`` of each tensor a weight of ``shape`` and ``dtype`` becomes.

    Examples
    --------
    >>> import numpy as np
    >>> from nbquant.convert.schemes import get_scheme
    >>> output_entries(get_scheme("NVFP4A16"), (32, 64), np.dtype(np.float16))
    [('weight_packed', 'U8', (32, 32)), ('weight_scale', 'F8_E4M3', (32, 4)), ('weight_global_scale', 'F32', (1,))]
    """
    n, k = shape
    h = dtype_name(dtype)
    if scheme.kind == "int":
        groups = 1 if scheme.strategy == "channel" else k // scheme.group_size
        if not scheme.packed:
            return [("weight", "I8", (n, k)), ("weight_scale", h, (n, groups))]
        out = [("weight_packed", "I32", (n, k * scheme.bits // 32)), ("weight_scale", h, (n, groups)),
               ("weight_shape", "I64", (2,))]
        if not scheme.symmetric:
            out.append(("weight_zero_point", "I32", (math.ceil(n * scheme.bits / 32), groups)))
        return out
    if scheme.kind == "fp8":
        grid = (n, 1) if scheme.strategy == "channel" else (-(-n // 128), -(-k // 128))
        return [("weight", "F8_E4M3", (n, k)), ("weight_scale", h, grid)]
    codes = ("weight_packed", "U8", (n, k // 2)) if scheme.bits == 4 else ("weight", "F8_E4M3", (n, k))
    if scheme.kind == "nvfp4":
        return [codes, ("weight_scale", "F8_E4M3", (n, k // 16)), ("weight_global_scale", "F32", (1,))]
    return [codes, ("weight_scale", "U8", (n, k // 32))]


def _view(buf: np.ndarray | None, dtype, shape: tuple[int, ...]) -> np.ndarray | None:
    """The start of ``buf`` as an array of ``dtype`` and ``shape`` (None without a buffer)."""
    if buf is None:
        return None
    return buf[:math.prod(shape) * np.dtype(dtype).itemsize].view(dtype).reshape(shape)


def _in(h: np.dtype, a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).astype(h)


def _eps(h: np.dtype):
    return ml_dtypes.finfo(h).eps


def weight_amax(name: str, x: np.ndarray, block_size) -> np.ndarray:
    """``max |x|`` per block (float32); :class:`ConvertError` naming ``name`` if the weight holds NaN or inf."""
    a = nbquant.reduce_amax(x, block_size=block_size)
    if not np.isfinite(a).all():
        raise ConvertError(f"tensor {name} holds NaN or inf; a checkpoint to quantize must be finite (exclude it "
                           "with --ignore)")
    return a


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
        g = np.float32(r * np.float32(_E2M1_MAX * _E4M3_MAX)).astype(h).astype(np.float32)
    return np.float32(1.0) if not np.isfinite(g) else g


def _flip_sign_bits(codes: np.ndarray, bits: int) -> np.ndarray:
    u8 = np.asarray(codes).view(np.uint8)
    wide = u8.reshape(-1).view(np.uint64) if u8.size % 8 == 0 else u8
    np.bitwise_xor(wide, np.array(_SIGN_BITS[bits] * (0x0101010101010101 if wide.dtype == np.uint64 else 1),
                                  wide.dtype), out=wide)
    return u8


def _int_weight(x: np.ndarray, scheme: Scheme, name: str, buf=None) -> dict[str, np.ndarray]:
    h, hname = x.dtype, WEIGHT_DTYPES[x.dtype]
    b, n = scheme.bits, x.shape[0]
    qmin, qmax = -(1 << (b - 1)), (1 << (b - 1)) - 1
    layout = {"axis": 0} if scheme.strategy == "channel" else {"block_size": (1, scheme.group_size)}
    zp = None
    with np.errstate(all="ignore"):
        if scheme.symmetric:
            a = _in(h, weight_amax(name, x, layout.get("block_size") or (1, x.shape[1])))
            s = (a / _in(h, (2 ** b - 1) / 2)).astype(h)
        else:
            lo, hi = nbquant.reduce_min_max(x, **layout)
            if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
                raise ConvertError(f"tensor {name} holds NaN or inf; a checkpoint to quantize must be finite")
            lo, hi = np.minimum(_in(h, lo), _in(h, 0)), np.maximum(_in(h, hi), _in(h, 0))
            s = ((hi - lo).astype(h) / _in(h, 2 ** b - 1)).astype(h)
            if not np.isfinite(s).all():
                raise _range_overflow(name, scheme, lo, hi, s)
            z = (_in(h, qmin) - (lo / s).astype(h)).astype(h).astype(np.float32)
            z = np.rint(np.clip(z, qmin, qmax))
            zp = np.where(np.isnan(z), 0, z).astype(np.float32)  # torch's int8 cast of NaN (0 / 0) gives 0
    s = np.where(s == 0, _in(h, _eps(h)), s).astype(h)
    s32 = s.astype(np.float32).reshape(-1) if scheme.strategy == "channel" else s.astype(np.float32)
    kw = dict(layout, compute_dtype=hname)
    if zp is not None:
        kw.update(zero_point=zp, zero_point_order="before_rounding")
    if not scheme.packed:
        q = nbquant.quantize(x, s32, "int8", quant_min=qmin, quant_max=qmax, out=_view(buf, np.int8, x.shape), **kw)
        return {"weight": q, "weight_scale": s.reshape(n, -1)}
    if zp is None:  # clamp(rne(v), qmin, qmax) + 2**(b-1) is the unsigned code with that zero point after rounding
        offset = np.full(s32.shape, 1 << (b - 1), np.float32)
        q = np.asarray(nbquant.quantize(x, s32, "u" + _FORMATS[b], zero_point=offset, packed=b < 8,
                                        out=_view(buf, np.uint8, (n, x.shape[1] * b // 8)), **kw))
    else:  # the zero point is added before rounding, in h: codes are signed, their sign bits flipped after
        dest = _view(buf, np.uint8 if b < 8 else np.int8, (n, x.shape[1] * b // 8))
        q = _flip_sign_bits(nbquant.quantize(x, s32, _FORMATS[b], packed=b < 8, out=dest, **kw), b)
    out = {"weight_packed": q.view(np.uint8).view(np.int32).reshape(n, -1), "weight_scale": s,
           "weight_shape": np.array(x.shape, np.int64)}
    if zp is not None:
        out["weight_zero_point"] = _pack_rows(zp, b)
    return out


def _range_overflow(name: str, scheme: Scheme, lo: np.ndarray, hi: np.ndarray, s: np.ndarray) -> ConvertError:
    """The error of an asymmetric weight whose range ``max - min`` overflows its scales' dtype (the weight's)."""
    at = int(np.flatnonzero(~np.isfinite(s))[0])
    row, group = divmod(at, s.size // s.shape[0])
    g = scheme.group_size
    cols = f", columns {group * g}-{(group + 1) * g - 1}" if scheme.strategy == "group" else ""
    module = name.rpartition(".")[0] or name
    return ConvertError(f"tensor {name}: row {row}{cols} spans {float(lo.flat[at]):g} to {float(hi.flat[at]):g}, "
                        f"so its {scheme.name} scale (max - min) / {2 ** scheme.bits - 1} overflows "
                        f"{WEIGHT_DTYPES[s.dtype]} (largest {float(ml_dtypes.finfo(s.dtype).max):g}); exclude it "
                        f"with --ignore {module} (and --overwrite) or use a symmetric scheme such as W4A16")


def _pack_rows(zp: np.ndarray, bits: int) -> np.ndarray:
    """Zero points ``(n, groups)`` stored as compressed-tensors packs them: ``zp + 2**(b-1)`` along rows, int32."""
    n = zp.shape[0]
    per_word = 32 // bits
    t = np.zeros((zp.shape[1], -(-n // per_word) * per_word), np.float32)
    t[:, :n] = zp.T + (1 << (bits - 1))
    fmt = {2: "uint2", 4: "uint4", 8: "uint8"}[bits]
    packed = nbquant.quantize(t, 1.0, fmt, packed=bits < 8)
    return np.ascontiguousarray(np.asarray(packed).view(np.uint8).view(np.int32).T)


def _fp8_weight(x: np.ndarray, scheme: Scheme, name: str, buf=None) -> dict[str, np.ndarray]:
    h, hname = x.dtype, WEIGHT_DTYPES[x.dtype]
    n, k = x.shape
    with np.errstate(all="ignore"):
        if scheme.strategy == "channel":
            a = weight_amax(name, x, (1, k)).reshape(n)
        else:
            rows = _padded_row_amax(name, x)
            rb = -(-n // 128)
            pad = np.zeros((rb * 128, rows.shape[1]), np.float32)
            pad[:n] = rows
            a = pad.reshape(rb, 128, -1).max(axis=1)
        s = (_in(h, a) / _in(h, _E4M3_MAX)).astype(h)
    s = np.where(s == 0, _in(h, _eps(h)), s).astype(h)
    if scheme.strategy == "channel":
        q = nbquant.quantize(x, s.astype(np.float32), "float8_e4m3fn", axis=0, compute_dtype=hname,
                             out=_view(buf, ml_dtypes.float8_e4m3fn, x.shape))
        return {"weight": q, "weight_scale": s.reshape(n, 1)}
    expanded = np.repeat(s.astype(np.float32), 128, axis=0)[:n]
    q = nbquant.quantize(x, expanded, "float8_e4m3fn", axis=1, block_size=min(128, k), compute_dtype=hname,
                         out=_view(buf, ml_dtypes.float8_e4m3fn, x.shape))
    return {"weight": q, "weight_scale": s}


def _padded_row_amax(name: str, x: np.ndarray) -> np.ndarray:
    """Row amax per 128 columns, the last block partial (ONNX blocking)."""
    a = nbquant.reduce_amax(x, axis=1, block_size=min(128, x.shape[1]))
    if not np.isfinite(a).all():
        raise ConvertError(f"tensor {name} holds NaN or inf; a checkpoint to quantize must be finite")
    return a


def _mx_codes(a: np.ndarray, h: np.dtype, bits: int) -> np.ndarray:
    """E8M0 scale codes from the block amax (float32, exact in ``h``), compressed-tensors' rounding."""
    fi = ml_dtypes.finfo(h)
    mbits, ebits = fi.nmant, fi.nexp
    store = {2: np.uint16, 4: np.uint32}[h.itemsize]
    u = a.astype(h).view(store).astype(np.int64)
    p2 = (u + (1 << (mbits - 2))) & (((1 << (ebits + 1)) - 1) << mbits)  # the mantissa rounds up at 0.75
    e = (p2 >> mbits) & ((1 << ebits) - 1)
    emax = 2 if bits == 4 else 8  # floor(log2(6)), floor(log2(448))
    code = np.where(e == 0, 0, np.clip(e - (1 << (ebits - 1)) + 1 + 127 - emax, 0, 255))
    scale = np.ldexp(np.float32(1), (code - 127).astype(np.int32)).astype(np.float32).astype(h)
    scale = np.where(scale == 0, _in(h, 1.0), scale).astype(h)  # compressed-tensors' eps for uint8 scales
    return scale


def _mx_weight(x: np.ndarray, scheme: Scheme, name: str, buf=None) -> dict[str, np.ndarray]:
    h, hname = x.dtype, WEIGHT_DTYPES[x.dtype]
    scale = _mx_codes(weight_amax(name, x, (1, 32)), h, scheme.bits)
    s32 = scale.astype(np.float32)
    code = (127 + np.floor(np.log2(s32))).astype(np.uint8)
    if scheme.bits == 4:
        q = np.asarray(nbquant.quantize(x, s32, "float4_e2m1fn", block_size=(1, 32), packed=True, compute_dtype=hname,
                                        out=_view(buf, np.uint8, (x.shape[0], x.shape[1] // 2)))).view(np.uint8)
        return {"weight_packed": _signed_zero_codes(x, q), "weight_scale": code}
    q = nbquant.quantize(x, s32, "float8_e4m3fn", block_size=(1, 32), compute_dtype=hname,
                         out=_view(buf, ml_dtypes.float8_e4m3fn, x.shape))
    return {"weight": q, "weight_scale": code}


def _signed_zero_codes(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """compressed-tensors codes ``-0.0`` weights as +0 (``x * sign(x)``); nbquant's e2m1 keeps the sign."""
    bits = x.view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize])
    where = np.flatnonzero(bits == np.array(1 << (8 * x.dtype.itemsize - 1), bits.dtype))
    if where.size:
        flat = q.reshape(-1)
        np.bitwise_and.at(flat, where // 2, np.where(where % 2 == 0, 0xF7, 0x7F).astype(np.uint8))  # both nibbles
    return q


def _nvfp4_weight(x: np.ndarray, gs: np.float32, name: str, buf=None, amax=None) -> dict[str, np.ndarray]:
    h = x.dtype
    a = _in(h, weight_amax(name, x, (1, 16)) if amax is None else amax)
    with np.errstate(all="ignore"):
        local = (a / _in(h, _E2M1_MAX)).astype(h).astype(np.float32)
        scale = np.minimum(np.float32(gs) * local, np.float32(_E4M3_MAX))
    code = np.asarray(nbquant.quantize(scale, 1.0, "float8_e4m3fn")).view(np.uint8)
    code = np.where(code == 0, np.uint8(0x20), code).view(ml_dtypes.float8_e4m3fn)  # scale 0 -> 0.125 (eps)
    divisor = nbquant.dequantize(code, 1.0) / np.float32(gs)  # e4m3 values are exact in h, and in float32
    q = np.asarray(nbquant.quantize(x, divisor, "float4_e2m1fn", block_size=(1, 16), packed=True,
                                    out=_view(buf, np.uint8, (x.shape[0], x.shape[1] // 2)))).view(np.uint8)
    return {"weight_packed": _signed_zero_codes(x, q), "weight_scale": code,
            "weight_global_scale": np.array([gs], np.float32)}


def nvfp4_block_amax(name: str, x: np.ndarray) -> np.ndarray:
    """NVFP4's per-16 block amax (float32), which also gives the fused global scale (its maximum)."""
    return weight_amax(name, x, (1, 16))


def quantize_weight(x: np.ndarray, scheme: Scheme, gs: np.float32 | None = None,
                    name: str = "weight", buffer: np.ndarray | None = None,
                    amax: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The tensors (by suffix: ``weight_packed``, ``weight_scale`` ...) that ``scheme`` turns weight ``x`` into.

    Parameters
    ----------
    x : numpy.ndarray
        A 2-D bfloat16, float16 or float32 weight (see :func:`check_weight`).
    scheme : Scheme
    gs : numpy.float32, optional
        NVFP4's global scale (:func:`global_scale` of the fused weights' amax); default: this weight's own.
    name : str
        The tensor's name, for error messages.
    buffer : numpy.ndarray, optional
        uint8, at least ``x.size`` bytes: the codes are written there (a view of it is
        returned), so that a caller converting many weights reuses one allocation.
    amax : numpy.ndarray, optional
        NVFP4: the weight's :func:`nvfp4_block_amax`, when already computed for its global scale.

    Returns
    -------
    dict of str to numpy.ndarray
        The compressed-tensors tensors of the weight, by suffix (prefix them with the module name).

    Examples
    --------
    >>> import numpy as np, ml_dtypes
    >>> from nbquant.convert import get_scheme, quantize_weight
    >>> x = np.linspace(-1, 1, 4 * 32, dtype=np.float32).reshape(4, 32).astype(ml_dtypes.bfloat16)
    >>> out = quantize_weight(x, get_scheme("MXFP4A16"))
    >>> out["weight_packed"].shape, out["weight_scale"].ravel().tolist()
    ((4, 16), [125, 124, 124, 125])
    """
    check_weight(name, x.dtype, x.shape, scheme)
    if buffer is not None and (buffer.dtype != np.uint8 or buffer.size < x.size or not buffer.flags.c_contiguous):
        raise ValueError(f"buffer must be a contiguous uint8 array of at least {x.size} bytes")
    if scheme.kind == "int":
        return _int_weight(x, scheme, name, buffer)
    if scheme.kind == "fp8":
        return _fp8_weight(x, scheme, name, buffer)
    if scheme.kind == "mx":
        return _mx_weight(x, scheme, name, buffer)
    if amax is None:
        amax = nvfp4_block_amax(name, x)
    if gs is None:
        gs = global_scale(float(amax.max()), x.dtype)
    return _nvfp4_weight(x, gs, name, buffer, amax)


def dequantize_weight(t: dict[str, np.ndarray], scheme: Scheme, dtype: np.dtype,
                      rows: slice = slice(None)) -> np.ndarray:
    """Decode the tensors of :func:`quantize_weight` (rows ``rows`` of the weight) to ``dtype`` with nbquant.

    This is compressed-tensors' decompression: ``(q - zp) * s`` (int), ``e4m3 * s`` (fp8),
    ``e2m1 * fl32(scale / gs)`` (nvfp4), ``element * 2**(code - 127)`` (mx), each computed in
    float32 and rounded once to ``dtype``.

    Examples
    --------
    >>> import numpy as np
    >>> from nbquant.convert import get_scheme, quantize_weight
    >>> x = np.array([[0.5, -1.0, 2.0, 6.0] * 4], np.float32)
    >>> y = dequantize_weight(quantize_weight(x, get_scheme("NVFP4A16")), get_scheme("NVFP4A16"), np.float32)
    >>> y[0, :4].tolist()
    [0.5, -1.0, 2.0, 6.0]
    """
    h = np.dtype(dtype)
    scale = t["weight_scale"][rows]
    if scheme.kind == "int":
        s = scale.astype(np.float32)
        layout = {"axis": 0} if scheme.strategy == "channel" else {"block_size": (1, scheme.group_size)}
        s = s.reshape(-1) if scheme.strategy == "channel" else s
        if not scheme.packed:
            return nbquant.dequantize(t["weight"][rows], s, out_dtype=h, **layout)
        codes = _flip_sign_bits(np.array(t["weight_packed"][rows]), scheme.bits)
        zp = None
        if not scheme.symmetric:
            zp = _unpack_rows(t["weight_zero_point"], scheme.bits, int(t["weight_shape"][0]))[rows]
        if scheme.bits == 8:
            return nbquant.dequantize(codes.view(np.int8), s, zero_point=zp, out_dtype=h, **layout)
        return nbquant.dequantize(codes, s, zero_point=zp, dtype=_FORMATS[scheme.bits], out_dtype=h, **layout)
    if scheme.kind == "fp8":
        w = t["weight"][rows]
        if scheme.strategy == "channel":
            return nbquant.dequantize(w, scale.astype(np.float32).reshape(-1), axis=0, out_dtype=h)
        full = np.repeat(t["weight_scale"].astype(np.float32), 128, axis=0)[:t["weight"].shape[0]]
        return nbquant.dequantize(w, full[rows], axis=1, block_size=min(128, w.shape[1]), out_dtype=h)
    if scheme.kind == "nvfp4":
        d = scale.astype(np.float32) / np.float32(t["weight_global_scale"][0])
        return nbquant.dequantize(np.asarray(t["weight_packed"][rows]), d, dtype="float4_e2m1fn",
                                  block_size=(1, 16), out_dtype=h)
    d = np.ldexp(np.float32(1), scale.astype(np.int32) - 127).astype(np.float32)
    if scheme.bits == 4:
        return nbquant.dequantize(np.asarray(t["weight_packed"][rows]), d, dtype="float4_e2m1fn",
                                  block_size=(1, 32), out_dtype=h)
    return nbquant.dequantize(t["weight"][rows], d, block_size=(1, 32), out_dtype=h)


def _unpack_rows(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    """The float32 zero points ``(n, groups)`` of :func:`_pack_rows`' int32 words."""
    t = np.ascontiguousarray(np.asarray(packed).T).view(np.uint8)
    fmt = {2: "uint2", 4: "uint4", 8: "uint8"}[bits]
    z = nbquant.dequantize(t, 1.0, dtype=fmt) if bits < 8 else t.astype(np.float32)
    return (z[:, :n] - (1 << (bits - 1))).T
