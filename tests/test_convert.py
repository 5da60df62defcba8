"""``nbquant convert`` without torch: synthetic checkpoints written here, an independent decoder of the format.

The decoder below is written from the compressed-tensors format alone (int32 words → codes,
the e2m1 / E4M3 / E8M0 tables, ``(q - zp) * s`` in exact arithmetic rounded once): it must
equal nbquant's dequantization of every weight, for every scheme. The byte equality with
llm-compressor itself is tests/test_parity_convert.py (the parity tier).
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from nbquant.convert import ConvertError, SafetensorsFile, convert, dequantize_weight, get_scheme
from nbquant.convert import run as run_module
from nbquant.convert.safetensors import ShardWriter
from nbquant.convert.synthetic import write_synthetic_checkpoint

SCHEMES = ["W4A16", "W4A16_ASYM", "W8A16", "W2A16", "W8A8", "W4A8", "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16",
           "MXFP4A16", "MXFP8A16"]
BF16 = np.dtype(ml_dtypes.bfloat16)


def write_raw(path, tensors: dict[str, np.ndarray], names: dict[str, str] | None = None) -> None:
    """A safetensors file written here (data in the given order, not the crate's), independent of nbquant's writer."""
    names = names or {}
    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        dtype = names.get(name) or {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "int32": "I32",
                                    "float8_e4m3fn": "F8_E4M3", "int8": "I8"}[str(a.dtype)]
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def heavy(rng, shape, dtype=BF16) -> np.ndarray:
    """Student-t (df 3) weights with a magnitude per row."""
    rows = np.exp(rng.uniform(-2.0, 2.0, (shape[0], 1))).astype(np.float32)
    return (rng.standard_t(3, shape).astype(np.float32) * rows * np.float32(0.02)).astype(dtype)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A Llama-shaped checkpoint cut into many small shards, so that q/k/v and gate/up partners are split."""
    d = tmp_path_factory.mktemp("llama")
    write_synthetic_checkpoint(d, hidden=256, intermediate=512, layers=2, vocab=96, shard_bytes=300_000)
    (d / "tokenizer.json").write_text('{"model": {}}')
    return d


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """Odd shapes (fp8 schemes only need none of them to divide), a float16 and a float32 weight, no index."""
    d = tmp_path_factory.mktemp("odd")
    rng = np.random.default_rng(1)
    write_raw(d / "model.safetensors", {
        "a.proj.weight": heavy(rng, (300, 200)), "b.proj.weight": heavy(rng, (129, 257), np.float16),
        "c.proj.weight": heavy(rng, (5, 7), np.float32), "c.proj.bias": np.ones(5, np.float32),
    })
    (d / "config.json").write_text('{"model_type": "odd"}')
    return d


def tensors_of(folder) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            sf = SafetensorsFile(os.path.join(folder, f))
            out.update({n: np.asarray(sf.tensor(n)) for n in sf.entries})
    return out


# --- an independent decoder of the compressed-tensors format -------------------------------------------------

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e4m3(bits: np.ndarray) -> np.ndarray:
    """float64 values of float8_e4m3fn bytes (bias 7, subnormals, 0x7f/0xff NaN)."""
    b = bits.astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e, m = (b >> 3) & 0xF, b & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    return np.where((b & 0x7F) == 0x7F, np.nan, sign * v)


def unpack_words(words: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Codes of ``bits`` bits packed densely, the first in the lowest bits of little-endian int32 words (per row)."""
    stream = np.unpackbits(np.ascontiguousarray(words).view(np.uint8), axis=-1, bitorder="little")
    codes = stream[..., : count * bits].reshape(*words.shape[:-1], count, bits)
    return (codes.astype(np.int64) << np.arange(bits)).sum(-1)


def decode(t: dict[str, np.ndarray], scheme: str, dtype: np.dtype, shape) -> np.ndarray:
    """The weight the format describes, each value computed exactly (float64) and rounded once to ``dtype``."""
    s = get_scheme(scheme)
    n, k = shape
    if s.kind == "int":
        scale = t["weight_scale"].astype(np.float64)
        if s.packed:
            q = unpack_words(t["weight_packed"], s.bits, k) - (1 << (s.bits - 1))
            assert list(t["weight_shape"]) == [n, k]
        else:
            q = t["weight"].astype(np.int64)
        zp = 0
        if not s.symmetric:
            zp = (unpack_words(t["weight_zero_point"].T, s.bits, n) - (1 << (s.bits - 1))).T
        g = k if s.strategy == "channel" else s.group_size
        x = (q - np.repeat(zp, g, axis=1) if not s.symmetric else q) * np.repeat(scale, g, axis=1)
    elif s.kind == "fp8":
        scale = t["weight_scale"].astype(np.float64)
        if s.strategy == "block":
            scale = np.repeat(np.repeat(scale, 128, axis=0), 128, axis=1)[:n, :k]
        x = e4m3(t["weight"].view(np.uint8)) * scale
    else:
        if s.bits == 4:
            nib = np.stack([t["weight_packed"] & 0xF, t["weight_packed"] >> 4], -1).reshape(n, k).astype(np.int64)
            q = np.where(nib & 8, -1.0, 1.0) * np.array(E2M1)[nib & 7]
        else:
            q = e4m3(t["weight"].view(np.uint8))
        if s.kind == "nvfp4":
            d = (e4m3(t["weight_scale"].view(np.uint8)).astype(np.float32) /
                 t["weight_global_scale"].astype(np.float32)[0]).astype(np.float64)
            x = q * np.repeat(d, 16, axis=1)
        else:
            x = q * np.repeat(2.0 ** (t["weight_scale"].astype(np.float64) - 127), 32, axis=1)
    return x.astype(dtype)


def module_tensors(out: dict, module: str) -> dict[str, np.ndarray]:
    return {k[len(module) + 1:]: v for k, v in out.items() if k.startswith(module + ".")}


@pytest.mark.parametrize("scheme", SCHEMES)
def test_independent_decoder_equals_nbquant_dequantization(llama, tmp_path, scheme):
    r = convert(llama, tmp_path / "out", scheme, ignore=["lm_head"], progress=False)
    out = tensors_of(tmp_path / "out")
    src = tensors_of(llama)
    assert len(r.quantized) == 2 * 7  # every Linear weight; the embedding (default ignore), lm_head and norms kept
    for t in r.quantized:
        module = t.name.rpartition(".")[0]
        mine = module_tensors(out, module)
        ref = decode(mine, scheme, BF16, t.shape)
        got = dequantize_weight(mine, get_scheme(scheme), BF16)
        assert ref.view(np.uint16).tobytes() == got.view(np.uint16).tobytes(), t.name
        x = src[t.name].astype(np.float32)
        err = got.astype(np.float32) - x
        sqnr = 10 * math.log10(float((x.astype(np.float64) ** 2).sum() / (err.astype(np.float64) ** 2).sum()))
        assert sqnr > {2: 2, 4: 12, 8: 25}[get_scheme(scheme).bits], (t.name, sqnr)


@pytest.mark.parametrize("scheme", ["FP8_DYNAMIC", "FP8_BLOCK", "W8A8"])
def test_odd_shapes_float16_float32(odd, tmp_path, scheme):
    r = convert(odd, tmp_path / "out", scheme, progress=False)
    out = tensors_of(tmp_path / "out")
    src = tensors_of(odd)
    assert sorted(t.name for t in r.quantized) == ["a.proj.weight", "b.proj.weight", "c.proj.weight"]
    for t in r.quantized:
        module = t.name.rpartition(".")[0]
        mine = module_tensors(out, module)
        dtype = src[t.name].dtype
        assert mine["weight_scale"].dtype == dtype  # compressed-tensors keeps the scale in the weight's dtype
        ref = decode(mine, scheme, dtype, t.shape)
        got = dequantize_weight(mine, get_scheme(scheme), dtype)
        assert ref.tobytes() == got.tobytes(), t.name
    assert out["c.proj.bias"].tobytes() == src["c.proj.bias"].tobytes()
    if scheme == "FP8_BLOCK":
        assert out["a.proj.weight_scale"].shape == (3, 2) and out["b.proj.weight_scale"].shape == (2, 3)


def test_config_index_and_copied_files(llama, tmp_path):
    convert(llama, tmp_path / "out", "W4A16_ASYM", ignore=["lm_head", "re:.*embed"], progress=False)
    dst = tmp_path / "out"
    config = json.loads((dst / "config.json").read_text())
    q = config.pop("quantization_config")
    assert config == json.loads((llama / "config.json").read_text())
    assert q["quant_method"] == "compressed-tensors" and q["format"] == "pack-quantized"
    assert q["ignore"] == ["lm_head", "re:.*embed"] and q["quantization_status"] == "compressed"
    w = q["config_groups"]["W4A16_ASYM"]["weights"]
    assert (w["num_bits"], w["group_size"], w["strategy"], w["symmetric"], w["zp_dtype"]) == \
        (4, 128, "group", False, "torch.int8")
    assert (dst / "config.json").read_text() == json.dumps(dict(config, quantization_config=q), indent=2,
                                                           sort_keys=True)
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    out = tensors_of(dst)
    assert sorted(index["weight_map"]) == sorted(out)
    assert index["metadata"]["total_size"] == sum(a.nbytes for a in out.values())
    for name, shard in index["weight_map"].items():
        assert name in SafetensorsFile(str(dst / shard)).entries
    assert (dst / "tokenizer.json").read_text() == (llama / "tokenizer.json").read_text()
    assert (dst / "generation_config.json").exists()
    assert "model.embed_tokens.weight" in out and "lm_head.weight" in out
    assert "model.layers.0.mlp.up_proj.weight_zero_point" in out
    assert not [f for f in os.listdir(dst) if f.startswith(".")]


def test_nvfp4_partners_share_a_global_scale_across_shards(llama, tmp_path):
    src_index = json.loads((llama / "model.safetensors.index.json").read_text())["weight_map"]
    p = "model.layers.0."
    assert src_index[p + "self_attn.q_proj.weight"] != src_index[p + "self_attn.v_proj.weight"] or \
        src_index[p + "mlp.gate_proj.weight"] != src_index[p + "mlp.up_proj.weight"]  # partners split
    convert(llama, tmp_path / "out", "NVFP4A16", progress=False)
    out = tensors_of(tmp_path / "out")
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())["weight_map"]
    src = tensors_of(llama)
    for layer in (0, 1):
        for group in (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")):
            kind = "self_attn" if group[0] == "q_proj" else "mlp"
            names = [f"model.layers.{layer}.{kind}.{m}" for m in group]
            scales = {out[n + ".weight_global_scale"].tobytes() for n in names}
            assert len(scales) == 1
            shards = {index[n + ".weight_packed"] for n in names}
            assert shards == {src_index[names[0] + ".weight"]}  # partners moved to the primary's shard
            amax = max(np.abs(src[n + ".weight"].astype(np.float32)).max() for n in names)
            r = np.float32(1 / np.float32(amax)).astype(ml_dtypes.bfloat16).astype(np.float32)
            assert out[names[0] + ".weight_global_scale"][0] == np.float32(r * 2688).astype(BF16).astype(np.float32)


def test_matching_norms_ignores_and_patterns(llama, tmp_path):
    import nbquant

    threads = nbquant.get_num_threads()
    r = convert(llama, tmp_path / "out", "W8A16", ignore=["re:model\\.layers\\.1\\.", "lm_head"], progress=False,
                workers=1, default_ignore=False)  # model_free_ptq's matching: the embedding is quantized
    assert nbquant.get_num_threads() == threads  # workers= lasts for the conversion only
    quantized = {t.name for t in r.quantized}
    assert "model.embed_tokens.weight" in quantized and "model.layers.0.mlp.down_proj.weight" in quantized
    assert not any(n.startswith("model.layers.1.") for n in quantized)
    reasons = {s["name"]: s["reason"] for s in r.skipped}
    assert reasons["model.norm.weight"] == "module name ends with norm (automatic ignore)"
    assert reasons["lm_head.weight"] == "ignored (lm_head)"
    assert reasons["model.layers.1.mlp.up_proj.weight"].startswith("ignored (re:")


def test_negative_zero_is_coded_as_compressed_tensors_does(tmp_path):
    """compressed-tensors' e2m1 cast multiplies by sign(x): -0.0 gets the +0 code; a tiny negative keeps -0."""
    x = np.full((2, 32), 0.5, np.float32)
    x[0, 0], x[0, 1], x[1, 2], x[1, 4], x[1, 5] = -0.0, -1e-6, -0.0, -0.0, -0.0
    src = small_checkpoint(tmp_path / "src", {"m.weight": x.astype(BF16)})
    for scheme in ("NVFP4A16", "MXFP4A16"):
        convert(src, tmp_path / scheme, scheme, progress=False)
        packed = tensors_of(tmp_path / scheme)["m.weight_packed"]
        assert packed[0, 0] & 0xFF == 0x80 and packed[1, 1] & 0x0F == 0x0, scheme  # -0.0 → 0, -1e-6 → 8
        assert packed[1, 2] == 0, scheme  # two -0.0 in one byte


# --- bad inputs: one line naming the file or tensor, exit status 1, no partial shard ------------------------


def cli(*args) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "nbquant", "convert", *map(str, args)], capture_output=True,
                          text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return proc.returncode, proc.stderr


def assert_clean(dst) -> None:
    if os.path.isdir(dst):
        left = os.listdir(dst)
        assert not [f for f in left if f.endswith(".partial")], left


def expect_error(src, dst, scheme="W4A16", match="", **kw) -> str:
    with pytest.raises(ConvertError) as e:
        convert(src, dst, scheme, progress=False, **kw)
    msg = str(e.value)
    assert "\n" not in msg and match in msg, msg
    assert_clean(dst)
    return msg


def small_checkpoint(d, tensors=None, config="{}"):
    os.makedirs(d, exist_ok=True)
    write_raw(os.path.join(d, "model.safetensors"), tensors or {"m.weight": np.ones((4, 128), BF16)})
    if config is not None:
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(config)
    return d


def test_missing_source_and_cli_exit_status(tmp_path):
    expect_error(tmp_path / "nope", tmp_path / "out", match=str(tmp_path / "nope") + ": no such directory")
    (tmp_path / "file").write_text("x")
    expect_error(tmp_path / "file", tmp_path / "out", match="not a directory")
    status, err = cli(tmp_path / "nope", tmp_path / "out", "--scheme", "W4A16")
    assert status == 1 and err.count("\n") == 1 and "no such directory" in err


def test_no_safetensors_and_no_config(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config.json").write_text("{}")
    expect_error(tmp_path / "a", tmp_path / "out", match="no *.safetensors files")
    small_checkpoint(tmp_path / "b", config=None)
    expect_error(tmp_path / "b", tmp_path / "out", match="config.json: missing")


@pytest.mark.parametrize("damage", ["short", "length", "json", "offsets", "size", "dtype-shape"])
def test_damaged_header(tmp_path, damage):
    d = small_checkpoint(tmp_path / "c")
    path = os.path.join(d, "model.safetensors")
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    if damage == "short":
        data = data[:5]
    elif damage == "length":
        data = struct.pack("<Q", 10**9) + data[8:]
    elif damage == "json":
        data = data[:8] + b"{" * n + data[8 + n:]
    else:
        info = header["m.weight"]
        if damage == "offsets":
            info["data_offsets"] = [0, 10**6]
        elif damage == "size":
            info["shape"] = [4, 129]
        else:
            info["shape"] = "4x128"
        text = json.dumps(header).encode()
        data = struct.pack("<Q", len(text)) + text + data[8 + n:]
    open(path, "wb").write(data)
    expect_error(d, tmp_path / "out", match=f"{path}: damaged safetensors header")


def test_index_naming_a_missing_shard(tmp_path):
    d = small_checkpoint(tmp_path / "c")
    (tmp_path / "c" / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"m.weight": "model.safetensors", "x.weight": "model-2.safetensors"}}))
    expect_error(d, tmp_path / "out", match="model-2.safetensors: missing")


