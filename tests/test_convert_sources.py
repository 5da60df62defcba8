"""``nbquant convert`` from quantized checkpoints: detection, BF16/F16/F32 targets, exact re-encodings, bad configs.

Sources are nbquant's own compressed-tensors output of a small synthetic checkpoint (every format it
writes, an MoE one too), hand-made per-tensor FP8 and DeepSeek-style ``weight_scale_inv`` checkpoints
with ragged blocks. Exact re-encodings are proven lossless: the BF16 decoding of the target equals the
source's bit for bit. compressed-tensors' own decoder is the parity tier's (test_parity_sources.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from nbquant.convert import ConvertError, SafetensorsFile, convert, dequantize_weight, get_scheme
from nbquant.convert.safetensors import ShardWriter, dtype_name
from nbquant.convert.synthetic import write_synthetic_checkpoint

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)


def tensors_of(folder) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            sf = SafetensorsFile(os.path.join(folder, f))
            out.update({n: np.asarray(sf.tensor(n)) for n in sf.entries})
    return out


def raw(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> str:
    d = str(tmp_path_factory.mktemp("plain") / "src")
    write_synthetic_checkpoint(d, hidden=128, intermediate=256, layers=1, vocab=64, shard_bytes=150_000)
    return d


@pytest.fixture(scope="module")
def quantized(plain, tmp_path_factory):
    """scheme → nbquant's compressed-tensors checkpoint of ``plain`` (made once per scheme)."""
    root = tmp_path_factory.mktemp("quantized")
    made: dict[str, str] = {}

    def get(scheme: str) -> str:
        if scheme not in made:
            made[scheme] = str(root / scheme)
            convert(plain, made[scheme], scheme, progress=False)
        return made[scheme]
    return get


def _bf16(src, tmp_path, name="bf16") -> dict[str, np.ndarray]:
    convert(src, tmp_path / name, "BF16", progress=False)
    return tensors_of(tmp_path / name)


@pytest.mark.parametrize("scheme", ["W4A16", "W4A16_ASYM", "W8A8", "W4A8", "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16",
                                    "MXFP4A16", "MXFP8A16"])
def test_bf16_is_the_codec_decoding_under_the_original_names(plain, quantized, tmp_path, scheme):
    src = quantized(scheme)
    r = convert(src, tmp_path / "out", "BF16", progress=False)
    out, q, orig = tensors_of(tmp_path / "out"), tensors_of(src), tensors_of(plain)
    assert sorted(out) == sorted(orig)  # the original names; scales, zero points, shapes gone
    assert {t.encoding for t in r.quantized} == {"decoded"} and len(r.quantized) == 7
    for t in r.quantized:
        module = t.name.rpartition(".")[0]
        mine = {k[len(module) + 1:]: v for k, v in q.items() if k.startswith(module + ".")}
        assert raw(out[t.name]) == raw(dequantize_weight(mine, get_scheme(scheme), BF16)), t.name
        assert out[t.name].dtype == BF16
    for name in set(orig) - {t.name for t in r.quantized}:
        assert raw(out[name]) == raw(orig[name]), name  # the rest as it was
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config == json.loads(open(os.path.join(plain, "config.json")).read())  # everything else kept
    assert sorted(os.listdir(tmp_path / "out")) == sorted(os.listdir(src))


@pytest.mark.parametrize("target,dtype", [("F16", np.float16), ("F32", np.float32)])
def test_f16_f32_round_once_from_float32(quantized, tmp_path, target, dtype):
    src = quantized("FP8_DYNAMIC")
    convert(src, tmp_path / "out", target, progress=False)
    out, q = tensors_of(tmp_path / "out"), tensors_of(src)
    name = "model.layers.0.mlp.up_proj"
    want = q[name + ".weight"].astype(np.float32) * q[name + ".weight_scale"].astype(np.float32)
    assert raw(out[name + ".weight"]) == raw(want.astype(dtype))


