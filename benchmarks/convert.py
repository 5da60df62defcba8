"""``python -m benchmarks.convert``: ``nbquant convert`` against llm-compressor's ``model_free_ptq``, whole process.

It writes a synthetic bfloat16 Llama-shaped checkpoint (594 MiB: hidden 2048, intermediate
5632, 4 layers, vocabulary 32000, two shards; Student-t weights), warms nbquant's compile
cache on a small checkpoint, then runs each tool as its own process under ``/usr/bin/time -v``
(wall time and peak RSS), alternating the two, ``--repeats`` times per scheme, with the same
worker count and ignore list. The outputs of the last runs are compared byte for byte.

nbquant runs as ``python -m nbquant convert SRC DST --scheme S --workers N --quiet`` (no table,
so no accuracy check: the conversion only, as ``model_free_ptq`` does) and once more with
``--report`` (the accuracy check of every weight). The peer runs
``model_free_ptq(SRC, DST, scheme=S, ignore=..., max_workers=N, device="cpu")`` in the
interpreter given by ``--peer-python`` (or ``$NBQUANT_PEER_PYTHON``; the peer is skipped when
neither has llmcompressor).

Examples
--------
Shell::

    $ python -m benchmarks.convert --schemes W4A16,NVFP4A16 --workers 2 --repeats 3 \\
          --peer-python /path/to/venv-with-llmcompressor/bin/python
    $ python -m benchmarks.convert --smoke            # a 3 MiB checkpoint, nbquant only: a quick check

>>> report = "Elapsed (wall clock) time (h:mm:ss or m:ss): 0:07.08\\nMaximum resident set size (kbytes): 1329312"
>>> parse_time_v(report)
(7.08, 1329312)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The benchmark checkpoint's sizes (594 MiB of bfloat16).
SHAPE = {"hidden": 2048, "intermediate": 5632, "layers": 4, "vocab": 32000, "shard_bytes": 320 << 20}
SMOKE_SHAPE = {"hidden": 256, "intermediate": 512, "layers": 2, "vocab": 2048, "shard_bytes": 2 << 20}
PEER_SCRIPT = ("import sys\nfrom llmcompressor import model_free_ptq\n"
               "model_free_ptq(sys.argv[1], sys.argv[2], scheme=sys.argv[3], ignore=sys.argv[5:], "
               "max_workers=int(sys.argv[4]), device='cpu')\n")


def parse_time_v(text: str) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) from ``/usr/bin/time -v``'s report."""
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if not wall or not rss:
        raise RuntimeError(f"no /usr/bin/time -v report in: {text[-500:]}")
    seconds = 0.0
    for part in wall.group(1).split(":"):
        seconds = seconds * 60 + float(part)
    return seconds, int(rss.group(1))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def timed(cmd: list[str]) -> tuple[float, int]:
    """Run ``cmd`` under ``/usr/bin/time -v``; (wall seconds, peak RSS KiB). Raises on a non-zero exit."""
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, cwd=ROOT, env=_env())
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return parse_time_v(proc.stderr)


def has_llmcompressor(python: str) -> bool:
    """Whether ``python`` can import llmcompressor."""
    try:
        return subprocess.run([python, "-c", "import llmcompressor"], capture_output=True, timeout=300).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def nbquant_cmd(src: Path, dst: Path, scheme: str, workers: int, ignore: list[str], report: Path | None = None):
    # --no-default-ignore: the peer's rule of what is quantized, so the two outputs can be compared byte for byte
    cmd = [sys.executable, "-m", "nbquant", "convert", str(src), str(dst), "--scheme", scheme, "--workers",
           str(workers), "--quiet", "--overwrite", "--no-default-ignore"]
    if ignore:
        cmd += ["--ignore", *ignore]
    return cmd + (["--report", str(report)] if report else [])


def peer_cmd(python: str, src: Path, dst: Path, scheme: str, workers: int, ignore: list[str]) -> list[str]:
    return [python, "-c", PEER_SCRIPT, str(src), str(dst), scheme, str(workers), *ignore]


def same_files(a: Path, b: Path) -> bool:
    """Whether two folders hold the same files with the same bytes."""
    names = sorted(os.listdir(a))
    if names != sorted(os.listdir(b)):
        return False
    for name in names:
        with open(a / name, "rb") as fa, open(b / name, "rb") as fb:
            while True:
                x, y = fa.read(1 << 24), fb.read(1 << 24)
                if x != y:
                    return False
                if not x:
                    break
    return True


def ensure_checkpoint(folder: Path, shape: dict) -> Path:
    """The synthetic checkpoint in ``folder`` (written once; a marker records its sizes)."""
    marker = folder / ".benchmark-shape.json"
    if marker.exists() and json.loads(marker.read_text()) == shape:
        return folder
    from nbquant.convert import write_synthetic_checkpoint

    shutil.rmtree(folder, ignore_errors=True)
    write_synthetic_checkpoint(folder, **shape)
    marker.write_text(json.dumps(shape))
    return folder


