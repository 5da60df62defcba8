"""``nbquant convert`` on hostile layouts (issue 27): nothing is read or written outside SRC and DST.

The source is untrusted: every shard is a top-level file the index names by a plain file name,
every tensor of every shard is in the index, sub-folder ``*.safetensors`` are copied, never
quantized, and no symlink is followed out of the folder. The destination is compared with the
source as real paths, and ``--overwrite`` removes only an earlier nbquant output. The property
test runs random hostile layouts and checks that nothing outside DST is created, changed or
deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile

import pytest
from _helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbquant import cli
from nbquant.convert import ConvertError, convert
from nbquant.convert import run as run_module
from nbquant.convert.destination import STAMP
from nbquant.convert.plan import open_checkpoint
from nbquant.convert.synthetic import write_synthetic_checkpoint

SCHEME = "FP8_DYNAMIC"  # one scale per row: the small shapes (hidden 64) take it
INDEX = "model.safetensors.index.json"


def write(path, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def checkpoint(d, index: bool = True) -> dict[str, str]:
    """A small Llama-shaped checkpoint (6 shards, or one without index) with a tokenizer folder; its weight_map."""
    names = write_synthetic_checkpoint(d, hidden=64, intermediate=128, layers=1, vocab=64,
                                       shard_bytes=20000 if index else 1 << 30, index=index)
    write(os.path.join(d, "tokenizer", "tokenizer.json"), '{"model": {}}')
    write(os.path.join(d, "tokenizer.json"), '{"model": {}}')
    return weight_map(d) if index else dict.fromkeys(names, "model.safetensors")


def weight_map(d) -> dict[str, str]:
    with open(os.path.join(d, INDEX), encoding="utf-8") as f:
        return json.load(f)["weight_map"]


def set_weight_map(d, wm: dict[str, str]) -> None:
    write(os.path.join(d, INDEX), json.dumps({"metadata": {}, "weight_map": wm}))


def run(src, dst, **kw):
    return convert(src, dst, SCHEME, progress=False, check=False, **kw)


def refused(src, dst, match: str, **kw) -> str:
    with pytest.raises(ConvertError) as e:
        run(src, dst, **kw)
    msg = str(e.value)
    assert "\n" not in msg and match in msg, msg
    return msg


def tree(parent, exclude=None) -> dict[str, tuple]:
    """Everything under ``parent`` but ``exclude``: folders, symlinks (their target) and files (size, mtime, hash)."""
    out = {}
    for folder, dirs, files in os.walk(parent):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) != exclude]
        for name in dirs + files:
            path = os.path.join(folder, name)
            if path == exclude:
                continue
            st_ = os.lstat(path)
            rel = os.path.relpath(path, parent)
            if stat.S_ISLNK(st_.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st_.st_mode):
                out[rel] = ("dir",)
            else:
                with open(path, "rb") as f:
                    out[rel] = ("file", st_.st_size, st_.st_mtime_ns, hashlib.sha256(f.read()).hexdigest())
    return out


def files(folder) -> dict[str, bytes]:
    """Relative path → bytes of every file under ``folder``."""
    out = {}
    for d, _, names in os.walk(folder):
        for name in names:
            with open(os.path.join(d, name), "rb") as f:
                out[os.path.relpath(os.path.join(d, name), folder)] = f.read()
    return out


@pytest.fixture
def parent(tmp_path):
    """A common parent with the source ``src`` and bait beside it: a valid shard, a secret, a folder."""
    p = os.path.realpath(tmp_path)
    checkpoint(os.path.join(p, "src"))
    shard = sorted(set(weight_map(os.path.join(p, "src")).values()))[0]
    shutil.copyfile(os.path.join(p, "src", shard), os.path.join(p, "outside.safetensors"))
    write(os.path.join(p, "secret.txt"), "secret")
    write(os.path.join(p, "outdir", "tokenizer.json"), "outside")
    return p


# --- the source: the index, shards and symlinks -------------------------------------------------------------


@pytest.mark.parametrize("entry", ["../outside.safetensors", "../../etc/passwd", "ABS", "tokenizer/x.safetensors",
                                   "./model-00001-of-00006.safetensors", "config.json", ""])
def test_an_index_entry_outside_the_top_level_is_refused_unopened(parent, entry):
    src = os.path.join(parent, "src")
    wm = weight_map(src)
    wm["model.embed_tokens.weight"] = os.path.join(parent, "outside.safetensors") if entry == "ABS" else entry
    set_weight_map(src, wm)
    before = tree(parent, os.path.join(parent, "dst"))
    msg = refused(src, os.path.join(parent, "dst"), "not a *.safetensors file name at the top of the folder",
                  overwrite=True)
    assert msg.startswith(f"{os.path.join(src, INDEX)}: names the shard {wm['model.embed_tokens.weight']!r},")
    assert tree(parent, os.path.join(parent, "dst")) == before and not os.path.exists(os.path.join(parent, "dst"))


def test_the_cli_prints_one_line(parent, capsys):
    src = os.path.join(parent, "src")
    wm = weight_map(src)
    wm["model.embed_tokens.weight"] = "../outside.safetensors"
    set_weight_map(src, wm)
    assert cli.main(["convert", src, os.path.join(parent, "dst"), "--scheme", SCHEME, "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'../outside.safetensors'" in err and INDEX in err


def test_a_tensor_missing_from_the_index_stops_the_run(parent):
    src = os.path.join(parent, "src")
    wm = weight_map(src)
    shard = max(set(wm.values()), key=list(wm.values()).count)  # a shard of several tensors
    first, *rest = [t for t, s in wm.items() if s == shard]
    del wm[rest[-1]]
    set_weight_map(src, wm)
    msg = refused(src, os.path.join(parent, "dst"), f"tensor {rest[-1]} is not in {INDEX}; every tensor")
    assert msg.startswith(os.path.join(src, shard) + ":")
    wm[rest[-1]] = shard
    shutil.copyfile(os.path.join(src, shard), os.path.join(src, "copy.safetensors"))
    wm.update(dict.fromkeys(rest, "copy.safetensors"))  # two shards hold them: the index keeps one of each
    set_weight_map(src, wm)
    refused(src, os.path.join(parent, "dst"), f"is not in {INDEX} (it names ")


def test_a_shard_symlink_out_of_the_source_is_refused(parent):
    src = os.path.join(parent, "src")
    shard = sorted(set(weight_map(src).values()))[-1]
    os.replace(os.path.join(src, shard), os.path.join(parent, "moved.safetensors"))
    os.symlink(os.path.join(parent, "moved.safetensors"), os.path.join(src, shard))
    msg = refused(src, os.path.join(parent, "dst"), "outside the source folder")
    assert msg.startswith(os.path.join(src, shard) + ": a symlink to " + os.path.join(parent, "moved.safetensors"))


@pytest.mark.parametrize(("name", "target"), [("tokenizer_config.json", "secret.txt"), ("extra", "outdir"),
                                              ("tokenizer/vocab.json", "secret.txt")])
def test_any_symlink_out_of_the_source_is_refused(parent, name, target):
    src = os.path.join(parent, "src")
    os.symlink(os.path.join(parent, target), os.path.join(src, name))
    msg = refused(src, os.path.join(parent, "dst"), "outside the source folder")
    assert msg.startswith(os.path.join(src, name) + ":") and target in msg


def test_symlinks_inside_the_source_are_copied_as_their_content(parent):
    src = os.path.join(parent, "src")
    plain = os.path.join(parent, "plain")
    shutil.copytree(src, plain)
    shard = sorted(set(weight_map(src).values()))[-1]
    os.makedirs(os.path.join(src, "store"))
    os.replace(os.path.join(src, shard), os.path.join(src, "store", "blob"))
    os.symlink(os.path.join("store", "blob"), os.path.join(src, shard))  # a shard: the link's name counts
    os.symlink("tokenizer", os.path.join(src, "tok"))  # a folder: copied as a folder
    shutil.copytree(os.path.join(src, "store"), os.path.join(plain, "store"))
    shutil.copytree(os.path.join(src, "tokenizer"), os.path.join(plain, "tok"))
    run(src, os.path.join(parent, "dst"))
    run(plain, os.path.join(parent, "dst_plain"))
    out = files(os.path.join(parent, "dst"))
    assert out == files(os.path.join(parent, "dst_plain")) and "tok/tokenizer.json" in out
    for d, dirs, names in os.walk(os.path.join(parent, "dst")):
        assert not [n for n in dirs + names if os.path.islink(os.path.join(d, n))]


def test_a_symlink_loop_and_a_pipe_are_refused(parent):
    src = os.path.join(parent, "src")
    os.symlink("..", os.path.join(src, "tokenizer", "up"))
    refused(src, os.path.join(parent, "dst"), "tokenizer/up: a symlink to " + src + ", a folder that contains it")
    os.unlink(os.path.join(src, "tokenizer", "up"))
    os.mkfifo(os.path.join(src, "pipe"))
    refused(src, os.path.join(parent, "dst"), "pipe: not a regular file")


@pytest.mark.parametrize("index", [True, False])
def test_sub_folder_safetensors_are_copied_not_quantized(tmp_path, index):
    src = tmp_path / "src"
    wm = checkpoint(src, index=index)
    shard = next(iter(wm.values()))
    os.makedirs(src / "original")
    shutil.copyfile(src / shard, src / "original" / "consolidated.safetensors")
    if index:
        shutil.copyfile(src / INDEX, src / "original" / INDEX)
    r = run(src, tmp_path / "dst")
    assert set(r.shards) == set(weight_map(tmp_path / "dst").values()) == set(wm.values())
    out = files(tmp_path / "dst")
    assert out["original/consolidated.safetensors"] == (src / "original" / "consolidated.safetensors").read_bytes()
    assert not index or out["original/" + INDEX] == (src / "original" / INDEX).read_bytes()


def test_a_hugging_face_cache_snapshot_is_read_through_its_links(tmp_path):
    repo = tmp_path / "models--org--name"
    plain = tmp_path / "plain"
    checkpoint(plain)
    snapshot = repo / "snapshots" / "abc"
    os.makedirs(repo / "blobs")
    for rel, data in files(plain).items():
        blob = hashlib.sha256(data).hexdigest() + rel.replace("/", "_")
        (repo / "blobs" / blob).write_bytes(data)
        os.makedirs((snapshot / rel).parent, exist_ok=True)
        os.symlink(os.path.relpath(repo / "blobs" / blob, (snapshot / rel).parent), snapshot / rel)
    run(snapshot, tmp_path / "dst")
    run(plain, tmp_path / "dst_plain")
    assert files(tmp_path / "dst") == files(tmp_path / "dst_plain")
    refused(snapshot, repo / "blobs" / "out", "the destination is inside " + str(os.path.realpath(repo / "blobs")))
    os.symlink(tmp_path / "plain" / "tokenizer.json", snapshot / "elsewhere.json")
    refused(snapshot, tmp_path / "dst2", "elsewhere.json: a symlink to")


# --- the destination -----------------------------------------------------------------------------------------


def test_a_destination_that_resolves_to_or_around_the_source_is_refused(parent):
    src = os.path.join(parent, "src")
    before = tree(parent)
    os.symlink(src, os.path.join(parent, "link"))
    os.symlink(parent, os.path.join(parent, "up"))
    after = tree(parent)
    for dst, match in [(os.path.join(parent, "link"), "the destination is the source folder"),
                       (os.path.join(parent, "link", "out"), "the destination is inside the source folder"),
                       (os.path.join(parent, "up", "src", "tokenizer"), "the destination is inside the source"),
                       (parent, "the destination contains the source folder"),
                       (os.path.join(parent, "up"), "the destination contains the source folder")]:
        msg = refused(src, dst, match, overwrite=True)
        assert msg.startswith(dst + ":")
        assert tree(parent) == after
    assert {k: v for k, v in after.items() if k not in ("link", "up")} == before


def test_overwrite_refuses_files_nbquant_did_not_write(parent):
    src, dst = os.path.join(parent, "src"), os.path.join(parent, "dst")
    write(os.path.join(dst, "notes.txt"), "mine")
    write(os.path.join(dst, "mine.safetensors"), "mine too")
    refused(src, dst, "exists and is not empty; pass --overwrite")
    before = tree(parent)
    msg = refused(src, dst, "holds files no nbquant run wrote: mine.safetensors, notes.txt; move them away",
                  overwrite=True)
    assert msg.startswith(dst + ":") and tree(parent) == before


def test_overwrite_removes_an_earlier_output_and_only_it(parent, monkeypatch):
    src, dst = os.path.join(parent, "src"), os.path.join(parent, "dst")
    run(src, dst)
    one = os.path.join(parent, "one")
    checkpoint(one, index=False)  # another checkpoint: one shard, another name
    run(one, dst, overwrite=True)  # the six shards of the first run go: its index names them
    run(one, os.path.join(parent, "one_out"))
    assert files(dst) == files(os.path.join(parent, "one_out"))
    write(os.path.join(one, "tokenizer", "merges.txt"), "a b")
    calls = {"n": 0}

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # the kernels' warm-up, one weight, then the interruption
            raise KeyboardInterrupt
        return quantize(*args, **kwargs)
    quantize = run_module.quantize_weight
    monkeypatch.setattr(run_module, "quantize_weight", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(one, dst, overwrite=True)
    monkeypatch.undo()
    assert STAMP in os.listdir(dst) and os.path.exists(os.path.join(dst, "tokenizer", "merges.txt"))
    run(src, dst, overwrite=True)  # the interrupted run's files go, merges.txt too: its stamp lists them
    run(src, os.path.join(parent, "src_out"))
    assert files(dst) == files(os.path.join(parent, "src_out"))
    run(one, os.path.join(parent, "one_out"), overwrite=True)  # a finished output: its index names its shards
    os.unlink(os.path.join(one, "tokenizer", "merges.txt"))
    refused(one, os.path.join(parent, "one_out"), "holds files no nbquant run wrote: tokenizer/merges.txt;",
            overwrite=True)


def test_a_symlink_in_the_destination_is_never_written_through(parent):
    src, dst = os.path.join(parent, "src"), os.path.join(parent, "dst")
    os.makedirs(dst)
    shard = sorted(set(weight_map(src).values()))[0]
    for name, target in [("config.json", "secret.txt"), ("tokenizer.json", "secret.txt"),
                         (f".{shard}.partial", "outside.safetensors"), (shard, "outside.safetensors")]:
        os.symlink(os.path.join(parent, target), os.path.join(dst, name))
    before = tree(parent, dst)
    run(src, dst, overwrite=True)
    assert tree(parent, dst) == before
    run(src, os.path.join(parent, "fresh"))
    assert files(dst) == files(os.path.join(parent, "fresh"))
    fresh = os.path.join(parent, "fresh")
    os.symlink(os.path.join(parent, "outdir"), os.path.join(fresh, "original"))  # where a copied folder could go
    before = tree(parent)
    refused(src, fresh, "holds files no nbquant run wrote: original;", overwrite=True)
    assert tree(parent) == before


def test_a_resumed_run_keeps_to_the_destination(parent):
    src, dst = os.path.join(parent, "src"), os.path.join(parent, "dst")
    stamp = run_module._stamp(open_checkpoint(src), SCHEME, [])
    assert set(stamp["files"]) >= {"config.json", INDEX, "tokenizer.json", os.path.join("tokenizer", "tokenizer.json")}
    write(os.path.join(dst, STAMP), json.dumps(stamp))
    os.symlink(os.path.join(parent, "secret.txt"), os.path.join(dst, "tokenizer.json"))
    os.symlink(os.path.join(parent, "outdir"), os.path.join(dst, "tokenizer"))
    before = tree(parent, dst)
    refused(src, dst, "holds files no nbquant run wrote: tokenizer;")
    os.unlink(os.path.join(dst, "tokenizer"))
    run(src, dst)
    assert tree(parent, dst) == before and not os.path.islink(os.path.join(dst, "tokenizer.json"))


# --- the property: nothing outside DST changes ------------------------------------------------------------------

ENTRIES = (None, "../outside.safetensors", "../../outside.safetensors", "ABS", "tokenizer/x.safetensors",
           "missing.safetensors")
LINKS = ("file_out", "dir_out", "dir_in", "shard_out", "shard_in", "loop")
DSTS = ("fresh", "user_files", "earlier_output", "links_out", "resume_links", "dir_link", "link_to_src",
        "inside_via_link")


def _hostile_source(p: str, src: str, entry, drop: bool, links) -> None:
    wm = weight_map(src)
    shards = sorted(set(wm.values()))
    if entry is not None or drop:
        first = [t for t, s in wm.items() if s == shards[0]]
        if entry is not None:
            wm[first[0]] = os.path.join(p, "outside.safetensors") if entry == "ABS" else entry
        if drop:
            del wm[first[-1]]
        set_weight_map(src, wm)
    if "file_out" in links:
        os.symlink(os.path.join(p, "secret.txt"), os.path.join(src, "tokenizer_config.json"))
    if "dir_out" in links:
        os.symlink(os.path.join(p, "outdir"), os.path.join(src, "extra"))
    if "dir_in" in links:
        os.symlink("tokenizer", os.path.join(src, "tok"))
    if "shard_out" in links:
        os.replace(os.path.join(src, shards[-1]), os.path.join(p, "moved.safetensors"))
        os.symlink(os.path.join(p, "moved.safetensors"), os.path.join(src, shards[-1]))
    if "shard_in" in links:
        os.makedirs(os.path.join(src, "store"))
        os.replace(os.path.join(src, shards[-2]), os.path.join(src, "store", "blob"))
        os.symlink(os.path.join("store", "blob"), os.path.join(src, shards[-2]))
    if "loop" in links:
        os.symlink(".", os.path.join(src, "loop"))


def _hostile_destination(p: str, src: str, kind: str) -> str:
    """DST for ``kind`` (one of :data:`DSTS`), built under ``p``."""
    dst = os.path.join(p, "dst")
    if kind == "link_to_src":
        os.symlink(src, dst)
    elif kind == "inside_via_link":
        os.symlink(src, os.path.join(p, "alias"))
        dst = os.path.join(p, "alias", "out")
    elif kind == "user_files":
        write(os.path.join(dst, "notes.txt"), "mine")
        write(os.path.join(dst, "mine.safetensors"), "mine")
    elif kind in ("links_out", "resume_links", "dir_link"):
        os.makedirs(dst)
        if kind != "dir_link":  # symlinks where the outputs go, to a secret and to a shard outside
            os.symlink(os.path.join(p, "secret.txt"), os.path.join(dst, "tokenizer.json"))
            os.symlink(os.path.join(p, "secret.txt"), os.path.join(dst, "config.json"))
            os.symlink(os.path.join(p, "outside.safetensors"),
                       os.path.join(dst, ".model-00001-of-00006.safetensors.partial"))
        else:  # a symlink where the source's tokenizer folder is copied
            os.symlink(os.path.join(p, "outdir"), os.path.join(dst, "tokenizer"))
        if kind != "links_out":  # the stamp of this very run: it resumes
            with contextlib.suppress(ConvertError):
                write(os.path.join(dst, STAMP), json.dumps(run_module._stamp(open_checkpoint(src), SCHEME, [])))
    return dst


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entry=st.sampled_from(ENTRIES), drop=st.booleans(), links=st.sets(st.sampled_from(LINKS), max_size=3),
       kind=st.sampled_from(DSTS), overwrite=st.booleans())
def test_nothing_outside_the_destination_changes(entry, drop, links, kind, overwrite):
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.realpath(tmp)
        src = os.path.join(p, "src")
        checkpoint(src)
        shutil.copyfile(os.path.join(src, sorted(set(weight_map(src).values()))[0]),
                        os.path.join(p, "outside.safetensors"))
        write(os.path.join(p, "secret.txt"), "secret")
        write(os.path.join(p, "outdir", "tokenizer.json"), "outside")
        if kind == "earlier_output":
            run(src, os.path.join(p, "dst"))
        _hostile_source(p, src, entry, drop, links)
        dst = _hostile_destination(p, src, kind)
        before = tree(p, dst)
        try:
            run(src, dst, overwrite=overwrite)
        except ConvertError as e:
            assert "\n" not in str(e)
        else:
            for d, dirs, names in os.walk(dst):
                assert not [n for n in dirs + names if os.path.islink(os.path.join(d, n))]
        assert tree(p, dst) == before
