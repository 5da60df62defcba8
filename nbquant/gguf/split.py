"""A GGUF model split in parts (``NAME-00001-of-00003.gguf`` ...), opened as one, as llama.cpp's model loader does.

The first part's ``split.count`` says how many there are; each part must carry ``split.no``
equal to its index, no tensor may appear in two parts, and the total must equal the first part's
``split.tensors.count``. Metadata are the first part's; tensors are the union, each read from its
own part's map. A file without ``split.count`` (or with 1) opens as itself.

Examples
--------
>>> import os, tempfile
>>> from nbquant.gguf.file import Field, encode_metadata
>>> path = os.path.join(tempfile.mkdtemp(), "m.gguf")
>>> with open(path, "wb") as f:
...     _ = f.write(encode_metadata([Field.string("general.architecture", "llama")], [], 32))
>>> with open_model(path) as m:
...     m.value("general.architecture"), m.parts
('llama', 1)
"""

from __future__ import annotations

import os
import re
from typing import Any

from .file import GGUFError, GGUFFile, TensorInfo, read_gguf

__all__ = ["SplitModel", "open_model"]

_FIRST = re.compile(r"^(.*)-00001-of-(\d{5})\.gguf$")


class SplitModel:
    """The parts of a split model read as one: :attr:`fields` of the first, :attr:`tensors` of all."""

    def __init__(self, files: list[GGUFFile]) -> None:
        self.files = files
        first = files[0]
        self.path, self.fields, self.alignment, self.version = first.path, first.fields, first.alignment, first.version
        self.tensors: dict[str, TensorInfo] = {}
        self._owner: dict[str, GGUFFile] = {}
        for f in files:
            for name, info in f.tensors.items():
                if name in self.tensors:
                    raise GGUFError(f"{f.path}: tensor {name!r} is also in an earlier part of the split model")
                self.tensors[name] = info
                self._owner[name] = f

    @property
    def parts(self) -> int:
        """How many files."""
        return len(self.files)

    def part_index(self, name: str) -> int:
        """The index of the part (0 for the first) that holds tensor ``name``."""
        return self.files.index(self._owner[name])

    def value(self, key: str, default: Any = None) -> Any:
        """The first part's value of ``key``."""
        return self.files[0].value(key, default)

    def tensor_bytes(self, name: str) -> memoryview:
        """The read-only bytes of tensor ``name``, in its part's map."""
        return self._owner[name].tensor_bytes(name)

    def exact_records(self, name: str, qtype: str) -> None:
        """None: a GGUF file's tensor has no other encoding to carry over (see ``HFModel.exact_records``)."""
        return None

    def release(self, name: str) -> None:
        """Drop tensor ``name``'s pages from this process's memory (:meth:`GGUFFile.release`)."""
        self._owner[name].release(name)

    def close(self) -> None:
        """Close every part."""
        for f in self.files:
            f.close()

    def __enter__(self) -> SplitModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _part(path: str, index: int) -> GGUFFile:
    g = read_gguf(path)
    no = g.value("split.no")
    if no != index:
        g.close()
        raise GGUFError(f"{path}: split.no is {no!r}, expected {index}")
    return g


def open_model(path: str | os.PathLike) -> SplitModel:
    """Open ``path`` and, when it is the first part of a split model, every other part beside it.

    Raises
    ------
    GGUFError
        One line naming the part and the fault.
    """
    path = os.fspath(path)
    first = read_gguf(path)
    files = [first]
    try:
        count = first.value("split.count", 1)
        if isinstance(count, int) and count > 1:
            if first.value("split.no") != 0:
                no = first.value("split.no")
                raise GGUFError(f"{path}: split.no is {no!r}; open the first part of a split model")
            m = _FIRST.match(path)
            if m is None or int(m.group(2)) != count:
                raise GGUFError(f"{path}: the first part of a {count}-part model must be named "
                                f"NAME-00001-of-{count:05d}.gguf")
            files += [_part(f"{m.group(1)}-{i + 1:05d}-of-{count:05d}.gguf", i) for i in range(1, count)]
            model = SplitModel(files)
            expected = first.value("split.tensors.count")
            if expected != len(model.tensors):
                raise GGUFError(f"{path}: split.tensors.count is {expected!r} but the parts hold {len(model.tensors)}")
            return model
        return SplitModel(files)
    except BaseException:
        for f in files:
            f.close()
        raise
