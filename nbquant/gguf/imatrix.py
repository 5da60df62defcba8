"""Importance matrices for ``nbquant convert --imatrix``: ``llama-imatrix``'s files, read as llama-quantize does.

Two formats (llama.cpp ``common/imatrix-loader.cpp`` at the tree of :mod:`nbquant.gguf.policy`):

* **GGUF** (current): the keys ``imatrix.datasets`` (strings), ``imatrix.chunk_count`` and
  ``imatrix.chunk_size`` (all three required), and per weight ``<name>.in_sum2`` (F32,
  ``[n_per_row, n_mat]``) and ``<name>.counts`` (F32, ``[1, n_mat]``). The importance is
  ``in_sum2 / float(lround(count))`` in float32; a count of 0 gives 1.0.
* **legacy** ``.dat`` (any file that is not GGUF): int32 entry count; per entry an int32 name
  length, the name, int32 ``ncall``, int32 value count and the float32 values; optionally an
  int32 chunk count and a dataset name. The importance is ``values / ncall``.

Every value must be finite, as llama-quantize requires.

Examples
--------
>>> import os, struct, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "im.dat")
>>> with open(path, "wb") as f:
...     _ = f.write(struct.pack("<ii1sii2f", 1, 1, b"w", 2, 2, 4.0, 6.0))
>>> m = read_imatrix(path)
>>> m.entries["w"].tolist(), m.legacy, m.chunk_count
([2.0, 3.0], True, 0)
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass, field

import numpy as np

from .file import STRING, GGUFError, read_gguf

__all__ = ["Imatrix", "read_imatrix"]


@dataclass
class Imatrix:
    """An importance matrix: float32 weights per tensor name (``n_mat * n_per_row`` values), datasets, chunk count."""

    entries: dict[str, np.ndarray]
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    legacy: bool = False


def _fail(path: str, what: str) -> GGUFError:
    return GGUFError(f"{path}: not a readable importance matrix: {what}")


def _lround(x: float) -> int:
    """C's ``lround``: to the nearest integer, halves away from zero."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def _from_gguf(g, path: str) -> Imatrix:
    if not g.tensors:
        raise _fail(path, "no data")
    if not all(k in g.fields for k in ("imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size")):
        raise _fail(path, "missing imatrix metadata (imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size)")
    ds = g.fields["imatrix.datasets"]
    datasets = [s.split(b"\0", 1)[0].decode("utf-8", "replace") for s in ds.values] if (
        ds.is_array and ds.vtype == STRING) else []
    pairs: dict[str, list] = {}
    for name in g.tensors:
        for suffix, slot in ((".in_sum2", 0), (".counts", 1)):
            if name.endswith(suffix) and len(name) > len(suffix):
                pairs.setdefault(name[:-len(suffix)], [None, None])[slot] = name
    entries = {}
    for name, (sums, counts) in sorted(pairs.items()):
        if sums is None or counts is None:
            raise _fail(path, f"mismatched sums and counts for {name}")
        if g.tensors[sums].type_id != 0 or g.tensors[counts].type_id != 0:
            raise _fail(path, f"sums and counts for {name} must be F32")
        s = np.frombuffer(g.tensor_bytes(sums), np.float32).copy()
        c = np.frombuffer(g.tensor_bytes(counts), np.float32)
        if not np.isfinite(c).all() or c.size == 0 or s.size % c.size:
            raise _fail(path, f"the counts of {name} are not finite or do not divide its {s.size} sums")
        per = s.size // c.size
        out = np.empty_like(s)
        for j, count in enumerate(c.tolist()):
            n = np.float32(_lround(count))
            out[j * per:(j + 1) * per] = s[j * per:(j + 1) * per] / n if n > 0 else np.float32(1)
        entries[name] = out
    value = g.value("imatrix.chunk_count")
    return Imatrix(entries, datasets, int(value) if isinstance(value, int) else 0)


def _from_legacy(path: str) -> Imatrix:
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(n: int, what: str) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(data):
            raise _fail(path, f"{what} runs past the end of the file")
        pos += n
        return data[pos - n:pos]

    def i32(what: str) -> int:
        return struct.unpack("<i", take(4, what))[0]

    n_entries = i32("the entry count") if len(data) >= 4 else 0
    if n_entries < 1:
        raise _fail(path, "no data (neither GGUF nor a legacy imatrix)")
    entries = {}
    for i in range(n_entries):
        name = take(i32(f"entry {i + 1}'s name length"), f"entry {i + 1}'s name").split(b"\0", 1)[0]
        ncall, nval = i32(f"entry {i + 1}'s call count"), i32(f"entry {i + 1}'s value count")
        if nval < 1:
            raise _fail(path, f"entry {i + 1} has {nval} values")
        sums = np.frombuffer(take(4 * nval, f"entry {i + 1}'s values"), "<f4").astype(np.float32)
        entries[name.decode("utf-8", "surrogateescape")] = sums / np.float32(ncall) if ncall > 0 else sums
    chunk_count, datasets = 0, []
    if pos + 4 <= len(data):
        chunk_count = i32("the chunk count")
        if pos + 4 <= len(data):
            n = i32("the dataset name's length")
            if 0 < n <= len(data) - pos:
                datasets.append(take(n, "the dataset name").split(b"\0", 1)[0].decode("utf-8", "replace"))
    return Imatrix(entries, datasets, chunk_count, legacy=True)


def read_imatrix(path: str | os.PathLike) -> Imatrix:
    """Read the importance matrix at ``path`` (GGUF, else legacy ``.dat``).

    Parameters
    ----------
    path : str or os.PathLike
        The file ``llama-imatrix`` wrote.

    Returns
    -------
    Imatrix
        Normalized weights per tensor, as llama-quantize passes them to the quantizer.

    Raises
    ------
    GGUFError
        One line naming the file and the fault (also for a non-finite value).
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            is_gguf = f.read(4) == b"GGUF"
    except OSError as e:
        raise GGUFError(f"{path}: cannot read: {e.strerror or e}") from None
    if is_gguf:
        with read_gguf(path) as g:
            matrix = _from_gguf(g, path)
    else:
        matrix = _from_legacy(path)
    for name, values in matrix.entries.items():
        if not np.isfinite(values).all():
            raise _fail(path, f"{name} holds a non-finite value")
    return matrix
