"""``nbquant inspect``: what a Hugging Face safetensors checkpoint holds, quantized or not.

:func:`inspect_checkpoint` reads a folder with the converter's reader (:func:`~nbquant.convert.plan.open_checkpoint`:
headers only, nothing outside the folder, one-line :class:`~nbquant.convert.safetensors.ConvertError` on a broken
file) and describes every module's weight as stored: its scheme (``pack-quantized int4 g128``, ``float-quantized
fp8 channel``, ``nvfp4``, ``bf16 (kept)`` and why), logical shape, dtypes and bytes. A weight's tensors
(``weight_packed``, ``weight_scale``, ``weight_zero_point``, ``weight_shape``, ``weight_global_scale``,
``input_*``) are one row; any other tensor (a bias) is a row of its own. :func:`format_inspection` prints the
``quantization_config`` summary, the rows (those that differ only by a layer or expert number grouped, as
``model.layers.{0..31}.mlp.down_proj``) and the totals.

Examples
--------
>>> import tempfile
>>> from nbquant.convert import convert, write_synthetic_checkpoint
>>> src, dst = tempfile.mkdtemp(), tempfile.mkdtemp()
>>> _ = write_synthetic_checkpoint(src, hidden=128, intermediate=256, layers=2, vocab=64)
>>> _ = convert(src, dst, "W4A16", progress=False, overwrite=True)
>>> data = inspect_checkpoint(dst)
>>> [(r["name"], r["scheme"]) for r in data["modules"] if r["name"].endswith(("0.mlp.down_proj", "lm_head"))]
[('lm_head', 'bf16 (kept)'), ('model.layers.0.mlp.down_proj', 'pack-quantized int4 g128')]
>>> print(format_inspection(data).splitlines()[-1])  # doctest: +ELLIPSIS
total: ... in 49 tensors, 1 shard: quantized 14 weights ..., kept 7 ...
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from typing import Any

from .plan import open_checkpoint, skip_reason
from .safetensors import ConvertError

__all__ = ["inspect_checkpoint", "format_inspection", "run"]

_INDEX = re.compile(r"0|[1-9][0-9]{0,17}")
_COLUMNS = ("module", "n", "scheme", "shape", "dtypes", "bytes", "why kept")


def _text(value: object) -> str:
    """``value`` as printable text: a control character of an untrusted name or value is escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))


def _size(n: int) -> str:
    """Bytes for a reader.

    Examples
    --------
    >>> _size(512), _size(34816), _size(3 << 30)
    ('512 B', '34.0 KiB', '3.0 GiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _args(a: object) -> str:
    """A compressed-tensors quantization-args object in a few words, e.g. ``int4 group g128``."""
    if not isinstance(a, dict):
        return "none"
    words = [f"{_text(a.get('type'))}{_text(a.get('num_bits'))}", _text(a.get("strategy"))]
    words += [f"g{_text(a['group_size'])}"] if a.get("group_size") else []
    words += [_text(a["block_structure"])] if a.get("block_structure") else []
    words += ["asym"] if a.get("symmetric") is False else []
    words += ["dynamic"] if a.get("dynamic") is True else []
    return " ".join(words)


def _ignore_list(path: str, qc: dict) -> list[str]:
    """``quantization_config.ignore``, checked: a list of strings whose ``re:`` patterns compile."""
    ignore = qc.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(t, str) for t in ignore):
        raise ConvertError(f"{path}: quantization_config.ignore is not a list of module names")
    for target in ignore:
        try:
            re.compile(target[3:]) if target.startswith("re:") else None
        except re.error as e:
            raise ConvertError(f"{path}: quantization_config.ignore entry {_text(target)!r}: {e}") from None
    return ignore


def _summary(qc: object, ignore: list[str]) -> list[str]:
    """The lines describing ``quantization_config``."""
    if qc is None:
        return ["quantization_config: none (not quantized)"]
    lines = [f"quantization_config: {_text(qc.get('quant_method'))} {_text(qc.get('version'))}, format "
             f"{_text(qc.get('format'))}, status {_text(qc.get('quantization_status'))}"]
    groups = qc.get("config_groups")
    for name, group in (groups.items() if isinstance(groups, dict) else []):
        g = group if isinstance(group, dict) else {}
        targets = g.get("targets")
        targets = ", ".join(map(str, targets)) if isinstance(targets, list) else targets
        lines.append(f"  group {_text(name)}: targets {_text(targets)}; weights {_args(g.get('weights'))}; "
                     f"input activations {_args(g.get('input_activations'))}")
    lines.append(f"  ignore ({len(ignore)}): {_text(', '.join(ignore)) or '-'}")
    return lines


def _logical_shape(ckpt, module: str, parts: dict[str, tuple[str, Any]]) -> tuple[int, ...]:
    """The weight's shape before packing: ``weight_shape``'s values, else the stored weight's shape."""
    if "weight_shape" in parts:
        shard, entry = parts["weight_shape"]
        if entry.dtype in ("I64", "I32") and entry.shape == (2,):
            return tuple(int(v) for v in ckpt.shards[shard].tensor(f"{module}.weight_shape"))
    packed = parts["weight_packed"][1] if "weight_packed" in parts else None
    if packed is not None and packed.dtype == "U8" and len(packed.shape) == 2:
        return packed.shape[0], 2 * packed.shape[1]  # two FP4 codes a byte
    for key in ("weight_packed", "weight"):
        if key in parts:
            return parts[key][1].shape
    return ()


