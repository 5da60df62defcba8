"""A float32 array several times larger than the workers' memory, quantized to int4 g32 on a memory-limited cluster.

The figure of docs/dask.md::

    python -m benchmarks.dask_large                       # 3 GiB on 2 workers x 400 MB, one thread each
    python -m benchmarks.dask_large --rows 2048 --check 1  # a quick run

A ``LocalCluster`` of ``--workers`` processes, each limited to ``--memory-limit`` (its
nanny restarts a worker past 95 % of it), generates the input lazily, chunk by chunk (dask's
random generator: a fixed stream per chunk), quantizes it with ``nbquant.quantize_dynamic(x,
"int4", block_size=(1, 32), packed=True)`` and reduces the codes, scales and zero points to
checksums, so nothing the size of the input is ever held. It prints the time, each worker's
peak resident memory (the kernel's high-water mark, ``getrusage``) against its limit, whether
a worker restarted (its process id changed), and checks ``--check`` row blocks against the
NumPy call bit for bit.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import subprocess
import time
from pathlib import Path

import numpy as np

import nbquant

ROOT = Path(__file__).resolve().parents[1]
GROUP = 32


def peak_rss() -> int:
    """This process's peak resident memory in bytes (Linux reports ``ru_maxrss`` in KiB).

    Examples
    --------
    >>> peak_rss() > 0
    True
    """
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _warm_up() -> int:
    """Load the int4 g32 kernels (from the disk cache) in a worker; its process id."""
    nbquant.quantize_dynamic(np.ones((2, 64), np.float32), "int4", block_size=(1, GROUP), packed=True)
    return os.getpid()


def _quantize(x, per_tensor: bool = False):
    return nbquant.quantize_dynamic(x, "int4", block_size=None if per_tensor else (1, GROUP), packed=True)


def _spilled(dask_worker) -> int:
    """The bytes a worker has written to disk when spilling, so far."""
    return int(getattr(dask_worker.data, "cumulative_metrics", {}).get(("disk-write", "bytes"), 0))


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(rows: int, columns: int, chunk_rows: int, workers: int, memory_limit: str, check: int,
        per_tensor: bool = False) -> dict:
    """Quantize a ``rows x columns`` float32 array on the cluster; the measurements as a dict.

    ``per_tensor``: one scale for the whole array instead of one per 32 (two passes).
    """
    import dask
    import dask.array as da
    from dask.utils import parse_bytes
    from distributed import Client, LocalCluster

    limit = parse_bytes(memory_limit)
    with (LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, memory_limit=limit,
                       dashboard_address=None, silence_logs=logging.ERROR) as cluster,
          Client(cluster) as client):
        pids = client.run(_warm_up)
        baseline = client.run(peak_rss)
        x = da.random.default_rng(18).standard_normal((rows, columns), chunks=(chunk_rows, columns), dtype=np.float32)
        codes, scale, zero_point = _quantize(x, per_tensor)
        sums = (codes.sum(dtype=np.uint64), scale.sum(dtype=np.float64), zero_point.sum(dtype=np.int64))
        start = time.perf_counter()
        x.sum(dtype=np.float64).compute()
        generate = time.perf_counter() - start
        start = time.perf_counter()
        checksums = dask.compute(*sums)
        seconds = time.perf_counter() - start
        peaks = client.run(peak_rss)
        spilled = client.run(_spilled)
        restarted = client.run(os.getpid) != pids
        checked = []
        for block in np.linspace(0, x.numblocks[0] - 1, check).astype(int):  # same graph, same chunks: same data
            part = slice(block * chunk_rows, (block + 1) * chunk_rows)
            if per_tensor:  # the whole array's qparams, as they were computed
                s, zp = dask.compute(scale, zero_point)
                expected = (nbquant.quantize(x[part].compute(), s, "int4", zero_point=zp, scale_op="reciprocal",
                                             packed=True),)
                got = dask.compute(codes[part])
            else:
                expected = _quantize(x[part].compute())
                got = dask.compute(codes[part], scale[part], zero_point[part])
            checked.append(all(np.array_equal(np.asarray(g).view(np.uint8), np.asarray(e).view(np.uint8))
                               for g, e in zip(got, expected, strict=True)))
    return {
        "date": time.strftime("%Y-%m-%d"),
        "commit": _commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
        "input_bytes": x.nbytes,
        "chunk_bytes": chunk_rows * columns * 4,
        "workers": workers,
        "memory_limit": limit,
        "seconds": round(seconds, 2),
        "generate_seconds": round(generate, 2),
        "input_gb_per_s": round(x.nbytes / seconds / 1e9, 3),
        "baseline_peak_rss": sorted(baseline.values()),
        "peak_rss": sorted(peaks.values()),
        "spilled_bytes": sum(spilled.values()),
        "granularity": "per-tensor" if per_tensor else f"g{GROUP}",
        "restarted": restarted,
        "checked_blocks_equal": checked,
        "checksums": [int(checksums[0]), float(checksums[1]), int(checksums[2])],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=24576, help="rows of the float32 input (default 24576: 3 GiB)")
    parser.add_argument("--columns", type=int, default=32768)
    parser.add_argument("--chunk-rows", type=int, default=256, help="rows per chunk (default 256: 32 MiB)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="400MB", help="per worker (default 400MB)")
    parser.add_argument("--check", type=int, default=3, help="row blocks checked against NumPy (default 3)")
    parser.add_argument("--per-tensor", action="store_true", help="one scale for the whole array (two passes)")
    args = parser.parse_args(argv)
    result = run(args.rows, args.columns, args.chunk_rows, args.workers, args.memory_limit, args.check,
                 args.per_tensor)
    mib = 2 ** 20
    times = result["input_bytes"] / (result["workers"] * result["memory_limit"])
    print(f"{result['input_bytes'] / 2**30:.2f} GiB float32 -> int4 {result['granularity']} packed on "
          f"{result['workers']} workers x {result['memory_limit'] / 1e6:.0f} MB ({times:.1f}x their memory): "
          f"{result['seconds']:.1f} s ({result['input_gb_per_s']:.2f} GB/s of input; the input generated alone: "
          f"{result['generate_seconds']:.1f} s)")
    print(f"worker peak RSS: {', '.join(f'{p / mib:.0f} MiB' for p in result['peak_rss'])} (after warm-up: "
          f"{', '.join(f'{p / mib:.0f} MiB' for p in result['baseline_peak_rss'])}); spilled to disk: "
          f"{result['spilled_bytes'] / mib:.0f} MiB; restarted: {result['restarted']}; "
          f"blocks equal to NumPy: {result['checked_blocks_equal']}")
    print(json.dumps(result))
    return 0 if not result["restarted"] and all(result["checked_blocks_equal"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
