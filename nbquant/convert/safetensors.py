"""A torch-free safetensors reader and writer: the header in Python, the data through ``numpy.memmap``.

The format (https://huggingface.co/docs/safetensors): 8 bytes little-endian ``N``, ``N`` bytes
of JSON (``{"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...}``
and an optional ``"__metadata__"`` map of strings), then the data. The writer lays files
out as the Rust ``safetensors`` crate (0.8) does, so that its bytes equal ``safetensors.torch.save_file``'s:
tensors sorted by descending dtype (the crate's ``Dtype`` order) then by name, the header
compact JSON in that order, padded with spaces to a multiple of 8 bytes.

The reader accepts exactly the files the reference library accepts (the crate's ``read_metadata``
and ``validate``; tests/test_parity_safetensors_reader.py), with one more refusal: a tensor name
given twice, of which the library silently keeps the last. A header of at most 100 MB, of JSON
as ``serde_json`` reads it (:mod:`nbquant.convert.untrusted_json`); each tensor a dtype of
:data:`BITS`, a shape and two offsets of 64-bit sizes; in offset order, the tensors end to end
from offset 0 to the end of the file, each exactly its shape's bytes, the bits counted without
overflowing 64 bits. Anything else is a :class:`ConvertError` naming the file and the rule. A
tensor kept whole is copied as bytes whatever its dtype (F4 and F6_* have no NumPy type here).

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
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .disksync import BackgroundSync
from .untrusted_json import UntrustedJSONError, loads

__all__ = ["BITS", "DTYPES", "ConvertError", "TensorEntry", "SafetensorsFile", "ShardWriter", "dtype_name", "layout"]

#: Every dtype of the Rust ``safetensors`` crate (0.8) → its width in bits, in the crate's ``Dtype`` order (the
#: sort key of the layout). F4, F6_E2M3 and F6_E3M2 are packed: a tensor of them must fill whole bytes.
BITS: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
#: safetensors dtype names → NumPy dtypes: all but the packed ones, which are read and copied as bytes.
DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_), "U8": np.dtype(np.uint8), "I8": np.dtype(np.int8),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2), "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu), "F8_E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "F8_E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz), "I16": np.dtype(np.int16), "U16": np.dtype(np.uint16),
    "F16": np.dtype(np.float16), "BF16": np.dtype(ml_dtypes.bfloat16), "I32": np.dtype(np.int32),
    "U32": np.dtype(np.uint32), "F32": np.dtype(np.float32), "C64": np.dtype(np.complex64),
    "F64": np.dtype(np.float64), "I64": np.dtype(np.int64), "U64": np.dtype(np.uint64),
}
_ORDER = {name: i for i, name in enumerate(BITS)}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
#: The Rust crate refuses headers larger than this.
MAX_HEADER = 100_000_000
#: The crate's ``usize``: shapes, offsets and sizes in bits must fit 64 bits.
_USIZE_MAX = (1 << 64) - 1
_FIELDS = ("dtype", "shape", "data_offsets")


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
        """The NumPy dtype, or None for a packed F4, F6_E2M3 or F6_E3M2 (copied as bytes, never mapped)."""
        return DTYPES.get(self.dtype)


def _damaged(path: str, why: str) -> ConvertError:
    return ConvertError(f"{path}: damaged safetensors header: {why} (re-download the file, or save it again with "
                        "the safetensors library)")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Repeated(dict):
    """A JSON object that gives keys more than once (``repeated``): the last value of each is kept."""

    __slots__ = ("repeated",)


def _object(pairs: list[tuple[str, object]]) -> dict:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    repeated = _Repeated(obj)
    repeated.repeated = [k for k, n in Counter(k for k, _ in pairs).items() if n > 1]
    return repeated


def _repeated(obj: dict) -> list[str]:
    """The keys a JSON object gives more than once."""
    return obj.repeated if isinstance(obj, _Repeated) else []


def _sizes(value: object) -> bool:
    """Whether ``value`` is a list of the crate's ``usize`` (integers from 0 to 2**64 - 1)."""
    return isinstance(value, list) and {int}.issuperset(map(type, value)) and \
        0 <= min(value, default=0) and max(value, default=0) <= _USIZE_MAX


def _dtype(value: object) -> str | None:
    """A dtype name as the crate reads it (also written as a one-variant map, ``{"F32": null}``), or None."""
    if isinstance(value, dict) and len(value) == 1 and not _repeated(value) and None in value.values():
        value = next(iter(value))
    return value if type(value) is str and value in BITS else None