@pytest.mark.parametrize(("tensor", "scheme", "match"), [
    (np.ones((4, 128), np.int32), "W4A16", "tensor m.weight: dtype int32 is not supported"),
    (np.ones((4, 128), ml_dtypes.float8_e4m3fn), "FP8_DYNAMIC", "dtype float8_e4m3fn is not supported"),
    (np.ones((4, 100), BF16), "W4A16", "K=100 is not a multiple of the group size 128"),
    (np.ones((4, 40), BF16), "NVFP4A16", "K=40 is not a multiple of the group size 16"),
    (np.ones((4, 48), BF16), "MXFP4A16", "K=48 is not a multiple of the group size 32"),
    (np.ones(128, BF16), "W4A16", "expected a 2-D Linear weight, got shape (128,)"),
    (np.ones((2, 4, 128), BF16), "FP8_DYNAMIC", "expected a 2-D Linear weight"),
])
def test_weight_the_scheme_cannot_take(tmp_path, tensor, scheme, match):
    d = small_checkpoint(tmp_path / "c", {"m.weight": tensor})
    peer = {"default_ignore": False} if tensor.ndim != 2 else {}  # by default a weight not 2-D is kept
    msg = expect_error(d, tmp_path / "out", scheme, match=match, **peer)
    assert "m.weight" in msg
    assert not os.path.exists(tmp_path / "out")  # every weight is checked before anything is written


