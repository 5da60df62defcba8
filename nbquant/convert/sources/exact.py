"""Exact re-encodings: a target scheme that holds the source's codes and scales unchanged gets them, not new ones.

Where a target's grid of scales is the source's, or a refinement of it, and its codes hold every
source code, the target's tensors are the source's codes (repacked) and scales (repeated over the
finer grid): nothing is rounded, and ``decode(target) == decode(source)`` bit for bit.

* the same format and arguments (``W4A16`` → ``W4A16``, ``NVFP4A16`` → ``NVFP4A16`` ...): the
  tensors as they are;
* E4M3 codes per tensor or channel → ``FP8_DYNAMIC`` (a scale per row); per tensor, or per block
  of ``(a·128, b·128)`` → ``FP8_BLOCK`` (DeepSeek-V3's ``weight_scale_inv`` included);
* symmetric integer codes of ``b`` bits per tensor, channel or group of ``g`` → a symmetric integer
  target of at least ``b`` bits whose groups divide ``g`` (or per channel, from per tensor or
  channel): ``W8A8`` → ``W8A16``, ``W4A8`` → ``W4A16``, ``W4A16`` → ``W8A16`` ...

The scales keep their dtype: the decoded weight is planned in the source scales' dtype
(:func:`exact_dtype`). The codes move through nbquant's kernels: the source codec decodes them with
unit scales (exact small integers in float32) and :func:`nbquant.quantize` packs them.

Examples
--------
>>> from nbquant.convert.schemes import get_scheme
>>> from nbquant.convert.sources.formats import fp8_block_format
>>> import numpy as np
>>> exact_dtype(fp8_block_format({}, "x"), get_scheme("FP8_BLOCK"), np.dtype(np.float32))
dtype('float32')
>>> exact_dtype(fp8_block_format({}, "x"), get_scheme("FP8_DYNAMIC"), np.dtype(np.float32)) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

import nbquant
from nbquant.formats import get_format

from ..codecs import Codec
from ..safetensors import dtype_name
from ..schemes import Scheme
from .formats import SourceFormat

__all__ = ["exact_dtype", "reencode"]

_ARGS = ("num_bits", "type", "strategy", "group_size", "symmetric", "block_structure")


def _same(fmt: SourceFormat, target: Scheme) -> bool:
    a, b = fmt.scheme.weights, target.weights
    return fmt.native and fmt.scheme.format == target.format and \
        all(a.get(k) == b.get(k) for k in _ARGS)


def _fp8(fmt: SourceFormat, target: Scheme) -> bool:
    src = fmt.scheme
    if src.kind != "fp8" or target.kind != "fp8":
        return False
    if target.block is None:
        return src.strategy in ("tensor", "channel")
    if src.strategy == "tensor":
        return True
    return src.block is not None and src.block[0] % target.block[0] == 0 and src.block[1] % target.block[1] == 0


def _int(fmt: SourceFormat, target: Scheme) -> bool:
    src = fmt.scheme
    if src.kind != "int" or target.kind != "int" or not (src.symmetric and target.symmetric):
        return False
    if src.bits > target.bits:
        return False
    if target.group_size is None:
        return src.strategy in ("tensor", "channel")
    return src.group_size is None or src.group_size % target.group_size == 0


def exact_dtype(fmt: SourceFormat, target: Scheme, scale_dtype: np.dtype) -> np.dtype | None:
    """The dtype to plan the decoded weight in when ``target`` holds ``fmt``'s codes and scales exactly, else None.

    That is the source scales' dtype (the target writes its scales in the weight's dtype), or for
    NVFP4 and MX, whose scales are not floats, the decoded dtype.
    """
    if _same(fmt, target):
        return fmt.dtype or scale_dtype
    if _fp8(fmt, target) or _int(fmt, target):
        return scale_dtype
    return None


def _repeat(s: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The scales ``s[rows][:, cols]`` (a finer grid's, each entry its source block's)."""
    return np.ascontiguousarray(np.asarray(s)[rows][:, cols])


