"""``nbquant convert`` on GGUF files: the reader's refusals, the writer's round trip, the type policy, the job.

Exact values throughout; the byte-for-byte comparison with llama-quantize is the parity tier's
(tests/test_parity_gguf_convert.py).
"""

from __future__ import annotations

import os
import re
import struct

import numpy as np
import pytest

from nbquant import gguf
from nbquant.convert import ConvertError
from nbquant.convert.gguf import convert_gguf, format_gguf_table, gguf_summary, write_synthetic_gguf
from nbquant.gguf.file import (
    FLOAT32,
    STRING,
    UINT32,
    Field,
    GGUFError,
    TensorInfo,
    encode_metadata,
    read_gguf,
    type_id,
    type_name,
)
from nbquant.gguf.imatrix import read_imatrix
from nbquant.gguf.policy import Hyper, PolicyOptions, choose_types, hyper_from, prune_layers, tensor_order

BF16, F32 = type_id("BF16"), type_id("F32")


def _file(tmp_path, fields=None, tensors=(), data=None, name="m.gguf") -> str:
    fields = [Field.string("general.architecture", "llama")] if fields is None else fields
    infos, offset = [], 0
    for tname, ne, tid in tensors:
        info = TensorInfo(tname, tuple(ne) + (1,) * (4 - len(ne)), tid, offset)
        infos.append(info)
        offset += info.nbytes + (-info.nbytes % 32)
    path = str(tmp_path / name)
    with open(path, "wb") as f:
        f.write(encode_metadata(fields, infos, 32))
        f.write(bytes(offset) if data is None else data)
    return path


def _refused(path: str, match: str) -> str:
    with pytest.raises(GGUFError) as e:
        read_gguf(path)
    msg = str(e.value)
    assert match in msg and "\n" not in msg and msg.startswith(path), msg
    return msg


def _patch(path: str, offset: int, raw: bytes) -> str:
    data = bytearray(open(path, "rb").read())
    data[offset:offset + len(raw)] = raw
    open(path, "wb").write(bytes(data))
    return path


# ---- reader: what gguf.cpp refuses, refused in one line ----

@pytest.mark.parametrize("raw, match", [(b"GGML", "the magic is b'GGML'"), (b"GG", "the magic runs past the end")])
def test_bad_magic(tmp_path, raw, match):
    path = str(tmp_path / "x.gguf")
    open(path, "wb").write(raw)
    _refused(path, match)


@pytest.mark.parametrize("version", [0, 1, 4, 0x03000000])
def test_versions_other_than_2_and_3(tmp_path, version):
    _refused(_patch(_file(tmp_path), 4, struct.pack("<I", version)), f"version {version}; nbquant reads GGUF")


def test_version_2_reads(tmp_path):
    with read_gguf(_patch(_file(tmp_path), 4, struct.pack("<I", 2))) as g:
        assert g.version == 2 and g.value("general.architecture") == "llama"


@pytest.mark.parametrize("offset, count", [(8, 2**40), (16, 2**40), (8, -1), (16, -1)])
def test_counts_bounded_by_the_file(tmp_path, offset, count):
    _refused(_patch(_file(tmp_path), offset, struct.pack("<q", count)), "do not fit in")


def test_string_length_past_the_end(tmp_path):
    _refused(_patch(_file(tmp_path), 24, struct.pack("<Q", 2**62)), "a key runs past the end of the file")


def test_empty_and_repeated_keys(tmp_path):
    _refused(_file(tmp_path, [Field.string("", "x")]), "an empty key")
    raw = open(_file(tmp_path, [Field.u32("a.b", 1), Field.u32("a.c", 2)]), "rb").read().replace(b"a.c", b"a.b")
    path = str(tmp_path / "twice.gguf")
    open(path, "wb").write(raw)
    _refused(path, "key 'a.b' appears twice")


def test_unknown_value_type(tmp_path):
    _refused(_file(tmp_path, [Field("k", 13, b"\0")]), "key 'k' has the unknown value type 13")


def test_array_longer_than_the_file(tmp_path):
    path = _file(tmp_path, [Field("k", UINT32, b"\0" * 8, is_array=True)])
    _refused(_patch(path, 24 + 8 + 1 + 8, struct.pack("<Q", 2**60)), "'k' holds 1152921504606846976 values")


@pytest.mark.parametrize("field, match", [(Field.string("general.alignment", "32"), "must be a u32"),
                                          (Field.u32("general.alignment", 48), "48 is not a power of 2"),
                                          (Field.u32("general.alignment", 0), "0 is not a power of 2")])
def test_alignment_key(tmp_path, field, match):
    _refused(_file(tmp_path, [field]), match)


def test_tensor_names(tmp_path):
    _refused(_file(tmp_path, tensors=[("n" * 64, [32], F32)]), "is 64 bytes; ggml allows at most 63")
    path = _file(tmp_path, tensors=[("a", [32], F32), ("b", [32], F32)])
    raw = open(path, "rb").read()
    i = raw.index(b"\x01\x00\x00\x00\x00\x00\x00\x00b")
    _refused(_patch(path, i + 8, b"a"), "tensor 'a' appears twice")


def _tensor_field_offset(path: str, name: bytes) -> int:
    return open(path, "rb").read().index(name) + len(name)


def test_dimensions_and_element_count(tmp_path):
    path = _file(tmp_path, tensors=[("w", [32, 2], F32)])
    at = _tensor_field_offset(path, b"w")
    _refused(_patch(path, at, struct.pack("<I", 5)), "has 5 dimensions; ggml allows at most 4")
    path = _file(tmp_path, tensors=[("w", [32, 2], F32)])
    _refused(_patch(path, at + 12, struct.pack("<q", -2)), "has a negative dimension")
    path = _file(tmp_path, tensors=[("w", [32, 2], F32)])
    _refused(_patch(path, at + 12, struct.pack("<q", 2**60)), "overflows an int64 element count")