def test_nan_weight_and_unknown_scheme(tmp_path):
    x = np.ones((4, 128), np.float32)
    x[1, 3] = np.nan
    d = small_checkpoint(tmp_path / "c", {"m.weight": x.astype(BF16)})
    expect_error(d, tmp_path / "out", match="tensor m.weight holds NaN or inf")
    expect_error(d, tmp_path / "out2", "W3A16", match="scheme W3A16 is not supported")
    expect_error(d, tmp_path / "out3", "Q4_K", match="unknown scheme 'Q4_K'")


def test_existing_destination_needs_overwrite(tmp_path):
    d = small_checkpoint(tmp_path / "c")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    expect_error(d, tmp_path / "out", match="exists and is not empty; pass --overwrite")
    status, err = cli(d, tmp_path / "out", "--scheme", "W4A16")
    assert status == 1 and "--overwrite" in err
    expect_error(d, tmp_path / "out", match="holds files no nbquant run wrote: notes.txt", overwrite=True)
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"  # --overwrite removes only nbquant's files
    expect_error(d, d, match="the destination is the source folder", overwrite=True)
    expect_error(d, tmp_path / "c" / "sub", match="the destination is inside the source folder")


def test_no_space_left(tmp_path, monkeypatch):
    d = small_checkpoint(tmp_path / "c")
    monkeypatch.setattr("nbquant.convert.safetensors._free_bytes", lambda path: 100)
    expect_error(d, tmp_path / "out", match="No space left on device")
    assert not [f for f in os.listdir(tmp_path / "out") if f.endswith(".safetensors")]

    def full(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.undo()
    monkeypatch.setattr("nbquant.convert.safetensors.os.pwrite", full)
    expect_error(d, tmp_path / "out2", match="model.safetensors.partial: cannot write: No space left on device")
    assert not [f for f in os.listdir(tmp_path / "out2") if "safetensors" in f]


def test_shards_sync_in_the_background_and_a_failed_sync_leaves_nothing(llama, tmp_path, monkeypatch):
    """Every ``disksync.SYNC_BYTES`` written, a shard's data go to a second thread to ``fdatasync`` (the disk writes
    overlap the conversion); the files are the same bytes, and a sync that fails ends the run with one line and no
    shard, temporary files included."""
    from nbquant.convert import disksync

    convert(llama, tmp_path / "whole", "W4A16", progress=False)
    synced = []
    monkeypatch.setattr(disksync, "SYNC_BYTES", 1 << 12)
    monkeypatch.setattr(disksync.os, "fdatasync", lambda fd: synced.append(fd), raising=False)
    convert(llama, tmp_path / "out", "W4A16", progress=False)
    shards = sorted(f for f in os.listdir(tmp_path / "whole") if f.endswith(".safetensors"))
    assert len(synced) >= 2 * len(shards)
    assert [(tmp_path / "out" / f).read_bytes() for f in shards] == [(tmp_path / "whole" / f).read_bytes()
                                                                      for f in shards]

    def failing(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(disksync.os, "fdatasync", failing, raising=False)
    expect_error(llama, tmp_path / "bad", match=".partial: cannot write: Input/output error")
    assert not [f for f in os.listdir(tmp_path / "bad") if "safetensors" in f]


# --- interrupted runs ---------------------------------------------------------------------------------------


def test_interrupted_run_resumes_and_never_mixes(llama, tmp_path, monkeypatch):
    clean = tmp_path / "clean"
    convert(llama, clean, "W4A16", progress=False)
    calls = {"n": 0}
    original = run_module.quantize_weight

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 12:
            raise KeyboardInterrupt
        return original(*args, **kwargs)
    monkeypatch.setattr(run_module, "quantize_weight", interrupted)
    dst = tmp_path / "dst"
    with pytest.raises(KeyboardInterrupt):
        convert(llama, dst, "W4A16", progress=False)
    monkeypatch.undo()
    left = os.listdir(dst)
    assert not [f for f in left if f.endswith(".partial")]
    finished = [f for f in left if f.endswith(".safetensors")]
    assert finished and "config.json" not in left and "model.safetensors.index.json" not in left
    for f in finished:  # whatever looks finished is finished
        assert open(dst / f, "rb").read() == open(clean / f, "rb").read()
    expect_error(llama, dst, "W8A16", match="exists and is not empty")  # another conversion: not mixed in
    r = convert(llama, dst, "W4A16", progress=False)  # the same one: resumed
    assert sorted(r.resumed_shards) == sorted(finished)
    assert sorted(os.listdir(dst)) == sorted(os.listdir(clean))
    for f in os.listdir(clean):
        assert open(dst / f, "rb").read() == open(clean / f, "rb").read(), f
    r = convert(llama, dst, "W8A16", overwrite=True, progress=False)
    assert not r.resumed_shards and json.loads((dst / "config.json").read_text())[
        "quantization_config"]["config_groups"]["W8A16"]


# --- the report, the progress bar, the CLI, memory, imports ------------------------------------------------


def test_report_json_and_table(llama, tmp_path):
    status, err = cli(llama, tmp_path / "out", "--scheme", "FP8_DYNAMIC", "--ignore", "lm_head", "--report",
                      tmp_path / "r.json", "--quiet")
    assert status == 0 and err == ""
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["scheme"] == "FP8_DYNAMIC" and rep["seconds"] > 0 and rep["mb_per_s"] > 0
    t = {q["name"]: q for q in rep["quantized"]}["model.layers.0.mlp.up_proj.weight"]
    assert t["shape"] == [512, 256] and t["sqnr_db"] > 25 and 0 < t["max_abs_err"] < 0.1 and t["rows_checked"]
    assert {"name": "lm_head.weight", "reason": "ignored (lm_head)"} in rep["skipped"]
    import contextlib
    import io

    from nbquant.cli import main
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["convert", str(llama), str(tmp_path / "o2"), "--scheme", "W4A16", "--full-check"]) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["tensor", "scheme", "shape", "SQNR", "dB", "max", "abs", "err"]
    assert any(line.startswith("kept as they are: 5 tensor(s): module name ends with norm") for line in lines)
    assert "MB/s" in lines[-1]


def test_progress_bar(tmp_path):
    from nbquant.convert.report import Progress

    class Tty:
        def __init__(self):
            self.text = ""

        def isatty(self):
            return True

        def write(self, s):
            self.text += s

        def flush(self):
            pass
    tty = Tty()
    bar = Progress(4, 4 << 20, stream=tty)
    for _ in range(4):
        bar.update(1 << 20)
    bar.close()
    last = tty.text.strip().split("\r")[-1]
    assert "4/4 tensors" in last and "4/4 MiB" in last and "MiB/s" in last and "ETA" in last
    quiet = Tty()
    quiet.isatty = lambda: False
    Progress(1, 1, stream=quiet).update(1)
    assert quiet.text == ""


def test_one_tensor_at_a_time(tmp_path):
    """Peak traced allocation stays a few times the largest tensor, far below the checkpoint."""
    import tracemalloc
    d = tmp_path / "big"
    write_synthetic_checkpoint(d, hidden=512, intermediate=1024, layers=6, vocab=512, shard_bytes=4 << 20)
    total = sum(os.path.getsize(d / f) for f in os.listdir(d) if f.endswith(".safetensors"))
    largest = 1024 * 512 * 2
    tracemalloc.start()
    convert(d, tmp_path / "out", "NVFP4A16", progress=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 3 * largest + (1 << 20) < total / 3, (peak, largest, total)


def test_torch_is_never_imported_and_import_nbquant_stays_light(llama, tmp_path):
    code = ("import sys, nbquant; assert 'nbquant.convert' not in sys.modules; "
            "from nbquant.convert import convert; "
            f"convert({str(llama)!r}, {str(tmp_path / 'o')!r}, 'NVFP4A16', progress=False); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True,
                   cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_writer_layout_matches_the_crate(tmp_path):
    """Sorted by descending dtype then name; compact header padded with spaces to 8 bytes."""
    w = ShardWriter(str(tmp_path / "x.safetensors"), [("b", "U8", (3,)), ("a", "U8", (1,)), ("z", "F32", (1,)),
                                                      ("m", "I64", (1,))])
    for name, n, dt in (("b", 3, np.uint8), ("a", 1, np.uint8), ("z", 1, np.float32), ("m", 1, np.int64)):
        w.write(name, np.zeros(n, dt))
    w.close()
    data = open(tmp_path / "x.safetensors", "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    assert n % 8 == 0 and data[8:8 + n].decode().endswith("}" + " " * (n - len(data[8:8 + n].decode().rstrip())))
    assert list(json.loads(data[8:8 + n])) == ["m", "z", "a", "b"]
    assert len(data) == 8 + n + 8 + 4 + 1 + 3


def test_demo_ends_with_a_conversion(capsys):
    from nbquant import cli

    assert cli.main(["demo", "--size", "16x96", "--backend", "cpu", "--repeats", "1"]) == 0
    out = capsys.readouterr().out.split("\nconvert: nbquant convert ", 1)[1].split("\ngguf: ", 1)[0].splitlines()
    assert out[0].split("  (")[0].endswith("--scheme W4A16") and "float32 checkpoint" in out[0]
    assert out[1].split()[:3] == ["tensor", "scheme", "shape"]
    assert out[-1].startswith("14 quantized, 7 kept")  # the embedding and lm_head kept by default
    assert cli.main(["demo", "--size", "16x96", "--backend", "cpu", "--repeats", "1", "--no-convert"]) == 0
    assert "convert:" not in capsys.readouterr().out


def test_fused_moe_experts_are_split_per_expert(tmp_path):
    """llm-compressor's split_fused_moe_experts: a 3-D gate_up_proj / down_proj becomes one weight per expert."""
    rng = np.random.default_rng(5)
    gate_up, down = heavy(rng, (3 * 256, 256)).reshape(3, 256, 256), heavy(rng, (3 * 64, 128))
    d = small_checkpoint(tmp_path / "moe", {"l.mlp.experts.gate_up_proj": gate_up,
                                            "l.mlp.experts.down_proj": down.reshape(3, 64, 128),
                                            "l.mlp.experts.gate_up_proj_bias": np.ones((3, 256), BF16)})
    r = convert(d, tmp_path / "out", "W8A16", ignore=["re:.*2\\.down_proj"], progress=False)
    assert sorted(t.name for t in r.quantized) == sorted(
        [f"l.mlp.experts.{e}.{p}_proj.weight" for e in range(3) for p in ("gate", "up")] +
        ["l.mlp.experts.0.down_proj.weight", "l.mlp.experts.1.down_proj.weight"])
    out = tensors_of(tmp_path / "out")
    assert out["l.mlp.experts.2.down_proj.weight"].tobytes() == down[128:].tobytes()  # kept, but split
    assert out["l.mlp.experts.gate_up_proj_bias"].shape == (3, 256)
    got = dequantize_weight(module_tensors(out, "l.mlp.experts.1.up_proj"), get_scheme("W8A16"), BF16)
    ref = gate_up[1, 128:].astype(np.float32)
    step = np.repeat(np.abs(ref).reshape(128, 2, 128).max(-1) / 127, 128, axis=1)
    steps = np.abs(got.astype(np.float32) - ref) / step
    assert steps.max() <= 1.0  # within a step of its group's int8 grid (bfloat16 scales and quotients)