def warm_cache(work: Path, schemes: list[str], workers: int) -> None:
    """Run nbquant once per scheme on a small checkpoint so that every kernel is in Numba's cache."""
    small = ensure_checkpoint(work / "warm-src", SMOKE_SHAPE)
    for scheme in schemes:
        for report in (None, work / "warm-report.json"):  # --report adds the dequantize kernels
            subprocess.run(nbquant_cmd(small, work / "warm-dst", scheme, workers, [], report), check=True, cwd=ROOT,
                           env=_env(), capture_output=True)
    shutil.rmtree(work / "warm-dst", ignore_errors=True)


def run(args: argparse.Namespace) -> dict:
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    shape = SMOKE_SHAPE if args.smoke else SHAPE
    src = ensure_checkpoint(work / ("smoke-src" if args.smoke else "src"), shape)
    size = sum(f.stat().st_size for f in src.glob("*.safetensors"))
    schemes = [s.strip().upper() for s in args.schemes.split(",") if s.strip()]
    peer = args.peer_python or os.environ.get("NBQUANT_PEER_PYTHON") or sys.executable
    peer = peer if not args.smoke and has_llmcompressor(peer) else None
    warm_cache(work, schemes, args.workers)
    results = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
               "machine": machine(), "commit": commit(), "checkpoint": {"path": str(src), "bytes": size, **shape},
               "workers": args.workers, "ignore": args.ignore, "repeats": args.repeats, "schemes": {}}
    for scheme in schemes:
        row: dict = {"nbquant": [], "nbquant_report": None, "peer": []}
        ours, theirs = work / f"nbquant-{scheme}", work / f"peer-{scheme}"
        for _ in range(args.repeats):
            if peer:
                shutil.rmtree(theirs, ignore_errors=True)
                row["peer"].append(timed(peer_cmd(peer, src, theirs, scheme, args.workers, args.ignore)))
            row["nbquant"].append(timed(nbquant_cmd(src, ours, scheme, args.workers, args.ignore)))
        row["nbquant_report"] = timed(nbquant_cmd(src, work / "with-report", scheme, args.workers, args.ignore,
                                                  work / f"report-{scheme}.json"))
        row["bytes_equal"] = same_files(ours, theirs) if peer else None
        row["command_nbquant"] = " ".join(nbquant_cmd(src, ours, scheme, args.workers, args.ignore)[1:])
        row["command_peer"] = (f"model_free_ptq({str(src)!r}, {str(theirs)!r}, scheme={scheme!r}, "
                               f"ignore={args.ignore!r}, max_workers={args.workers}, device='cpu')")
        results["schemes"][scheme] = row
        print(summary_line(scheme, row), flush=True)
        if not args.keep:
            shutil.rmtree(theirs, ignore_errors=True)
            shutil.rmtree(work / "with-report", ignore_errors=True)
    return results


def summary_line(scheme: str, row: dict) -> str:
    """One line: median wall and peak RSS of both tools, the speed-up, the byte comparison."""
    def med(runs, i):
        return statistics.median(r[i] for r in runs) if runs else float("nan")
    ours, theirs = med(row["nbquant"], 0), med(row["peer"], 0)
    text = (f"{scheme:10s} nbquant {ours:6.2f} s (min {min(r[0] for r in row['nbquant']):.2f}) "
            f"{med(row['nbquant'], 1) / 1024:7.0f} MiB RSS; with --report {row['nbquant_report'][0]:.2f} s "
            f"{row['nbquant_report'][1] / 1024:.0f} MiB")
    if row["peer"]:
        text += (f" | model_free_ptq {theirs:6.2f} s (min {min(r[0] for r in row['peer']):.2f}) "
                 f"{med(row['peer'], 1) / 1024:7.0f} MiB RSS | {theirs / ours:5.1f}x | bytes "
                 f"{'equal' if row['bytes_equal'] else 'DIFFER'}")
    return text


def machine() -> str:
    """CPU model, cores and memory."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else 0
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB"


def commit() -> str:
    """The repository's short commit (flagged when nbquant/ has uncommitted changes)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                              timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "nbquant"], capture_output=True, text=True,
                               cwd=ROOT, timeout=5).stdout.strip()
        return head + (" + uncommitted changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.convert", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "nbquant-convert-bench"),
                        help="work folder (the checkpoint is written once and reused)")
    parser.add_argument("--schemes", default="W4A16,NVFP4A16,FP8_DYNAMIC")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ignore", nargs="*", default=["lm_head"])
    parser.add_argument("--peer-python", default=None, help="an interpreter with llmcompressor (CPU torch)")
    parser.add_argument("--json", default=None, help="write the results there")
    parser.add_argument("--keep", action="store_true", help="keep the peer's outputs")
    parser.add_argument("--smoke", action="store_true", help="a small checkpoint, nbquant only, one repeat")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats = 1
    if not os.path.exists("/usr/bin/time"):
        print("benchmarks.convert needs /usr/bin/time (apt-get install time)", file=sys.stderr)
        return 2
    results = run(args)
    print(f"date {results['date']}; machine {results['machine']}; commit {results['commit']}; "
          f"checkpoint {results['checkpoint']['bytes'] / 2**20:.0f} MiB; workers {args.workers}; "
          f"ignore {args.ignore}; {args.repeats} repeat(s), median wall (min)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
