"""Fixed costs of the cuda backend on a real GPU: the first call of each kernel family, and a small call.

Bandwidth at large sizes is the ratio benchmark's job (``python -m benchmarks --device cuda``:
every case against a device-to-device copy and torch on CUDA). This module measures what a user
pays before the data moves, one row per kernel family:

* ``first s``: the first call in this process, to its end (the kernel's compile by NVVM, or
  its load from Numba's on-disk cache when ``NUMBA_CACHE_DIR`` already holds it);
* ``second ms``: the next call (the same signature, now in memory);
* ``dev 2^10 us``: the median of ``--repeat`` calls on 1024 elements already on the device,
  each to its end (``cuda.synchronize``): the launch overhead of a small call;
* ``host 2^10 us``: the same with NumPy in and out on ``backend="cuda"`` (copies to and from the
  device included);
* ``cpu 2^10 us``: the same NumPy call on the cpu backend, for scale.

Usage::

    python -m benchmarks.cuda [--repeat 200] [--profile]

``--profile`` then profiles (cProfile, top 25 by cumulative time) the small device call of the
first family, where the fixed cost of a call on device arrays goes.

Run it from the repository root, once with an empty ``NUMBA_CACHE_DIR`` (the cold compile) and
once more with that cache filled (a new process's first call). Without a GPU it exits 1 with a
message (``tests/test_bench.py`` checks that it starts).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import ml_dtypes
import numpy as np


def _families(rows: int, cols: int) -> list[tuple[str, Callable]]:
    """``(label, call(x_float32_2d, codes_int8_2d) -> result)`` for each kernel family."""
    import nbquant

    s_row = np.linspace(0.01, 0.02, rows, dtype=np.float32)
    s_g32 = np.full((rows, cols // 32), 0.02, np.float32)
    return [
        ("quantize int8 per-tensor", lambda x, q: nbquant.quantize(x, 0.02, "int8")),
        ("quantize int8 per-channel", lambda x, q: nbquant.quantize(x, s_row, "int8", axis=0)),
        ("quantize uint8 zero point", lambda x, q: nbquant.quantize(x, 0.02, "uint8", zero_point=128)),
        ("quantize int4 packed g32", lambda x, q: nbquant.quantize(x, s_g32, "int4", axis=1, block_size=32,
                                                                    packed=True)),
        ("quantize fp8 e4m3", lambda x, q: nbquant.quantize(x, 0.02, "float8_e4m3fn")),
        ("quantize fp4 e2m1 packed", lambda x, q: nbquant.quantize(x, 0.02, "float4_e2m1fn", packed=True)),
        ("dequantize int8 -> f32", lambda x, q: nbquant.dequantize(q, 0.02)),
        ("dequantize int8 -> bf16", lambda x, q: nbquant.dequantize(q, 0.02, out_dtype=ml_dtypes.bfloat16)),
        ("quantize_mx mxfp4", lambda x, q: nbquant.quantize_mx(x, "mxfp4")),
        ("quantize_nvfp4", lambda x, q: nbquant.quantize_nvfp4(x)),
        ("quantize_nf4", lambda x, q: nbquant.quantize_nf4(x)),
        ("quantize_dynamic int8 per-row", lambda x, q: nbquant.quantize_dynamic(x, "int8", axis=0)),
        ("quantize_dynamic uint4 g128 packed", lambda x, q: nbquant.quantize_dynamic(
            x, "uint4", block_size=(1, 128), mapping="asymmetric", packed=True)),
        ("reduce_amax per-tensor", lambda x, q: nbquant.reduce_amax(x)),
    ]


def _timed(cuda, fn: Callable[[], object]) -> float:
    """Seconds of one call of ``fn`` to its end on the GPU."""
    t0 = time.perf_counter()
    fn()
    cuda.synchronize()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cuda", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200, help="small calls per family (median reported)")
    parser.add_argument("--profile", action="store_true", help="profile the small device call of the first family")
    args = parser.parse_args(argv)
    from numba import cuda
    from numba.cuda.core import config

    if config.ENABLE_CUDASIM or not cuda.is_available():
        print("benchmarks.cuda: needs a real CUDA GPU (not the simulator)", file=sys.stderr)
        return 1
    import numba

    import nbquant
    from nbquant.backends.cuda.runtime import to_device

    name = cuda.get_current_device().name
    print(f"device: {name.decode() if isinstance(name, bytes) else name}; numba {numba.__version__}; "
          f"NUMBA_CACHE_DIR={numba.config.CACHE_DIR or '(default)'}")
    rows, cols = 1024, 1024
    rng = np.random.default_rng(0)
    x_big = rng.standard_normal((rows, cols), dtype=np.float32)
    q_big = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    x_small, q_small = x_big[:1, :], q_big[:1, :]  # 1024 elements
    d_big, d_qbig = to_device(x_big), to_device(q_big)
    d_small, d_qsmall = to_device(np.ascontiguousarray(x_small)), to_device(np.ascontiguousarray(q_small))
    print(f"{'kernel family (1024 x 1024 float32, then 2^10)':<38} {'first s':>8} {'second ms':>10} "
          f"{'dev 2^10 us':>12} {'host 2^10 us':>13} {'cpu 2^10 us':>12}")
    small_calls = dict(_families(1, cols))
    for label, call in _families(rows, cols):
        small = small_calls[label]
        try:
            first = _timed(cuda, lambda call=call: call(d_big, d_qbig))
            second = _timed(cuda, lambda call=call: call(d_big, d_qbig))
            small(d_small, d_qsmall)  # a 1-row layout may be another signature: compile it before timing
            with nbquant.use_backend("cuda"):
                small(x_small, q_small)
                cuda.synchronize()
                dev = statistics.median(_timed(cuda, lambda s=small: s(d_small, d_qsmall)) for _ in range(args.repeat))
                host = statistics.median(_timed(cuda, lambda s=small: s(x_small, q_small)) for _ in range(args.repeat))
            with nbquant.use_backend("cpu"):
                small(x_small, q_small)
                cpu = statistics.median(_timed(cuda, lambda s=small: s(x_small, q_small)) for _ in range(args.repeat))
        except Exception as exc:  # noqa: BLE001 - report the family and go on
            print(f"{label:<38} failed: {type(exc).__name__}: {exc}", flush=True)
            continue
        print(f"{label:<38} {first:>8.2f} {second * 1e3:>10.3f} {dev * 1e6:>12.1f} {host * 1e6:>13.1f} "
              f"{cpu * 1e6:>12.1f}", flush=True)
    if args.profile:
        _profile(cuda, small_calls, d_small, d_qsmall, args.repeat)
    return 0


def _profile(cuda, calls: dict[str, Callable], x, q, repeat: int) -> None:
    """cProfile of ``repeat`` small device calls of the first family, the top 25 by cumulative time."""
    import cProfile
    import pstats

    label, call = next(iter(calls.items()))
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(repeat):
        call(x, q)
        cuda.synchronize()
    profiler.disable()
    print(f"\nprofile: {repeat} calls of {label!r} on 2^10 elements on the device")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    sys.exit(main())