def test_types_and_blocks(tmp_path):
    path = _file(tmp_path, tensors=[("w", [32, 2], F32)])
    at = _tensor_field_offset(path, b"w") + 4 + 16
    _refused(_patch(path, at, struct.pack("<i", 4)), "has the unknown ggml type 4")
    path = _file(tmp_path, tensors=[("w", [32, 2], F32)])
    _refused(_patch(path, at, struct.pack("<i", type_id("Q4_K"))), "rows of 32 values, not a multiple of its block 256")


def test_offsets_follow_each_other_and_stay_in_the_file(tmp_path):
    path = _file(tmp_path, tensors=[("a", [8], F32), ("b", [8], F32)])
    at = _tensor_field_offset(path, b"b") + 4 + 8 + 4
    _refused(_patch(path, at, struct.pack("<Q", 64)), "tensor 'b' starts at offset 64 of the data section, expected 32")
    path = _file(tmp_path, tensors=[("a", [8], F32), ("b", [8], F32)], data=bytes(40))
    _refused(path, "tensor 'b''s 32 bytes run past the end of the file")


def test_missing_file_is_one_line(tmp_path):
    _refused(str(tmp_path / "none.gguf"), "cannot read")


# ---- writer: gguf.cpp's encoding ----

def test_round_trip_every_value_type(tmp_path):
    fields = [Field("u8", 0, b"\xff"), Field("i8", 1, b"\xfe"), Field("u16", 2, struct.pack("<H", 65535)),
              Field("i16", 3, struct.pack("<h", -2)), Field.u32("u32", 7), Field("i32", 5, struct.pack("<i", -7)),
              Field("f32", FLOAT32, struct.pack("<f", 0.5)), Field("bool", 7, b"\x01"),
              Field.string("str", "héllo"), Field("u64", 10, struct.pack("<Q", 2**63)),
              Field("i64", 11, struct.pack("<q", -(2**62))), Field("f64", 12, struct.pack("<d", -1.25)),
              Field("arr", 5, struct.pack("<3i", 1, -2, 3), is_array=True),
              Field("strs", STRING, [b"a", b"", b"cd"], is_array=True), Field("empty", FLOAT32, b"", is_array=True)]
    path = _file(tmp_path, fields, tensors=[("w", [32, 3], F32)], data=np.arange(96, dtype="<f4").tobytes())
    with read_gguf(path) as g:
        assert [g.value(f.key) for f in fields] == [255, -2, 65535, -2, 7, -7, 0.5, True, "héllo", 2**63, -(2**62),
                                                    -1.25, [1, -2, 3], ["a", "", "cd"], []]
        assert np.frombuffer(g.tensor_bytes("w"), "<f4").tolist() == list(range(96))
        assert g.tensors["w"].shape == (3, 32) and g.data_offset % 32 == 0
        head = encode_metadata(list(g.fields.values()), list(g.tensors.values()), 32)
    assert open(path, "rb").read()[:len(head)] == head


def test_writer_follows_gguf_cpp():
    """Version 3, strings cut at NUL, booleans 0/1, n_dims without trailing 1s, a repeated key last."""
    head = encode_metadata([Field.string("k", b"ab\0cd"), Field("b", 7, b"\x05"), Field.u32("k", 9)],
                           [TensorInfo("t", (64, 1, 1, 1), F32, 0)], 32)
    assert head[4:8] == struct.pack("<I", 3) and len(head) % 32 == 0
    kv = struct.pack("<Q", 1) + b"b" + struct.pack("<i", 7) + b"\x01"
    kv += struct.pack("<Q", 1) + b"k" + struct.pack("<iI", UINT32, 9)
    info = struct.pack("<Q", 1) + b"t" + struct.pack("<Iq", 1, 64) + struct.pack("<iQ", F32, 0)
    assert head.rstrip(b"\0") == (b"GGUF" + struct.pack("<Iqq", 3, 1, 2) + kv + info).rstrip(b"\0")


# ---- policy: llama_tensor_get_type's rules on known shapes ----

