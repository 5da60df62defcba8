"""The C oracle of the GGUF parity tests: ggml's own ``ggml_quantize_chunk``, built from source and called by ctypes.

A second target, :func:`build_quantize`, builds the ``llama-quantize`` tool from the same tree
(about 8-10 minutes on two cores): the file oracle of tests/test_parity_gguf_convert.py.

The source is the llama.cpp tree that the ``llama-cpp-python`` sdist vendors (version
:data:`SDIST_VERSION`, which vendors ggml-org/llama.cpp@0c1e57098). Only the cmake
target ``ggml-base`` is built (about 30 s on two cores), with cmake's default flags:
on x86-64 ``ggml-base`` gets no ``-march``, so the quantizers are compiled for baseline
SSE2 without FMA contraction. Those are the bytes nbquant's GGUF kernels reproduce.

The sdist, the extracted tree and the build live in a cache folder: ``$NBQUANT_GGML_ORACLE_DIR``
when set, else a fresh temporary folder (removed by nobody; CI caches nothing). Each
step is skipped when its output is already there.

Usage::

    python tools/ggml_oracle.py            # build (or find) the library, print its path
    python tools/ggml_oracle.py quantize   # build (or find) llama-quantize, print its path
    python tools/ggml_oracle.py parity     # both builds the parity tests use (the library, llama-quantize with
                                           # its C++ at -O0): .ci/run builds them while the default tier runs
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["SDIST_VERSION", "build_library", "build_quantize", "vocab_folder", "GgmlOracle"]

#: The ``llama-cpp-python`` sdist whose vendored llama.cpp is the reference.
SDIST_VERSION = "0.3.36"
_NAME = f"llama_cpp_python-{SDIST_VERSION}"


def _run(cmd: list[str], cwd: Path) -> None:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                           f"{result.stderr[-3000:]}")


def _cmake() -> str:
    """cmake beside this interpreter (the parity extra's wheel, in a venv that is not activated), else on PATH."""
    beside = Path(sys.executable).with_name("cmake")
    return str(beside) if beside.exists() else (shutil.which("cmake") or "cmake")


def _cache(cache: str | os.PathLike | None) -> Path:
    folder = Path(cache or os.environ.get("NBQUANT_GGML_ORACLE_DIR") or tempfile.mkdtemp(prefix="ggml-oracle-"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _source(cache: Path) -> Path:
    """The vendored llama.cpp tree of the sdist, downloaded and extracted into ``cache`` when missing."""
    sdist = cache / f"{_NAME}.tar.gz"
    if not sdist.exists():
        _run([sys.executable, "-m", "pip", "download", "--no-binary", "llama-cpp-python", "--no-deps",
              f"llama-cpp-python=={SDIST_VERSION}", "-d", str(cache)], cache)
    source = cache / _NAME / "vendor" / "llama.cpp"
    if not source.exists():
        with tarfile.open(sdist) as tar:
            tar.extractall(cache, filter="data")
    return source


def vocab_folder(cache: str | os.PathLike | None = None) -> Path:
    """llama.cpp's vocabulary tests: ``models/ggml-vocab-NAME.gguf`` (a tokenizer's metadata, no tensors) with
    ``.gguf.inp`` (texts) and ``.gguf.out`` (the ids the model's own Hugging Face tokenizer gives them)."""
    return _source(_cache(cache)) / "models"


def _build(cache: Path, build: str, target: str, tools: bool, extra: tuple[str, ...] = ()) -> None:
    _run([_cmake(), "-S", str(_source(cache)), "-B", str(cache / build), "-DCMAKE_BUILD_TYPE=Release",
          "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", f"-DLLAMA_BUILD_TOOLS={'ON' if tools else 'OFF'}",
          "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", *extra], cache)
    _run([_cmake(), "--build", str(cache / build), "--target", target, "--parallel", str(os.cpu_count() or 1)],
         cache)


def build_library(cache: str | os.PathLike | None = None) -> Path:
    """Download, extract and build ``libggml-base.so`` into ``cache``; return the library's path.

    Parameters
    ----------
    cache : path-like, optional
        The cache folder (default: ``$NBQUANT_GGML_ORACLE_DIR``, else a new temporary folder).
    """
    cache = _cache(cache)
    library = cache / "build" / "bin" / "libggml-base.so"
    if not library.exists():
        _build(cache, "build", "ggml-base", tools=False)
    return library


def build_quantize(cache: str | os.PathLike | None = None, *, optimized: bool = True) -> Path:
    """Download, extract and build the ``llama-quantize`` tool into ``cache``; return the executable's path.

    Cmake's default flags (the same reference build as :func:`build_library`); only the
    ``llama-quantize`` target and what it links (ggml, llama, common) are compiled.

    Parameters
    ----------
    cache : path-like, optional
        The cache folder (default: ``$NBQUANT_GGML_ORACLE_DIR``, else a new temporary folder).
    optimized : bool
        True: cmake's Release flags everywhere (the build to time). False (the parity tests): the C++ (llama,
        common, the tool; file layout and type choice, no quantizer) compiled at ``-O0``, which builds
        several times faster; the C of ggml, where every quantizer is, keeps the Release flags, so the files
        it writes are the reference build's bytes.
    """
    cache = _cache(cache)
    build = "build-tools" if optimized else "build-tools-cxx-O0"
    tool = cache / build / "bin" / "llama-quantize"
    if not tool.exists():
        extra = () if optimized else ("-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG",)
        _build(cache, build, "llama-quantize", tools=True, extra=extra)
    return tool


class GgmlOracle:
    """ctypes access to ``ggml_quantize_chunk`` of a built ``libggml-base.so``.

    Parameters
    ----------
    library : path-like
        The shared library (from :func:`build_library`).
    """

    def __init__(self, library: str | os.PathLike) -> None:
        lib = ctypes.CDLL(str(library))
        lib.ggml_quantize_chunk.restype = ctypes.c_size_t
        lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                            ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        lib.ggml_row_size.restype = ctypes.c_size_t
        lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
        lib.ggml_quantize_init.argtypes = [ctypes.c_int]
        lib.ggml_quantize_init.restype = None
        self.lib = lib

    def quantize(self, x: np.ndarray, qtype: int, imatrix: np.ndarray | None = None) -> np.ndarray:
        """``x`` (rows, n) float32 quantized to ``qtype`` by ggml: uint8 (rows, row bytes)."""
        x = np.ascontiguousarray(x, np.float32).reshape(-1, np.shape(x)[-1])
        rows, n = x.shape
        row_bytes = self.lib.ggml_row_size(int(qtype), n)
        out = np.zeros((rows, row_bytes), np.uint8)
        weights = None if imatrix is None else np.ascontiguousarray(imatrix, np.float32)
        self.lib.ggml_quantize_init(int(qtype))
        written = self.lib.ggml_quantize_chunk(int(qtype), x.ctypes.data, out.ctypes.data, 0, rows, n,
                                               None if weights is None else weights.ctypes.data)
        if written != out.nbytes:
            raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes, expected {out.nbytes}")
        return out


if __name__ == "__main__":
    _WHAT = {"": lambda: [build_library()], "quantize": lambda: [build_quantize()],
             "parity": lambda: [build_library(), build_quantize(optimized=False)]}
    _ARG = " ".join(sys.argv[1:])
    if _ARG not in _WHAT:
        sys.exit(f"ggml_oracle.py: unknown target {_ARG!r}; give nothing (the library), 'quantize' or 'parity'")
    print(*_WHAT[_ARG](), sep="\n")