EXACT = [("W4A16", "W4A16"), ("W4A16_ASYM", "W4A16_ASYM"), ("W8A8", "W8A16"), ("W4A8", "W4A16"), ("W2A16", "W4A16"),
         ("W4A16", "W8A16"), ("FP8_DYNAMIC", "FP8_DYNAMIC"), ("FP8_BLOCK", "FP8_BLOCK"), ("NVFP4A16", "NVFP4A16"),
         ("MXFP4A16", "MXFP4A16"), ("MXFP8A16", "MXFP8")]


@pytest.mark.parametrize("source,target", EXACT)
def test_exact_reencodings_are_lossless(quantized, tmp_path, source, target):
    src = quantized(source)
    r = convert(src, tmp_path / "t", target, progress=False)
    assert {t.encoding for t in r.quantized} == {"exact"}
    assert all(t.sqnr_db == np.inf and t.max_abs_err == 0 for t in r.quantized)
    a, b = _bf16(src, tmp_path, "a"), _bf16(tmp_path / "t", tmp_path, "b")
    assert {n: raw(v) for n, v in a.items()} == {n: raw(v) for n, v in b.items()}
    if (get_scheme(source).format, get_scheme(source).weights) == (get_scheme(target).format,
                                                                  get_scheme(target).weights):  # the very tensors
        target_tensors = tensors_of(tmp_path / "t")
        assert {n: raw(v) for n, v in tensors_of(src).items()} == {n: raw(v) for n, v in target_tensors.items()}


def test_requantized_equals_quantizing_the_decoded_checkpoint(plain, tmp_path):
    """MoE (Qwen3 layout), fused NVFP4 global scales: W4A16 → NVFP4A16 is BF16 then NVFP4A16, byte for byte."""
    moe = tmp_path / "moe"
    write_synthetic_checkpoint(moe, hidden=128, intermediate=128, layers=1, vocab=64, moe="qwen3_moe", experts=2,
                               shard_bytes=60_000)
    convert(moe, tmp_path / "w4", "W4A16", progress=False)
    r = convert(tmp_path / "w4", tmp_path / "direct", "NVFP4A16", progress=False)
    assert {t.encoding for t in r.quantized} == {"requantized"}
    assert all(10 < t.sqnr_db < 40 for t in r.quantized)
    convert(tmp_path / "w4", tmp_path / "bf16", "BF16", progress=False)
    convert(tmp_path / "bf16", tmp_path / "two-step", "NVFP4A16", progress=False)
    for f in sorted(os.listdir(tmp_path / "direct")):
        if f.endswith((".safetensors", ".json")):
            assert (tmp_path / "direct" / f).read_bytes() == (tmp_path / "two-step" / f).read_bytes(), f


# --- hand-made sources: per-tensor FP8 (compressed-tensors) and DeepSeek-style weight_scale_inv -------------------


def _write(folder, tensors: dict[str, np.ndarray], qc: dict) -> str:
    os.makedirs(folder, exist_ok=True)
    _write_shard(folder, tensors)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "torch_dtype": "bfloat16", "quantization_config": qc}, f)
    return str(folder)


def _write_shard(folder, tensors):
    w = ShardWriter(os.path.join(folder, "model.safetensors"),
                    [(n, dtype_name(a.dtype), a.shape) for n, a in tensors.items()])
    for n, a in tensors.items():
        w.write(n, a)
    w.close()