def _scale_grid(fmt: SourceFormat, s: np.ndarray, shape: tuple[int, int], target: Scheme) -> np.ndarray:
    """The source scales ``s`` (codec layout: ``(n, 1)`` per tensor or channel) on the target's grid."""
    n, k = shape
    if target.block is not None:  # FP8_BLOCK
        br, bc = target.block
        rows, cols = np.arange(0, n, br), np.arange(0, k, bc)
        if fmt.scheme.block is None:  # per tensor
            return _repeat(s, rows, np.zeros(len(cols), np.intp))
        return _repeat(s, rows // fmt.scheme.block[0], cols // fmt.scheme.block[1])
    g = target.group_size
    if g is None:
        return np.ascontiguousarray(s).reshape(n, 1)
    cols = np.arange(0, k, g)
    return _repeat(s, np.arange(n), cols // fmt.scheme.group_size if fmt.scheme.group_size else cols * 0)


def _int_codes(fmt: SourceFormat, t: Mapping[str, np.ndarray], target: Codec) -> np.ndarray:
    """The source's integer codes in the target's storage, through the kernels."""
    unit = dict(t, weight_scale=np.ones(np.shape(t["weight_scale"]), np.float32))
    q = fmt.codec.dequantize(unit, np.dtype(np.float32))  # the codes themselves, exact in float32
    s = target.scheme
    if not s.packed:
        return np.asarray(nbquant.quantize(q, np.float32(1), "int8"))
    u = get_format(f"uint{s.bits}")
    packed = np.asarray(nbquant.quantize(q, np.float32(1), u.name, zero_point=np.float32(1 << (s.bits - 1)),
                                         packed=u.packable))
    return packed.view(np.uint8).view(np.int32).reshape(q.shape[0], -1)


def reencode(fmt: SourceFormat, t: Mapping[str, np.ndarray], shape: tuple[int, int], target: Codec,
             dtype: np.dtype) -> dict[str, np.ndarray] | None:
    """The target's tensors holding the source's codes and scales (``t``, codec layout), or None if it cannot.

    ``dtype`` is the decoded weight's planned dtype: an exact re-encoding writes the scales in it,
    so it is the source scales' dtype (:func:`exact_dtype`) or the re-encoding does not apply.

    Examples
    --------
    >>> import ml_dtypes
    >>> from nbquant.convert.codecs import codec_for
    >>> from nbquant.convert.schemes import get_scheme
    >>> from nbquant.convert.sources.formats import fp8_block_format
    >>> t = {"weight": np.zeros((200, 300), ml_dtypes.float8_e4m3fn),
    ...      "weight_scale": np.arange(6, dtype=np.float32).reshape(2, 3)}
    >>> target = codec_for(get_scheme("FP8_BLOCK"))
    >>> reencode(fp8_block_format({}, "x"), t, (200, 300), target, np.dtype(np.float32))["weight_scale"].tolist()
    [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    """
    s = target.scheme
    if exact_dtype(fmt, s, np.dtype(np.asarray(t["weight_scale"]).dtype)) != dtype:
        return None
    want = target.entries(shape, dtype)
    if _same(fmt, s):
        out = {k: np.asarray(t[k]) for k, _, _ in want}
        if "weight_shape" in out:
            out["weight_shape"] = np.array(shape, np.int64)
    elif _fp8(fmt, s):
        out = {"weight": np.asarray(t["weight"]), "weight_scale": _scale_grid(fmt, t["weight_scale"], shape, s)}
    elif _int(fmt, s):
        codes = _int_codes(fmt, t, target)
        out = {"weight_packed" if s.packed else "weight": codes,
               "weight_scale": _scale_grid(fmt, t["weight_scale"], shape, s)}
        if s.packed:
            out["weight_shape"] = np.array(shape, np.int64)
    else:
        return None
    made = [(k, dtype_name(out[k].dtype), tuple(out[k].shape)) for k, _, _ in want if k in out]
    if made != [(k, d, tuple(sh)) for k, d, sh in want]:
        raise RuntimeError(f"exact re-encoding made {made}, {type(target).__name__} plans {want}")
    return out