def _scheme(parts: dict[str, tuple[str, Any]], shape: tuple[int, ...], hints: tuple[set, list]) -> str | None:
    """The scheme of a weight as its tensors store it, or None for an unquantized weight.

    ``hints`` (the config groups' group sizes and block shapes) tell a group as wide as the weight from a
    channel scale, and a block clipped by a small weight from a smaller block.
    """
    entry = {k: e for k, (_, e) in parts.items()}
    packed, weight, scale = entry.get("weight_packed"), entry.get("weight"), entry.get("weight_scale")
    detail = True
    if packed is not None and packed.dtype == "U8":
        label, detail = "nvfp4" if "weight_global_scale" in entry else "mxfp4", False
    elif packed is not None:
        bits = 32 * packed.shape[-1] // shape[-1] if len(shape) == 2 and shape[-1] else "?"
        label = f"pack-quantized int{bits}"
    elif weight is not None and scale is not None:
        label = {"F8_E4M3": "float-quantized fp8", "I8": "int-quantized int8"}.get(weight.dtype, weight.dtype.lower())
        if scale.dtype == "U8":
            label, detail = "mxfp8", False
    else:
        return None
    if detail and scale is not None and len(scale.shape) == 2 and len(shape) == 2:
        (r, c), (rows, cols) = scale.shape, shape
        blocks = [b for b in hints[1] if (-(-rows // b[0]), -(-cols // b[1])) == (r, c)]
        if r == rows:
            label += " channel" if c == 1 and cols not in hints[0] else f" g{-(-cols // c)}"
        else:
            a, b = blocks[0] if blocks else (-(-rows // max(r, 1)), -(-cols // max(c, 1)))
            label += f" block {a}x{b}"
    elif detail and scale is not None:
        label += " tensor"
    return label + (" asym" if "weight_zero_point" in entry else "")


def inspect_checkpoint(path: str) -> dict[str, Any]:
    """Describe the checkpoint folder ``path``: its ``quantization_config``, every tensor, and one row a weight.

    Parameters
    ----------
    path : str
        A Hugging Face safetensors checkpoint folder (``config.json`` and ``*.safetensors``).

    Returns
    -------
    dict
        ``path``, ``quantization_config`` (as stored, or None), ``summary`` (its lines), ``shards``,
        ``tensors`` (name, shard, dtype, shape, bytes; every tensor), ``modules`` (name, scheme, quantized,
        reason, shape, dtypes, bytes, tensors; one a weight or other tensor) and ``totals``.

    Raises
    ------
    ConvertError
        With one line naming the file, for a missing or broken folder, shard, index or config.

    Examples
    --------
    >>> import tempfile
    >>> inspect_checkpoint(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    nbquant.convert.safetensors.ConvertError: .../config.json: missing; ...
    """
    ckpt = open_checkpoint(path, quantized=True)
    config_path = os.path.join(path, "config.json")
    qc = ckpt.config.get("quantization_config")
    if qc is not None and not isinstance(qc, dict):
        raise ConvertError(f"{config_path}: quantization_config is not a JSON object")
    ignore = _ignore_list(config_path, qc) if qc is not None else []
    tensors, grouped = [], {}
    for name, shard in ckpt.weight_map.items():
        entry = ckpt.shards[shard].entries[name]
        tensors.append({"name": name, "shard": shard, "dtype": entry.dtype, "shape": list(entry.shape),
                        "bytes": entry.nbytes})
        module, _, part = name.rpartition(".")
        if module and part.startswith(("weight", "input_")):
            grouped.setdefault((module, True), {})[part] = (shard, entry)
        else:
            grouped[name, False] = {"weight": (shard, entry)}
    hints = _hints(qc)
    modules = [_row(ckpt, key, weight, parts, qc, ignore, hints) for (key, weight), parts in grouped.items()]
    modules.sort(key=lambda r: _natural(r["name"]))
    quantized = [r for r in modules if r["quantized"]]
    q_bytes = sum(r["bytes"] for r in quantized)
    totals = {"bytes": sum(t["bytes"] for t in tensors), "tensors": len(tensors), "shards": len(ckpt.shards),
              "quantized_weights": len(quantized), "quantized_bytes": q_bytes, "kept": len(modules) - len(quantized),
              "kept_bytes": sum(r["bytes"] for r in modules) - q_bytes}
    return {"path": path, "quantization_config": qc, "summary": _summary(qc, ignore), "shards": list(ckpt.shards),
            "tensors": tensors, "modules": modules, "totals": totals}


def _hints(qc: dict | None) -> tuple[set, list]:
    """The group sizes and block shapes (positive integers) of the weights of ``qc``'s config groups."""
    groups = (qc or {}).get("config_groups")
    args = [g.get("weights") for g in (groups.values() if isinstance(groups, dict) else []) if isinstance(g, dict)]
    args = [a for a in args if isinstance(a, dict)]
    sizes = {a["group_size"] for a in args if type(a.get("group_size")) is int and a["group_size"] > 0}
    blocks = [tuple(a["block_structure"]) for a in args if isinstance(a.get("block_structure"), list) and
              len(a["block_structure"]) == 2 and all(type(v) is int and v > 0 for v in a["block_structure"])]
    return sizes, blocks


def _row(ckpt, key: str, weight: bool, parts: dict, qc: dict | None, ignore: list[str],
         hints: tuple[set, list]) -> dict[str, Any]:
    """The row of module ``key``'s weight tensors ``parts`` (``weight``), or of the other tensor ``key``."""
    try:
        shape = _logical_shape(ckpt, key, parts)
    except (ConvertError, OSError) as e:
        raise ConvertError(f"{key}.weight_shape: {e}") from None
    scheme, reason = _scheme(parts, shape, hints), None
    dtypes = sorted({e.dtype for _, e in parts.values()})
    if scheme is None:
        reason = skip_reason(f"{key}.weight" if weight else key, ignore) if qc is not None else None
        scheme = "+".join(d.lower() for d in dtypes) + (" (kept)" if qc is not None else "")
        if qc is not None and reason is None:
            reason = "not 2-D" if len(shape) != 2 else "not quantized (no rule or ignore entry says why)"
    return {"name": key, "scheme": scheme, "quantized": reason is None and qc is not None, "reason": reason,
            "shape": list(shape), "dtypes": dtypes, "bytes": sum(e.nbytes for _, e in parts.values()),
            "tensors": [f"{key}.{p}" if weight else key for p in parts]}


def _natural(name: str) -> list:
    """Sort key: the numbers of ``name`` compared as numbers (``layers.2`` before ``layers.10``)."""
    return [(0, int(p), "") if p.isdigit() and p.isascii() else (1, 0, p) for p in re.split(r"(\d+)", name)]


def _ranges(values: list[int]) -> str:
    """Sorted numbers as ``{0..3,5}`` (a single one bare).

    Examples
    --------
    >>> _ranges([0, 1, 2, 3, 5, 7, 8]), _ranges([4])
    ('{0..3,5,7..8}', '4')
    """
    if len(values) == 1:
        return str(values[0])
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return "{" + ",".join(str(a) if a == b else f"{a}..{b}" for a, b in runs) + "}"


def _collapse(pattern: list[str], members: list[tuple[tuple[int, ...], dict]]) -> list[dict]:
    """Rows ``members`` (numbers, row) of one name ``pattern`` (``None`` where a number goes) as few rows as possible.

    When the numbers are every combination of their values (all 32 layers, all 8 experts of each), one row;
    else one per value of the first number, recursively.
    """
    if len(members) == 1:
        return [{**members[0][1], "n": 1}]
    columns = [sorted({idx[i] for idx, _ in members}) for i in range(len(members[0][0]))]
    if math.prod(len(c) for c in columns) == len(members):
        filled, values = [], iter(columns)
        for p in pattern:
            filled.append(_ranges(next(values)) if p is None else p)
        first = members[0][1]
        return [{**first, "name": ".".join(filled), "n": len(members), "bytes": sum(r["bytes"] for _, r in members)}]
    out, slot = [], pattern.index(None)
    for v in columns[0]:
        sub = pattern[:slot] + [str(v)] + pattern[slot + 1:]
        out += _collapse(sub, [(idx[1:], r) for idx, r in members if idx[0] == v])
    return out


def group_rows(rows: list[dict]) -> list[dict]:
    """``rows`` with those that differ only by numbers in their names (layers, experts) and agree on everything
    else merged into one, its name with the numbers as ranges and ``n`` the count.

    Examples
    --------
    >>> rows = [{"name": f"layers.{i}.up", "scheme": "nvfp4", "reason": None, "shape": [8, 16], "dtypes": ["U8"],
    ...          "bytes": 10} for i in range(4)]
    >>> [(r["name"], r["n"], r["bytes"]) for r in group_rows(rows)]
    [('layers.{0..3}.up', 4, 40)]
    """
    buckets: dict[tuple, list] = {}
    for r in rows:
        parts = r["name"].split(".")
        idx = tuple(int(p) for p in parts if _INDEX.fullmatch(p))
        pattern = tuple(None if _INDEX.fullmatch(p) else p for p in parts)
        sig = (pattern, r["scheme"], r["reason"], tuple(r["shape"]), tuple(r["dtypes"]), r["bytes"])
        buckets.setdefault(sig, []).append((idx, r))
    out = [row for (pattern, *_), members in buckets.items() for row in _collapse(list(pattern), members)]
    return sorted(out, key=lambda r: _natural(r["name"]))


def format_inspection(data: dict[str, Any], group: bool = True) -> str:
    """The text ``nbquant inspect`` prints: the ``quantization_config`` summary, a table of rows, the totals.

    ``group=False`` (``--all``) prints one row a weight; see the module docstring for an example.
    """
    rows = group_rows(data["modules"]) if group else [{**r, "n": 1} for r in data["modules"]]
    cells = [_COLUMNS] + [(_text(r["name"]), str(r["n"]), _text(r["scheme"]), "x".join(map(str, r["shape"])) or "-",
                           ",".join(r["dtypes"]), _size(r["bytes"]), _text(r["reason"] or "")) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(_COLUMNS))]
    table = ["  ".join(c.rjust(w) if i in (1, 5) else c.ljust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip() for row in cells]
    t = data["totals"]
    total = (f"total: {_size(t['bytes'])} in {t['tensors']} tensors, {t['shards']} shard"
             f"{'s' if t['shards'] != 1 else ''}: quantized {t['quantized_weights']} weights "
             f"{_size(t['quantized_bytes'])} (with their scales), kept {t['kept']} {_size(t['kept_bytes'])}")
    return "\n".join([f"{_text(data['path'])}", *data["summary"], "", *table, "", total])


def run(path: str, as_json: bool = False, group: bool = True) -> int:
    """``nbquant inspect PATH``: print the description (``as_json``: the full data as JSON); 0, or 1 with one
    line on stderr for a missing or broken folder.

    Examples
    --------
    >>> import tempfile
    >>> run(tempfile.mkdtemp() + "/missing")  # prints to stderr
    1
    """
    if path.lower().endswith(".gguf"):  # a GGUF file: nbquant.convert.gguf.inspect
        from nbquant.gguf.file import GGUFError

        from .gguf.inspect import format_gguf_inspection, inspect_gguf
        try:
            data = inspect_gguf(path)
        except GGUFError as e:
            print(f"nbquant inspect: error: {e}", file=sys.stderr)
            return 1
        print(json.dumps(data, indent=1) if as_json else format_gguf_inspection(data))
        return 0
    try:
        data = inspect_checkpoint(path)
    except ConvertError as e:
        print(f"nbquant inspect: error: {_text(e)}", file=sys.stderr)
        return 1
    print(json.dumps(data, indent=1) if as_json else format_inspection(data, group))
    return 0
