"""GGUF files read (memory-mapped, treated as untrusted) and written, as llama.cpp's ``gguf.cpp`` does.

:func:`read_gguf` accepts what ``gguf_init_from_file`` accepts and refuses the rest with a
:class:`GGUFError` of one line: the magic ``GGUF``, version 2 or 3, key/value and tensor
counts and every string length bounded by the file's size, no empty or repeated key, known
value types, ``general.alignment`` a u32 power of two, tensor names shorter than 64 bytes and
not repeated, at most 4 dimensions, no negative dimension nor an element count past
``INT64_MAX``, a known ggml type whose block divides the row, offsets that follow each other
in the data section as ``gguf.cpp`` requires, and every tensor's bytes inside the file.
Tensor data stay in the file's map: :meth:`GGUFFile.tensor_bytes` is a read-only view.

:func:`encode_metadata` writes the header, key/value pairs and tensor infos as ``gguf.cpp``'s
writer does (version 3; strings cut at their first NUL byte, booleans 0 or 1, ``n_dims``
without trailing 1s), followed by the zero padding to the alignment.

Examples
--------
>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "empty.gguf")
>>> with open(path, "wb") as f:
...     _ = f.write(encode_metadata([Field("general.architecture", STRING, [b"llama"])], [], 32))
>>> with read_gguf(path) as g:
...     g.value("general.architecture"), len(g.tensors)
('llama', 0)
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any

__all__ = ["GGUFError", "Field", "TensorInfo", "GGUFFile", "read_gguf", "encode_metadata", "GGML_TYPES",
           "type_name", "type_id", "STRING", "UINT32", "FLOAT32", "ARRAY"]

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
#: struct codes of the fixed-size GGUF value types.
_CODES = {UINT8: "B", INT8: "b", UINT16: "H", INT16: "h", UINT32: "I", INT32: "i", FLOAT32: "f", BOOL: "B",
          UINT64: "Q", INT64: "q", FLOAT64: "d"}
_MAGIC = b"GGUF"
_MAX_NAME = 64
_INT64_MAX = 2**63 - 1

#: ggml's types: id -> (name, values per block, bytes per block); the ids gguf.cpp accepts in a file.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18), 42: ("Q2_0", 64, 18)}
_IDS = {name: i for i, (name, _, _) in GGML_TYPES.items()}


def type_name(tid: int) -> str:
    """ggml's name of type id ``tid``.

    Examples
    --------
    >>> type_name(12), type_name(30)
    ('Q4_K', 'BF16')
    """
    return GGML_TYPES[tid][0]


def type_id(name: str) -> int:
    """The ggml type id of ``name`` (case-insensitive); ValueError naming the known ones otherwise.

    Examples
    --------
    >>> type_id("q8_0"), type_id("MXFP4")
    (8, 39)
    """
    tid = _IDS.get(str(name).upper())
    if tid is None:
        raise ValueError(f"{name!r} is not a ggml type; known: {', '.join(_IDS)}")
    return tid


class GGUFError(ValueError):
    """A GGUF file nbquant refuses to read; the message is one line naming the file and the fault."""


@dataclass(frozen=True)
class Field:
    """One key/value pair, kept as its encoded values so that a copy is byte-exact.

    ``vtype`` is the value type (the element type of an array); ``values`` holds the raw
    little-endian bytes of the numbers, or a list of byte strings for ``STRING``.
    """

    key: str
    vtype: int
    values: Any
    is_array: bool = False

    @property
    def value(self) -> Any:
        """The decoded value: an int, float, bool or str, or a list of them for an array."""
        if self.vtype == STRING:
            items = [s.decode("utf-8", "replace") for s in self.values]
        else:
            code = _CODES[self.vtype]
            items = list(struct.unpack(f"<{len(self.values) // struct.calcsize(code)}{code}", self.values))
            if self.vtype == BOOL:
                items = [bool(v) for v in items]
        return items if self.is_array else items[0]

    @staticmethod
    def u32(key: str, value: int) -> Field:
        """A u32 field (``general.file_type`` and the like)."""
        return Field(key, UINT32, struct.pack("<I", value))

    @staticmethod
    def string(key: str, value: str | bytes) -> Field:
        """A string field."""
        return Field(key, STRING, [value.encode() if isinstance(value, str) else value])


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's info: name, ggml shape ``ne`` (innermost first, 4 entries), type id, offset in the data section."""

    name: str
    ne: tuple[int, int, int, int]
    type_id: int
    offset: int

    @property
    def n_dims(self) -> int:
        """ggml's ``ggml_n_dims``: the dimensions up to the last one above 1 (at least 1)."""
        return max([1] + [i + 1 for i, n in enumerate(self.ne) if n > 1])

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's data."""
        _, block, size = GGML_TYPES[self.type_id]
        return self.ne[0] // block * size * self.ne[1] * self.ne[2] * self.ne[3]

    @property
    def shape(self) -> tuple[int, ...]:
        """The NumPy-order shape (outermost first) over :attr:`n_dims`."""
        return tuple(reversed(self.ne[:self.n_dims]))


