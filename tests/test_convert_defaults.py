"""``nbquant convert``'s default ignore list: what a real client loads unquantized stays unquantized, and is recorded.

Synthetic checkpoints (Llama with and without a tied head, Qwen3-MoE and Mixtral layouts, a
vision-language layout, names no rule lists) are converted with the defaults and with
``--no-default-ignore``; the tests check which tensors are quantized and why the others are kept,
the ``quantization_config.ignore`` written, the error of an ``--ignore`` that matches nothing,
the note of ``--ignore lm_head`` on a tied model, and that the defaults are ``model_free_ptq``'s
choice given the recorded ignore list, byte for byte. ``--no-default-ignore`` against
``model_free_ptq`` itself is tests/test_parity_convert.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from nbquant.convert import ConvertError, convert, write_synthetic_checkpoint
from nbquant.convert.policy import default_reason, model_facts, select
from nbquant.convert.report import format_table
from nbquant.convert.safetensors import ShardWriter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = {"hidden": 256, "intermediate": 384, "layers": 2, "vocab": 160, "shard_bytes": 300_000}
LINEAR = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nbquant", "convert", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def written(dst) -> dict[str, bytes]:
    return {f: open(os.path.join(dst, f), "rb").read() for f in sorted(os.listdir(dst))}


def recorded_ignore(dst) -> list[str]:
    with open(os.path.join(dst, "config.json")) as f:
        return json.load(f)["quantization_config"]["ignore"]


def peer_rule(names, ignore=()) -> set[str]:
    """model_free_ptq's choice, written from its docs: every <module>.weight but norms and ignored modules."""
    return {n for n in names if n.endswith(".weight") and not n[:-7].endswith("norm") and n[:-7] not in ignore}


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """The synthetic checkpoints: Llama, tied Llama, Qwen3-MoE, tied Mixtral; name → (folder, tensor names)."""
    out = {}
    for name, kw in {"llama": {}, "tied": {"tie_word_embeddings": True}, "qwen3_moe": {"moe": "qwen3_moe"},
                     "mixtral": {"moe": "mixtral", "experts": 3, "tie_word_embeddings": True}}.items():
        d = tmp_path_factory.mktemp(name)
        out[name] = (d, write_synthetic_checkpoint(d, **SIZES, **kw))
    return out


def test_llama_keeps_embedding_and_head_and_records_them(layouts, tmp_path):
    src, names = layouts["llama"]
    r = convert(src, tmp_path / "out", "W4A16", progress=False)
    linear = {f"model.layers.{i}.{m}.weight" for i in range(2) for m in (*LINEAR, "mlp.gate_proj", "mlp.up_proj",
                                                                            "mlp.down_proj")}
    assert {t.name for t in r.quantized} == linear
    kept = {s["name"]: s["reason"] for s in r.skipped}
    assert kept["model.embed_tokens.weight"] == kept["lm_head.weight"] == \
        "embedding or output head: 160 rows = vocab_size (default ignore)"
    assert recorded_ignore(tmp_path / "out") == ["model.embed_tokens", "lm_head"]
    assert r.notes == []
    assert "kept as they are: 2 tensor(s): embedding or output head: 160 rows = vocab_size (default ignore): " \
           "model.embed_tokens.weight, lm_head.weight" in format_table(r).splitlines()


def test_tied_model_keeps_the_shared_weight_and_ignores_lm_head(layouts, tmp_path):
    src, names = layouts["tied"]
    assert "lm_head.weight" not in names
    r = convert(src, tmp_path / "out", "W4A16", progress=False)
    kept = {s["name"]: s["reason"] for s in r.skipped}
    assert kept["model.embed_tokens.weight"] == \
        "token embedding, shared with the output head lm_head: tie_word_embeddings (default ignore)"
    assert recorded_ignore(tmp_path / "out") == ["lm_head", "model.embed_tokens"]  # transformers builds lm_head
    assert "model.embed_tokens.weight" in written_tensors(tmp_path / "out")


def written_tensors(dst) -> set[str]:
    with open(os.path.join(dst, "model.safetensors.index.json")) as f:
        return set(json.load(f)["weight_map"])


