"""The safetensors reader refuses what the format forbids, in one line, and copies every dtype it allows.

Each hostile file is built here byte by byte. The rules are those of the reference ``safetensors``
library (the Rust crate's ``read_metadata`` and ``validate``), checked against it by
tests/test_parity_safetensors_reader.py; nbquant refuses one thing more, a tensor name given
twice (the library silently keeps the last).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from nbquant.convert import ConvertError, SafetensorsFile, convert
from nbquant.convert.run import STAMP
from nbquant.convert.safetensors import BITS, ShardWriter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
W = '{"dtype":"BF16","shape":[2,128],"data_offsets":[0,512]}'  # the weight of every small checkpoint


def file_bytes(header: str, data: bytes) -> bytes:
    text = header.encode()
    return struct.pack("<Q", len(text)) + text + data


def refused(tmp_path, header: str, data: bytes, match: str, name="model.safetensors") -> str:
    """Write the file, assert the reader's one-line refusal naming it and ``match``; return the message."""
    path = str(tmp_path / name)
    with open(path, "wb") as f:
        f.write(file_bytes(header, data))
    with pytest.raises(ConvertError) as e:
        SafetensorsFile(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: damaged safetensors header: ") and match in msg, msg
    return msg


def checkpoint(folder, header: str, data: bytes, config: str = '{"model_type": "llama"}', index: str | None = None):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(file_bytes(header, data))
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write(config)
    if index is not None:
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            f.write(index)
    return folder


# --- the layout of the data: contiguous, whole, every tensor its size -------------------------------------------


def test_tensor_given_twice(tmp_path):
    msg = refused(tmp_path, f'{{"m.weight":{W},"m.weight":{W}}}', bytes(512), "tensor 'm.weight' is given twice")
    assert "keeps only the last" in msg


@pytest.mark.parametrize(("header", "size", "match"), [
    ('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}',
     6, "tensor 'b' has data_offsets [2, 6]: it should begin at 4"),
    ('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}',
     4, "tensor 'b' has data_offsets [0, 4]: it should begin at 4"),
    ('{"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}', 4, "tensor 'a' has data_offsets [2, 4]: it should "
                                                                 "begin at 0"),
    ('{"a":{"dtype":"U8","shape":[0],"data_offsets":[3,2]}}', 3, "tensor 'a' has data_offsets [3, 2]"),
], ids=["overlap", "same-range", "hole", "backwards"])
def test_offsets_overlap_or_leave_holes(tmp_path, header, size, match):
    msg = refused(tmp_path, header, bytes(size), match)
    assert "end to end" in msg


@pytest.mark.parametrize(("extra", "match"), [(1, "the tensors end at data byte 512 but the file has 513"),
                                              (-1, "the tensors end at data byte 512 but the file has 511")])
def test_bytes_after_or_missing_at_the_end(tmp_path, extra, match):
    refused(tmp_path, f'{{"m.weight":{W}}}', bytes(512 + extra), match)


def test_size_must_match_shape_and_dtype(tmp_path):
    refused(tmp_path, '{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', bytes(8),
            "tensor 'a' of dtype F32 and shape [3] needs 12 bytes, its data_offsets [0, 8] give 8")


@pytest.mark.parametrize("shape", [[1 << 32, 1 << 32], [1 << 32, 1 << 32, 0], [1 << 63, 2]])
def test_element_count_overflowing_64_bits(tmp_path, shape):
    refused(tmp_path, json.dumps({"a": {"dtype": "U8", "shape": shape, "data_offsets": [0, 0]}}), b"",
            "more than 2**64")


def test_element_bits_overflowing_64_bits(tmp_path):
    refused(tmp_path, json.dumps({"a": {"dtype": "U16", "shape": [1 << 63], "data_offsets": [0, 0]}}), b"",
            "more than 2**64")


def test_sub_byte_tensor_of_a_partial_byte(tmp_path):
    refused(tmp_path, '{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}', bytes(2),
            "tensor 'a' of dtype F4 and shape [3] holds 12 bits, not whole bytes")


# --- the header: its length, its JSON, every entry's fields -----------------------------------------------------


@pytest.mark.parametrize(("blob", "match"), [
    (b"\x01\x00", "the file has 2 bytes, fewer than the 8"),
    (struct.pack("<Q", 100_000_001) + b"{}", "header length 100000001 is over the 100000000"),
    (struct.pack("<Q", 40) + b"{}", "header length 40 does not fit the file's 10 bytes"),
    (struct.pack("<Q", 3) + b"{\xff}", "not valid UTF-8"),
], ids=["short", "too-long", "past-the-end", "utf8"])
def test_header_length_and_encoding(tmp_path, blob, match):
    path = tmp_path / "model.safetensors"
    path.write_bytes(blob)
    with pytest.raises(ConvertError, match=match):
        SafetensorsFile(str(path))


@pytest.mark.parametrize(("header", "match"), [
    ('{"a":' + "[" * 200 + "]" * 200 + "}", "JSON nested 201 levels deep (at most 127)"),
    ('{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":' + "9" * 5000 + "}}", "beyond the float range"),
    ('{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":NaN}}', "NaN is not JSON"),
    ('{"a\\ud800":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}', "lone UTF-16 surrogate"),
    ('{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},}', "not valid JSON"),
    ("[]", "the header is not a JSON object"),
], ids=["deep", "5000-digits", "nan", "surrogate", "syntax", "array"])
def test_header_json(tmp_path, header, match):
    refused(tmp_path, header, b"", match)


@pytest.mark.parametrize(("info", "match"), [
    ('{"dtype":"XYZ","shape":[0],"data_offsets":[0,0]}', "tensor 'a' has dtype 'XYZ', not a safetensors dtype"),
    ('{"dtype":"f32","shape":[0],"data_offsets":[0,0]}', "not a safetensors dtype (BOOL, F4, F6_E2M3"),
    ('{"dtype":{"F32":1},"shape":[0],"data_offsets":[0,0]}', "not a safetensors dtype"),
    ('{"shape":[0],"data_offsets":[0,0]}', "tensor 'a' has no dtype"),
    ('{"dtype":"U8","shape":[0],"shape":[0],"data_offsets":[0,0]}', "tensor 'a' gives shape twice"),
    ('{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}', "shape [1.0], not a list of integers from 0 to 2**64-1"),
    ('{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}', "not a list of integers"),
    ('{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}', "not a list of integers"),
    ('{"dtype":"U8","shape":[true],"data_offsets":[0,0]}', "not a list of integers"),
    ('{"dtype":"U8","shape":[0],"data_offsets":[0,0,0]}', "data_offsets [0, 0, 0], not two integers"),
    ('["U8",[0]]', "tensor 'a' is not an object of dtype, shape and data_offsets"),
    ("null", "tensor 'a' is not an object of dtype, shape and data_offsets"),
], ids=["unknown", "lower-case", "variant-map", "missing", "twice", "float", "2**64", "minus-zero", "bool",
        "three-offsets", "short-array", "null"])
def test_tensor_entry_fields(tmp_path, info, match):
    refused(tmp_path, f'{{"a":{info}}}', b"", match)


@pytest.mark.parametrize(("meta", "match"), [
    ('{"k":1}', "__metadata__ is not a map of strings to strings"),
    ("[]", "__metadata__ is not a map of strings to strings"),
])
def test_metadata_map_of_strings(tmp_path, meta, match):
    refused(tmp_path, f'{{"__metadata__":{meta}}}', b"", match)
    refused(tmp_path, f'{{"__metadata__":{{}},"__metadata__":{meta}}}', b"", "gives __metadata__ twice")


def test_what_the_reference_accepts(tmp_path):
    """The forms the Rust crate's serde reads are read the same: a [dtype, shape, offsets] array, a dtype as a
    one-variant map, unknown keys (ignored), a repeated metadata key (the last kept), surrounding whitespace."""
    header = (' \n{"__metadata__":{"k":"1","k":"2"},"c":["U8",[2],[4,6]],"b":{"dtype":{"I16":null},"shape":[1],'
              '"data_offsets":[2,4],"x":[{"y":-1e300}, -0, 123456789012345678901234567890]},'
              '"a":{"dtype":"U16","shape":[],"data_offsets":[0,2]},"z":{"dtype":"U8","shape":[0,18446744073709551615],'
              '"data_offsets":[6,6]}}\t\r ')
    (tmp_path / "x.safetensors").write_bytes(file_bytes(header, bytes(range(6))))
    f = SafetensorsFile(str(tmp_path / "x.safetensors"))
    assert f.metadata == {"k": "2"}
    assert [(n, e.dtype, e.shape, e.nbytes) for n, e in f.entries.items()] == [
        ("a", "U16", (), 2), ("b", "I16", (1,), 2), ("c", "U8", (2,), 2), ("z", "U8", (0, (1 << 64) - 1), 0)]
    assert f.tensor("c").tolist() == [4, 5] and f.tensor("b").view(np.uint8).tolist() == [2, 3]
    with pytest.raises(ConvertError, match=r"tensor z has shape \[0, 18446744073709551615\], more than NumPy can hold"):
        f.tensor("z")


# --- every safetensors dtype: copied byte for byte, refused as a weight in one line -----------------------------


def test_every_dtype_is_copied_byte_for_byte(tmp_path):
    rng = np.random.default_rng(0)
    kept = {f"x.{dtype.lower()}": (dtype, (2, 3, 4)) for dtype in BITS}  # 24 elements: whole bytes for F4 and F6
    entries = [("m.weight", "BF16", (2, 128)), *[(n, d, s) for n, (d, s) in kept.items()]]
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("{}")
    w = ShardWriter(str(src / "model.safetensors"), entries)
    w.write("m.weight", np.ones((2, 128), ml_dtypes.bfloat16))
    data = {}
    for name, (dtype, _) in kept.items():
        data[name] = rng.integers(0, 256, 24 * BITS[dtype] // 8, dtype=np.uint8)  # any bytes, as raw bytes
        w.write(name, data[name])
    w.close()
    report = convert(src, tmp_path / "dst", "W4A16", progress=False)
    assert len(report.quantized) == 1
    out = SafetensorsFile(str(tmp_path / "dst" / "model.safetensors"))
    raw = (tmp_path / "dst" / "model.safetensors").read_bytes()
    for name, (dtype, shape) in kept.items():
        e = out.entries[name]
        assert (e.dtype, e.shape) == (dtype, shape)
        assert raw[e.begin:e.end] == data[name].tobytes(), name


@pytest.mark.parametrize(("dtype", "shown"), [("C64", "complex64"), ("F8_E4M3FNUZ", "float8_e4m3fnuz"),
                                             ("U32", "uint32"), ("BOOL", "bool")])
def test_weight_of_another_dtype_is_refused_in_one_line(tmp_path, dtype, shown):
    n = 2 * 128 * BITS[dtype] // 8
    src = checkpoint(tmp_path / "src", f'{{"m.weight":{{"dtype":"{dtype}","shape":[2,128],"data_offsets":[0,{n}]}}}}',
                     bytes(n))
    with pytest.raises(ConvertError, match=f"tensor m.weight: dtype {shown} is not supported for W4A16") as e:
        convert(src, tmp_path / "dst", "W4A16", progress=False)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize("dtype", ["F4", "F6_E2M3"])
def test_weight_of_a_packed_dtype_is_refused_in_one_line(tmp_path, dtype):
    n = 2 * 128 * BITS[dtype] // 8
    src = checkpoint(tmp_path / "src", f'{{"m.weight":{{"dtype":"{dtype}","shape":[2,128],"data_offsets":[0,{n}]}}}}',
                     bytes(n))
    with pytest.raises(ConvertError, match=f"tensor m.weight: dtype {dtype} is not supported for W4A16"):
        convert(src, tmp_path / "dst", "W4A16", progress=False)


# --- config.json and the index ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "match"), [
    ('{"a":' + "[" * 5000 + "]" * 5000 + "}", "JSON nested 5001 levels deep (at most 127)"),
    ('{"a":' + "9" * 5000 + "}", "an integer of 5000 digits (at most 4300)"),
    ("{", "not valid JSON"),
    ("[1]", "expected a JSON object"),
], ids=["deep", "5000-digits", "syntax", "array"])
@pytest.mark.parametrize("which", ["config.json", "model.safetensors.index.json"])
def test_config_and_index_json(tmp_path, which, text, match):
    src = checkpoint(tmp_path / "src", f'{{"m.weight":{W}}}', bytes(512),
                     **({"config": text} if which == "config.json" else {"index": text}))
    with pytest.raises(ConvertError) as e:
        convert(src, tmp_path / "dst", "W4A16", progress=False)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(os.path.join(str(src), which) + ": ") and match in msg, msg