class _Cursor:
    """Bounds-checked little-endian reads from the map; every fault is a :class:`GGUFError` naming the file."""

    def __init__(self, buf: memoryview, path: str) -> None:
        self.buf, self.path, self.pos = buf, path, 0

    def fail(self, what: str) -> GGUFError:
        return GGUFError(f"{self.path}: not a readable GGUF file: {what}")

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or n > len(self.buf) - self.pos:
            raise self.fail(f"{what} runs past the end of the file (offset {self.pos}, {n} bytes)")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, code: str, what: str):
        return struct.unpack("<" + code, self.take(struct.calcsize(code), what))[0]

    def string(self, what: str) -> bytes:
        return bytes(self.take(self.unpack("Q", f"{what}'s length"), what))


def _read_field(cur: _Cursor, key: str) -> Field:
    vtype = cur.unpack("i", f"the type of {key!r}")
    is_array = vtype == ARRAY
    count = 1
    if is_array:
        vtype = cur.unpack("i", f"the element type of {key!r}")
        count = cur.unpack("Q", f"the length of {key!r}")
    if vtype == STRING:
        if count > (len(cur.buf) - cur.pos) // 8:
            raise cur.fail(f"{key!r} holds {count} strings, more than the file can")
        return Field(key, STRING, [cur.string(f"a string of {key!r}") for _ in range(count)], is_array)
    if vtype not in _CODES:
        raise cur.fail(f"key {key!r} has the unknown value type {vtype}")
    size = struct.calcsize(_CODES[vtype])
    if count > (len(cur.buf) - cur.pos) // size:
        raise cur.fail(f"{key!r} holds {count} values, more than the file can")
    return Field(key, vtype, bytes(cur.take(count * size, f"the value of {key!r}")), is_array)


def _read_tensor_info(cur: _Cursor, seen: set[str]) -> TensorInfo:
    raw = cur.string("a tensor name")
    if len(raw) >= _MAX_NAME:
        raise cur.fail(f"tensor name {raw[:80]!r} is {len(raw)} bytes; ggml allows at most {_MAX_NAME - 1}")
    if b"\0" in raw:
        raise cur.fail(f"tensor name {raw!r} holds a NUL byte")
    name = raw.decode("utf-8", "surrogateescape")
    if name in seen:
        raise cur.fail(f"tensor {name!r} appears twice")
    seen.add(name)
    n_dims = cur.unpack("I", f"{name}'s dimension count")
    if n_dims > 4:
        raise cur.fail(f"tensor {name!r} has {n_dims} dimensions; ggml allows at most 4")
    ne = [cur.unpack("q", f"{name}'s shape") for _ in range(n_dims)] + [1] * (4 - n_dims)
    if any(n < 0 for n in ne):
        raise cur.fail(f"tensor {name!r} has a negative dimension {ne[:n_dims]}")
    total = ne[0]
    for n in ne[1:]:
        if n > 1 and total > _INT64_MAX // n:
            raise cur.fail(f"tensor {name!r}'s shape {ne[:n_dims]} overflows an int64 element count")
        total *= n
    tid = cur.unpack("i", f"{name}'s type")
    if tid not in GGML_TYPES:
        raise cur.fail(f"tensor {name!r} has the unknown ggml type {tid}")
    tname, block, _ = GGML_TYPES[tid]
    if ne[0] % block:
        raise cur.fail(f"tensor {name!r} ({tname}) has rows of {ne[0]} values, not a multiple of its block {block}")
    return TensorInfo(name, tuple(ne), tid, cur.unpack("Q", f"{name}'s offset"))


