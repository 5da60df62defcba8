"""``nbquant convert --scheduler``: the shards written by a two-process ``LocalCluster`` (started here), byte for byte.

Local and distributed runs of the same conversion must give the same files; a local run must
not import dask; a bad scheduler address is a one-line error.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import time

import ml_dtypes
import numpy as np
import pytest

from nbquant.cli import main
from nbquant.convert import ConvertError, SafetensorsFile, convert
from nbquant.convert import run as run_module
from nbquant.convert.plan import open_checkpoint
from nbquant.convert.report import Progress
from nbquant.convert.synthetic import write_synthetic_checkpoint

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")
BF16 = np.dtype(ml_dtypes.bfloat16)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes of one thread each, for this module."""
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                  silence_logs=logging.ERROR) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A small Llama-shaped checkpoint in several shards, q/k/v and gate/up partners split across them."""
    d = tmp_path_factory.mktemp("llama")
    write_synthetic_checkpoint(d, hidden=256, intermediate=512, layers=2, vocab=96, shard_bytes=300_000)
    (d / "tokenizer.json").write_text('{"model": {}}')
    return d


def files(folder) -> dict[str, bytes]:
    return {f: open(os.path.join(folder, f), "rb").read() for f in sorted(os.listdir(folder))}


@pytest.mark.parametrize("scheme", ["W4A16", "NVFP4A16"])
def test_same_bytes_as_a_local_run(cluster, llama, tmp_path, scheme):
    local = convert(llama, tmp_path / "local", scheme, ignore=["lm_head"], progress=False)
    lines: list[str] = []
    remote = convert(llama, tmp_path / "remote", scheme, ignore=["lm_head"], progress=False, log=lines.append,
                     scheduler=cluster.scheduler_address)
    assert len(local.shards) > 2
    assert files(tmp_path / "remote") == files(tmp_path / "local")
    assert [t.name for t in remote.quantized] == [t.name for t in local.quantized]
    # the report's sums are BLAS dot products: the workers' single-threaded BLAS may round the last bit differently
    assert [t.sqnr_db for t in remote.quantized] == pytest.approx([t.sqnr_db for t in local.quantized], rel=1e-12)
    assert remote.skipped == local.skipped and remote.bytes_out == local.bytes_out
    assert sorted(line for line in lines if line.startswith("wrote")) == sorted(f"wrote {s}" for s in local.shards)


def test_progress_bar_fed_from_the_workers(cluster, llama, tmp_path, monkeypatch):
    seen = []
    original = Progress.update

    def update(self, nbytes, tensors=1):
        seen.append((nbytes, tensors))
        original(self, nbytes, tensors)
    monkeypatch.setattr(Progress, "update", update)
    closed = []
    monkeypatch.setattr(Progress, "close", lambda self: closed.append((self.done_tensors, self.tensors,
                                                                       self.done_bytes, self.total)))
    convert(llama, tmp_path / "o", "W8A16", progress=False, scheduler=cluster.scheduler_address)
    (done, total, done_bytes, total_bytes), = closed
    assert done == total and done_bytes == total_bytes
    assert len(seen) >= 2


def test_resume_on_the_cluster(cluster, llama, tmp_path):
    clean = tmp_path / "clean"
    r = convert(llama, clean, "W4A16", progress=False)
    dst = tmp_path / "dst"
    convert(llama, dst, "W4A16", progress=False)
    for f in r.shards[1:] + ["config.json", "model.safetensors.index.json"]:  # as an interrupted run leaves it
        os.unlink(dst / f)
    stamp = run_module._stamp(open_checkpoint(str(llama)), "W4A16", [])
    (dst / run_module.STAMP).write_text(json.dumps(stamp))
    out = convert(llama, dst, "W4A16", progress=False, scheduler=cluster.scheduler_address)
    assert out.resumed_shards == r.shards[:1] and files(dst) == files(clean)


def test_a_failed_task_leaves_no_shard_that_looks_finished(cluster, tmp_path):
    src = tmp_path / "src"
    write_synthetic_checkpoint(src, hidden=256, intermediate=512, layers=2, vocab=96, shard_bytes=300_000)
    index = json.loads((src / "model.safetensors.index.json").read_text())["weight_map"]
    name = "model.layers.1.self_attn.o_proj.weight"
    entry = SafetensorsFile(str(src / index[name])).entries[name]
    with open(src / index[name], "r+b") as f:  # a NaN only the task that quantizes it sees (the plan reads headers)
        f.seek(entry.begin)
        f.write(np.array([np.nan], BF16).tobytes())
    dst = tmp_path / "dst"
    with pytest.raises(ConvertError, match="NaN"):
        convert(src, dst, "W4A16", progress=False, scheduler=cluster.scheduler_address)
    for _ in range(100):  # the other tasks, cancelled but running, finish or delete their files
        if not [f for f in os.listdir(dst) if f.endswith(".partial")]:
            break
        time.sleep(0.1)
    left = os.listdir(dst)
    assert index[name] not in left and "config.json" not in left and run_module.STAMP in left
    assert not [f for f in left if f.endswith(".partial")]
    out = convert(src, tmp_path / "again", "W4A16", progress=False, ignore=[name[:-len(".weight")]],
                  scheduler=cluster.scheduler_address)
    assert name not in {t.name for t in out.quantized}


def test_cli_scheduler(cluster, llama, tmp_path):
    convert(llama, tmp_path / "local", "NVFP4A16", ignore=["lm_head"], progress=False)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        status = main(["convert", str(llama), str(tmp_path / "cli"), "--scheme", "NVFP4A16", "--ignore", "lm_head",
                       "--scheduler", cluster.scheduler_address])
    assert status == 0 and "MB/s" in out.getvalue().splitlines()[-1]
    assert files(tmp_path / "cli") == files(tmp_path / "local")


def test_bad_scheduler_address_is_a_one_line_error(llama, tmp_path):
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}), \
            contextlib.redirect_stderr(io.StringIO()) as err:
        status = main(["convert", str(llama), str(tmp_path / "o"), "--scheme", "W4A16", "--quiet",
                       "--scheduler", "tcp://127.0.0.1:1"])
    assert status == 1
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nbquant convert: error: scheduler tcp://127.0.0.1:1: cannot "
                                                   "connect"), lines
    assert not [f for f in os.listdir(tmp_path / "o") if f.endswith(".safetensors") or f.endswith(".partial")]


def test_missing_distributed_is_a_one_line_error(llama, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed raises ImportError
    with pytest.raises(ConvertError, match=r'pip install "nbquant\[dask\]"'):
        convert(llama, tmp_path / "o", "W4A16", progress=False, scheduler="tcp://127.0.0.1:1")


def test_a_local_run_never_imports_dask(llama, tmp_path):
    code = ("import sys; from nbquant.convert import convert; "
            f"convert({str(llama)!r}, {str(tmp_path / 'o')!r}, 'NVFP4A16', progress=False); "
            "import nbquant.cli; nbquant.cli.main(['convert', "
            f"{str(llama)!r}, {str(tmp_path / 'c')!r}, '--scheme', 'W4A16', '--quiet']); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
