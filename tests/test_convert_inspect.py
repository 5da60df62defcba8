"""``nbquant inspect``: a source checkpoint, converted ones (W4A16, NVFP4A16, FP8_DYNAMIC), ``--json``, ``--all``,
and a broken folder (one line on stderr, exit 1)."""

from __future__ import annotations

import json

import pytest

from nbquant.cli import main
from nbquant.convert import convert, write_synthetic_checkpoint
from nbquant.convert.safetensors import SafetensorsFile

pytestmark = pytest.mark.nosim


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A synthetic 2-layer source checkpoint and its W4A16, NVFP4A16 and FP8_DYNAMIC conversions."""
    root = tmp_path_factory.mktemp("inspect")
    write_synthetic_checkpoint(root / "src", hidden=128, intermediate=256, layers=2, vocab=128)
    for scheme in ("W4A16", "NVFP4A16", "FP8_DYNAMIC"):
        convert(root / "src", root / scheme, scheme, progress=False, check=False)
    return root


def _inspect(capsys, *argv):
    status = main(["inspect", *map(str, argv)])
    out = capsys.readouterr()
    return status, out.out, out.err


def _row(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(name + " "))


def test_source_checkpoint(folders, capsys):
    status, out, err = _inspect(capsys, folders / "src")
    assert (status, err) == (0, "")
    assert "quantization_config: none (not quantized)" in out
    assert _row(out, "model.layers.{0..1}.mlp.down_proj").split()[1:5] == ["2", "bf16", "128x256", "BF16"]
    assert "quantized 0 weights 0 B" in out.splitlines()[-1]
    assert "in 21 tensors, 1 shard:" in out.splitlines()[-1]


@pytest.mark.parametrize(("scheme", "label", "dtypes"), [
    ("W4A16", "pack-quantized int4 g128", "BF16,I32,I64"),
    ("NVFP4A16", "nvfp4", "F32,F8_E4M3,U8"),
    ("FP8_DYNAMIC", "float-quantized fp8 channel", "BF16,F8_E4M3"),
])
def test_converted_checkpoint(folders, capsys, scheme, label, dtypes):
    status, out, err = _inspect(capsys, folders / scheme)
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[1].startswith("quantization_config: compressed-tensors 0.19.0, format ")
    assert lines[2].startswith(f"  group {scheme}: targets Linear; weights ")
    assert lines[3] == "  ignore (2): model.embed_tokens, lm_head"
    row = _row(out, "model.layers.{0..1}.mlp.down_proj")
    assert row.split()[1:] == ["2", *label.split(), "128x256", dtypes, row.split()[-2], "KiB"]  # shape unpacked
    assert " bf16 (kept) " in _row(out, "lm_head") and _row(out, "lm_head").endswith("  ignored (lm_head)")
    assert _row(out, "model.norm").endswith("module name ends with norm (automatic ignore)")
    assert "ignored (model.embed_tokens)" in _row(out, "model.embed_tokens")
    assert len([line for line in lines if line.startswith("model.layers.")]) == 9  # one row a layer's module
    assert lines[-1].startswith("total: ")
    assert "1 shard: quantized 14 weights " in lines[-1] and "kept 7 65.2 KiB" in lines[-1]


def test_all_lists_every_layer(folders, capsys):
    status, out, _ = _inspect(capsys, folders / "W4A16", "--all")
    assert status == 0
    assert "{0..1}" not in out
    assert "model.layers.1.mlp.down_proj " in out and "model.layers.0.mlp.down_proj " in out


@pytest.mark.parametrize("scheme", ["src", "W4A16", "NVFP4A16", "FP8_DYNAMIC"])
def test_json_lists_every_tensor(folders, capsys, scheme):
    status, out, err = _inspect(capsys, folders / scheme, "--json")
    assert (status, err) == (0, "")
    data = json.loads(out)
    stored = SafetensorsFile(str(folders / scheme / "model-00001-of-00001.safetensors")).entries
    assert {t["name"] for t in data["tensors"]} == set(stored)
    assert all(t["bytes"] == stored[t["name"]].nbytes for t in data["tensors"])
    assert sorted(n for r in data["modules"] for n in r["tensors"]) == sorted(stored)
    totals = data["totals"]
    assert totals["tensors"] == len(stored) and totals["shards"] == 1
    assert totals["quantized_bytes"] + totals["kept_bytes"] == totals["bytes"]
    assert (data["quantization_config"] is None) == (scheme == "src")


@pytest.mark.parametrize("damage", ["missing", "header", "config", "ignore"])
def test_broken_folder_is_one_line(tmp_path, capsys, folders, damage):
    folder = tmp_path / "ckpt"
    if damage != "missing":
        folder.mkdir()
        config = json.loads((folders / "W4A16" / "config.json").read_text())
        config["quantization_config"]["ignore"] = "lm_head" if damage == "ignore" else ["lm_head"]
        text = json.dumps(config)
        (folder / "config.json").write_text(text[:-5] if damage == "config" else text)
        (folder / "model.safetensors").write_bytes(b"\x10" + bytes(7) + b"{not json" if damage == "header" else
                                                   (folders / "W4A16" / "model-00001-of-00001.safetensors")
                                                   .read_bytes())
    status, out, err = _inspect(capsys, folder)
    assert (status, out) == (1, "")
    assert err.startswith("nbquant inspect: error: ") and err.count("\n") == 1


def test_a_closed_pipe_ends_quietly(folders):
    """`nbquant inspect DIR | true`: the reader is gone before the first line; no traceback, exit status 1."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run(["bash", "-c", f"{sys.executable} -m nbquant inspect "
                           f"{folders / 'W4A16'} --all | true; echo \"status ${{PIPESTATUS[0]}}\" >&2"],
                          capture_output=True, text=True, cwd=root)
    assert proc.stderr == "status 1\n", proc.stderr