@pytest.mark.parametrize("flags", [[], ["--no-default-ignore"]])
def test_ignore_lm_head_on_a_tied_model_is_a_note_not_an_error(layouts, tmp_path, flags):
    src, _ = layouts["tied"]
    proc = run_cli(src, tmp_path / "out", "--scheme", "W4A16", "--ignore", "lm_head", "--quiet", *flags)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""
    assert proc.stderr.startswith("nbquant convert: --ignore 'lm_head': the output head lm_head is tied to "
                                  "model.embed_tokens (tie_word_embeddings; no lm_head tensor): ")
    if flags:  # model_free_ptq's choice: the shared weight is quantized, the ignore list is as given
        assert "model.embed_tokens is quantized, as model_free_ptq does" in proc.stderr
        assert recorded_ignore(tmp_path / "out") == ["lm_head"]
        assert "model.embed_tokens.weight_packed" in written_tensors(tmp_path / "out")
    else:
        assert proc.stderr.rstrip().endswith("both stay unquantized, and quantization_config.ignore names lm_head")
        assert recorded_ignore(tmp_path / "out") == ["lm_head", "model.embed_tokens"]
        assert "model.embed_tokens.weight" in written_tensors(tmp_path / "out")


@pytest.mark.parametrize(("layout", "block", "count", "projections"), [
    ("qwen3_moe", "mlp", 4, ("gate_proj", "up_proj", "down_proj")),
    ("mixtral", "block_sparse_moe", 3, ("w1", "w2", "w3")),
])
def test_moe_routers_are_kept_experts_quantized(layouts, tmp_path, layout, block, count, projections):
    src, names = layouts[layout]
    router, experts = f"{block}.gate", [f"{block}.experts.{e}.{p}" for e in range(count) for p in projections]
    r = convert(src, tmp_path / "out", "NVFP4A16", progress=False)
    quantized = {t.name for t in r.quantized}
    assert quantized == {f"model.layers.{i}.{m}.weight" for i in range(2) for m in (*LINEAR, *experts)}
    kept = {s["name"]: s["reason"] for s in r.skipped}
    for i in range(2):
        assert kept[f"model.layers.{i}.{router}.weight"] == "MoE router or gate (default ignore)"
    ignore = recorded_ignore(tmp_path / "out")
    assert [m for m in ignore if "layers" in m] == [f"model.layers.{i}.{router}" for i in range(2)]
    assert ("lm_head" in ignore) and ("model.embed_tokens" in ignore)
    if layout == "qwen3_moe":
        assert kept["model.layers.0.self_attn.q_norm.weight"] == "module name ends with norm (automatic ignore)"


def test_no_default_ignore_is_model_free_ptqs_choice(layouts, tmp_path):
    for layout, (src, names) in layouts.items():
        r = convert(src, tmp_path / layout, "W8A16", progress=False, default_ignore=False)
        assert {t.name for t in r.quantized} == peer_rule(names), layout  # routers, embeddings, head quantized
        assert recorded_ignore(tmp_path / layout) == []
        assert not [s for s in r.skipped if "default ignore" in s["reason"]]


@pytest.mark.parametrize("scheme", ["W4A16", "NVFP4A16", "FP8_BLOCK"])
def test_defaults_are_the_peer_choice_given_the_recorded_ignore_byte_for_byte(layouts, tmp_path, scheme):
    """What the defaults write is what --no-default-ignore (model_free_ptq) writes given the ignore list recorded."""
    for layout, (src, _) in layouts.items():
        convert(src, tmp_path / f"{layout}-defaults", scheme, progress=False)
        ignore = recorded_ignore(tmp_path / f"{layout}-defaults")
        convert(src, tmp_path / f"{layout}-peer", scheme, ignore=ignore, progress=False, default_ignore=False)
        assert written(tmp_path / f"{layout}-defaults") == written(tmp_path / f"{layout}-peer"), layout


def test_no_default_ignore_equals_the_defaults_where_they_keep_nothing(tmp_path):
    rng = np.random.default_rng(3)
    src = tmp_path / "src"
    src.mkdir()
    tensors = {f"blocks.{i}.proj.weight": rng.standard_normal((64, 256)).astype(ml_dtypes.bfloat16) for i in range(3)}
    w = ShardWriter(str(src / "model.safetensors"), [(n, "BF16", a.shape) for n, a in tensors.items()])
    for n, a in tensors.items():
        w.write(n, a)
    w.close()
    (src / "config.json").write_text('{"vocab_size": 1000}')
    assert run_cli(src, tmp_path / "a", "--scheme", "W4A16", "--quiet").returncode == 0
    assert run_cli(src, tmp_path / "b", "--scheme", "W4A16", "--quiet", "--no-default-ignore").returncode == 0
    assert written(tmp_path / "a") == written(tmp_path / "b")


