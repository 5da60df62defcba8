"""The quantized formats ``nbquant convert`` reads, detected from ``config.json``, each decoded by an existing codec.

:func:`detect` reads the source's ``quantization_config`` and returns, per quantized module, a
:class:`SourceFormat`: the scheme its tensors were written with, the suffixes of those tensors and
the dtype its ecosystem's decoder gives. Two families are recognised:

* ``quant_method: "compressed-tensors"`` (llm-compressor, ``model_free_ptq``, nbquant convert):
  the formats ``pack-quantized``, ``int-quantized``, ``float-quantized`` (per tensor, channel or
  block), ``nvfp4-pack-quantized``, ``mxfp4-pack-quantized`` and ``mxfp8-quantized``; each module
  takes the ``config_groups`` entry whose ``targets`` name it (a module name or ``re:`` pattern
  first, then a class name such as ``Linear``). Decoded as compressed-tensors decompresses:
  to the scales' dtype (bfloat16 for NVFP4 and MX, whose scales are not floats of the model).
* ``quant_method: "fp8"`` (DeepSeek-V3/R1, Qwen3-FP8): an E4M3 ``weight`` and a float32
  ``weight_scale_inv`` per ``weight_block_size`` block; decoded as DeepSeek's ``weight_dequant``
  (the product in float32, then bfloat16).
* ``quant_method: "modelopt"`` (or ``hf_quant_config.json``): :mod:`.modelopt`.

A module is quantized when its tensors say so (``weight_packed``, or ``weight`` with
``weight_scale`` / ``weight_scale_inv``); its other quantization tensors (``weight_shape``,
``weight_zero_point``, ``weight_global_scale``, ``input_scale`` ...) are consumed with it. The
numbers are the codecs' (:mod:`nbquant.convert.codecs`): a format here is a :class:`Scheme` built
from the source's own arguments, handed to :func:`~nbquant.convert.codecs.codec_for`.

Examples
--------
>>> f = compressed_tensors_format("group_0", {"format": "pack-quantized", "weights": {
...     "num_bits": 4, "type": "int", "strategy": "group", "group_size": 32, "symmetric": True}}, "x")
>>> f.scheme.format, f.scheme.group_size, f.label
('pack-quantized', 32, 'compressed-tensors pack-quantized int4 g32')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import ml_dtypes
import numpy as np

from ..codecs import Codec, codec_for
from ..safetensors import ConvertError
from ..schemes import Scheme

__all__ = ["SourceFormat", "compressed_tensors_format", "fp8_block_format", "CONSUMED", "FLOAT_DTYPES"]

BF16 = np.dtype(ml_dtypes.bfloat16)
#: The safetensors dtypes of float scales, as NumPy dtypes.
FLOAT_DTYPES = {"BF16": BF16, "F16": np.dtype(np.float16), "F32": np.dtype(np.float32)}
#: The suffixes of a quantized module's tensors that its decoded weight replaces (activation and KV scales too:
#: neither a plain checkpoint nor a re-quantized one keeps the source's activation quantization).
CONSUMED = ("weight", "weight_packed", "weight_scale", "weight_scale_inv", "weight_zero_point", "weight_shape",
            "weight_global_scale", "weight_scale_2", "input_scale", "input_global_scale", "input_zero_point",
            "output_scale")
#: compressed-tensors formats read, and the ``QuantizationArgs`` each accepts: (type, bits, strategies).
_CT_FORMATS: dict[str, tuple[str, tuple[int, ...], tuple[str, ...]]] = {
    "pack-quantized": ("int", (2, 4, 8), ("group", "channel", "tensor")),
    "int-quantized": ("int", (2, 3, 4, 5, 6, 7, 8), ("group", "channel", "tensor")),
    "float-quantized": ("float", (8,), ("tensor", "channel", "block")),
    "nvfp4-pack-quantized": ("float", (4,), ("tensor_group", "group")),
    "mxfp4-pack-quantized": ("float", (4,), ("group",)),
    "mxfp8-quantized": ("float", (8,), ("group",)),
}
_KIND = {"pack-quantized": "int", "int-quantized": "int", "float-quantized": "fp8", "nvfp4-pack-quantized": "nvfp4",
         "mxfp4-pack-quantized": "mx", "mxfp8-quantized": "mx"}
_GROUP = {"nvfp4-pack-quantized": 16, "mxfp4-pack-quantized": 32, "mxfp8-quantized": 32}


@dataclass(frozen=True)
class SourceFormat:
    """How the weight of one quantized module is stored, and how it decodes.

    Attributes
    ----------
    label : str
        For messages and the report (``compressed-tensors pack-quantized int4 g128``).
    scheme : Scheme
        The source's arguments as a :class:`~nbquant.convert.schemes.Scheme`; its codec decodes.
    renames : tuple of (str, str)
        ``(source suffix, codec suffix)`` where the source names a tensor otherwise
        (``weight_scale_inv`` → ``weight_scale``); empty for compressed-tensors' own layout.
    dtype : numpy.dtype or None
        The dtype the ecosystem's decoder gives (None: the scales' own dtype).
    codec_class : type or None
        A codec class decoding otherwise than the scheme's format (modelopt's NVFP4 scale product).
    scale_in_dtype : bool
        The decoder rounds the scales to :attr:`dtype` before the product (modelopt's FP8).
    """

    label: str
    scheme: Scheme
    renames: tuple[tuple[str, str], ...] = ()
    dtype: np.dtype | None = None
    codec_class: type | None = None
    scale_in_dtype: bool = False

    @cached_property
    def codec(self) -> Codec:
        """The codec whose ``dequantize`` is the decoder."""
        return self.codec_class(self.scheme) if self.codec_class else codec_for(self.scheme)

    @property
    def native(self) -> bool:
        """Stored and decoded as compressed-tensors stores and decodes :attr:`scheme`."""
        return not self.renames and self.codec_class is None and not self.scale_in_dtype

    @property
    def per_tensor(self) -> bool:
        """One scale for the whole weight."""
        return self.scheme.strategy == "tensor"

    def source_suffix(self, suffix: str) -> str:
        """The source's name of the codec's tensor ``suffix``."""
        return next((src for src, mine in self.renames if mine == suffix), suffix)

    @property
    def codes(self) -> str:
        """The suffix of the codes in the source."""
        return self.source_suffix("weight_packed" if self.scheme.packed else "weight")

    @property
    def scale(self) -> str:
        """The suffix of the scales in the source."""
        return self.source_suffix("weight_scale")

    def scalar(self, suffix: str) -> bool:
        """Whether the source tensor ``suffix`` holds one value (any shape of one element is read)."""
        return (suffix == self.scale and self.per_tensor) or self.source_suffix("weight_global_scale") == suffix

    def tensors(self, found: Mapping[str, np.ndarray], shape: tuple[int, int]) -> dict[str, np.ndarray]:
        """The module's tensors under the codec's suffixes: renamed, one per-tensor scale per row."""
        names = dict(self.renames)
        t = {names.get(k, k): v for k, v in found.items() if k in CONSUMED[:8]}
        s = t["weight_scale"]
        if self.scale_in_dtype:
            s = np.asarray(s).astype(self.dtype)
        t["weight_scale"] = np.broadcast_to(np.asarray(s).reshape(1, 1), (shape[0], 1)) if self.per_tensor else s
        if "weight_global_scale" in t:
            t["weight_global_scale"] = np.asarray(t["weight_global_scale"]).reshape(1)
        return t

    def decode(self, tensors: Mapping[str, np.ndarray], dtype: np.dtype, rows: slice = slice(None)) -> np.ndarray:
        """Rows ``rows`` of the weight (``tensors`` from :meth:`tensors`), decoded to ``dtype`` by the codec."""
        return self.codec.dequantize(tensors, np.dtype(dtype), rows)

    def expected(self, shape: tuple[int, int], scale_dtype: np.dtype) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Source suffix → (safetensors dtype, shape) the source must hold for a weight of ``shape``."""
        return {self.source_suffix(suffix): (dt, tuple(s)) for suffix, dt, s in self.codec.entries(shape, scale_dtype)}


def _bad(where: str, field: str, value: object, allowed: str) -> ConvertError:
    return ConvertError(f"{where}: {field} {value!r} is not supported ({allowed})")


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def compressed_tensors_format(key: str, group: Mapping[str, Any], where: str,
                              default_format: object = None) -> SourceFormat:
    """The :class:`SourceFormat` of one ``config_groups`` entry (``key``); ``where`` names it in errors.

    Raises :class:`ConvertError` (one line naming the field and its value) for a format or argument
    that nbquant does not decode.
    """
    where = f"{where}: quantization_config.config_groups.{key}"
    if not isinstance(group, Mapping):
        raise ConvertError(f"{where}: expected a JSON object, got {group!r}")
    fmt = group.get("format") or default_format
    if fmt not in _CT_FORMATS:
        raise _bad(where, "format", fmt, f"supported: {', '.join(_CT_FORMATS)}")
    w = group.get("weights")
    if not isinstance(w, Mapping):
        raise ConvertError(f"{where}.weights: expected a JSON object of quantization arguments, got {w!r}")
    type_, bits_ok, strategies = _CT_FORMATS[fmt]
    bits, strategy, gs = w.get("num_bits"), w.get("strategy"), w.get("group_size")
    symmetric = w.get("symmetric", True)
    if w.get("type") != type_:
        raise _bad(f"{where}.weights", "type", w.get("type"), f"{fmt} stores {type_} codes")
    if not _positive(bits) or bits not in bits_ok:
        raise _bad(f"{where}.weights", "num_bits", bits, f"{fmt} reads {', '.join(map(str, bits_ok))}")
    if strategy not in strategies:
        raise _bad(f"{where}.weights", "strategy", strategy, f"{fmt} reads {', '.join(strategies)}")
    if not isinstance(symmetric, bool) or (not symmetric and fmt != "pack-quantized"):
        raise _bad(f"{where}.weights", "symmetric", symmetric, "zero points are read for pack-quantized only")
    if w.get("actorder") not in (None, "weight", "static"):
        raise _bad(f"{where}.weights", "actorder", w.get("actorder"), "activation-ordered groups (weight_g_idx) "
                   "are not decoded")
    block = None
    if strategy == "block":
        block = w.get("block_structure")
        if not (isinstance(block, list) and len(block) == 2 and all(_positive(b) for b in block)):
            raise _bad(f"{where}.weights", "block_structure", block, "two positive ints, [rows, columns]")
    if strategy in ("group", "tensor_group"):
        need = _GROUP.get(fmt)
        if not _positive(gs) or (need is not None and gs != need):
            raise _bad(f"{where}.weights", "group_size", gs, f"{fmt} uses {need}" if need else "a positive int")
    else:
        gs = None
    args = {"num_bits": bits, "type": type_, "strategy": strategy, "group_size": gs, "symmetric": symmetric,
            "block_structure": block}
    scheme = Scheme(str(key), _KIND[fmt], bits, strategy, fmt, args, gs, symmetric,
                    fmt in ("pack-quantized", "nvfp4-pack-quantized", "mxfp4-pack-quantized"))
    detail = {"tensor": " per tensor", "channel": " per channel",
              "block": f" block {block and 'x'.join(map(str, block))}"}
    name = f"int{bits}" if type_ == "int" else {"float-quantized": "fp8"}.get(fmt, "")
    label = " ".join(p for p in ("compressed-tensors", fmt, name) if p)
    label += f" g{gs}" if gs and fmt in ("pack-quantized", "int-quantized") else detail.get(strategy, "")
    label += "" if symmetric else " asymmetric"
    return SourceFormat(label, scheme, (), BF16 if _KIND[fmt] in ("nvfp4", "mx") else None)


def fp8_block_format(qc: Mapping[str, Any], where: str) -> SourceFormat:
    """The :class:`SourceFormat` of a ``quant_method: "fp8"`` config (DeepSeek-V3 style ``weight_scale_inv``)."""
    where = f"{where}: quantization_config"
    fmt = qc.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise _bad(where, "fmt", fmt, "the fp8 weights read are e4m3")
    block = qc.get("weight_block_size", [128, 128])
    if not (isinstance(block, list) and len(block) == 2 and all(_positive(b) for b in block)):
        raise _bad(where, "weight_block_size", block, "two positive ints, [rows, columns]")
    args = {"num_bits": 8, "type": "float", "strategy": "block", "group_size": None, "symmetric": True,
            "block_structure": list(block)}
    scheme = Scheme("FP8_BLOCK_SOURCE", "fp8", 8, "block", "float-quantized", args)
    return SourceFormat(f"fp8 block {block[0]}x{block[1]} (weight_scale_inv)", scheme,
                        (("weight_scale_inv", "weight_scale"),), BF16)


def matching_group(module: str, groups: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The key of the ``config_groups`` entry that quantizes ``module``: a target naming it (its name, or a ``re:``
    pattern matched from the start) first, then a class-name target (``Linear``); None if none does.

    Examples
    --------
    >>> groups = {"a": {"targets": ["Linear"]}, "b": {"targets": ["re:.*down_proj$"]}}
    >>> matching_group("m.layers.0.mlp.down_proj", groups), matching_group("m.layers.0.mlp.up_proj", groups)
    ('b', 'a')
    """
    by_class = None
    for key, group in groups.items():
        targets = group.get("targets") if isinstance(group, Mapping) else None
        for t in targets if isinstance(targets, list) else []:
            if not isinstance(t, str):
                continue
            if t == module or (t.startswith("re:") and _match(t[3:], module)):
                return key
            if by_class is None and "." not in t and not t.startswith("re:"):
                by_class = key
    return by_class


def _match(pattern: str, name: str) -> bool:
    try:
        return re.match(pattern, name) is not None
    except re.error:
        return False


def packed_columns(fmt: SourceFormat, columns: int) -> int:
    """The weight's K from the codes' columns (packed e2m1: two per byte); pack-quantized reads ``weight_shape``."""
    return columns * 2 if fmt.scheme.kind in ("nvfp4", "mx") and fmt.scheme.packed else columns

