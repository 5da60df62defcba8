"""A quantized source checkpoint seen as a plain one: each quantized module's tensors become one decoded weight.

:func:`open_source` detects the source's format (:mod:`.formats`), checks every quantized
module's tensors (dtypes and shapes against the format, before anything is written), and returns
a :class:`~nbquant.convert.plan.Checkpoint` whose shards are :class:`DecodedFile` views: where the
source holds ``<module>.weight_packed``, ``weight_scale`` ... the view holds ``<module>.weight``,
a :class:`Decoded` weight of the decoded dtype that is decoded only when read (whole, or rows).
The planner, the writer, resume and the report then treat it as any other weight.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..plan import Checkpoint
from ..safetensors import ConvertError, SafetensorsFile, TensorEntry, dtype_name
from ..schemes import Scheme
from ..untrusted_json import UntrustedJSONError, loads
from .dense import DENSE_DTYPES
from .exact import exact_dtype
from .formats import (
    CONSUMED,
    FLOAT_DTYPES,
    SourceFormat,
    compressed_tensors_format,
    fp8_block_format,
    matching_group,
    packed_columns,
)
from .gptoss import gptoss_experts
from .modelopt import modelopt_format

__all__ = ["Decoded", "DecodedFile", "open_source", "decoded_names", "HF_QUANT_CONFIG"]

#: modelopt's export config, beside ``config.json``: read to detect the format, not copied.
HF_QUANT_CONFIG = "hf_quant_config.json"


class Decoded:
    """The weight of one quantized module, decoded on demand: ``x[rows]`` decodes rows, ``np.asarray(x)`` all.

    Attributes
    ----------
    name : str
        ``<module>.weight``.
    fmt : SourceFormat
    shape : tuple of int
    dtype : numpy.dtype
        The decoded dtype.
    """

    def __init__(self, name: str, fmt: SourceFormat, found: Mapping[str, np.ndarray], shape: tuple[int, int],
                 dtype: np.dtype) -> None:
        self.name, self.fmt, self.shape, self.dtype = name, fmt, tuple(shape), np.dtype(dtype)
        self.found = dict(found)

    @property
    def ndim(self) -> int:
        """2, or 3 for fused MoE experts (gpt-oss)."""
        return len(self.shape)

    @property
    def tensors(self) -> dict[str, np.ndarray]:
        """The source tensors under the codec's suffixes (:meth:`SourceFormat.tensors`)."""
        return self.fmt.tensors(self.found, self.shape)

    def __getitem__(self, rows: slice) -> np.ndarray:
        if not isinstance(rows, slice):
            raise TypeError(f"a decoded weight is read by rows (a slice), not {rows!r}")
        return self.fmt.decode(self.tensors, self.dtype, rows)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        a = self[:]
        return a if dtype is None else a.astype(dtype)


class DecodedFile:
    """One source shard as the planner sees it: its plain tensors, and ``<module>.weight`` for each quantized module.

    It has :class:`~nbquant.convert.safetensors.SafetensorsFile`'s ``path``, ``entries`` and
    :meth:`tensor`; ``decoded`` maps each decoded weight's name to ``(format, module tensors by
    suffix → (file, name), shape)``.
    """

    def __init__(self, file: SafetensorsFile, entries: dict[str, TensorEntry],
                 decoded: dict[str, tuple[SourceFormat, dict[str, tuple[SafetensorsFile, str]], tuple[int, int]]]):
        self.file, self.path, self.entries, self.decoded = file, file.path, entries, decoded

    def tensor(self, name: str) -> np.ndarray | Decoded:
        """The plain tensor ``name`` mapped from the file, or the :class:`Decoded` weight ``name``."""
        if name not in self.decoded:
            return self.file.tensor(name)
        fmt, parts, shape = self.decoded[name]
        return Decoded(name, fmt, {s: f.tensor(n) for s, (f, n) in parts.items()}, shape,
                       self.entries[name].numpy_dtype)


def decoded_names(ckpt: Checkpoint) -> set[str]:
    """The names of the decoded weights of ``ckpt`` (empty for a plain checkpoint)."""
    return {n for f in ckpt.shards.values() if isinstance(f, DecodedFile) for n in f.decoded}


def _formats(qc: Any, where: str, modules: list[str], config: Mapping) -> dict[str, SourceFormat]:
    """Module → its :class:`SourceFormat`, from the ``quantization_config`` ``qc``."""
    if not isinstance(qc, Mapping):
        raise ConvertError(f"{where}: quantization_config is not a JSON object: {qc!r}")
    method = qc.get("quant_method")
    if method == "fp8":
        return dict.fromkeys(modules, fp8_block_format(qc, where))
    if method == "modelopt":
        return dict.fromkeys(modules, modelopt_format(qc, where, config))
    if method != "compressed-tensors":
        raise ConvertError(f"{where}: quantization_config.quant_method {method!r} is not supported (nbquant reads "
                           "compressed-tensors, fp8 and modelopt checkpoints)")
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise ConvertError(f"{where}: quantization_config.config_groups {groups!r}: expected a non-empty JSON object")
    cache: dict[str, SourceFormat] = {}
    out = {}
    for m in modules:
        key = matching_group(m, groups)
        if key is None:
            raise ConvertError(f"{where}: module {m} holds quantized tensors but no config_groups target matches it")
        if key not in cache:
            cache[key] = compressed_tensors_format(key, groups[key], where, qc.get("format"))
        out[m] = cache[key]
    return out


