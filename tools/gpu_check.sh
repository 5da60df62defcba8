#!/usr/bin/env bash
# The cuda backend on a real GPU, in one run that fits a short lease (docs/cuda.md, "Checked on a GPU").
#
#   tools/gpu_check.sh [PHASE...]       # default: env tests ratio gguf latency convert
#
# Output goes to $OUT when set (the device tool's folder), else /tmp/nbquant-gpu. Phases, each under its own
# time limit (seconds: TESTS_LIMIT, RATIO_LIMIT, GGUF_LIMIT, CONVERT_LIMIT), each writing OUTDIR/<phase>.log,
# one line per phase in OUTDIR/summary.txt (exit status and seconds):
#   env      the GPU, driver and Python packages (wheels in .whl/ are installed first, see below);
#   tests    the backend suite on cuda (NBQUANT_TEST_BACKENDS=cuda: every test that uses the backend fixture,
#            bit for bit against reference) + tests/test_cuda_simulator.py + the gpu-marked tests, pytest-xdist;
#            a Numba cpu-cache warm-up runs beside it for the later phases;
#   latency  python -m benchmarks.cuda with an empty NUMBA_CACHE_DIR (cold compile), then again (cache load)
#            with a profile of the small call on device arrays;
#   ratio    python -m benchmarks --device cuda at 2^24 and 2^28, the quantize and dequantize case of each kernel
#            family (RATIO_CASES: other case names), against a device-to-device copy of the same bytes and torch
#            on CUDA;
#   gguf     python -m benchmarks.gguf_quantize --device cuda: each GGUF format on a 4096 x 4096 device matrix
#            against the cpu backend on every core, and the two outputs compared byte for byte;
#   convert  nbquant convert of a 594 MiB bf16 checkpoint on the cpu and on cuda (NBQUANT_BACKEND=cuda):
#            wall time and a byte comparison of the outputs.
# A wheel folder .whl/ (numba-cuda and what it needs, for Python 3.12) is installed into /tmp/site first when
# present; numba itself only when the machine's llvmlite matches it. Archives .whl/*-site.tar.xz (unpacked wheels:
# numba, llvmlite, numba-cuda, cuda-core, cuda-pathfinder, ml_dtypes, NumPy 2.4) are unpacked there instead.
set -u
cd "$(dirname "$0")/.."
OUTD=${OUT:-/tmp/nbquant-gpu}
PHASES=${*:-env tests ratio gguf latency convert}
mkdir -p "$OUTD"
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE
export PY=${PYTHON:-python3} OUTD
T0=$(date +%s)

phase() {  # phase NAME LIMIT_S CMD...: run CMD with a time limit, its output in OUTD/NAME.log
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    timeout -k 5 "$limit" "$@" >>"$OUTD/$name.log" 2>&1
    rc=$?
    echo "$name rc=$rc $(($(date +%s) - start))s (at $(($(date +%s) - T0))s)" | tee -a "$OUTD/summary.txt"
}