def write_checkpoint(src, shapes: dict[str, tuple[int, ...]], config: dict) -> None:
    os.makedirs(src)
    rng = np.random.default_rng(4)
    w = ShardWriter(os.path.join(src, "model.safetensors"), [(n, "BF16", s) for n, s in shapes.items()])
    for n, s in shapes.items():
        w.write(n, (rng.standard_normal(s) * 0.02).astype(ml_dtypes.bfloat16))
    w.close()
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump(config, f)


def test_towers_and_names_no_rule_lists(tmp_path):
    """Vision/audio towers and projectors, a conv kernel, an embedding and a head found by their vocab_size rows,
    a router found by its expert-count rows (DBRX's nested ffn_config), a shared expert's one-row gate."""
    h = 128
    shapes = {
        "visual.patch_embed.proj.weight": (h, 3, 2, 14, 14), "visual.blocks.0.attn.qkv.weight": (3 * h, h),
        "model.vision_tower.encoder.layers.0.mlp.fc1.weight": (2 * h, h),
        "multi_modal_projector.linear_1.weight": (h, h), "audio_tower.layers.0.fc1.weight": (2 * h, h),
        "transformer.wte.weight": (500, h), "transformer.blocks.0.ffn.router.layer.weight": (6, h),
        "transformer.blocks.0.ffn.experts.0.w1.weight": (2 * h, h),
        "transformer.blocks.0.ffn.shared_expert_gate.weight": (1, h),
        "transformer.blocks.0.ffn.shared_expert.up_proj.weight": (500, h),  # vocab_size rows, inside a block
        "transformer.blocks.0.attn.Wqkv.weight": (3 * h, h), "output.weight": (500, h),
    }
    config = {"architectures": ["DbrxForCausalLM"], "tie_word_embeddings": False, "vision_config": {},
              "text_config": {"vocab_size": 500}, "ffn_config": {"moe_num_experts": 6, "moe_top_k": 2}}
    write_checkpoint(tmp_path / "src", shapes, config)
    r = convert(tmp_path / "src", tmp_path / "out", "FP8_DYNAMIC", progress=False)
    assert sorted(t.name for t in r.quantized) == ["transformer.blocks.0.attn.Wqkv.weight",
                                                   "transformer.blocks.0.ffn.experts.0.w1.weight",
                                                   "transformer.blocks.0.ffn.shared_expert.up_proj.weight"]
    kept = {s["name"]: s["reason"] for s in r.skipped}
    assert kept["visual.patch_embed.proj.weight"] == kept["visual.blocks.0.attn.qkv.weight"] == \
        "visual: vision or audio tower or projector (default ignore)"
    assert kept["model.vision_tower.encoder.layers.0.mlp.fc1.weight"].startswith("vision_tower: ")
    assert kept["multi_modal_projector.linear_1.weight"].startswith("multi_modal_projector: ")
    assert kept["audio_tower.layers.0.fc1.weight"].startswith("audio_tower: ")
    assert kept["transformer.wte.weight"] == kept["output.weight"] == \
        "embedding or output head: 500 rows = vocab_size (default ignore)"
    assert kept["transformer.blocks.0.ffn.router.layer.weight"] == "MoE router or gate (default ignore)"
    assert kept["transformer.blocks.0.ffn.shared_expert_gate.weight"] == "MoE router or gate (default ignore)"
    assert set(recorded_ignore(tmp_path / "out")) == {n[:-len(".weight")] for n in kept}


