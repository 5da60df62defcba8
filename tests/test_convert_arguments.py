"""``convert``'s arguments are all checked before anything is written; failures and Ctrl-C say what to do.

Issue 27, class 4 ("failing late or with a traceback"): each bad argument of the Python API is a
``TypeError`` or ``ValueError`` naming the argument, the value and what is allowed, raised
before the destination exists; the command line prints the same as one line and exits 1; a
weight that cannot be quantized names the tensor, its file and the fix; Ctrl-C prints one line,
exits 130 and leaves a destination that the same command resumes into the uninterrupted bytes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from nbquant import cli
from nbquant.convert import ConvertError, convert, write_synthetic_checkpoint
from nbquant.convert.safetensors import ShardWriter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A one-layer Llama-shaped checkpoint of a few hundred KiB."""
    d = tmp_path_factory.mktemp("tiny")
    write_synthetic_checkpoint(d, hidden=128, intermediate=256, layers=1, vocab=64, shard_bytes=40_000)
    return d


def run_cli(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nbquant", "convert", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=600, **kwargs)


def bad_values(tmp_path, tiny):
    """``(keyword arguments, exception, text the message must hold)`` for each rule of convert()'s arguments."""
    (tmp_path / "file").write_text("x")
    return [
        ({"src": tmp_path / "nope"}, ValueError, f"src {tmp_path / 'nope'}: no such directory"),
        ({"src": tmp_path / "file"}, ValueError, f"src {tmp_path / 'file'}: not a directory"),
        ({"src": 3}, TypeError, "src must be a path"),
        ({"dst": b"out"}, TypeError, "dst must be a path (str or os.PathLike), got bytes b'out'"),
        ({"dst": ""}, ValueError, "dst '': empty"),
        ({"scheme": "Q4_K"}, ValueError, "unknown scheme 'Q4_K'; choose one of W2A16, W4A16"),
        ({"scheme": None}, TypeError, "scheme must be a str"),
        ({"ignore": ["re:model.layers.(0"]}, ValueError, "ignore 're:model.layers.(0': not a valid regular expression"),
        ({"ignore": ["lm_head", ""]}, ValueError, "ignore '': empty"),
        ({"ignore": 5}, TypeError, "ignore must be a module name"),
        ({"ignore": ["lm_head", 5]}, TypeError, "ignore holds int 5"),
        ({"workers": 0}, ValueError, "workers 0: must be a positive int"),
        ({"workers": "4"}, TypeError, "workers must be a positive int or None, got str '4'"),
        ({"workers": True}, TypeError, "workers must be a positive int"),
        ({"report": tmp_path}, ValueError, f"report {tmp_path}: is a directory"),
        ({"report": tmp_path / "out"}, ValueError, f"report {tmp_path / 'out'}: is the destination folder"),
        ({"report": tmp_path / "missing" / "r.json"}, ValueError,
         f"the folder {tmp_path / 'missing'} does not exist"),
        ({"overwrite": "yes"}, TypeError, "overwrite must be True or False, got str 'yes'"),
        ({"progress": 1}, TypeError, "progress must be True, False or None"),
        ({"full_check": None}, TypeError, "full_check must be True or False"),
        ({"log": "stderr"}, TypeError, "log must be a callable"),
        ({"scheduler": ""}, ValueError, "scheduler '': empty"),
    ]


def test_every_argument_is_checked_before_anything_is_written(tmp_path, tiny):
    for kwargs, error, text in bad_values(tmp_path, tiny):
        args = {"src": tiny, "dst": tmp_path / "out", "scheme": "W4A16", "progress": False, **kwargs}
        with pytest.raises(error) as e:
            convert(args.pop("src"), args.pop("dst"), args.pop("scheme"), **args)
        msg = str(e.value)
        assert text in msg and "\n" not in msg, (kwargs, msg)
        assert isinstance(e.value, ConvertError) == (error is ValueError), kwargs  # the CLI's errors are both
        assert not os.path.exists(tmp_path / "out"), kwargs
    for dst, text in [(tmp_path / "file", "exists and is not a directory"), (tiny, "is the source folder"),
                      (tiny / "sub", "is inside the source folder")]:  # the destination's own checks, before writing
        with pytest.raises(ConvertError, match=text):
            convert(tiny, dst, "W4A16", progress=False)
    assert not os.path.exists(tiny / "sub")
    # a report path in the destination folder, which convert creates, is fine
    r = convert(tiny, tmp_path / "out", "W4A16", progress=False, report=tmp_path / "out" / "r.json")
    assert json.loads((tmp_path / "out" / "r.json").read_text())["scheme"] == r.scheme


@pytest.mark.parametrize(("args", "text"), [
    (["--ignore", "re:model.layers.(0"], "nbquant convert: error: --ignore 're:model.layers.(0': not a valid regular "
                                         "expression (missing ), unterminated subpattern at position 16); write re:"),
    (["--report", "{tmp}/missing/r.json"], "nbquant convert: error: --report {tmp}/missing/r.json: the folder "
                                           "{tmp}/missing does not exist"),
    (["--report", "{tmp}"], "nbquant convert: error: --report {tmp}: is a directory"),
    (["--workers", "0"], "nbquant convert: error: argument --workers: '0' is not a positive integer"),
    (["--scheme", "W3A16"], "nbquant convert: error: --scheme W3A16 is not supported"),
])
def test_cli_argument_errors_are_one_line_before_writing(tmp_path, tiny, capsys, args, text):
    argv = ["convert", str(tiny), str(tmp_path / "out"), "--scheme", "W4A16", *[a.format(tmp=tmp_path) for a in args]]
    try:
        status = cli.main(argv)
    except SystemExit as e:  # argparse's own checks
        status = e.code
    err = capsys.readouterr().err
    assert status in (1, 2) and err.count("\n") == 1 and err.startswith(text.format(tmp=tmp_path)), err
    assert not os.path.exists(tmp_path / "out")


def test_cli_bad_regex_subprocess(tmp_path, tiny):
    """The whole command: one line, exit status 1, no destination (it used to print a 20-line traceback)."""
    proc = run_cli(tiny, tmp_path / "out", "--scheme", "W4A16", "--ignore", "lm_head", "re:(")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("nbquant convert: error: --ignore 're:(': ")
    assert not os.path.exists(tmp_path / "out")


def test_ignore_as_one_string_is_one_pattern(tmp_path, tiny):
    one = convert(tiny, tmp_path / "str", "W4A16", ignore="lm_head", progress=False)
    listed = convert(tiny, tmp_path / "list", "W4A16", ignore=["lm_head"], progress=False)
    assert "lm_head.weight" not in {t.name for t in one.quantized}
    assert [t.name for t in one.quantized] == [t.name for t in listed.quantized]
    for f in os.listdir(tmp_path / "list"):
        assert (tmp_path / "str" / f).read_bytes() == (tmp_path / "list" / f).read_bytes(), f


def test_asym_scale_overflow_names_tensor_file_and_fix(tmp_path):
    """A float16 weight spanning more than 65504 overflows W4A16_ASYM's float16 scale: a ConvertError, not numpy's."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("{}")
    x = np.full((4, 128), 0.5, np.float16)
    x[2, 2], x[2, 1] = 40000, -40000
    writer = ShardWriter(str(src / "model.safetensors"), [("m.proj.weight", "F16", x.shape)])
    writer.write("m.proj.weight", x)
    writer.close()
    with pytest.raises(ConvertError) as e:
        convert(src, tmp_path / "out", "W4A16_ASYM", progress=False)
    msg = str(e.value)
    assert "\n" not in msg, msg
    for part in (str(src / "model.safetensors"), "tensor m.proj.weight", "row 2, columns 0-127", "overflows float16",
                 "--ignore m.proj", "W4A16"):
        assert part in msg, (part, msg)
    assert not [f for f in os.listdir(tmp_path / "out") if f.endswith((".safetensors", ".partial"))]
    convert(src, tmp_path / "out", "W4A16_ASYM", ignore="m.proj", progress=False, overwrite=True)  # the fix


def test_ctrl_c_prints_one_line_exits_130_and_the_same_command_resumes(tmp_path):
    src, dst, clean = tmp_path / "src", tmp_path / "dst", tmp_path / "clean"
    write_synthetic_checkpoint(src, hidden=512, intermediate=1536, layers=2, vocab=512, shard_bytes=1 << 20)
    command = [src, dst, "--scheme", "W4A16", "--report", tmp_path / "r.json"]

    def default_sigint() -> None:  # Python turns SIGINT into KeyboardInterrupt only if it was not ignored
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.nice(19)  # on a loaded machine this test's polling loop runs first, so the signal lands mid-run
    proc = subprocess.Popen([sys.executable, "-m", "nbquant", "convert", *map(str, command)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    deadline = time.monotonic() + 600  # a liveness guard, not a timing: the shard appears long before
    while not (dst.is_dir() and any(f.endswith(".safetensors") for f in os.listdir(dst))):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)  # a shard is finished, the others are being written (~0.5 s more)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 130 and out == ""
    assert err == "nbquant convert: interrupted; run the same command again to resume\n"
    convert(src, clean, "W4A16", progress=False, check=False)
    left = os.listdir(dst)
    assert "config.json" not in left and "model.safetensors.index.json" not in left  # it does not look complete
    finished = [f for f in left if f.endswith(".safetensors")]
    for f in finished:
        assert (dst / f).read_bytes() == (clean / f).read_bytes(), f  # whatever looks finished is
    assert not [f for f in left if f.endswith(".partial")] and not (tmp_path / "r.json").exists()
    again = run_cli(*command)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert set(json.loads((tmp_path / "r.json").read_text())["resumed_shards"]) == set(finished)
    assert sorted(os.listdir(dst)) == sorted(os.listdir(clean))
    for f in os.listdir(clean):
        assert (dst / f).read_bytes() == (clean / f).read_bytes(), f


def test_ctrl_c_with_overwrite_says_to_drop_it(tmp_path, tiny, monkeypatch, capsys):
    """``--overwrite`` starts clean each time: the hint to resume is the same command without it."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("nbquant.convert.convert", interrupted)
    assert cli.main(["convert", str(tiny), str(tmp_path / "out"), "--scheme", "W4A16", "--overwrite"]) == 130
    assert capsys.readouterr().err == ("nbquant convert: interrupted; run the same command again without "
                                       "--overwrite to resume\n")