if ls .whl/*-site.tar.xz >/dev/null 2>&1; then
    # the same packages as site-packages trees in xz (llvmlite's wheel alone is 57 MB, over the 64 MiB a call carries)
    mkdir -p /tmp/site && for f in .whl/*-site.tar.xz; do tar xJf "$f" -C /tmp/site; done && export PYTHONPATH=/tmp/site
elif ls .whl/*.whl >/dev/null 2>&1; then
    # numpy too: numba-cuda 0.30.4 needs a NumPy that still has np.row_stack (removed in 2.5)
    wheels=$(ls .whl/numba_cuda-*.whl .whl/cuda_core-*.whl .whl/cuda_pathfinder-*.whl .whl/ml_dtypes-*.whl \
        .whl/numpy-*.whl 2>/dev/null)
    llvm=$($PY -c "import importlib.metadata as m; print(m.version('llvmlite'))" 2>/dev/null)
    case $llvm in 0.50.*) wheels="$wheels $(ls .whl/numba-0.68*.whl 2>/dev/null)" ;; esac
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels \
        >>"$OUTD/env.log" 2>&1 && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export NUMBA_CACHE_DIR=/tmp/nbquant-numba-cache

env_info() {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
    nvidia-smi | head -5
    nproc; uname -r; git log -1 --format='commit %H %cd' 2>/dev/null
    $PY - <<'EOF'
import importlib.metadata as m, sys
print(sys.version)
for p in ("numba", "llvmlite", "numba-cuda", "cuda-bindings", "cuda-core", "cuda-pathfinder", "numpy", "ml_dtypes",
          "torch", "cupy-cuda13x", "hypothesis", "pytest", "pytest-xdist"):
    try:
        print(p, m.version(p))
    except m.PackageNotFoundError:
        print(p, "-")
from numba import cuda
try:
    import numba.cuda.cudadrv.nvvm as nvvm
    print("cuda runtime", cuda.runtime.get_version(), "nvvm", nvvm.NVVM().get_version())
except Exception as e:
    print("versions:", type(e).__name__, e)
cuda.detect()
import nbquant
print([(b.name, b.available, b.reason) for b in nbquant.backends()])
EOF
}

convert_both() {  # cpu and cuda conversions of one checkpoint, per scheme: wall time, then a byte comparison
    local src=/tmp/nbquant-ckpt scheme b
    [ -d $src ] || $PY -c "from nbquant.convert.synthetic import write_synthetic_checkpoint as w; \
w('$src', hidden=2048, intermediate=5632, layers=4, vocab=32000, shard_bytes=320 << 20)"
    du -sh $src
    for scheme in ${SCHEMES:-W4A16 NVFP4A16}; do
        for b in cpu cuda; do
            rm -rf "/tmp/out-$b"
            /usr/bin/time -f "$scheme $b: %e s wall, %M KiB peak RSS" env NBQUANT_BACKEND=$b \
                $PY -m nbquant convert $src "/tmp/out-$b" --scheme "$scheme" --ignore lm_head --quiet
        done
        diff -r /tmp/out-cpu /tmp/out-cuda && echo "$scheme: cpu and cuda outputs are byte-identical"
    done
}
export -f env_info convert_both

#: One case per kernel family, quantize and dequantize (names are matched as substrings).
FAMILIES="q int8 per-channel axis0,q uint8 per-tensor zp,q int4 g32 packed,q fp8 e4m3 per-tensor,"
FAMILIES+="q fp6 e3m2 per-tensor packed,q fp4 e2m1 g16 packed,mxfp4,q mxfp8,nvfp4,q int8 per-row dynamic,"
FAMILIES+="q int4 g128 dynamic packed,q nf4 (block 64),calib max"
#: The GGUF formats of the gguf phase (and of the cpu warm-up beside the tests).
GGUF_FORMATS=${GGUF_FORMATS:-Q8_0,Q4_0,IQ4_NL,Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,IQ4_XS}

for p in $PHASES; do
    case $p in
    env) phase env 60 bash -c env_info ;;
    tests)
        # The cpu kernels of the benchmark's set-ups and the cpu conversion, compiled while the GPU tests run.
        (cd tests && nice -n 5 $PY _background.py warm >/tmp/nbquant-cpu-warm.log 2>&1) &
        for f in ${GGUF_FORMATS//,/ }; do  # the gguf phase's cpu kernels, one process per format
            nice -n 5 $PY -c "import numpy as np; from nbquant.block_rows import quantize_blocks as q; \
from nbquant.blocks import get_block_format as g; q(g('gguf_${f,,}'), np.ones((1, 256), np.float32), backend='cpu')" \
                >>/tmp/nbquant-cpu-warm.log 2>&1 &
        done
        phase tests "${TESTS_LIMIT:-210}" env NBQUANT_TEST_BACKENDS=cuda PYTHONPATH="$PWD/tests:$PYTHONPATH" \
            $PY -m pytest tests -q -p _cudasim_plugin -p no:cacheprovider -n "${WORKERS:-14}" --tb=short -rfE -p no:benchmark \
            -W ignore::pytest.PytestUnknownMarkWarning --junitxml="$OUTD/tests.xml" -o addopts="" ;;
    latency)
        rm -rf /tmp/nbquant-cold-cache
        phase latency 60 env NUMBA_CACHE_DIR=/tmp/nbquant-cold-cache $PY -m benchmarks.cuda --repeat 200
        phase latency 45 env NUMBA_CACHE_DIR=/tmp/nbquant-cold-cache $PY -m benchmarks.cuda --repeat 200 --profile ;;
    ratio)
        wait
        phase ratio "${RATIO_LIMIT:-200}" $PY -m benchmarks --device cuda --sizes "${RATIO_SIZES:-2^24,2^28}" --repeats 10 \
            --cases "${RATIO_CASES:-$FAMILIES}" --json "$OUTD/bench-cuda.json" ;;
    gguf) wait; phase gguf "${GGUF_LIMIT:-60}" $PY -m benchmarks.gguf_quantize --device cuda --repeats 5 \
        --formats "$GGUF_FORMATS" --json "$OUTD/gguf-cuda.json" ;;
    convert) wait; phase convert "${CONVERT_LIMIT:-120}" bash -c convert_both ;;
    *) echo "unknown phase $p (env tests ratio gguf latency convert)" >&2; exit 2 ;;
    esac
done
echo "total $(($(date +%s) - T0))s" | tee -a "$OUTD/summary.txt"