# --- the command line: exit status 1, one line on stderr, nothing written ----------------------------------------


@pytest.mark.parametrize(("header", "data", "config", "match"), [
    (f'{{"m.weight":{W},"m.weight":{W}}}', bytes(512), "{}", "is given twice"),
    ('{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}', b"", "{}", "more than 2**64"),
    (f'{{"m.weight":{W}}}', bytes(513), "{}", "the tensors end at data byte 512"),
    (f'{{"m.weight":{W}}}', bytes(512), '{"a":' + "[" * 3000 + "]" * 3000 + "}", "nested 3001 levels"),
], ids=["twice", "overflow", "trailing", "deep-config"])
def test_cli_refuses_in_one_line_and_writes_nothing(tmp_path, header, data, config, match):
    src = checkpoint(tmp_path / "src", header, data, config)
    proc = subprocess.run([sys.executable, "-m", "nbquant", "convert", str(src), str(tmp_path / "dst"), "--scheme",
                           "W4A16"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and match in proc.stderr, proc.stderr
    assert proc.stderr.startswith("nbquant convert: error: ") and "Traceback" not in proc.stderr
    assert not (tmp_path / "dst").exists() or not os.listdir(tmp_path / "dst"), os.listdir(tmp_path / "dst")
    assert not (tmp_path / "dst" / STAMP).exists()


def test_kept_packed_moe_tensor_is_split_per_expert_byte_for_byte(tmp_path):
    """A fused MoE tensor of 4-bit elements kept as it is: each expert's projection is its own bytes of the source."""
    from safetensors import safe_open

    shape, n = (2, 4, 8), 2 * 4 * 8 // 2
    data = bytes(range(n))
    other = f'"m.weight":{{"dtype":"BF16","shape":[2,128],"data_offsets":[{n},{n + 512}]}}'
    src = checkpoint(tmp_path / "src", f'{{"m.experts.gate_up_proj":{{"dtype":"F4","shape":[2,4,8],'
                                       f'"data_offsets":[0,{n}]}},{other}}}', data + bytes(512))
    convert(src, tmp_path / "dst", "W4A16", ignore=["re:m.experts"], progress=False)
    rows = shape[1] // 2 * shape[2] // 2  # bytes of one projection of one expert
    out = str(tmp_path / "dst" / "model.safetensors")
    with open(out, "rb") as f:
        head = int.from_bytes(f.read(8), "little")
        header, body = json.loads(f.read(head)), f.read()
    with safe_open(out, "np") as f:  # the reference reader accepts the output
        assert {"m.experts.0.gate_proj.weight", "m.experts.1.up_proj.weight"} <= set(f.keys())
    for e in range(2):
        for i, part in enumerate(("gate_proj", "up_proj")):
            entry = header[f"m.experts.{e}.{part}.weight"]
            assert entry["dtype"] == "F4" and entry["shape"] == [2, 8]
            begin, end = entry["data_offsets"]
            assert body[begin:end] == data[(2 * e + i) * rows:(2 * e + i + 1) * rows], f"expert {e} {part}"