def _parse_entry(path: str, name: str, info: object) -> tuple[str, tuple[int, ...], int, int]:
    """A tensor's dtype, shape and data offsets, read as the crate reads them: an object with the three keys
    (others ignored), or a ``[dtype, shape, data_offsets]`` array."""
    if isinstance(info, dict):
        twice = [k for k in _repeated(info) if k in _FIELDS]
        if twice:
            raise _damaged(path, f"tensor {name!r} gives {twice[0]} twice")
        if not info.keys() >= set(_FIELDS):
            raise _damaged(path, f"tensor {name!r} has no {next(k for k in _FIELDS if k not in info)}")
        info = [info["dtype"], info["shape"], info["data_offsets"]]
    if not isinstance(info, list) or len(info) != 3:
        raise _damaged(path, f"tensor {name!r} is not an object of dtype, shape and data_offsets: {_short(info)}")
    dtype, shape, offsets = _dtype(info[0]), info[1], info[2]
    if dtype is None:
        raise _damaged(path, f"tensor {name!r} has dtype {_short(info[0])}, not a safetensors dtype "
                             f"({', '.join(BITS)})")
    if not _sizes(shape):
        raise _damaged(path, f"tensor {name!r} has shape {_short(shape)}, not a list of integers from 0 to 2**64-1")
    if not _sizes(offsets) or len(offsets) != 2:
        raise _damaged(path, f"tensor {name!r} has data_offsets {_short(offsets)}, not two integers from 0 to "
                             "2**64-1")
    return dtype, tuple(shape), offsets[0], offsets[1]


def _bits(shape: tuple[int, ...], dtype: str) -> int | None:
    """The tensor's size in bits, or None past 2**64 - 1 (the crate multiplies in order, checking each step)."""
    n = 1
    for d in [*shape, BITS[dtype]]:
        n *= d
        if n > _USIZE_MAX:
            return None
    return n


def _check_layout(path: str, tensors: list[tuple[str, str, tuple[int, ...], int, int]], data_size: int) -> None:
    """The crate's ``validate``: in offset order, each tensor begins where the last ended (the first at 0) and
    holds exactly its shape's bytes; the last ends at the end of the file."""
    at = 0
    for name, dtype, shape, begin, end in tensors:
        if begin != at or end < begin:
            raise _damaged(path, f"tensor {name!r} has data_offsets [{begin}, {end}]: it should begin at {at} "
                                 "(tensors lie end to end from offset 0, without holes or overlaps)")
        at = end
        bits = _bits(shape, dtype)
        if bits is None:
            raise _damaged(path, f"tensor {name!r} of dtype {dtype} and shape {list(shape)} holds more than 2**64 "
                                 "bits")
        if bits % 8:
            raise _damaged(path, f"tensor {name!r} of dtype {dtype} and shape {list(shape)} holds {bits} bits, not "
                                 "whole bytes")
        if bits // 8 != end - begin:
            raise _damaged(path, f"tensor {name!r} of dtype {dtype} and shape {list(shape)} needs {bits // 8} bytes, "
                                 f"its data_offsets [{begin}, {end}] give {end - begin}")
    if at != data_size:
        raise _damaged(path, f"the tensors end at data byte {at} but the file has {data_size} data bytes")


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
                if n > MAX_HEADER:
                    raise _damaged(path, f"header length {n} is over the {MAX_HEADER} bytes the safetensors "
                                         "library reads")
                if n + 8 > size:
                    raise _damaged(path, f"header length {n} does not fit the file's {size} bytes")
                text = f.read(n)
        except OSError as e:
            raise ConvertError(f"{path}: cannot read: {e.strerror or e}") from None
        try:
            header = loads(text.decode("utf-8"), strict=True, object_pairs_hook=_object)
        except UnicodeDecodeError as e:
            raise _damaged(path, f"not valid UTF-8 ({e})") from None
        except UntrustedJSONError as e:
            raise _damaged(path, str(e)) from None
        if not isinstance(header, dict):
            raise _damaged(path, "the header is not a JSON object")
        if _repeated(header):
            key = _repeated(header)[0]
            raise _damaged(path, "it gives __metadata__ twice" if key == "__metadata__" else
                           f"tensor {key!r} is given twice (the safetensors library keeps only the last)")
        metadata = header.pop("__metadata__", None)
        if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in
                                                                             metadata.values())):
            raise _damaged(path, f"__metadata__ is not a map of strings to strings: {_short(metadata)}")
        self.metadata = None if metadata is None else dict(metadata)
        self.data_start = 8 + n
        tensors = sorted(((name, *_parse_entry(path, name, info)) for name, info in header.items()),
                         key=lambda t: (t[3], t[4]))
        _check_layout(path, tensors, size - self.data_start)
        self.entries: dict[str, TensorEntry] = {
            name: TensorEntry(dtype, shape, self.data_start + begin, self.data_start + end)
            for name, dtype, shape, begin, end in tensors}

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
            try:
                return np.zeros(e.shape, dtype)
            except ValueError:  # an empty shape whose other dimensions NumPy cannot hold ([0, 2**32, 2**32])
                raise ConvertError(f"{self.path}: tensor {name} has shape {list(e.shape)}, more than NumPy can "
                                   "hold") from None
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
        bits = math.prod(shape) * BITS[dtype]
        if bits % 8:
            raise ConvertError(f"tensor {name}: {math.prod(shape)} elements of {dtype} are {bits} bits, not whole "
                               "bytes")
        n = bits // 8
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

    The data written go to disk in the background as the file grows
    (:class:`~nbquant.convert.disksync.BackgroundSync`); :meth:`close` syncs the rest before the rename.

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
        self._sync = BackgroundSync(self.fd)  # the data reach the disk while the job goes on
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
            self._sync.written(n)

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
                    self._sync.written(n)
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
            self._sync.close()
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
            try:
                self._sync.close()  # the fd stays open while a sync uses it
            except OSError:
                pass
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
