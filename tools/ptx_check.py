"""Compile every CUDA kernel signature nbquant launches to PTX and SASS, without a GPU.

Each ``(kernel, signature)`` in :func:`nbquant.backends.cuda.runtime.all_signatures` is typed and
lowered once (numba-cuda; see :data:`LOWERING_CC`), then NVVM (the pip ``nvidia-nvvm`` wheel) emits
its PTX for each target architecture and ``ptxas -arch=sm_XY -v`` assembles it, from the pip
``nvidia-cuda-nvcc`` wheel of the same CUDA minor (never ``/usr/local/cuda``). It fails
on any compile error, any ``.f64`` instruction in a float32 path (float64-input kernels
may only load float64 and convert it to float32), any fused multiply-add in a GGUF kernel
and any register spill, and prints the registers each kernel uses.

Usage::

    python tools/ptx_check.py [--arch 75,80,89,90,100,120] [--one-per-kernel] [--only PATTERNS] [--jobs N]

``--only 'gguf_*'`` checks the GGUF kernels alone: one kernel per format and direction
(``gguf_q8_0_quantize``, ..., ``gguf_iq4_xs_dequantize``), each its own entry of
``all_signatures()``, so every format is checked, ``--one-per-kernel`` included.

Exit status 0 when everything passes, 1 on a failure, 2 when the toolkit wheels
(``pip install 'nbquant[test]'``) are absent.
"""

from __future__ import annotations

import argparse
import fnmatch
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

ARCHES = (75, 80, 89, 90, 100, 120)
MISSING = 2

_REGS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
# In a float64-input kernel the only float64 work allowed is loading x and rounding it to float32.
_F64_ALLOWED = re.compile(r"^\s*(ld\.global(\.nc)?\.f64|cvt\.rn\.f32\.f64)\b")


def find_ptxas() -> Path | None:
    """``ptxas`` from the pip ``nvidia-cuda-nvcc`` wheel in this interpreter's site-packages, if installed."""
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
    for root in roots:
        for sub in ("cu13", "cuda_nvcc", "cu12"):
            exe = Path(root) / sub / "bin" / ("ptxas.exe" if os.name == "nt" else "ptxas")
            if exe.is_file():
                return exe
    return None


def toolkit_problem() -> str:
    """Why the check cannot run here ("" when it can)."""
    import importlib.util

    if importlib.util.find_spec("numba_cuda") is None:
        return "numba-cuda is not installed (pip install 'nbquant[test]')"
    if find_ptxas() is None:
        return "ptxas from the pip nvidia-cuda-nvcc wheel is not installed (pip install 'nbquant[test]')"
    if importlib.util.find_spec("nvidia.cu13") is None and importlib.util.find_spec("nvidia.cuda_nvrtc") is None:
        return "the pip NVRTC/NVVM wheels are not installed (pip install 'nbquant[test]')"
    return ""


def f64_violations(ptx: str, f64_input: bool) -> list[str]:
    """PTX instruction lines that use float64 where the kernel should stay in float32."""
    bad = []
    for line in ptx.splitlines():
        if ".f64" not in line or line.lstrip().startswith("//"):
            continue
        if f64_input and (_F64_ALLOWED.match(line) or line.lstrip().startswith(".reg .f64")):
            continue
        bad.append(line.strip())
    return bad


#: Kernels whose names start with this must hold no :data:`FMA`: ggml's C rounds each product and sum on its
#: own, and the GGUF kernels match it bit for bit (NVVM would contract ``a * b + c`` where the code allowed it).
NO_FMA_PREFIX = "gguf_"
FMA = "fma.rn.f32"

#: libdevice's float min/max, which no kernel may call: numba-cuda lowers the builtin ``max``/``min`` of floats to
#: ``__nv_fmaxf``/``__nv_fminf``, which drop a NaN and may return either zero, where Numba's cpu ``max`` keeps the
#: first operand unless the second is greater (found on an H100: ``max(-0.0, 0.0)`` gave ``+0.0``). The element
#: layer compares instead (``max_f32``, ``min_f32``). Checked on the lowered LLVM IR: NVVM itself turns a
#: compare-and-select into ``max.f32`` where it proves the result the same (an operand that is never NaN).
LIBDEVICE_MINMAX = re.compile(r"(?<=@)\"?(__nv_f(?:max|min)f?)\b")