def _shape(ckpt: Checkpoint, module: str, fmt: SourceFormat, parts: dict) -> tuple[int, int]:
    """The weight's ``(N, K)``: from ``weight_shape`` (pack-quantized), else from the codes."""
    codes = parts.get(fmt.codes)
    if codes is None:
        raise ConvertError(f"tensor {module}.{fmt.codes}: missing ({fmt.label} stores the codes there)")
    f, name = codes
    e = f.entries[name]
    if len(e.shape) != 2:
        raise ConvertError(f"{f.path}: tensor {name} has shape {list(e.shape)}; {fmt.label} codes are 2-D")
    if fmt.scheme.format != "pack-quantized":
        return e.shape[0], packed_columns(fmt, e.shape[1])
    if "weight_shape" not in parts:
        raise ConvertError(f"tensor {module}.weight_shape: missing ({fmt.label} records the weight's shape there)")
    sf, sname = parts["weight_shape"]
    s = sf.entries[sname]
    if s.dtype not in ("I64", "I32") or s.shape != (2,):
        raise ConvertError(f"{sf.path}: tensor {sname} has dtype {s.dtype} shape {list(s.shape)}; expected int64 (2,)")
    n, k = (int(v) for v in sf.tensor(sname))
    if n <= 0 or k <= 0:
        raise ConvertError(f"{sf.path}: tensor {sname} holds [{n}, {k}]; expected a positive weight shape")
    return n, k


def _check(module: str, fmt: SourceFormat, parts: dict, shape: tuple[int, int]) -> np.dtype:
    """Check the module's tensors against ``fmt`` (dtypes, shapes); return its scales' dtype."""
    if fmt.scale not in parts:
        raise ConvertError(f"tensor {module}.{fmt.scale}: missing ({fmt.label})")
    if "weight_g_idx" in parts:
        raise ConvertError(f"tensor {module}.weight_g_idx: activation-ordered groups are not decoded by nbquant")
    if 0 in shape:
        raise ConvertError(f"tensor {module}: a {fmt.label} weight of shape {list(shape)} is empty")
    g = fmt.scheme.group_size
    if g and shape[1] % g:
        raise ConvertError(f"tensor {module}: a {fmt.label} weight of shape {list(shape)} needs K divisible by {g}")
    sf, sname = parts[fmt.scale]
    scale_dtype = FLOAT_DTYPES.get(sf.entries[sname].dtype) if fmt.scheme.kind in ("int", "fp8") else fmt.dtype
    if scale_dtype is None:
        raise ConvertError(f"{sf.path}: tensor {sname} has dtype {sf.entries[sname].dtype}; {fmt.label} scales are "
                           "BF16, F16 or F32")
    for suffix, (dt, want) in fmt.expected(shape, scale_dtype).items():
        if suffix not in parts:
            raise ConvertError(f"tensor {module}.{suffix}: missing ({fmt.label})")
        f, name = parts[suffix]
        e = f.entries[name]
        if suffix == "weight_shape" and e.dtype == "I32":  # older compressed-tensors releases
            dt = "I32"
        if fmt.scalar(suffix):
            want = tuple(e.shape) if int(np.prod(e.shape)) == 1 else (1,)
        if e.dtype != dt or tuple(e.shape) != want:
            raise ConvertError(f"{f.path}: tensor {name} has dtype {e.dtype} shape {list(e.shape)}; a {fmt.label} "
                               f"weight of shape {list(shape)} stores {dt} {list(want)}")
    return fmt.dtype if fmt.scale_in_dtype else scale_dtype


def _read_json(path: str) -> dict:
    """The JSON object in the untrusted file ``path``, or a one-line :class:`ConvertError`."""
    try:
        with open(path, encoding="utf-8") as f:
            data = loads(f.read())
    except (OSError, UnicodeDecodeError, UntrustedJSONError) as e:
        raise ConvertError(f"{path}: cannot read a JSON object: {getattr(e, 'strerror', None) or e}") from None
    if not isinstance(data, dict):
        raise ConvertError(f"{path}: expected a JSON object")
    return data