def test_not_2d_weights_are_kept_by_default_and_refused_without(tmp_path):
    write_checkpoint(tmp_path / "src", {"m.conv1d.weight": (256, 1, 4), "m.proj.weight": (64, 256)}, {})
    r = convert(tmp_path / "src", tmp_path / "out", "W4A16", progress=False)
    assert [t.name for t in r.quantized] == ["m.proj.weight"]
    assert r.skipped == [{"name": "m.conv1d.weight", "reason": "not a 2-D Linear weight (default ignore)"}]
    assert recorded_ignore(tmp_path / "out") == ["m.conv1d"]
    with pytest.raises(ConvertError, match="expected a 2-D Linear weight"):
        convert(tmp_path / "src", tmp_path / "peer", "W4A16", progress=False, default_ignore=False)


@pytest.mark.parametrize(("pattern", "hint"), [
    ("lm_haed", "; the closest module names: lm_head"),
    ("mlp.gate", r"; to match the modules that end with it: re:.*\.mlp\.gate$ (model.layers.0.mlp.gate and 1 more)"),
    ("model.layers.1", r"; to match the modules that lie inside it: re:model\.layers\.1\. (model.layers.1."),
    (r"re:.*mlp\.gat$", "; the closest module names: model.layers.0.mlp.gate, model.layers.1.mlp.gate"),
])
def test_an_ignore_that_matches_nothing_is_an_error_before_anything_is_written(layouts, tmp_path, pattern, hint):
    src, _ = layouts["qwen3_moe"]
    proc = run_cli(src, tmp_path / "out", "--scheme", "W4A16", "--ignore", "lm_head", pattern)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and proc.stdout == ""
    assert proc.stderr.startswith(f"nbquant convert: error: --ignore {pattern!r}: matches no module of the checkpoint")
    assert hint in proc.stderr, proc.stderr
    assert not os.path.exists(tmp_path / "out")
    with pytest.raises(ValueError, match="matches no module"):  # an ArgumentError, in both modes
        convert(src, tmp_path / "out", "W4A16", ignore=[pattern], progress=False, default_ignore=False)
    assert not os.path.exists(tmp_path / "out")


def test_rules_come_from_the_config_and_shapes_not_one_familys_names():
    facts = model_facts({"text_config": {"vocab_size": 100, "tie_word_embeddings": True}, "num_local_experts": 8,
                         "num_experts_per_tok": 2, "n_shared_experts": 1},
                        {"lm.tok.weight": (100, 64), "lm.h.0.moe.experts.0.fc.weight": (64, 64)})
    assert facts.tied and facts.embedding == "lm.tok.weight" and facts.expert_counts == {8}
    assert facts.moe_blocks == {"lm.h.0.moe"}
    assert default_reason("lm.h.0.moe.scorer.weight", (8, 64), facts) == "MoE router or gate (default ignore)"
    assert default_reason("lm.h.0.attn.scorer.weight", (8, 64), facts) is None  # not in a block with experts
    assert default_reason("lm.h.0.moe.experts.0.fc.weight", (8, 64), facts) is None
    assert default_reason("lm.h.0.attn.proj.weight", (100, 64), facts) is None  # vocab rows inside a block
    assert default_reason("lm.h.0.mtp.shared_head.head.weight", (100, 64), facts).startswith("embedding or output")
    no_count = model_facts({}, {"m.layers.0.mlp.experts.0.up_proj.weight": (64, 64)})  # experts, no count
    for name in ("m.layers.0.mlp.gate.weight", "m.layers.0.feed_forward.router.weight", "m.layers.0.ffn.router.layer"
                 ".weight", "m.layers.0.mlp.shared_expert_gate.weight", "m.layers.0.moe.expert_router.weight"):
        assert default_reason(name, (7, 64), no_count) == "MoE router or gate (default ignore)", name
    assert default_reason("m.layers.0.mlp.gate_proj.weight", (7, 64), no_count) is None
    assert default_reason("m.layers.0.mlp.gate.weight", (7, 64), model_facts({}, {})) is None  # dense: no experts
    untied = model_facts({"architectures": ["XForCausalLM"]}, {"lm_head.weight": (10, 8)})
    headless = model_facts({"architectures": ["XForCausalLM"]}, {"model.embed_tokens.weight": (10, 8)})
    assert not untied.tied and headless.tied  # no tie_word_embeddings: a head class without an lm_head tensor
    sel = select({"tie_word_embeddings": True}, {"model.embed_tokens.weight": (10, 128)}, ["re:.*lm_head"])
    assert sel.ignore == ["re:.*lm_head", "model.embed_tokens"] and len(sel.notes) == 1
