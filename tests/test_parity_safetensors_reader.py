"""nbquant's safetensors reader against the reference ``safetensors`` library (the parity tier).

Random files, valid and not (dtypes known and unknown, shapes up to and past 2**64 elements,
offsets shifted, grown, overlapping, extra or missing data bytes, entries as objects, arrays or with
a dtype written as a one-variant map, extra keys, repeated keys, metadata of every kind, and
hostile JSON: ``NaN``, huge numbers, deep nesting, lone surrogate escapes): nbquant reads a file
exactly when ``safetensors.safe_open`` does, and then the same names, dtypes, shapes, metadata
and bytes. The one deliberate difference: a tensor name given twice, which the library resolves
by keeping the last entry, nbquant refuses.
"""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
from _helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nbquant.convert.safetensors import BITS, ConvertError, SafetensorsFile

pytestmark = pytest.mark.parity
safetensors = pytest.importorskip("safetensors")

NAMES = ["a", "b", "w.weight", "__metadata_", "é\u2028", ""]
BAD_DTYPES = ["XYZ", "f32", "F8", ""]
#: Shape values, one in eleven around the limits: 2**32 twice overflows 64 bits, 2**63 once doubled, 2**64 is
#: no usize, and values of the wrong type.
DIMS = [0, 1, 2, 3, 4] * 16 + [1 << 32, 1 << 63, (1 << 64) - 1, 1 << 64, -1, 1.0, True, "2"]
#: Empty shapes whose element count overflows 64 bits before its 0 (refused) or never does (read).
EMPTY = [[1 << 32, 1 << 32, 0], [1 << 63, 2, 0], [0, 1 << 32, 1 << 32], [(1 << 64) - 1, 0], [1 << 32, 0, 1 << 32]]
#: Shapes as JSON text no Python list dumps to: -0 is the float -0.0 to serde_json, 1e0 and 1.0 are floats.
RAW_SHAPES = ["[-0]", "[2,-0]", "[1e0]", "[1.0]", "[0]"]
#: JSON values for an extra key of an entry (ignored by both readers when they parse).
EXTRAS = ["1", "-0", "1e-400", "123456789012345678901234567890", "-123456789012345678901234567890", "1" * 309,
          "9" * 400, "1e400", "NaN", "-Infinity", '"\\ud800"', '"\\ud83d\\ude00"', '{"y":1,"y":2}',
          "[" * 126 + "]" * 126, "[" * 127 + "]" * 127, "null"]


#: The part of a file a hostile example damages (now and then), or "all" of them (rarely each).
DAMAGES = ["names", "dtype", "shape", "offsets", "form", "extra", "metadata", "header", "data", "all"]