def _llama(layers=8, hidden=256, ffn=512, vocab=64, tied=False):
    rows = [("token_embd.weight", (hidden, vocab, 1, 1), BF16), ("output_norm.weight", (hidden, 1, 1, 1), F32)]
    rows += [] if tied else [("output.weight", (hidden, vocab, 1, 1), BF16)]
    for i in range(layers):
        rows += [(f"blk.{i}.attn_norm.weight", (hidden, 1, 1, 1), F32),
                 (f"blk.{i}.attn_v.weight", (hidden, hidden // 4, 1, 1), BF16),
                 (f"blk.{i}.attn_q.weight", (hidden, hidden, 1, 1), BF16),
                 (f"blk.{i}.attn_output.weight", (hidden, hidden, 1, 1), BF16),
                 (f"blk.{i}.ffn_down.weight", (ffn, hidden, 1, 1), BF16)]
    return rows


def _types(rows, scheme, hyper, **opts):
    return {c.name: c.type_name for c in choose_types(rows, scheme, hyper, PolicyOptions(**opts))}


def _per_layer(types, suffix, layers=8):
    return [types[f"blk.{i}.{suffix}"] for i in range(layers)]


def test_order_is_layer_then_name():
    assert tensor_order(["blk.10.a", "output.weight", "blk.2.b", "blk.2.a", "token_embd.weight", "a"]) == [
        "a", "output.weight", "token_embd.weight", "blk.2.a", "blk.2.b", "blk.10.a"]


def test_q4_k_m_mix():
    t = _types(_llama(), "Q4_K_M", Hyper("llama", 8, 4, 0))
    assert (t["token_embd.weight"], t["output.weight"], t["output_norm.weight"]) == ("Q4_K", "Q6_K", "F32")
    more = ["Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q6_K"]  # use_more_bits over 8 layers
    assert _per_layer(t, "attn_v.weight") == more and _per_layer(t, "ffn_down.weight") == more
    assert set(_per_layer(t, "attn_q.weight") + _per_layer(t, "attn_output.weight")) == {"Q4_K"}
    assert set(_per_layer(t, "attn_norm.weight")) == {"F32"}


@pytest.mark.parametrize("scheme, attn_v, ffn_down, attn_output", [
    ("Q3_K_M", ["Q5_K", "Q5_K"] + ["Q4_K"] * 6, ["Q4_K"] * 8, ["Q4_K"] * 8),
    ("Q3_K_L", ["Q5_K"] * 8, ["Q5_K"] * 8, ["Q5_K"] * 8),
    ("Q3_K_S", ["Q3_K"] * 8, ["Q3_K"] * 8, ["Q3_K"] * 8),
    ("Q4_K_S", ["Q5_K"] * 4 + ["Q4_K"] * 4, ["Q5_K"] + ["Q4_K"] * 7, ["Q4_K"] * 8),
    ("Q5_K_M", ["Q6_K", "Q5_K", "Q5_K", "Q6_K", "Q5_K", "Q5_K", "Q6_K", "Q6_K"],
     ["Q6_K", "Q5_K", "Q5_K", "Q6_K", "Q5_K", "Q5_K", "Q6_K", "Q6_K"], ["Q5_K"] * 8),
    ("Q2_K", ["Q4_K"] * 8, ["Q3_K"] * 8, ["Q3_K"] * 8),
    ("IQ4_XS", ["Q5_K"] * 8, ["Q5_K"] + ["IQ4_XS"] * 7, ["IQ4_XS"] * 8),
    ("Q8_0", ["Q8_0"] * 8, ["Q8_0"] * 8, ["Q8_0"] * 8),
])
def test_scheme_mixes(scheme, attn_v, ffn_down, attn_output):
    t = _types(_llama(), scheme, Hyper("llama", 8, 4, 0))
    assert _per_layer(t, "attn_v.weight") == attn_v
    assert _per_layer(t, "ffn_down.weight") == ffn_down
    assert _per_layer(t, "attn_output.weight") == attn_output
    assert t["output.weight"] == ("Q8_0" if scheme == "Q8_0" else "Q6_K")


def test_imatrix_and_gqa_change_the_mix():
    assert _per_layer(_types(_llama(), "Q4_0", Hyper("llama", 8, 4, 0), has_imatrix=True), "ffn_down.weight") == [
        "Q4_1"] + ["Q4_0"] * 7
    assert _per_layer(_types(_llama(), "IQ4_NL", Hyper("llama", 8, 1, 0)), "attn_v.weight") == ["IQ4_NL"] * 8
    assert _per_layer(_types(_llama(), "Q2_K", Hyper("llama", 8, 1, 0)), "attn_v.weight") == ["Q3_K"] * 8
    assert _per_layer(_types(_llama(layers=80), "Q3_K_S", Hyper("llama", 80, 8, 0, seventy_b=True)),
                      "attn_v.weight", 80) == ["Q5_K"] * 80


def test_fallbacks_and_tied_embeddings():
    t = _types(_llama(hidden=288, ffn=360, tied=True), "Q4_K_M", Hyper("llama", 8, 4, 0))
    assert t["token_embd.weight"] == "Q8_0"  # tied: handled as the output; rows of 288 do not fit Q4_K
    assert _per_layer(t, "attn_q.weight") == ["Q5_0"] * 8
    assert _per_layer(t, "ffn_down.weight") == ["F16"] * 8
    t = _types(_llama(hidden=288), "IQ4_XS", Hyper("llama", 8, 1, 0))
    assert _per_layer(t, "attn_q.weight") == ["IQ4_NL"] * 8


def test_options():
    h = Hyper("llama", 8, 4, 0)
    assert set(_types(_llama(), "Q4_K_M", h, pure=True).values()) == {"Q4_K", "F32"}
    t = _types(_llama(), "Q4_K_M", h, output_tensor_type="Q8_0", token_embedding_type="Q4_0", quantize_output=True)
    assert (t["output.weight"], t["token_embd.weight"]) == ("Q8_0", "Q4_0")
    assert _types(_llama(), "Q4_K_M", h, quantize_output=False)["output.weight"] == "BF16"


def test_tensor_type_overrides_skip_the_mix_and_its_counters():
    h = Hyper("llama", 8, 4, 0)
    plain = _types(_llama(), "Q4_K_M", h)
    assert _per_layer(plain, "attn_v.weight") == ["Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q6_K"]
    rules = ((re.compile(r"blk\.0\.attn_v"), "Q8_0"), (re.compile("attn_q"), "Q5_0"), (re.compile("attn_o"), "Q6_K"))
    t = _types(_llama(), "Q4_K_M", h, tensor_types=rules)
    # blk.0's attn_v is not counted: the more-bits layers of attn_v move one layer on (counter 0 is blk.1)
    assert _per_layer(t, "attn_v.weight") == ["Q8_0", "Q6_K", "Q4_K", "Q4_K", "Q6_K", "Q4_K", "Q4_K", "Q6_K"]
    assert _per_layer(t, "attn_q.weight") == ["Q5_0"] * 8
    assert _per_layer(t, "attn_output.weight") == ["Q6_K"] * 8
    assert _per_layer(t, "ffn_down.weight") == _per_layer(plain, "ffn_down.weight")
    reasons = {c.name: c.reason for c in choose_types(_llama(), "Q4_K_M", h, PolicyOptions(tensor_types=rules))}
    assert reasons["blk.3.attn_q.weight"] == "--tensor-type attn_q=Q5_0"
    # output and token_embd: --output-tensor-type / --token-embedding-type come first; the fallback still applies
    rules = ((re.compile("output|token_embd"), "Q4_K"),)
    assert [_types(_llama(hidden=288), "Q8_0", h, tensor_types=rules)[n] for n in ("output.weight", "token_embd.weight",
                                                                                     "blk.0.attn_output.weight")] == [
        "Q5_0", "Q5_0", "Q5_0"]
    t = _types(_llama(), "Q8_0", h, tensor_types=rules, output_tensor_type="Q8_0", token_embedding_type="Q4_0")
    assert (t["output.weight"], t["token_embd.weight"], t["blk.0.attn_output.weight"]) == ("Q8_0", "Q4_0", "Q4_K")


def test_generic_policy_for_unknown_architectures():
    rows = [("double_blocks.0.img_norm1.weight", (128, 2, 1, 1), BF16),
            ("double_blocks.0.img_attn.qkv.weight", (256, 768, 1, 1), BF16),
            ("double_blocks.0.img_attn.qkv.bias", (768, 1, 1, 1), BF16), ("img_in.weight", (64, 256, 1, 1), BF16)]
    fields = {"general.architecture": "flux"}
    hyper = hyper_from(lambda k, d=None: fields.get(k, d), [r[0] for r in rows])
    assert hyper.generic and hyper.n_layer == 0
    choices = {c.name: (c.type_name, c.reason) for c in choose_types(rows, "Q4_K_M", hyper)}
    assert choices == {"double_blocks.0.img_norm1.weight": ("BF16", "kept: a norm (generic policy)"),
                       "double_blocks.0.img_attn.qkv.weight": ("Q4_K", "scheme default"),
                       "double_blocks.0.img_attn.qkv.bias": ("BF16", "kept: 1-D"),
                       "img_in.weight": ("Q5_0", "rows of 64 do not fit Q4_K's block of 256: Q5_0")}


def test_unknown_scheme():
    with pytest.raises(ValueError, match="scheme 'Q7_K' is not a GGUF scheme"):
        choose_types([], "Q7_K", Hyper("llama", 1, 1, 0))


# ---- importance matrices ----

def test_legacy_imatrix(tmp_path):
    path = str(tmp_path / "im.dat")
    raw = struct.pack("<ii3sii3f", 1, 3, b"w.a", 4, 3, 2.0, 6.0, 1.0) + struct.pack("<ii5s", 7, 5, b"wiki!")
    open(path, "wb").write(raw)
    m = read_imatrix(path)
    assert (m.entries["w.a"].tolist(), m.datasets, m.chunk_count, m.legacy) == ([0.5, 1.5, 0.25], ["wiki!"], 7, True)


def test_gguf_imatrix(tmp_path):
    fields = [Field("imatrix.datasets", STRING, [b"d.txt"], is_array=True), Field.u32("imatrix.chunk_count", 3),
              Field.u32("imatrix.chunk_size", 512)]
    sums = np.array([[3.0, 6.0], [1.0, 2.0]], "<f4")
    counts = np.array([2.5, 0.0], "<f4")  # lround(2.5) = 3; a count of 0 gives 1
    path = _file(tmp_path, fields, tensors=[("w.in_sum2", [2, 2], F32), ("w.counts", [1, 2], F32)],
                 data=sums.tobytes() + bytes(16) + counts.tobytes() + bytes(24))
    m = read_imatrix(path)
    assert (m.entries["w"].tolist(), m.datasets, m.chunk_count) == ([1.0, 2.0, 1.0, 1.0], ["d.txt"], 3)
    _refused_matrix(_file(tmp_path, fields[:2], tensors=[("w.in_sum2", [2], F32)], name="n.gguf"), "missing imatrix")


def _refused_matrix(path, match):
    with pytest.raises(GGUFError, match=match):
        read_imatrix(path)


# ---- the job ----

@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_synthetic_gguf(str(tmp_path_factory.mktemp("g") / "m.gguf"), hidden=256, intermediate=512,
                                layers=2, vocab=64)


def test_convert_q8_0_layout_and_bytes(model, tmp_path):
    dst = str(tmp_path / "q.gguf")
    report = convert_gguf(model, dst, "Q8_0", progress=False)
    with read_gguf(model) as src, read_gguf(dst) as out:
        assert list(out.fields)[-2:] == ["general.quantization_version", "general.file_type"]
        assert (out.value("general.file_type"), out.value("general.quantization_version")) == (7, 2)
        assert list(out.fields)[:-2] == list(src.fields)
        assert list(out.tensors) == tensor_order(src.tensors)
        for name, info in out.tensors.items():
            assert info.offset % 32 == 0
            raw = src.tensor_bytes(name)
            if src.tensors[name].type_id == F32:
                assert bytes(out.tensor_bytes(name)) == bytes(raw)
                continue
            x = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(info.shape)
            assert bytes(out.tensor_bytes(name)) == gguf.quantize(x, "Q8_0").tobytes(), name
            del raw
    rows = {t.name: t for t in report.tensors}
    assert rows["output.weight"].reason == "output of Q8_0" and rows["output_norm.weight"].target == "F32"
    assert rows["blk.0.attn_q.weight"].sqnr_db > 30
    assert "blk.0.attn_q.weight" in format_gguf_table(report)


def test_refusals_leave_nothing(model, tmp_path):
    dst = str(tmp_path / "q.gguf")
    open(dst, "wb").write(b"keep")
    with pytest.raises(ConvertError, match="the destination exists; pass --overwrite"):
        convert_gguf(model, dst, "Q8_0", progress=False)
    with pytest.raises(ConvertError, match="scheme 'W4A16' is not a GGUF scheme"):
        convert_gguf(model, dst, "W4A16", progress=False)
    with pytest.raises(ConvertError, match="the destination is the source file"):
        convert_gguf(model, model, "Q8_0", progress=False, overwrite=True)
    with pytest.raises(ConvertError, match="not a readable GGUF file"):
        convert_gguf(dst, str(tmp_path / "z.gguf"), "Q8_0", progress=False)
    assert open(dst, "rb").read() == b"keep" and sorted(os.listdir(tmp_path)) == ["q.gguf"]


def _split(src: str, parts: int, folder) -> str:
    """``src`` rewritten as ``parts`` files with llama.cpp's split keys; returns the first part's path."""
    with read_gguf(src) as g:
        names = list(g.tensors)
        chunks = [names[i::parts] for i in range(parts)]
        for i, chunk in enumerate(chunks):
            fields = list(g.fields.values()) if i == 0 else []
            fields += [Field("split.no", 2, struct.pack("<H", i)), Field("split.count", 2, struct.pack("<H", parts)),
                       Field("split.tensors.count", 5, struct.pack("<i", len(names)))]
            infos, offset, data = [], 0, []
            for name in chunk:
                t = g.tensors[name]
                infos.append(TensorInfo(name, t.ne, t.type_id, offset))
                raw = bytes(g.tensor_bytes(name))
                data.append(raw + bytes(-len(raw) % 32))
                offset += len(data[-1])
            with open(folder / f"s-{i + 1:05d}-of-{parts:05d}.gguf", "wb") as f:
                f.write(encode_metadata(fields, infos, 32) + b"".join(data))
    return str(folder / f"s-00001-of-{parts:05d}.gguf")


def test_split_source_reads_as_one(model, tmp_path):
    first = _split(model, 3, tmp_path)
    convert_gguf(model, str(tmp_path / "whole.gguf"), "Q8_0", progress=False)
    convert_gguf(first, str(tmp_path / "split.gguf"), "Q8_0", progress=False)
    assert (tmp_path / "whole.gguf").read_bytes() == (tmp_path / "split.gguf").read_bytes()
    os.remove(tmp_path / "s-00003-of-00003.gguf")
    with pytest.raises(ConvertError, match="s-00003-of-00003.gguf: cannot read"):
        convert_gguf(first, str(tmp_path / "again.gguf"), "Q8_0", progress=False)
    with pytest.raises(ConvertError, match="split.no is 1; open the first part"):
        convert_gguf(str(tmp_path / "s-00002-of-00003.gguf"), str(tmp_path / "again.gguf"), "Q8_0", progress=False)


def test_keep_split_writes_one_file_per_part(model, tmp_path, capsys):
    from nbquant.cli import main

    (tmp_path / "in").mkdir()
    first = _split(model, 3, tmp_path / "in")
    convert_gguf(model, str(tmp_path / "whole.gguf"), "Q8_0", progress=False)
    report = convert_gguf(first, str(tmp_path / "k.gguf"), "Q8_0", keep_split=True, progress=False)
    paths = [str(tmp_path / f"k-{i:05d}-of-00003.gguf") for i in (1, 2, 3)]
    assert report.notes == [f"--keep-split: written as 3 part(s): {', '.join(paths)}"]
    with read_gguf(str(tmp_path / "whole.gguf")) as whole:
        for i, path in enumerate(paths):
            with read_gguf(str(tmp_path / "in" / f"s-{i + 1:05d}-of-00003.gguf")) as part_in, read_gguf(path) as out:
                split = [("split.no", i), ("split.count", 3), ("split.tensors.count", len(whole.tensors))]
                assert [(k, out.value(k)) for k in out.fields] == (
                    [(k, whole.value(k)) for k in whole.fields] if i == 0 else []) + split
                assert [out.fields[k].vtype for k in list(out.fields)[-3:]] == [2, 2, 5]
                assert list(out.tensors) == list(part_in.tensors)  # the source's order within each part
                for name in out.tensors:
                    assert bytes(out.tensor_bytes(name)) == bytes(whole.tensor_bytes(name))
    with read_gguf(model) as src:  # one file: -00001-of-00001, the source's order, no split keys
        convert_gguf(model, str(tmp_path / "one"), "Q8_0", keep_split=True, progress=False)
        with read_gguf(str(tmp_path / "one-00001-of-00001.gguf")) as out:
            assert list(out.tensors) == list(src.tensors) and "split.count" not in out.fields
    with pytest.raises(ConvertError, match="k-00001-of-00003.gguf: the destination exists"):
        convert_gguf(first, str(tmp_path / "k.gguf"), "Q8_0", keep_split=True, progress=False)
    assert main(["convert", first, str(tmp_path / "c.gguf"), "--scheme", "Q8_0", "--quiet", "--keep-split"]) == 0
    assert capsys.readouterr().err.startswith("nbquant convert: --keep-split: written as 3 part(s): ")
    assert [(tmp_path / f"c-{i:05d}-of-00003.gguf").read_bytes() for i in (1, 2, 3)] == [
        open(p, "rb").read() for p in paths]
    assert main(["convert", str(tmp_path), str(tmp_path / "e"), "--scheme", "W4A16", "--keep-split"]) == 1
    assert capsys.readouterr().err.startswith("nbquant convert: error: --keep-split applies to GGUF sources")


def test_imatrix_keys_and_weight_filters(model, tmp_path):
    path = str(tmp_path / "im.dat")
    names = ["blk.0.attn_q.weight", "blk.1.attn_q.weight"]
    raw = struct.pack("<i", 2)
    for name in names:
        raw += struct.pack("<i", len(name)) + name.encode() + struct.pack("<ii", 1, 256)
        raw += np.ones(256, "<f4").tobytes()
    open(path, "wb").write(raw + struct.pack("<ii4s", 5, 4, b"wiki"))
    convert_gguf(model, str(tmp_path / "a.gguf"), "Q4_0", imatrix=path, exclude_weights=["blk.1."], progress=False)
    with read_gguf(str(tmp_path / "a.gguf")) as g:
        assert {k: g.value(k) for k in list(g.fields)[-6:]} == {
            "general.quantization_version": 2, "general.file_type": 2, "quantize.imatrix.file": path,
            "quantize.imatrix.dataset": "wiki", "quantize.imatrix.entries_count": 1, "quantize.imatrix.chunks_count": 5}
        assert list(g.fields)[-6:] == ["general.quantization_version", "general.file_type", "quantize.imatrix.file",
                                       "quantize.imatrix.dataset", "quantize.imatrix.entries_count",
                                       "quantize.imatrix.chunks_count"]
    convert_gguf(model, str(tmp_path / "b.gguf"), "Q4_0", imatrix=path, include_weights=["nothing"], progress=False)
    with read_gguf(str(tmp_path / "b.gguf")) as g:  # every entry filtered out: no imatrix, no keys
        assert list(g.fields)[-1] == "general.file_type"
    with pytest.raises(ConvertError, match="cannot be used together"):
        convert_gguf(model, str(tmp_path / "c.gguf"), "Q4_0", imatrix=path, include_weights=["a"],
                     exclude_weights=["b"], progress=False)


def test_cli_and_inspect(model, tmp_path, capsys):
    from nbquant.cli import main

    flux = write_synthetic_gguf(str(tmp_path / "flux.gguf"), hidden=256, intermediate=256, layers=1, vocab=32,
                                arch="flux")
    assert main(["convert", flux, str(tmp_path / "f.gguf"), "--scheme", "Q8_0", "--quiet"]) == 0
    assert "architecture 'flux' is unknown to llama.cpp" in capsys.readouterr().err
    assert main(["convert", flux, str(tmp_path / "f.gguf"), "--scheme", "Q8_0"]) == 1
    assert capsys.readouterr().err.strip().endswith("the destination exists; pass --overwrite to replace it")
    assert main(["inspect", str(tmp_path / "f.gguf")]) == 0
    out = capsys.readouterr().out
    assert "general.file_type = 7" in out and out.strip().endswith("12 tensors, 0.4 MiB; F32 3, Q8_0 9")
    assert main(["inspect", str(tmp_path / "missing.gguf")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_tensor_type_option(model, tmp_path, capsys):
    from nbquant.cli import main

    dst = str(tmp_path / "q.gguf")
    report = convert_gguf(model, dst, "Q8_0", tensor_types=["ATTN_[QK]=q4_0", "ffn_(g|u|d)=F16", "ffn_down=Q4_1"],
                          progress=False)
    targets = {t.name: t.target for t in report.tensors}
    assert {n: t for n, t in targets.items() if "attn_q" in n or "attn_k" in n or "ffn_" in n} == {
        f"blk.{i}.{w}.weight": t for i in range(2) for w, t in (
            ("attn_q", "Q4_0"), ("attn_k", "Q4_0"), ("ffn_gate", "F16"), ("ffn_up", "F16"), ("ffn_down", "F16"),
            ("ffn_norm", "F32"))}
    assert targets["blk.0.attn_v.weight"] == "Q8_0" and targets["output.weight"] == "Q8_0"
    for value, match in (("attn_q", "expected PATTERN=TYPE"), ("=Q8_0", "expected PATTERN=TYPE"),
                         ("attn_q=", "expected PATTERN=TYPE"), ("attn_q=Q9_K", "the type 'Q9_K' is not one"),
                         ("attn_(q=Q8_0", "the pattern is not a regular expression")):
        with pytest.raises(ConvertError, match=re.escape(f"--tensor-type {value!r}: ") + ".*" + match):
            convert_gguf(model, str(tmp_path / "r.gguf"), "Q8_0", tensor_types=[value], progress=False)
    with pytest.raises(ConvertError, match="give a list of PATTERN=TYPE strings"):
        convert_gguf(model, str(tmp_path / "r.gguf"), "Q8_0", tensor_types="attn_q=Q8_0", progress=False)
    assert main(["convert", model, str(tmp_path / "c.gguf"), "--scheme", "Q8_0", "--quiet", "--tensor-type",
                 "ATTN_[QK]=q4_0", "--tensor-type", "ffn_(g|u|d)=F16", "--tensor-type", "ffn_down=Q4_1"]) == 0
    assert (tmp_path / "c.gguf").read_bytes() == open(dst, "rb").read()
    assert main(["convert", model, str(tmp_path / "d.gguf"), "--scheme", "Q8_0", "--tensor-type",
                 "attn_q=IQ2_XXS"]) == 1
    assert capsys.readouterr().err == (
        "nbquant convert: error: --tensor-type 'attn_q=IQ2_XXS': the type 'IQ2_XXS' is not one nbquant writes ("
        + ", ".join(gguf.implemented_formats()) + ", F32, F16, BF16)\n")
    assert main(["convert", str(tmp_path), str(tmp_path / "e"), "--scheme", "W4A16", "--tensor-type", "a=Q8_0"]) == 1
    assert capsys.readouterr().err.startswith("nbquant convert: error: --tensor-type applies to GGUF sources")
    assert sorted(os.listdir(tmp_path)) == ["c.gguf", "q.gguf"]


def test_override_kv(model, tmp_path, capsys):
    from nbquant.cli import main

    dst = str(tmp_path / "q.gguf")
    kv = ["general.name=str:renamed", "llama.context_length=int:-4096", "x.f=float:1e-3", "x.inf=float:-1e99",
          "x.b=bool:true", "general.name=str:again", "general.file_type=int:99", "llama.attention.head_count_kv=int:1"]
    convert_gguf(model, dst, "Q8_0", override_kv=kv, progress=False)
    with read_gguf(model) as src, read_gguf(dst) as out:
        moved = ["llama.context_length", "x.f", "x.inf", "x.b", "general.name", "general.file_type",
                 "llama.attention.head_count_kv"]
        assert list(out.fields) == [k for k in src.fields if k not in moved] + ["general.quantization_version"] + moved
        assert [out.value(k) for k in moved] == [4096, np.float32(1e-3), -np.inf, True, "again", 99, 1]
        assert [out.fields[k].vtype for k in moved] == [UINT32, FLOAT32, FLOAT32, 7, STRING, UINT32, UINT32]
    # an int override of a hyperparameter counts in the type choice: IQ4_NL gives attn_v Q5_K with GQA 4 (the
    # file's 16 / 4 heads), IQ4_NL with 16 / 16
    with read_gguf(model) as g:
        rows = [(t.name, t.ne, t.type_id) for t in g.tensors.values()]
    assert {c.type_name for c in choose_types(rows, "IQ4_NL", Hyper("llama", 2, 4, 0)) if "attn_v" in c.name} == {
        "Q5_K"}
    report = convert_gguf(model, str(tmp_path / "n.gguf"), "IQ4_NL",
                          override_kv=["llama.attention.head_count_kv=int:16"],
                          tensor_types=[r"^(?!blk\.\d+\.attn_v).*=Q8_0"], progress=False)
    assert {t.name: t.target for t in report.tensors if t.target not in ("Q8_0", "F32")} == {
        "blk.0.attn_v.weight": "IQ4_NL", "blk.1.attn_v.weight": "IQ4_NL"}
    os.remove(tmp_path / "n.gguf")
    for value, match in (("general.name", "expected KEY=TYPE:VALUE"), ("=str:a", "expected KEY=TYPE:VALUE"),
                         ("k" * 128 + "=str:a", "a key of 1 to 127 bytes"), ("a=u32:1", "TYPE must be int, float"),
                         ("a=int", "TYPE must be int"), ("a=int:1.5", "decimal integer"), ("a=int:4294967296",
                                                                                          "below 2"),
                         ("a=float:1_0", "decimal number"), ("a=float:", "decimal number"), ("a=bool:True", "true or"),
                         ("a=str:" + "x" * 128, "at most 127 bytes"), ("general.alignment=int:64", "cannot be over")):
        with pytest.raises(ConvertError, match=re.escape(f"--override-kv {value!r}: ") + ".*" + match):
            convert_gguf(model, str(tmp_path / "r.gguf"), "Q8_0", override_kv=[value], progress=False)
    assert main(["convert", model, str(tmp_path / "c.gguf"), "--scheme", "Q8_0", "--quiet", *[
        a for v in kv for a in ("--override-kv", v)]]) == 0
    assert (tmp_path / "c.gguf").read_bytes() == open(dst, "rb").read()
    assert main(["convert", model, str(tmp_path / "d.gguf"), "--scheme", "Q8_0", "--override-kv", "a=int:x"]) == 1
    assert capsys.readouterr().err == ("nbquant convert: error: --override-kv 'a=int:x': an int VALUE is a decimal "
                                       "integer of absolute value below 2**32 (written as u32 of |VALUE|)\n")
    assert sorted(os.listdir(tmp_path)) == ["c.gguf", "q.gguf"]


def test_prune_layers_renumbers_and_keeps_the_source_layer_count():
    names = [f"blk.{i}.{w}" for i in range(6) for w in ("a", "b")] + ["output.weight", "x.blk.3.c"]
    kept, count = prune_layers(names, [1, 3])
    assert count == 4 and kept == {"output.weight": "output.weight",  # x.blk.3.c: in layer 3 too
                                   "blk.0.a": "blk.0.a", "blk.0.b": "blk.0.b", "blk.1.a": "blk.2.a",
                                   "blk.1.b": "blk.2.b", "blk.2.a": "blk.4.a", "blk.2.b": "blk.4.b",
                                   "blk.3.a": "blk.5.a", "blk.3.b": "blk.5.b"}
    assert prune_layers(names, [9]) == ({n: n for n in tensor_order(names)}, 6)
    assert prune_layers(names, []) == ({n: n for n in tensor_order(names)}, None)


def test_prune_layers_option(model, tmp_path, capsys):
    from nbquant.cli import main

    dst = str(tmp_path / "q.gguf")
    report = convert_gguf(model, dst, "Q8_0", prune_layers="0", override_kv=["llama.block_count=int:7"],
                          progress=False)
    with read_gguf(model) as src, read_gguf(dst) as out:
        assert list(out.fields)[-1] == "llama.block_count" and out.value("llama.block_count") == 1
        order = tensor_order(src.tensors)
        assert list(out.tensors) == [n for n in order if not n.startswith("blk.")] + [
            n.replace("blk.1.", "blk.0.") for n in order if n.startswith("blk.1.")]
    again = str(tmp_path / "again.gguf")
    convert_gguf(model, again, "Q8_0", progress=False)
    with read_gguf(dst) as out, read_gguf(again) as whole:
        for name in out.tensors:  # the bytes of blk.1 of the whole model
            source = name.replace("blk.0.", "blk.1.")
            assert (out.tensors[name].ne, bytes(out.tensor_bytes(name))) == (whole.tensors[source].ne,
                                                                             bytes(whole.tensor_bytes(source)))
    reasons = {t.name: t.reason for t in report.tensors}
    assert reasons["blk.0.attn_q.weight"] == "scheme default; was blk.1.attn_q.weight"
    for value in ("1,x", "-1", "", "1.5", [True], ["a"]):
        with pytest.raises(ConvertError, match=re.escape(f"--prune-layers {value!r}: expected")):
            convert_gguf(model, str(tmp_path / "r.gguf"), "Q8_0", prune_layers=value, progress=False)
    assert main(["convert", model, str(tmp_path / "c.gguf"), "--scheme", "Q8_0", "--quiet", "--prune-layers", "0,0",
                 "--override-kv", "llama.block_count=int:7"]) == 0
    assert (tmp_path / "c.gguf").read_bytes() == open(dst, "rb").read()
    assert main(["convert", model, str(tmp_path / "d.gguf"), "--scheme", "Q8_0", "--prune-layers", "2,a"]) == 1
    assert capsys.readouterr().err == ("nbquant convert: error: --prune-layers '2,a': expected layer numbers "
                                       "(integers >= 0) separated by commas, e.g. 3,4; 'a' is not one\n")
    assert sorted(os.listdir(tmp_path)) == ["again.gguf", "c.gguf", "q.gguf"]


def test_writes_never_follow_links_and_failures_leave_nothing(model, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"untouched")
    os.symlink(target, tmp_path / ".q.gguf.partial")  # a stale temporary name that is a link
    convert_gguf(model, str(tmp_path / "q.gguf"), "Q8_0", progress=False)
    assert target.read_bytes() == b"untouched" and not os.path.lexists(tmp_path / ".q.gguf.partial")
    os.symlink(target, tmp_path / "link.gguf")
    with pytest.raises(ConvertError, match="the destination is a symlink"):
        convert_gguf(model, str(tmp_path / "link.gguf"), "Q8_0", progress=False, overwrite=True)
    with pytest.raises(ConvertError, match="does not exist"):
        convert_gguf(model, str(tmp_path / "no" / "q.gguf"), "Q8_0", progress=False)
    with pytest.raises(ConvertError, match="requantizing from Q8_0 is disabled"):
        convert_gguf(str(tmp_path / "q.gguf"), str(tmp_path / "r.gguf"), "Q4_0", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "link.gguf", "q.gguf"]


def test_output_syncs_in_the_background_and_a_failed_sync_leaves_nothing(model, tmp_path, monkeypatch):
    """Every ``disksync.SYNC_BYTES`` the writer hands the data written so far to a second thread to ``fdatasync``
    (the disk writes overlap the conversion); the file is the same bytes, and a sync that fails (a full or failing
    disk) ends the job with one line and no output, temporary file included."""
    from nbquant.convert import disksync
    from nbquant.convert.gguf import job

    whole = str(tmp_path / "whole.gguf")
    convert_gguf(model, whole, "Q8_0", progress=False)
    synced = []
    monkeypatch.setattr(disksync, "SYNC_BYTES", 1 << 16)
    monkeypatch.setattr(job.os, "fdatasync", lambda fd: synced.append(fd), raising=False)
    convert_gguf(model, str(tmp_path / "q.gguf"), "Q8_0", progress=False)
    assert len(synced) >= 2 and (tmp_path / "q.gguf").read_bytes() == open(whole, "rb").read()

    def failing(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(job.os, "fdatasync", failing, raising=False)
    with pytest.raises(ConvertError, match="cannot write: Input/output error"):
        convert_gguf(model, str(tmp_path / "bad.gguf"), "Q8_0", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["q.gguf", "whole.gguf"]


@pytest.mark.parametrize("source", ["F16", "BF16"])
def test_half_sources_widen_in_pieces_to_the_same_bits(source, monkeypatch):
    """A slab of F16/BF16 values is widened to float32 in pieces on several threads; every bit pattern (NaNs,
    infinities, subnormals, -0.0) comes out as the one-piece conversion gives it, at piece boundaries too."""
    from concurrent.futures import ThreadPoolExecutor

    from nbquant.convert.gguf import job

    monkeypatch.setattr(job, "WIDEN_GRAIN", 1000)
    bits = np.arange(65536, dtype=np.uint16)
    raw = memoryview(np.concatenate([bits, bits[::-1], bits[:4321]]).astype("<u2").tobytes())
    whole = job._to_float32(raw, source)
    with ThreadPoolExecutor(2) as pool:
        for parts in (2, 3, 7):
            out = np.full(len(raw) // 2 + 5, 7.0, np.float32)
            got = job._to_float32(raw, source, out, pool, parts)
            assert got.view(np.uint32).tobytes() == whole.view(np.uint32).tobytes()
    half = bits.view("<f2").astype(np.float32) if source == "F16" else (bits.astype(np.uint32) << 16).view(np.float32)
    assert whole[:65536].view(np.uint32).tobytes() == half.view(np.uint32).tobytes()


def test_empty_tensor(tmp_path):
    src = _file(tmp_path, tensors=[("e.weight", [0, 4], BF16), ("w.weight", [32, 2], BF16)], data=bytes(128))
    convert_gguf(src, str(tmp_path / "q.gguf"), "Q8_0", progress=False)
    with read_gguf(str(tmp_path / "q.gguf")) as g:
        assert [(n, t.ne, t.type_id, t.nbytes) for n, t in g.tensors.items()] == [
            ("e.weight", (0, 4, 1, 1), type_id("Q8_0"), 0), ("w.weight", (32, 2, 1, 1), type_id("Q8_0"), 68)]
        assert bytes(g.tensor_bytes("w.weight")) == bytes([0, 0] + [0] * 32) * 2


# ---- the demo's GGUF step ----

def test_demo_gguf_step_converts_the_synthetic_model(tmp_path):
    from nbquant import demo

    report = demo.gguf_step(str(tmp_path))
    assert report.scheme == demo.GGUF_SCHEME == "Q8_0" and report.arch == "llama"
    assert sorted(os.listdir(tmp_path)) == ["model-BF16.gguf", "model-Q8_0.gguf"]
    targets = {t.name: t.target for t in report.tensors}
    assert len(targets) == 2 + 9 * demo.GGUF_MODEL["layers"] + 1
    assert {n for n, t in targets.items() if t == "F32"} == {"output_norm.weight", "blk.0.attn_norm.weight",
                                                             "blk.0.ffn_norm.weight", "blk.1.attn_norm.weight",
                                                             "blk.1.ffn_norm.weight"}
    assert all(t.target == "Q8_0" and t.sqnr_db > 40 for t in report.tensors if t.source == "BF16")
    with read_gguf(str(tmp_path / "model-Q8_0.gguf")) as g:
        assert g.value("general.file_type") == 7
        assert {n: type_name(i.type_id) for n, i in g.tensors.items()} == targets
    lines = gguf_summary(report)
    assert lines[0].startswith("Q8_0  16 tensor(s)") and lines[1].startswith("F32    5 tensor(s)")
    assert lines[2].startswith(f"size: {report.bytes_in / 2**20:.2f} MiB -> {report.bytes_out / 2**20:.2f} MiB (")
    assert lines[2].endswith(", 8.50 bits a weight in the converted tensors)")


def test_demo_ends_with_a_gguf_conversion(capsys):
    from nbquant import cli

    assert cli.main(["demo", "--size", "16x96", "--backend", "cpu", "--repeats", "1"]) == 0
    out = capsys.readouterr().out.split("\ngguf: ", 1)[1].splitlines()
    assert out[0].startswith("nbquant convert model-BF16.gguf model-Q8_0.gguf --scheme Q8_0  (a synthetic")
    assert out[1].startswith("Q8_0  16 tensor(s)") and out[2].startswith("F32    5 tensor(s)")
    assert out[3].startswith("size: ") and out[3].endswith(" s") and len(out) == 4
    assert cli.main(["demo", "--size", "16x96", "--backend", "cpu", "--repeats", "1", "--no-convert"]) == 0
    assert "gguf:" not in capsys.readouterr().out