class GGUFFile:
    """An open GGUF file: its fields in order, its tensor infos in order, and its data section mapped read-only.

    Use as a context manager (or call :meth:`close`); see :func:`read_gguf`.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self._view = memoryview(self._map) if self._map is not None else memoryview(b"")
        try:
            self._parse()
        except BaseException:
            self.close()
            raise

    def _parse(self) -> None:
        cur = _Cursor(self._view, self.path)
        magic = bytes(cur.take(4, "the magic"))
        if magic != _MAGIC:
            raise cur.fail(f"the magic is {magic!r}, expected b'GGUF'")
        self.version = cur.unpack("I", "the version")
        if self.version not in (2, 3):
            raise cur.fail(f"version {self.version}; nbquant reads GGUF versions 2 and 3")
        n_tensors = cur.unpack("q", "the tensor count")
        n_kv = cur.unpack("q", "the key/value count")
        room = len(self._view) - cur.pos
        if not 0 <= n_kv <= room // 12 or not 0 <= n_tensors <= room // 28:
            raise cur.fail(f"{n_kv} key/value pairs and {n_tensors} tensors do not fit in {len(self._view)} bytes")
        self.fields: dict[str, Field] = {}
        for _ in range(n_kv):
            raw = cur.string("a key")
            key = raw.decode("utf-8", "surrogateescape")
            if not raw or key in self.fields:
                raise cur.fail("an empty key" if not raw else f"key {key!r} appears twice")
            self.fields[key] = _read_field(cur, key)
        align = self.fields.get("general.alignment")
        if align is not None and (align.vtype != UINT32 or align.is_array):
            raise cur.fail("general.alignment must be a u32")
        self.alignment = 32 if align is None else align.value
        if self.alignment == 0 or self.alignment & (self.alignment - 1):
            raise cur.fail(f"general.alignment {self.alignment} is not a power of 2")
        seen: set[str] = set()
        self.tensors: dict[str, TensorInfo] = {}
        for _ in range(n_tensors):
            info = _read_tensor_info(cur, seen)
            self.tensors[info.name] = info
        self.data_offset = -(-cur.pos // self.alignment) * self.alignment if n_tensors else cur.pos
        expected = 0
        for info in self.tensors.values():
            if info.offset != expected:
                raise cur.fail(f"tensor {info.name!r} starts at offset {info.offset} of the data section, "
                               f"expected {expected} (tensors follow each other, aligned to {self.alignment})")
            if self.data_offset + info.offset + info.nbytes > len(self._view):
                raise cur.fail(f"tensor {info.name!r}'s {info.nbytes} bytes run past the end of the file")
            expected += -(-info.nbytes // self.alignment) * self.alignment

    def value(self, key: str, default: Any = None) -> Any:
        """The decoded value of ``key`` (see :attr:`Field.value`), or ``default`` when absent."""
        field = self.fields.get(key)
        return default if field is None else field.value

    def tensor_bytes(self, name: str) -> memoryview:
        """The read-only bytes of tensor ``name``, in the file's map."""
        info = self.tensors[name]
        start = self.data_offset + info.offset
        return self._view[start:start + info.nbytes]

    def release(self, name: str) -> None:
        """Drop tensor ``name``'s pages from this process's memory (they stay in the page cache): RSS stays small.

        Whole pages inside the tensor only; a no-op where ``madvise`` is missing.
        """
        info = self.tensors[name]
        page = mmap.PAGESIZE
        start = self.data_offset + info.offset
        first, last = -(-start // page) * page, (start + info.nbytes) // page * page
        if last > first and self._map is not None and hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED, first, last - first)

    def close(self) -> None:
        """Release the map (views handed out must be dropped first)."""
        self._view.release()
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view handed out is still alive: the map goes with it
                pass
            self._map = None

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_gguf(path: str | os.PathLike) -> GGUFFile:
    """Open and check the GGUF file at ``path``.

    Parameters
    ----------
    path : str or os.PathLike
        The file.

    Returns
    -------
    GGUFFile
        Fields and tensor infos in file order; tensor data mapped, not read.

    Raises
    ------
    GGUFError
        One line naming the file and what is wrong with it.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "bad.gguf")
    >>> with open(path, "wb") as f:
    ...     _ = f.write(b"GGML")
    >>> read_gguf(path)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    nbquant.gguf.file.GGUFError: .../bad.gguf: not a readable GGUF file: the magic is b'GGML', expected b'GGUF'
    """
    try:
        return GGUFFile(path)
    except OSError as e:
        raise GGUFError(f"{os.fspath(path)}: cannot read: {e.strerror or e}") from None


