"""``nbquant inspect FILE.gguf``: a GGUF file's metadata and tensors (type, shape, bytes), read as untrusted.

Examples
--------
>>> import os, tempfile
>>> from nbquant.convert.gguf import write_synthetic_gguf
>>> path = os.path.join(tempfile.mkdtemp(), "m.gguf")
>>> data = inspect_gguf(write_synthetic_gguf(path, hidden=64, intermediate=128, layers=1, vocab=32))
>>> data["metadata"]["general.architecture"], data["types"]
('llama', {'BF16': 9, 'F32': 3})
>>> print(format_gguf_inspection(data).splitlines()[-1])
total: 12 tensors, 0.1 MiB; BF16 9, F32 3
"""

from __future__ import annotations

from typing import Any

from nbquant.gguf.file import STRING, read_gguf, type_name

__all__ = ["inspect_gguf", "format_gguf_inspection"]


def _short(field) -> Any:
    """A field's value for display: arrays longer than 8 shortened to their length and first items."""
    if not field.is_array:
        return field.value
    n = len(field.values) if field.vtype == STRING else None
    value = field.value
    n = len(value) if n is None else n
    return value if n <= 8 else f"[{', '.join(map(repr, value[:3]))}, ... ({n} items)]"


def inspect_gguf(path: str) -> dict[str, Any]:
    """The metadata and tensors of the GGUF file at ``path`` (GGUFError, one line, when it is broken)."""
    with read_gguf(path) as g:
        tensors = [{"name": t.name, "shape": list(t.shape), "type": type_name(t.type_id), "bytes": t.nbytes}
                   for t in g.tensors.values()]
        metadata = {k: _short(f) for k, f in g.fields.items()}
        version, alignment = g.version, g.alignment
    types: dict[str, int] = {}
    for t in tensors:
        types[t["type"]] = types.get(t["type"], 0) + 1
    return {"path": path, "version": version, "alignment": alignment, "metadata": metadata, "tensors": tensors,
            "types": dict(sorted(types.items()))}


def format_gguf_inspection(data: dict[str, Any]) -> str:
    """The description: metadata (one key a line), tensors (name, type, shape, bytes), the totals."""
    lines = [f"GGUF v{data['version']}, alignment {data['alignment']}"]
    lines += [f"  {k} = {v!r}" if isinstance(v, str) and not v.startswith("[") else f"  {k} = {v}"
              for k, v in data["metadata"].items()]
    rows = [(t["name"], t["type"], "x".join(map(str, t["shape"])), str(t["bytes"])) for t in data["tensors"]]
    widths = [max([len(r[i]) for r in rows] + [1]) for i in range(4)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    total = sum(t["bytes"] for t in data["tensors"])
    mix = ", ".join(f"{k} {v}" for k, v in data["types"].items())
    lines.append(f"total: {len(rows)} tensors, {total / 2**20:.1f} MiB; {mix}")
    return "\n".join(lines)
