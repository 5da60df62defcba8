"""Write ``docs/_data/numpy-objects.inv``: the few numpy objects nbquant's docs link to, as a Sphinx inventory.

The docs build reads this file instead of ``https://numpy.org/doc/stable/objects.inv``, so it needs no network (CI
reaches PyPI only) and never fails or warns for want of one; the links still point at numpy.org. Add an entry here
when a docstring or page starts referring to another numpy object, then run ``python docs/_scripts/numpy_inventory.py``
and commit the result.

The format is Sphinx's inventory version 2: four header lines, then zlib-compressed lines of
``name domain:role priority uri display-name`` (``$`` in the uri stands for the name, ``-`` for a display name equal
to the name).
"""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

OUTPUT = Path(__file__).resolve().parents[1] / "_data" / "numpy-objects.inv"
GENERATED = "reference/generated/numpy.{}.html#$"
SCALARS = "reference/arrays.scalars.html#$"

ENTRIES: list[tuple[str, str, str, str]] = [
    ("numpy", "py:module", "index.html#module-numpy", "-"),
    *((f"numpy.{name}", "py:class", GENERATED.format(name), "-") for name in ("ndarray", "dtype", "ufunc")),
    *((f"numpy.{name}", "py:function", GENERATED.format(name), "-")
      for name in ("asarray", "ascontiguousarray", "from_dlpack", "shares_memory", "rint", "histogram", "round")),
    *((f"numpy.{name}", "py:class", SCALARS, "-")
      for name in ("float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                   "bool")),
    ("numpy.random.Generator", "py:class", "reference/random/generator.html#$", "-"),
    ("numpy.random.Generator.standard_t", "py:method",
     "reference/random/generated/numpy.random.Generator.standard_t.html#$", "-"),
    ("numpy.typing.ArrayLike", "py:data", "reference/typing.html#$", "-"),
    ("numpy.typing.DTypeLike", "py:data", "reference/typing.html#$", "-"),
    ("array_like", "std:term", "glossary.html#term-array_like", "-"),
    ("arrays.scalars", "std:label", "reference/arrays.scalars.html#arrays-scalars", "Scalars"),
]


def inventory_bytes() -> bytes:
    """The inventory file's bytes (the same every run: sorted entries, fixed zlib level)."""
    header = "# Sphinx inventory version 2\n# Project: NumPy\n# Version: 2\n" \
             "# The remainder of this file is compressed using zlib.\n"
    body = "".join(f"{name} {role} {1 if role.startswith('py:') else -1} {uri} {shown}\n"
                   for name, role, uri, shown in sorted(ENTRIES))
    return header.encode() + zlib.compress(body.encode(), 9)


def main() -> int:
    """Write the inventory, or with ``--check`` exit 1 if the committed file differs."""
    data = inventory_bytes()
    if "--check" in sys.argv[1:]:
        return 0 if OUTPUT.exists() and OUTPUT.read_bytes() == data else 1
    OUTPUT.write_bytes(data)
    print(f"wrote {OUTPUT} ({len(ENTRIES)} entries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