def _encode_string(raw: bytes) -> bytes:
    raw = raw.split(b"\0", 1)[0]
    return struct.pack("<Q", len(raw)) + raw


def _encode_field(field: Field) -> bytes:
    out = [_encode_string(field.key.encode("utf-8", "surrogateescape"))]
    if field.is_array:
        count = len(field.values) if field.vtype == STRING else len(field.values) // struct.calcsize(
            _CODES[field.vtype])
        out.append(struct.pack("<iiQ", ARRAY, field.vtype, count))
    else:
        out.append(struct.pack("<i", field.vtype))
    if field.vtype == STRING:
        nul = b"\0"
        out.extend(len(s).to_bytes(8, "little") + s if nul not in s else _encode_string(s) for s in field.values)
    elif field.vtype == BOOL:
        out.append(bytes(1 if b else 0 for b in field.values))
    else:
        out.append(field.values)
    return b"".join(out)


def encode_metadata(fields: list[Field], tensors: list[TensorInfo], alignment: int) -> bytes:
    """The head of a GGUF file as ``gguf.cpp`` writes it: header, ``fields``, ``tensors``' infos, zero padding.

    A key that appears twice keeps its last value at the place of its last appearance (``gguf_set_val_*``).

    Parameters
    ----------
    fields : list of Field
        The key/value pairs in order.
    tensors : list of TensorInfo
        The tensor infos in order (their offsets as they will be in the data section).
    alignment : int
        The data section's alignment (32 unless ``general.alignment`` says otherwise).

    Returns
    -------
    bytes
        Everything before the data section; its length is a multiple of ``alignment``.
    """
    last = {f.key.split("\0", 1)[0]: i for i, f in enumerate(fields)}
    kept = [f for i, f in enumerate(fields) if last[f.key.split("\0", 1)[0]] == i]
    out = [_MAGIC, struct.pack("<Iqq", 3, len(tensors), len(kept))]
    out.extend(_encode_field(f) for f in kept)
    for t in tensors:
        out.append(_encode_string(t.name.encode("utf-8", "surrogateescape")))
        out.append(struct.pack(f"<I{t.n_dims}q", t.n_dims, *t.ne[:t.n_dims]))
        out.append(struct.pack("<iQ", t.type_id, t.offset))
    head = b"".join(out)
    return head + bytes(-len(head) % alignment)