def _fp8_codes(rng, shape) -> np.ndarray:
    codes = rng.integers(0, 256, shape, dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0  # no NaN codes
    return codes.view(E4M3)


DEEPSEEK = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def deepseek(folder, shapes=((200, 300), (256, 128))) -> tuple[str, dict]:
    rng = np.random.default_rng(3)
    t: dict[str, np.ndarray] = {"model.norm.weight": np.ones(128, BF16)}
    for i, (n, k) in enumerate(shapes):
        m = f"model.layers.0.mlp.p{i}"
        t[m + ".weight"] = _fp8_codes(rng, (n, k))
        t[m + ".weight_scale_inv"] = np.exp2(rng.uniform(-12, -4, (-(-n // 128), -(-k // 128)))).astype(np.float32) \
            * np.float32(1.2345)
    return _write(folder, t, DEEPSEEK), t


def weight_dequant(codes: np.ndarray, s: np.ndarray, block=128) -> np.ndarray:
    """DeepSeek-V3's ``weight_dequant``: each code times its block's scale in float32, then bfloat16."""
    full = np.repeat(np.repeat(s, block, 0), block, 1)[:codes.shape[0], :codes.shape[1]]
    return (codes.astype(np.float32) * full).astype(BF16)


def test_deepseek_fp8_block_to_bf16_ragged_blocks(tmp_path):
    src, t = deepseek(tmp_path / "ds")
    r = convert(src, tmp_path / "out", "BF16", progress=False)
    out = tensors_of(tmp_path / "out")
    assert sorted(out) == ["model.layers.0.mlp.p0.weight", "model.layers.0.mlp.p1.weight", "model.norm.weight"]
    for i in range(2):
        m = f"model.layers.0.mlp.p{i}"
        assert raw(out[m + ".weight"]) == raw(weight_dequant(t[m + ".weight"], t[m + ".weight_scale_inv"]))
    assert "quantization_config" not in json.loads((tmp_path / "out" / "config.json").read_text())
    assert [q.shape for q in r.quantized] == [(200, 300), (256, 128)]


def test_qwen3_fp8_bfloat16_scale_inv(tmp_path):
    src, t = deepseek(tmp_path / "ds")
    t = {k: v.astype(BF16) if k.endswith("_scale_inv") else v for k, v in t.items()}
    bf = tmp_path / "bf"
    _write(bf, t, DEEPSEEK)
    out = _bf16(bf, tmp_path)
    m = "model.layers.0.mlp.p0"
    want = weight_dequant(t[m + ".weight"], t[m + ".weight_scale_inv"].astype(np.float32))
    assert raw(out[m + ".weight"]) == raw(want)


def test_deepseek_to_fp8_block_is_exact_float32_scales(tmp_path):
    src, t = deepseek(tmp_path / "ds")
    r = convert(src, tmp_path / "fp8", "FP8_BLOCK", progress=False)
    assert {q.encoding for q in r.quantized} == {"exact"}
    out = tensors_of(tmp_path / "fp8")
    m = "model.layers.0.mlp.p0"
    assert raw(out[m + ".weight"]) == raw(t[m + ".weight"])
    assert raw(out[m + ".weight_scale"]) == raw(t[m + ".weight_scale_inv"])  # F32, as they were
    assert _bf16(src, tmp_path, "a").keys() == _bf16(tmp_path / "fp8", tmp_path, "b").keys()
    a, b = tensors_of(tmp_path / "a"), tensors_of(tmp_path / "b")
    assert all(raw(a[n]) == raw(b[n]) for n in a)
    r = convert(src, tmp_path / "dyn", "FP8_DYNAMIC", progress=False)  # a scale per row cannot hold the blocks
    assert {q.encoding for q in r.quantized} == {"requantized"} and r.quantized[0].dtype == "bfloat16"


def per_tensor_fp8(folder) -> tuple[str, dict]:
    rng = np.random.default_rng(5)
    t = {"model.layers.0.mlp.up_proj.weight": _fp8_codes(rng, (256, 256)),
         "model.layers.0.mlp.up_proj.weight_scale": np.array([0.0123], BF16),
         "model.layers.0.mlp.up_proj.input_scale": np.array([0.5], BF16)}
    group = {"targets": ["Linear"], "format": "float-quantized", "weights": {
        "num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True, "dynamic": False}}
    qc = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": group},
          "ignore": ["lm_head"]}
    return _write(folder, t, qc), t


@pytest.mark.parametrize("target", ["FP8_DYNAMIC", "FP8_BLOCK"])
def test_per_tensor_fp8_is_exact_in_per_channel_and_block(tmp_path, target):
    src, t = per_tensor_fp8(tmp_path / "pt")
    r = convert(src, tmp_path / "t", target, progress=False)
    assert {q.encoding for q in r.quantized} == {"exact"}
    out = tensors_of(tmp_path / "t")
    assert "model.layers.0.mlp.up_proj.input_scale" not in out
    scales = out["model.layers.0.mlp.up_proj.weight_scale"]
    assert set(scales.ravel().tolist()) == {float(np.float32(BF16.type(0.0123)))}
    a, b = _bf16(src, tmp_path, "a"), _bf16(tmp_path / "t", tmp_path, "b")
    assert raw(a["model.layers.0.mlp.up_proj.weight"]) == raw(b["model.layers.0.mlp.up_proj.weight"])


# --- refusals: one line, exit status 1, no traceback ------------------------------------------------------------


def _group(**weights):
    w = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True}
    w.update(weights)
    return {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": w}}}


BAD = [
    ({"quant_method": "gptq", "bits": 4}, "quant_method 'gptq' is not supported"),
    ({"quant_method": "compressed-tensors"}, "config_groups None: expected a non-empty JSON object"),
    (dict(_group(), format="marlin-24"), "format 'marlin-24' is not supported"),
    (_group(num_bits=3), "num_bits 3 is not supported (pack-quantized reads 2, 4, 8)"),
    (_group(num_bits=4.0), "num_bits 4.0 is not supported"),
    (_group(group_size=512), "needs K divisible by 512"),
    (_group(strategy="token"), "strategy 'token' is not supported"),
    ({**_group(), "config_groups": {"g": {"targets": ["re:nothing$"], "weights": {}}}}, "no config_groups target"),
    ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "modelopt quant_algo 'W4A8_AWQ' is not supported"),
    (_group(actorder="group"), "actorder 'group' is not supported"),
    (_group(group_size=0), "group_size 0 is not supported"),
    ({**DEEPSEEK, "weight_block_size": [128]}, "weight_block_size [128] is not supported"),
    ({**DEEPSEEK, "fmt": "e5m2"}, "fmt 'e5m2' is not supported"),
    ([1, 2], "quantization_config is not a JSON object"),
]


@pytest.mark.parametrize("qc,message", BAD)
def test_bad_quantization_config_is_one_line(quantized, tmp_path, qc, message):
    src = tmp_path / "src"
    base = quantized("W4A16") if not (isinstance(qc, dict) and qc.get("quant_method") == "fp8") else \
        deepseek(tmp_path / "ds")[0]
    subprocess.run(["cp", "-r", str(base), str(src)], check=True)
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps(dict(config, quantization_config=qc)))
    with pytest.raises(ConvertError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        convert(src, tmp_path / "out", "BF16", progress=False)
    assert not os.path.exists(tmp_path / "out")


def test_tensors_that_do_not_match_the_format(tmp_path):
    src, t = deepseek(tmp_path / "ds")
    t["model.layers.0.mlp.p0.weight_scale_inv"] = t["model.layers.0.mlp.p0.weight_scale_inv"][:1]
    bad = tmp_path / "bad"
    _write(bad, t, DEEPSEEK)
    with pytest.raises(ConvertError, match=r"tensor model.layers.0.mlp.p0.weight_scale_inv has dtype F32 shape "
                                           r"\[1, 3\]; a fp8 block 128x128 \(weight_scale_inv\) weight of shape "
                                           r"\[200, 300\] stores F32 \[2, 3\]"):
        convert(bad, tmp_path / "out", "BF16", progress=False)


def test_dense_target_needs_a_quantized_source(plain, tmp_path):
    with pytest.raises(ConvertError, match="no quantization_config: the checkpoint is not quantized, and scheme "
                                           "BF16 writes a dequantized copy"):
        convert(plain, tmp_path / "out", "bf16", progress=False)


def test_cli_reports_a_broken_config_on_one_line(quantized, tmp_path):
    src = tmp_path / "src"
    subprocess.run(["cp", "-r", quantized("W4A16"), str(src)], check=True)
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"]["config_groups"] = {"W4A16": {"targets": ["Linear"], "format": "pack-quantized",
                                                                 "weights": {"type": "int", "num_bits": 5}}}
    (src / "config.json").write_text(json.dumps(config))
    proc = subprocess.run([sys.executable, "-m", "nbquant", "convert", str(src), str(tmp_path / "o"), "--scheme",
                           "BF16"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "num_bits 5 is not supported" in proc.stderr


def test_on_a_cluster_same_bytes_as_a_local_run(quantized, tmp_path):
    distributed = pytest.importorskip("distributed")
    import logging

    src = quantized("W8A8")
    with distributed.LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None,
                                  silence_logs=logging.ERROR) as cluster:
        for target in ("BF16", "W8A16", "W4A16"):
            local = convert(src, tmp_path / f"local-{target}", target, progress=False)
            remote = convert(src, tmp_path / f"remote-{target}", target, progress=False,
                             scheduler=cluster.scheduler_address)
            assert [t.encoding for t in remote.quantized] == [t.encoding for t in local.quantized]
            for f in sorted(os.listdir(tmp_path / f"local-{target}")):
                assert (tmp_path / f"local-{target}" / f).read_bytes() == \
                    (tmp_path / f"remote-{target}" / f).read_bytes(), (target, f)


def test_interrupted_run_resumes(quantized, tmp_path, monkeypatch):
    from nbquant.convert import run as run_module

    src = quantized("FP8_DYNAMIC")
    convert(src, tmp_path / "clean", "BF16", progress=False)
    calls = {"n": 0}
    original = run_module.quantize_weight

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return original(*args, **kwargs)
    monkeypatch.setattr(run_module, "quantize_weight", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert(src, tmp_path / "dst", "BF16", progress=False)
    monkeypatch.undo()
    finished = [f for f in os.listdir(tmp_path / "dst") if f.endswith(".safetensors")]
    r = convert(src, tmp_path / "dst", "BF16", progress=False)
    assert sorted(r.resumed_shards) == sorted(finished)
    assert sorted(os.listdir(tmp_path / "dst")) == sorted(os.listdir(tmp_path / "clean"))
    for f in os.listdir(tmp_path / "clean"):
        assert (tmp_path / "dst" / f).read_bytes() == (tmp_path / "clean" / f).read_bytes(), f


# --- modelopt exports (hf_quant_config.json) ----------------------------------------------------------------------

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)  # modelopt's: -0 is +0


def modelopt_nvfp4(folder, shape=(64, 96), in_config=False) -> tuple[str, dict]:
    rng = np.random.default_rng(11)
    n, k = shape
    scales = rng.integers(0x08, 0x70, (n, k // 16), dtype=np.uint8).view(E4M3)
    t = {"model.layers.0.mlp.up_proj.weight": rng.integers(0, 256, (n, k // 2), dtype=np.uint8),
         "model.layers.0.mlp.up_proj.weight_scale": scales,
         "model.layers.0.mlp.up_proj.weight_scale_2": np.array(0.000123, np.float32).reshape(()),
         "model.layers.0.mlp.up_proj.input_scale": np.array(0.5, np.float32).reshape(()),
         "lm_head.weight": np.ones((8, 64), BF16)}
    q = {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"], "kv_cache_quant_algo": None}
    if in_config:
        _write(folder, t, dict(q, quant_method="modelopt"))
    else:
        _write(folder, t, {})
        config = json.loads(open(os.path.join(folder, "config.json")).read())
        del config["quantization_config"]
        open(os.path.join(folder, "config.json"), "w").write(json.dumps(config))
        open(os.path.join(folder, "hf_quant_config.json"), "w").write(json.dumps(
            {"producer": {"name": "modelopt", "version": "0.39.0"}, "quantization": q}))
    return str(folder), t


def modelopt_nvfp4_decode(codes: np.ndarray, scale: np.ndarray, s2: np.float32) -> np.ndarray:
    """modelopt's ``NVFP4QTensor.dequantize``: e2m1 value times ``fl32(scale * scale_2)`` in float32, then bf16."""
    v = np.stack([E2M1[codes & 0xF], E2M1[codes >> 4]], axis=-1).reshape(codes.shape[0], -1)
    d = scale.astype(np.float32) * np.float32(s2)
    return (v.reshape(v.shape[0], -1, 16) * d[..., None]).reshape(v.shape).astype(BF16)


@pytest.mark.parametrize("in_config", [False, True])
def test_modelopt_nvfp4_to_bf16(tmp_path, in_config):
    src, t = modelopt_nvfp4(tmp_path / "mo", in_config=in_config)
    r = convert(src, tmp_path / "out", "BF16", progress=False)
    out = tensors_of(tmp_path / "out")
    m = "model.layers.0.mlp.up_proj"
    assert sorted(out) == ["lm_head.weight", m + ".weight"]
    want = modelopt_nvfp4_decode(t[m + ".weight"], t[m + ".weight_scale"], t[m + ".weight_scale_2"])
    assert raw(out[m + ".weight"]) == raw(want)
    assert "hf_quant_config.json" not in os.listdir(tmp_path / "out") and [q.encoding for q in r.quantized] == \
        ["decoded"]
    r = convert(src, tmp_path / "nv", "NVFP4A16", progress=False)  # compressed-tensors divides: re-quantized
    assert [q.encoding for q in r.quantized] == ["requantized"]


def test_modelopt_fp8_rounds_the_scale_to_the_model_dtype(tmp_path):
    rng = np.random.default_rng(2)
    t = {"model.layers.0.mlp.up_proj.weight": _fp8_codes(rng, (64, 128)),
         "model.layers.0.mlp.up_proj.weight_scale": np.array(0.0123456, np.float32).reshape(())}
    src = _write(tmp_path / "fp8", t, {"quant_method": "modelopt", "quant_algo": "FP8"})
    convert(src, tmp_path / "out", "BF16", progress=False)
    w = tensors_of(tmp_path / "out")["model.layers.0.mlp.up_proj.weight"]
    s = t["model.layers.0.mlp.up_proj.weight_scale"].astype(BF16).astype(np.float32)
    assert raw(w) == raw((t["model.layers.0.mlp.up_proj.weight"].astype(np.float32) * s).astype(BF16))
    r = convert(src, tmp_path / "dyn", "FP8_DYNAMIC", progress=False)
    assert [q.encoding for q in r.quantized] == ["exact"]
    assert raw(tensors_of(tmp_path / "dyn")["model.layers.0.mlp.up_proj.weight_scale"]) == raw(
        np.full((64, 1), s[()], BF16))


def test_dense_target_keeps_fused_moe_tensors_whole(tmp_path):
    from nbquant.convert import quantize_weight
    from nbquant.convert.schemes import quantization_config

    rng = np.random.default_rng(4)
    x = rng.standard_normal((64, 128)).astype(BF16)
    fused = rng.standard_normal((2, 64, 128)).astype(BF16)
    t = {f"model.layers.0.mlp.up_proj.{k}": v for k, v in quantize_weight(x, get_scheme("W4A16")).items()}
    t["model.layers.0.mlp.experts.gate_up_proj"] = fused
    src = _write(tmp_path / "src", t, quantization_config("W4A16", get_scheme("W4A16"), [], True))
    convert(src, tmp_path / "out", "BF16", progress=False)
    out = tensors_of(tmp_path / "out")
    assert sorted(out) == ["model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.up_proj.weight"]
    assert raw(out["model.layers.0.mlp.experts.gate_up_proj"]) == raw(fused)


GPTOSS_QC = {"quant_method": "mxfp4",
             "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                        "lm_head"]}
#: transformers' FP4_VALUES: the -0 code is -0 (modelopt's E2M1 above makes it +0).
E2M1_SIGNED = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def gptoss(folder, plain: dict | None = None, config: dict | None = None, experts=4, hidden=64, inter=64,
           layers=1) -> tuple[str, dict]:
    """A gpt-oss mxfp4 checkpoint: ``plain`` tensors (default a norm) and each layer's experts as blocks and scales."""
    rng = np.random.default_rng(6)
    t = dict(plain if plain is not None else {"model.norm.weight": np.ones(hidden, BF16)})
    for layer in range(layers):
        m = f"model.layers.{layer}.mlp.experts."
        for proj, r, k in (("gate_up_proj", 2 * inter, hidden), ("down_proj", hidden, inter)):
            t[m + proj + "_blocks"] = rng.integers(0, 256, (experts, r, k // 32, 16), dtype=np.uint8)
            t[m + proj + "_scales"] = rng.integers(119, 125, (experts, r, k // 32), dtype=np.uint8)
            t[m + proj + "_bias"] = rng.standard_normal((experts, r)).astype(BF16)
    os.makedirs(folder, exist_ok=True)
    _write_shard(folder, t)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(dict(config or {"model_type": "gpt_oss", "torch_dtype": "bfloat16"}, quantization_config=GPTOSS_QC),
                  f)
    return str(folder), t


def gptoss_by_hand(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """``e2m1(code) * 2**(scale - 127)`` in float64, codes low nibble first, each expert transposed: ``[E, K, R]``."""
    codes = np.stack([blocks & 0xF, blocks >> 4], axis=-1).reshape(*scales.shape, 32)
    v = E2M1_SIGNED[codes] * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return v.reshape(blocks.shape[0], blocks.shape[1], -1).transpose(0, 2, 1)


@pytest.mark.parametrize("target,dtype", [("BF16", BF16), ("F16", np.float16), ("F32", np.float32)])
def test_gptoss_experts_decoded_under_transformers_names(tmp_path, target, dtype):
    src, t = gptoss(tmp_path / "src", layers=2)
    r = convert(src, tmp_path / "out", target, progress=False)
    out = tensors_of(tmp_path / "out")
    experts = [f"model.layers.{i}.mlp.experts.{p}" for i in range(2) for p in ("gate_up_proj", "down_proj")]
    assert sorted(out) == sorted([*experts, *(n + "_bias" for n in experts), "model.norm.weight"])
    assert sorted(x.name for x in r.quantized) == sorted(experts)
    assert {x.encoding for x in r.quantized} == {"decoded"} and {x.sqnr_db for x in r.quantized} == {np.inf}
    for n in experts:
        want = gptoss_by_hand(t[n + "_blocks"], t[n + "_scales"])  # exact in float32: rounded once to dtype
        assert out[n].shape == want.shape and out[n].dtype == dtype
        assert raw(out[n]) == raw(want.astype(np.float32).astype(dtype)), n
    assert out[experts[0]].shape == (4, 64, 128) and out[experts[1]].shape == (4, 64, 64)  # [E, H, 2I], [E, I, H]
    for n in set(out) - set(experts):
        assert raw(out[n]) == raw(t[n])
    assert json.loads((tmp_path / "out" / "config.json").read_text()) == {"model_type": "gpt_oss",
                                                                          "torch_dtype": "bfloat16"}


def test_gptoss_edge_codes_and_scales_by_hand():
    from nbquant.convert.sources.gptoss import decode_experts

    blocks = np.zeros((2, 4, 1, 16), np.uint8)
    blocks[..., 0] = 0x21  # +0.5, +1
    blocks[..., 1] = 0x08  # +0, -0
    blocks[..., 2] = 0xF9  # -0.5, -6
    scales = np.array([[[0], [255], [127], [254]], [[1], [128], [126], [200]]], np.uint8)
    f32 = decode_experts(blocks, scales, np.float32)
    assert f32.shape == (2, 32, 4)
    assert f32[0, :6, 0].tolist() == [2.0 ** -128, 2.0 ** -127, 0, 0, -(2.0 ** -128), -6 * 2.0 ** -127]  # scale 0
    # scale 255 is 2**128 as torch.ldexp takes it (OCP MX: NaN): ±0 stays, 0.5 → 2**127, larger → inf
    assert f32[0, :6, 1].tolist() == [2.0 ** 127, np.inf, 0, 0, -(2.0 ** 127), -np.inf]
    assert np.signbit(f32[:, 2, :]).all() and not np.signbit(f32[:, 3, :]).any()  # -0 codes stay -0
    assert f32[1, :6, 1].tolist() == [1, 2, 0, 0, -1, -12]
    f16 = decode_experts(blocks, scales, np.float16)
    assert f16[0, :2, 0].tolist() == [0, 0] and np.signbit(f16[0, 4, 0])  # below float16's range: ±0
    assert f16[1, :6, 3].tolist() == [np.inf, np.inf, 0, 0, -np.inf, -np.inf]  # 0.5 * 2**73: inf
    assert raw(decode_experts(blocks, scales, BF16)) == raw(f32.astype(BF16))  # bfloat16 has float32's range
    assert raw(decode_experts(blocks, scales, np.float32, slice(1, 2))) == raw(f32[1:])


def test_gptoss_to_a_quantized_scheme_is_refused(tmp_path):
    src, _ = gptoss(tmp_path / "src")
    with pytest.raises(ConvertError, match=r"scheme W4A16: a gpt-oss mxfp4 checkpoint converts to BF16, F16 or F32 "
                                           r"only \(its fused gate_up_proj experts are stored transposed"):
        convert(src, tmp_path / "out", "W4A16", progress=False)
    assert not os.path.exists(tmp_path / "out")


def test_plain_gptoss_experts_are_kept_whole_not_cut_as_gate_then_up(tmp_path):
    """A plain (BF16) gpt-oss checkpoint to W4A16: its [E, H, 2I] interleaved experts are not cut per expert as
    llm-compressor's split would (gate rows then up rows); as 3-D tensors they are kept, byte for byte."""
    q = "model.layers.0.self_attn.q_proj.weight"
    src, _ = gptoss(tmp_path / "src", plain={q: np.random.default_rng(2).standard_normal((64, 128)).astype(BF16)})
    convert(src, tmp_path / "bf16", "BF16", progress=False)
    r = convert(tmp_path / "bf16", tmp_path / "w4", "W4A16", progress=False)
    experts = "model.layers.0.mlp.experts.gate_up_proj"
    assert [t.name for t in r.quantized] == [q]
    assert {s["name"]: s["reason"] for s in r.skipped}[experts] == "not a weight (gate_up_proj)"
    bf16, w4 = SafetensorsFile(str(tmp_path / "bf16" / "model.safetensors")), \
        SafetensorsFile(str(tmp_path / "w4" / "model.safetensors"))
    assert w4.entries[experts].shape == (4, 64, 128)
    assert raw(w4.tensor(experts)) == raw(bf16.tensor(experts))
    assert not any(".experts.0." in n for n in w4.entries)


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.pop("model.layers.0.mlp.experts.down_proj_scales"),
     r"tensor model.layers.0.mlp.experts.down_proj_scales: missing \(gpt-oss mxfp4 experts store down_proj_blocks "
     r"and down_proj_scales\)"),
    (lambda t: t.update({"model.layers.0.mlp.experts.down_proj_scales":
                         t["model.layers.0.mlp.experts.down_proj_scales"].astype(np.float32)}),
     r"tensor model.layers.0.mlp.experts.down_proj_scales has dtype F32 shape \[4, 64, 2\]; the scales of "
     r"model.layers.0.mlp.experts.down_proj_blocks are U8 \[4, 64, 2\]"),
    (lambda t: t.update({"model.layers.0.mlp.experts.gate_up_proj_blocks":
                         t["model.layers.0.mlp.experts.gate_up_proj_blocks"].reshape(4, 128, 4, 8)}),
     r"tensor model.layers.0.mlp.experts.gate_up_proj_blocks has dtype U8 shape \[4, 128, 4, 8\]; gpt-oss mxfp4 "
     r"blocks are U8 \[experts, rows, K/32, 16\]"),
    (lambda t: t.update({"model.layers.0.mlp.experts.gate_up_proj_scales":
                         t["model.layers.0.mlp.experts.gate_up_proj_scales"][:, :64]}),
     r"has dtype U8 shape \[4, 64, 2\]; the scales of model.layers.0.mlp.experts.gate_up_proj_blocks are "
     r"U8 \[4, 128, 2\]"),
    (lambda t: [t.pop(n) for n in list(t) if "_blocks" in n or "_scales" in n],
     r"quant_method 'mxfp4' but no tensor \*_blocks / \*_scales of gate_up_proj or down_proj"),
])
def test_gptoss_bad_tensors_are_one_line(tmp_path, edit, message):
    src, t = gptoss(tmp_path / "good")
    edit(t)
    bad = tmp_path / "bad"
    os.makedirs(bad)
    _write_shard(bad, t)
    (bad / "config.json").write_text(json.dumps({"model_type": "gpt_oss", "quantization_config": GPTOSS_QC}))
    with pytest.raises(ConvertError, match=message) as e:
        convert(bad, tmp_path / "out", "BF16", progress=False)
    assert "\n" not in str(e.value) and not os.path.exists(tmp_path / "out")