#: The compute capability every signature is lowered at. numba-cuda 0.30's lowering reads the target's compute
#: capability in two places only (``nvvmutils.declare_atomic_add_float64``: native below 6.0 or not;
#: ``mathimpl.impl_tanh``: ``tanh.approx`` under fastmath from 7.5), so for every arch from 7.5 up the lowered
#: LLVM IR is the same and NVVM alone differs per arch: lowering once and running NVVM per arch gives
#: ``compile_ptx``'s PTX for each arch (checked equal, symbol names aside) for a fifth of the time.
LOWERING_CC = (7, 5)


def _compile_signature(index: int, arches: list[int]):
    """Worker: PTX of signature ``index`` of ``all_signatures()`` for each arch (or the error).

    The signature is typed and lowered once (at :data:`LOWERING_CC`), then NVVM emits each arch's PTX from that
    module, as ``numba.cuda.compile_ptx`` does after lowering.
    """
    from numba import types
    from numba.cuda.compiler import _compile_pyfunc_with_fixup

    from nbquant.backends.cuda import runtime

    name, sig = runtime.all_signatures()[index]
    fn = runtime.KERNELS[name].fn
    label = f"{name}({sig.args[0].dtype}->{sig.args[-1].dtype})"
    f64_input = any(getattr(a, "dtype", None) == types.float64 for a in sig.args)  # e.g. ste's x after grad
    try:
        library, _ = _compile_pyfunc_with_fixup(
            fn, sig.args, debug=False, lineinfo=False, device=False, fastmath=False, cc=LOWERING_CC, opt=True,
            abi="numba", abi_info=None, forceinline=False, launch_bounds=None, lto=False)
    except Exception as exc:  # report every failure, then fail
        return label, f64_input, [(arch, "", f"{type(exc).__name__}: {exc}") for arch in arches], []
    minmax = sorted(set(LIBDEVICE_MINMAX.findall(library.get_llvm_str())))
    per_arch = []
    for arch in arches:
        try:
            (ptx,) = library.get_asm_strs(cc=(arch // 10, arch % 10))
            per_arch.append((arch, ptx, ""))
        except Exception as exc:
            per_arch.append((arch, "", f"{type(exc).__name__}: {exc}"))
    return label, f64_input, per_arch, minmax


#: The signature whose PTX is also compiled the direct way (``compile_ptx`` per arch) on every run, to show that
#: lowering once gives the same PTX (a bfloat16 output: the half-type paths).
VERIFIED_KERNEL = "nvfp4_dequantize"
_SYMBOL = re.compile(r"_ZN\w+")


def _direct_ptx(index: int, arches: list[int]) -> list[str]:
    """Worker: ``numba.cuda.compile_ptx`` of signature ``index`` for each arch, symbol names blanked."""
    from numba import cuda

    from nbquant.backends.cuda import runtime

    name, sig = runtime.all_signatures()[index]
    return [_SYMBOL.sub("_", cuda.compile_ptx(runtime.KERNELS[name].fn, sig.args, cc=(a // 10, a % 10))[0])
            for a in arches]


def main(argv: list[str] | None = None) -> int:
    """Run the check; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default=",".join(map(str, ARCHES)), help="comma-separated sm numbers")
    parser.add_argument("--one-per-kernel", action="store_true",
                        help="only the first signature of each kernel (the default test tier's quick check)")
    parser.add_argument("--only", default="*",
                        help="comma-separated shell patterns of kernel names to check (e.g. 'gguf_*'); default all")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compile processes")
    args = parser.parse_args(argv)
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        print("ptx_check: unset NUMBA_ENABLE_CUDASIM; the simulator cannot compile PTX", file=sys.stderr)
        return 1
    problem = toolkit_problem()
    if problem:
        print(f"ptx_check: SKIP: {problem}", file=sys.stderr)
        return MISSING
    arches = [int(a) for a in args.arch.split(",") if a]
    if min(arches, default=75) < LOWERING_CC[0] * 10 + LOWERING_CC[1]:
        parser.error(f"--arch: the lowest arch checked is sm_75 (kernels are lowered once at it), got {args.arch}")
    ptxas = find_ptxas()

    import numba
    from numba import cuda

    from nbquant.backends.cuda import runtime

    version = subprocess.run([str(ptxas), "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    nvvm = cuda.cudadrv.nvvm.NVVM().get_version()
    print(f"numba {numba.__version__}, numba-cuda {cuda.implementation}, NVVM IR {nvvm}, "
          f"ptxas {version[-1] if version else '?'} ({ptxas})")
    start = time.perf_counter()
    failures: list[str] = []
    jobs = []
    count = len(runtime.all_signatures())
    with tempfile.TemporaryDirectory() as tmp:
        # One lowering per signature, NVVM per arch; spread the signatures over processes (numba's compiler
        # is serial).
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max(1, min(args.jobs, count)), mp_context=ctx) as pool:
            names = [name for name, _ in runtime.all_signatures()]
            patterns = [p for p in args.only.split(",") if p]
            chosen = [i for i in range(count) if (not args.one_per_kernel or names.index(names[i]) == i)
                      and any(fnmatch.fnmatchcase(names[i], p) for p in patterns)]
            if not chosen:
                parser.error(f"--only: no kernel matches {args.only!r}")
            verified = next((i for i in chosen if names[i] == VERIFIED_KERNEL), chosen[0])
            direct = pool.submit(_direct_ptx, verified, arches)
            compiled = dict(zip(chosen, pool.map(_compile_signature, chosen, [arches] * len(chosen)), strict=True))
            lowered = [_SYMBOL.sub("_", ptx) for _, ptx, _ in compiled[verified][2]]
            same = direct.result() == lowered
            print(f"lowered once, NVVM per arch: {compiled[verified][0]}'s PTX "
                  f"{'equals' if same else 'DIFFERS from'} compile_ptx's for every arch")
            if not same:
                failures.append(f"{compiled[verified][0]}: the PTX of one lowering differs from compile_ptx's")
        for index, (label, f64_input, per_arch, minmax) in compiled.items():
            if minmax:
                failures.append(f"{label}: calls {', '.join(minmax)} (the builtin max/min of floats), which differ "
                                "from the cpu's max/min on NaN and signed zeros")
            for arch, ptx, error in per_arch:
                if error:
                    failures.append(f"{label} sm_{arch}: compile_ptx failed: {error}")
                    continue
                bad = f64_violations(ptx, f64_input)
                if bad:
                    failures.append(f"{label} sm_{arch}: {len(bad)} float64 instruction(s), e.g. {bad[:3]}")
                if label.startswith(NO_FMA_PREFIX) and FMA in ptx:
                    failures.append(f"{label} sm_{arch}: {ptx.count(FMA)} fused multiply-add(s), which ggml's C "
                                    "does not contract")
                path = Path(tmp) / f"k{index}_sm{arch}.ptx"
                path.write_text(ptx)
                jobs.append((label, arch, path))

        def assemble(job):
            label, arch, path = job
            out = path.with_suffix(".cubin")
            res = subprocess.run([str(ptxas), f"-arch=sm_{arch}", "-v", str(path), "-o", str(out)],
                                 capture_output=True, text=True)
            return label, arch, res

        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            results = list(pool.map(assemble, jobs))

    table: dict[str, dict[int, str]] = {}
    for label, arch, res in results:
        text = res.stdout + res.stderr
        if res.returncode:
            failures.append(f"{label} sm_{arch}: ptxas failed: {text.strip()}")
            continue
        regs = _REGS.search(text)
        spills = _SPILL.findall(text)
        if not regs:
            failures.append(f"{label} sm_{arch}: no register count in ptxas output: {text.strip()}")
            continue
        if any(int(s) or int(ld) for s, ld in spills):
            failures.append(f"{label} sm_{arch}: register spill: {spills}")
        table.setdefault(label, {})[arch] = regs.group(1)

    width = max(map(len, table), default=10)
    print(f"{'kernel (input->output)':<{width}}  " + "  ".join(f"sm_{a:<4}" for a in arches) + "  (registers)")
    for label, regs in table.items():
        print(f"{label:<{width}}  " + "  ".join(f"{regs.get(a, '-'):<7}" for a in arches))
    elapsed = time.perf_counter() - start
    print(f"{len(results)} kernel x arch compiles ({len(table)} signatures x {len(arches)} arches) in {elapsed:.1f}s; "
          f"spills: {'none' if not any('spill' in f for f in failures) else 'SOME'}; failures={len(failures)}")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