@st.composite
def files(draw) -> tuple[bytes, bool]:
    """A safetensors file's bytes, and whether its header repeats a tensor name.

    Half the files are valid by construction; each other one damages one part (:data:`DAMAGES`).
    """
    damage = draw(st.sampled_from([None] * len(DAMAGES) + DAMAGES))

    def hurt(part, rare, common, one_in=2):
        """``draw(rare)`` one time in ``one_in`` where the file damages ``part``, else ``draw(common)``."""
        hit = damage == part or (damage == "all" and draw(st.integers(0, 7)) == 0)
        return draw(rare) if hit and draw(st.integers(0, one_in - 1)) == 0 else draw(common)

    names = draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=damage not in ("names", "all")))
    entries, at = [], 0
    for name in names:
        dtype = hurt("dtype", st.sampled_from(BAD_DTYPES), st.sampled_from(list(BITS)))
        shape = hurt("shape", st.sampled_from(EMPTY + RAW_SHAPES) | st.lists(st.sampled_from(DIMS), max_size=3),
                     st.lists(st.integers(0, 4), max_size=3))
        size = 0
        if isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape) and dtype in BITS:
            size = min(math.prod(shape) * BITS[dtype] // 8, 64)  # a product past 64 bytes is refused anyway
        shape = shape if isinstance(shape, str) else json.dumps(shape)
        begin, end = hurt("offsets", st.tuples(st.integers(0, at + 4), st.integers(0, at + size + 4)),
                          st.just((at, at + size)))
        at = max(at, end)
        form = hurt("form", st.sampled_from(["array", "variant", "array variant", "missing", "twice", "array4"]),
                    st.just("object"))
        dtype_json = {dtype: None} if "variant" in form else dtype
        if form.startswith("array"):
            text = f"[{json.dumps(dtype_json)},{shape},[{begin},{end}]{',0' if form == 'array4' else ''}]"
        else:
            fields = [("dtype", json.dumps(dtype_json)), ("shape", shape),
                      ("data_offsets", json.dumps([begin, end]))]
            extra = hurt("extra", st.sampled_from(EXTRAS), st.none(), 1)
            if extra is not None:
                fields.insert(draw(st.integers(0, 3)), ("x", extra))
            if form == "missing":
                del fields[draw(st.integers(0, 2))]
            elif form == "twice":
                fields.append(draw(st.sampled_from(fields)))
            text = "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in fields) + "}"
        entries.append((name, text))
    entries = draw(st.permutations(entries))
    meta = hurt("metadata", st.sampled_from(['{"k":1}', "[]", '{"k":"1","k":"2"}', "{}", '"x"', "twice"]),
                st.sampled_from([None, "null", '{"format":"pt"}']), 1)
    if meta is not None:
        for _ in range(2 if meta == "twice" else 1):
            entries.insert(draw(st.integers(0, len(entries))), ("__metadata__", "{}" if meta == "twice" else meta))
    header = "{" + ",".join(f"{json.dumps(k, ensure_ascii=draw(st.booleans()))}:{v}" for k, v in entries) + "}"
    header = hurt("header", st.sampled_from([" \n" + header, header + "\x00", header[:-1], "[" + header + "]",
                                             "\ufeff" + header]),
                  st.just(header + " " * draw(st.integers(0, 7))), 1)
    data = draw(st.binary(min_size=at, max_size=at))
    data = hurt("data", st.sampled_from([data + b"\x00", data[:-1]]), st.just(data), 1)
    return struct.pack("<Q", len(header.encode())) + header.encode() + data, len(names) > len(set(names))


def reference(path: str, blob: bytes):
    """``(metadata, {name: (dtype, shape, bytes)})`` as the safetensors library reads the file, or None."""
    try:
        with safetensors.safe_open(path, "np") as f:
            names, metadata = set(f.keys()), f.metadata()
            infos = {n: (f.get_slice(n).get_dtype(), tuple(f.get_slice(n).get_shape())) for n in names}
    except safetensors.SafetensorError:
        return None
    tensors = {n: (t["dtype"], tuple(t["shape"]), bytes(t["data"])) for n, t in safetensors.deserialize(blob)}
    assert {n: v[:2] for n, v in tensors.items()} == infos
    return metadata, tensors


def nbquant(path: str, blob: bytes):
    """The same from nbquant's reader, or the one-line refusal."""
    try:
        f = SafetensorsFile(path)
    except ConvertError as e:
        assert "\n" not in str(e) and str(e).startswith(f"{path}: damaged safetensors header: "), str(e)
        return str(e)
    tensors = {n: (e.dtype, e.shape, blob[e.begin:e.end]) for n, e in f.entries.items()}
    for n, e in f.entries.items():
        if e.numpy_dtype is not None and e.nbytes:
            assert np.asarray(f.tensor(n)).tobytes() == tensors[n][2], n
    return f.metadata, tensors


@settings(max_examples=examples(3000), deadline=None)
@given(file=files())
def test_reader_accepts_exactly_what_safetensors_accepts(tmp_path_factory, file):
    blob, repeated = file
    path = str(tmp_path_factory.mktemp("st") / "x.safetensors")
    with open(path, "wb") as f:
        f.write(blob)
    ours, ref = nbquant(path, blob), reference(path, blob)
    if repeated:
        assert isinstance(ours, str) and (ref is None or "is given twice" in ours), (ours, ref, blob[:300])
    elif ref is None:
        assert isinstance(ours, str), (ours, blob[:300])
    else:
        assert ours == ref, (ours, ref, blob[:300])