def open_source(ckpt: Checkpoint, target: Scheme) -> Checkpoint:
    """``ckpt`` as the planner reads it: unchanged when it is not quantized, else its :class:`DecodedFile` view.

    The decoded dtype of each weight is the target's for a BF16/F16/F32 ``target``; the source
    scales' dtype where ``target`` holds the source's codes and scales exactly
    (:func:`.exact.exact_dtype`); else the dtype the source's ecosystem decodes to.

    Raises :class:`ConvertError` (one line) for an unsupported or broken ``quantization_config``,
    a module whose tensors do not match its format, and a BF16/F16/F32 target for an
    unquantized source.

    Examples
    --------
    >>> import tempfile, os
    >>> from nbquant.convert import convert, get_scheme, write_synthetic_checkpoint
    >>> from nbquant.convert.plan import open_checkpoint
    >>> src, dst = tempfile.mkdtemp(), os.path.join(tempfile.mkdtemp(), "fp8")
    >>> _ = write_synthetic_checkpoint(src, hidden=128, intermediate=256, layers=1, vocab=64)
    >>> _ = convert(src, dst, "FP8_DYNAMIC", progress=False)
    >>> view = open_source(open_checkpoint(dst, quantized=True), get_scheme("BF16"))
    >>> name = "model.layers.0.mlp.up_proj.weight"
    >>> w = view.shards[view.weight_map[name]].tensor(name)
    >>> w.fmt.label, w.shape, w[:2].dtype, "quantization_config" in view.config
    ('compressed-tensors float-quantized fp8 per channel', (256, 128), dtype(bfloat16), False)
    """
    cfg_path = os.path.join(ckpt.root, "config.json")
    qc = ckpt.config.get("quantization_config")
    other = [f for f in ckpt.other_files if f != HF_QUANT_CONFIG]
    if qc is None and HF_QUANT_CONFIG in ckpt.other_files:  # a modelopt export
        cfg_path = os.path.join(ckpt.root, HF_QUANT_CONFIG)
        qc = dict(_read_json(cfg_path), quant_method="modelopt")
    if qc is None:
        if target.kind == "dense":
            raise ConvertError(f"{cfg_path}: no quantization_config: the checkpoint is not quantized, and scheme "
                               f"{target.name} writes a dequantized copy of a quantized one")
        return ckpt
    by_module: dict[str, dict[str, tuple[SafetensorsFile, str]]] = {}
    for name, shard in ckpt.weight_map.items():
        module, _, suffix = name.rpartition(".")
        by_module.setdefault(module, {})[suffix] = (ckpt.shards[shard], name)
    if isinstance(qc, Mapping) and qc.get("quant_method") == "mxfp4":  # gpt-oss
        dtype = DENSE_DTYPES.get(target.name, DENSE_DTYPES["BF16"])
        return _view(ckpt, *gptoss_experts(by_module, qc, target, cfg_path, dtype), other)
    quantized = [m for m, p in by_module.items() if "weight_packed" in p or
                 ("weight" in p and ("weight_scale" in p or "weight_scale_inv" in p))]
    if not quantized:
        raise ConvertError(f"{cfg_path}: has a quantization_config but no module holds quantized tensors")
    formats = _formats(qc, cfg_path, quantized, ckpt.config)
    drop_kv = isinstance(qc, Mapping) and bool(qc.get("kv_cache_scheme"))
    decoded: dict[str, tuple] = {}
    virtual: dict[str, tuple[str, TensorEntry]] = {}  # the codes tensor's name → (weight name, its entry)
    for m in quantized:
        fmt, parts = formats[m], by_module[m]
        shape = _shape(ckpt, m, fmt, parts)
        scale_dtype = _check(m, fmt, parts, shape)
        h = DENSE_DTYPES[target.name] if target.kind == "dense" else \
            exact_dtype(fmt, target, scale_dtype) or fmt.dtype or scale_dtype
        consumed = {s: p for s, p in parts.items() if s in CONSUMED}
        f, codes = consumed[fmt.codes]
        size = sum(pf.entries[pn].nbytes for pf, pn in consumed.values())
        virtual[codes] = (f"{m}.weight", TensorEntry(dtype_name(h), shape, 0, size))
        decoded[f"{m}.weight"] = (fmt, consumed, shape)
    gone = {n for m in quantized for s, (_, n) in by_module[m].items() if s in CONSUMED}
    if drop_kv:
        gone |= {n for n in ckpt.weight_map if n.rpartition(".")[2] in ("k_scale", "v_scale", "q_scale")}
    return _view(ckpt, decoded, virtual, gone, other)


def _view(ckpt: Checkpoint, decoded: dict[str, tuple], virtual: dict[str, tuple[str, TensorEntry]], gone: set[str],
          other: list[str]) -> Checkpoint:
    """``ckpt`` with each tensor of ``virtual`` replaced by its decoded weight and the tensors ``gone`` dropped."""
    shards, weight_map = {}, {}
    for shard, f in ckpt.shards.items():
        entries: dict[str, TensorEntry] = {}
        mine = {}
        for name, e in f.entries.items():
            if name in virtual:
                wname, entry = virtual[name]
                entries[wname] = entry
                mine[wname] = decoded[wname]
            elif name not in gone:
                entries[name] = e
        shards[shard] = DecodedFile(f, entries, mine)
    for name, shard in ckpt.weight_map.items():
        if name in virtual:
            weight_map[virtual[name][0]] = shard
        elif name not in gone:
            weight_map[name] = shard
    config = {k: v for k, v in ckpt.config.items() if k != "quantization_config"}
    return Checkpoint(ckpt.root, shards, weight_map, ckpt.index_name, other, config)
