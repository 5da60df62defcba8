"""A torch-free safetensors reader and writer: the header in Python, the data through ``numpy.memmap``.

The format (https://huggingface.co/docs/safetensors): 8 bytes little-endian ``N``, ``N`` bytes
of JSON (``{"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...}``
and an optional ``"__metadata__"`` map of strings), then the data. The writer lays files
out as the Rust ``safetensors`` crate (0.8) does, so that its bytes equal ``safetensors.torch.save_file``'s:
tensors sorted by descending dtype (the crate's ``Dtype`` order) then by name, the header
compact JSON in that order, padded with spaces to a multiple of 8 bytes.

Reading maps one tensor at a time (:meth:`SafetensorsFile.tensor`), so a process holds only
the tensors it is working on. :class:`ShardWriter` writes to a temporary name in the
destination folder, checks the free space first (a full disk fails at once), writes each
tensor at its offset, and renames the file only when every tensor is written and synced.

Examples
--------
>>> import os, tempfile, numpy as np, ml_dtypes
>>> from nbquant.convert.safetensors import SafetensorsFile, ShardWriter
>>> d = tempfile.mkdtemp()
>>> x = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
>>> w = ShardWriter(os.path.join(d, "a.safetensors"), [("x", "BF16", (2, 3)), ("n", "I64", (2,))])
>>> w.write("x", x); w.write("n", np.array([2, 3]))
>>> w.close()
>>> f = SafetensorsFile(os.path.join(d, "a.safetensors"))
>>> list(f.entries), f.tensor("x").astype(np.float32).tolist()
(['n', 'x'], [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = ["DTYPES", "ConvertError", "TensorEntry", "SafetensorsFile", "ShardWriter", "dtype_name", "layout"]

#: safetensors dtype names → NumPy dtypes, in the Rust crate's ``Dtype`` order (the sort key of the layout).
DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu), "I16": np.dtype(np.int16), "U16": np.dtype(np.uint16),
    "F16": np.dtype(np.float16), "BF16": np.dtype(ml_dtypes.bfloat16), "I32": np.dtype(np.int32),
    "U32": np.dtype(np.uint32), "F32": np.dtype(np.float32), "F64": np.dtype(np.float64),
    "I64": np.dtype(np.int64), "U64": np.dtype(np.uint64),
}
_ORDER = {name: i for i, name in enumerate(DTYPES)}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
#: The Rust crate refuses headers larger than this.
MAX_HEADER = 100_000_000


class ConvertError(Exception):
    """A bad input or a failed write, with a one-line message naming the file or tensor."""


def dtype_name(dtype: np.dtype) -> str:
    """The safetensors name of a NumPy dtype (``"BF16"`` for ``ml_dtypes.bfloat16``).

    Examples
    --------
    >>> import numpy as np
    >>> dtype_name(np.dtype(np.int32))
    'I32'
    """
    try:
        return _NAMES[np.dtype(dtype)]
    except KeyError:
        raise ConvertError(f"dtype {dtype} has no safetensors name") from None


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file: its dtype name, shape and absolute byte range in the file."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        """The size of its data in bytes."""
        return self.end - self.begin

    @property
    def numpy_dtype(self) -> np.dtype | None:
        """The NumPy dtype, or None for a dtype this reader cannot map (it can still be copied)."""
        return DTYPES.get(self.dtype)


def _damaged(path: str, why: str) -> ConvertError:
    return ConvertError(f"{path}: damaged safetensors header: {why}")


def _parse_entry(path: str, name: str, info, start: int, size: int) -> TensorEntry:
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise _damaged(path, f"tensor {name!r} needs exactly dtype, shape and data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or not isinstance(shape, list) or not isinstance(offsets, list):
        raise _damaged(path, f"tensor {name!r} has a malformed dtype, shape or data_offsets")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape + offsets) or \
            len(offsets) != 2:
        raise _damaged(path, f"tensor {name!r} has a malformed shape {shape} or data_offsets {offsets}")
    begin, end = offsets
    if not begin <= end <= size:
        raise _damaged(path, f"tensor {name!r} has data_offsets {offsets} outside the {size} data bytes")
    itemsize = DTYPES[dtype].itemsize if dtype in DTYPES else None
    if itemsize is not None and math.prod(shape) * itemsize != end - begin:
        raise _damaged(path, f"tensor {name!r} of dtype {dtype} and shape {shape} needs "
                             f"{math.prod(shape) * itemsize} bytes, its data_offsets {offsets} give {end - begin}")
    return TensorEntry(dtype, tuple(shape), start + begin, start + end)


class SafetensorsFile:
    """The header of a safetensors file, and its tensors mapped one at a time.

    Parameters
    ----------
    path : str
        The file. A missing or unreadable file, or a damaged header, raises
        :class:`ConvertError` with one line naming the file.

    Attributes
    ----------
    entries : dict[str, TensorEntry]
        The tensors, in the order of their data in the file.
    metadata : dict or None
        The ``__metadata__`` map.

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "bad.safetensors")
    >>> _ = open(p, "wb").write(b"\\x10" + bytes(7) + b"{not json")
    >>> SafetensorsFile(p)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    nbquant.convert.safetensors.ConvertError: .../bad.safetensors: damaged safetensors header: ...
    """

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                head = f.read(8)
                if len(head) < 8:
                    raise _damaged(path, f"the file has {size} bytes, fewer than the 8 of the header length")
                (n,) = struct.unpack("<Q", head)
                if n > MAX_HEADER or n + 8 > size:
                    raise _damaged(path, f"header length {n} does not fit the file's {size} bytes")
                text = f.read(n)
        except OSError as e:
            raise ConvertError(f"{path}: cannot read: {e.strerror or e}") from None
        try:
            header = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise _damaged(path, f"not valid UTF-8 JSON ({e})") from None
        if not isinstance(header, dict):
            raise _damaged(path, "the header is not a JSON object")
        self.metadata = header.pop("__metadata__", None)
        self.data_start = 8 + n
        entries = [(name, _parse_entry(path, name, info, self.data_start, size - self.data_start))
                   for name, info in header.items()]
        self.entries: dict[str, TensorEntry] = dict(sorted(entries, key=lambda e: (e[1].begin, e[1].end)))

    def tensor(self, name: str) -> np.ndarray:
        """The tensor ``name`` mapped from the file, copy-on-write (nothing is read until used; the file never changes).

        Raises :class:`ConvertError` for a dtype with no NumPy equivalent here.
        """
        e = self.entries[name]
        dtype = e.numpy_dtype
        if dtype is None:
            raise ConvertError(f"{self.path}: tensor {name} has dtype {e.dtype}, which this reader cannot map to a "
                               f"NumPy array (supported: {', '.join(DTYPES)})")
        if e.nbytes == 0:
            return np.zeros(e.shape, dtype)
        try:
            return np.memmap(self.path, dtype=dtype, mode="c", offset=e.begin, shape=e.shape)
        except OSError as e:
            raise ConvertError(f"{self.path}: cannot map tensor {name}: {e.strerror or e}") from None


def layout(entries: Iterable[tuple[str, str, tuple[int, ...]]],
           metadata: dict[str, str] | None = None) -> tuple[bytes, dict[str, tuple[int, int]]]:
    """The header bytes and each tensor's data range, laid out as the Rust crate does.

    Examples
    --------
    >>> head, offsets = layout([("b", "BF16", (2,)), ("a", "I64", (1,))])
    >>> head[8:].decode().rstrip(), offsets
    ('{"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}}', \
{'a': (0, 8), 'b': (8, 12)})
    """
    ordered = sorted(entries, key=lambda e: (-_ORDER[e[1]], e[0]))
    obj: dict = {} if metadata is None else {"__metadata__": metadata}
    offsets: dict[str, tuple[int, int]] = {}
    at = 0
    for name, dtype, shape in ordered:
        n = math.prod(shape) * DTYPES[dtype].itemsize
        obj[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + n]}
        offsets[name] = (at, at + n)
        at += n
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, offsets


def _no_space(path: str, e: OSError) -> ConvertError:
    return ConvertError(f"{path}: cannot write: {e.strerror or e}")


class ShardWriter:
    """Write one safetensors file, tensor by tensor, in any order; it appears under its name only when complete.

    Parameters
    ----------
    path : str
        The final file name. The data goes to ``.<name>.partial`` beside it first.
    entries : iterable of (name, dtype name, shape)
        Every tensor the file will hold (the header is written first).
    metadata : dict, optional
        The ``__metadata__`` map.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> p = os.path.join(tempfile.mkdtemp(), "x.safetensors")
    >>> w = ShardWriter(p, [("a", "F32", (2,))])
    >>> os.path.exists(p), os.path.exists(w.partial)
    (False, True)
    >>> w.write("a", np.ones(2, np.float32)); w.close()
    >>> os.path.exists(p), os.path.exists(w.partial)
    (True, False)
    """

    def __init__(self, path: str, entries: Iterable[tuple[str, str, tuple[int, ...]]],
                 metadata: dict[str, str] | None = None) -> None:
        entries = list(entries)
        self.path = path
        self.partial = os.path.join(os.path.dirname(path) or ".", "." + os.path.basename(path) + ".partial")
        header, offsets = layout(entries, metadata)
        self.offsets = {name: (len(header) + b, len(header) + e) for name, (b, e) in offsets.items()}
        self.dtypes = {name: dtype for name, dtype, _ in entries}
        self.pending = set(self.offsets)
        self.size = len(header) + (max(e for _, e in offsets.values()) if offsets else 0)
        try:
            self.fd = os.open(self.partial, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise _no_space(self.partial, e) from None
        try:
            free = _free_bytes(os.path.dirname(self.partial))
            if free is not None and free < self.size:
                raise OSError(28, f"No space left on device: the file needs {self.size} bytes, {free} are free")
            os.ftruncate(self.fd, self.size)  # not posix_fallocate: writing into reserved extents is 7x slower
            self._pwrite(memoryview(header), 0)
        except OSError as e:
            self.abort()
            raise _no_space(self.partial, e) from None

    def _pwrite(self, data: memoryview, at: int) -> None:
        while len(data):
            n = os.pwrite(self.fd, data, at)
            data, at = data[n:], at + n

    def write(self, name: str, array: np.ndarray) -> None:
        """Write tensor ``name`` (its bytes, C order); its size must match the planned entry."""
        begin, end = self.offsets[name]
        a = np.ascontiguousarray(array)
        if a.nbytes != end - begin:
            raise ConvertError(f"{self.path}: tensor {name} has {a.nbytes} bytes, the header planned {end - begin}")
        try:
            self._pwrite(memoryview(a.reshape(-1).view(np.uint8)), begin)
        except OSError as e:
            raise _no_space(self.partial, e) from None
        self.pending.discard(name)

    def copy(self, name: str, source: str, begin: int) -> None:
        """Copy tensor ``name``'s bytes from file ``source`` at offset ``begin`` (kernel-side where possible)."""
        at, end = self.offsets[name]
        try:
            with open(source, "rb") as f:
                src = f.fileno()
                while at < end:
                    n = _copy_range(src, begin, self.fd, at, min(end - at, 1 << 30))
                    at, begin = at + n, begin + n
        except OSError as e:
            raise _no_space(self.partial, e) from None
        self.pending.discard(name)

    def flush(self) -> None:
        """Write the data written so far to disk now (``fdatasync``), so that :meth:`close` has less to sync."""
        if self.fd >= 0:
            try:
                os.fdatasync(self.fd)
            except (OSError, AttributeError):
                pass

    def close(self) -> None:
        """Sync the file, then rename it to its final name (and sync the folder)."""
        if self.pending:
            self.abort()
            raise ConvertError(f"{self.path}: tensors never written: {', '.join(sorted(self.pending))}")
        try:
            os.fsync(self.fd)
            os.close(self.fd)
            self.fd = -1
            os.replace(self.partial, self.path)
            sync_dir(os.path.dirname(self.path) or ".")
        except OSError as e:
            self.abort()
            raise _no_space(self.path, e) from None

    def abort(self) -> None:
        """Close and delete the partial file (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            os.unlink(self.partial)
        except FileNotFoundError:
            pass


def _copy_range(src: int, src_at: int, dst: int, dst_at: int, n: int) -> int:
    """Copy up to ``n`` bytes between file descriptors at offsets; returns the count (> 0)."""
    if hasattr(os, "copy_file_range"):
        try:
            done = os.copy_file_range(src, dst, n, src_at, dst_at)
            if done > 0:
                return done
        except OSError as e:
            if e.errno not in (18, 22, 38, 95):  # EXDEV, EINVAL, ENOSYS, EOPNOTSUPP: fall back to pread/pwrite
                raise
    data = os.pread(src, min(n, 64 << 20), src_at)
    if not data:
        raise OSError(5, "unexpected end of the source file")
    view = memoryview(data)
    while len(view):
        done = os.pwrite(dst, view, dst_at)
        view, dst_at = view[done:], dst_at + done
    return len(data)


def _free_bytes(path: str) -> int | None:
    """Bytes available to this user on the file system of ``path`` (None where unknown)."""
    try:
        st = os.statvfs(path or ".")
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


def sync_dir(path: str) -> None:
    """fsync a folder so that a rename in it is durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
