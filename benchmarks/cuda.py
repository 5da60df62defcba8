"""Bandwidth of the cuda backend's kernels next to a device-to-device copy (needs a real GPU).

For each case and size, times ``nbquant.quantize`` / ``dequantize`` on device arrays (so
only the kernel and the tiny scale upload are timed) with CUDA events, and a
device-to-device copy of the same input bytes. It reports effective bandwidth: the
bytes the kernel reads plus the bytes it writes, per second. The copy figure is
``2 * bytes / time`` (read + write). Medians over ``--repeat`` runs after one warm-up
(which also compiles).

Usage::

    python -m benchmarks.cuda [--sizes 24,28] [--repeat 20]

Run it from the repository root. CI only checks that it starts (``tests/test_bench.py``: without
a GPU it exits 1 with a message); docs/cuda.md records that no GPU has measured it yet.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import ml_dtypes
import numpy as np


def _cases(n: int):
    """(label, run(x_dev) -> None, input dtype, bytes read, bytes written) for ``n`` elements."""
    import nbquant

    rows = 4096
    cols = n // rows
    per_channel = np.linspace(0.01, 0.02, rows, dtype=np.float32)
    blocked = np.full((rows, cols // 32), 0.02, np.float32)
    return [
        ("quantize f32->int8 per-tensor", np.float32, 4 * n, n,
         lambda x: nbquant.quantize(x, np.float32(0.02), "int8")),
        ("quantize f32->int8 per-channel(axis=0)", np.float32, 4 * n, n,
         lambda x: nbquant.quantize(x.reshape(rows, cols), per_channel, "int8", axis=0)),
        ("quantize bf16->int4 packed, blocks of 32", ml_dtypes.bfloat16, 2 * n, n // 2,
         lambda x: nbquant.quantize(x.reshape(rows, cols), blocked, "int4", axis=1, block_size=32, packed=True)),
        ("quantize f16->uint8 zero point", np.float16, 2 * n, n,
         lambda x: nbquant.quantize(x, np.float32(0.02), "uint8", zero_point=128)),
        ("dequantize int8->f32 per-tensor", np.int8, n, 4 * n,
         lambda q: nbquant.dequantize(q, np.float32(0.02))),
        ("dequantize int4 packed->bf16, blocks of 32", np.uint8, n // 2, 2 * n,
         lambda q: nbquant.dequantize(q.reshape(rows, cols // 2), blocked, axis=1, block_size=32, dtype="int4",
                                      out_dtype=ml_dtypes.bfloat16)),
    ]


def _time(cuda, fn, repeat: int) -> float:
    """Median seconds of ``repeat`` calls of ``fn`` timed with CUDA events, after one untimed call."""
    start, stop = cuda.event(), cuda.event()
    fn()
    cuda.synchronize()
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cuda.event_elapsed_time(start, stop) / 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cuda", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="24,28", help="log2 of the element counts")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    from numba import cuda
    from numba.cuda.core import config

    if config.ENABLE_CUDASIM or not cuda.is_available():
        print("benchmarks.cuda: needs a real CUDA GPU (not the simulator)", file=sys.stderr)
        return 1
    name = cuda.get_current_device().name
    print(f"device: {name.decode() if isinstance(name, bytes) else name}")
    print(f"{'case':<46} {'n':>6} {'kernel ms':>10} {'GB/s':>8} {'copy GB/s':>10} {'ratio':>6}")
    rng = np.random.default_rng(0)
    for log2 in (int(s) for s in args.sizes.split(",")):
        n = 1 << log2
        base = rng.standard_normal(n, dtype=np.float32)
        for label, dtype, read, written, run in _cases(n):
            host = (rng.integers(-128, 128, n, dtype=np.int8) if dtype == np.int8 else
                    rng.integers(0, 256, n // 2, dtype=np.uint8) if dtype == np.uint8 else base.astype(dtype))
            d = cuda.to_device(host)
            copy = cuda.device_array_like(d)
            t = _time(cuda, lambda d=d, run=run: run(d), args.repeat)
            t_copy = _time(cuda, lambda d=d, copy=copy: copy.copy_to_device(d), args.repeat)
            gbs, copy_gbs = (read + written) / t / 1e9, 2 * d.nbytes / t_copy / 1e9
            print(f"{label:<46} 2^{log2:<4} {t * 1e3:>10.3f} {gbs:>8.1f} {copy_gbs:>10.1f} {gbs / copy_gbs:>6.2f}")
            del d, copy
    return 0


if __name__ == "__main__":
    sys.exit(main())
