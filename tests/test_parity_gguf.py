"""GGUF parity: nbquant's records equal ggml's C ``ggml_quantize_chunk``; its floats equal gguf-py's ``dequantize``.

The C oracle is built once per session (``tools/ggml_oracle.py``: the llama.cpp the
``llama-cpp-python`` 0.3.36 sdist vendors, target ``ggml-base``, default flags; cache
folder ``$NBQUANT_GGML_ORACLE_DIR`` or a temporary one). Cases: random weight-like rows,
ties, all-zero blocks, a single outlier, -0.0, subnormal and huge magnitudes, block
maxima on and next to powers of two, random positive importance matrices.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbquant import gguf

pytestmark = pytest.mark.parity

FORMATS = gguf.implemented_formats()
#: The formats gguf-py's ``quantize`` implements.
GGUF_PY_QUANTIZERS = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "MXFP4")
_ORACLE = Path(__file__).resolve().parents[1] / "tools" / "ggml_oracle.py"


@pytest.fixture(scope="session")
def oracle():
    spec = importlib.util.spec_from_file_location("ggml_oracle", _ORACLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.GgmlOracle(mod.build_library())


@pytest.fixture(scope="session")
def gguf_py():
    import gguf as peer

    return peer


def _rows(seed: int, rows: int = 8, n: int = 256) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_t(4, (rows, n)) * np.exp2(rng.integers(-12, 12, (rows, 1)))
    return x.astype(np.float32)


def _crafted() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 256)).astype(np.float32)
    x[0] = 0.0
    x[0, 3] = -0.0
    x[0, 64:] = -0.0
    x[0, 70] = 0.0
    x[1, :32] = rng.integers(-4, 5, 32)                    # ties at every code
    x[1, 32:64] = np.where(np.arange(32) % 2, 1.0, -1.0)   # equal |max| of both signs
    x[2, :64] *= 1e-40                                     # subnormal
    x[2, 64:] *= 1e35                                      # huge
    x[3, 17] = 300.0                                       # single outlier
    for r in range(4, 16):                                 # maxima on and next to powers of two
        p = np.float32(2.0 ** (r - 9))
        x[r, 5::32] = np.resize([p, np.nextafter(p, np.float32(0)), np.nextafter(p, np.float32(np.inf)), -p], 8)
    x[5, 32:64] = np.abs(x[5, 32:64])
    x[6, 64:96] = -0.0
    x[6, 65] = 0.0
    x[6, 66:70] = 1.0
    x[7, 128:144] = 0.0                                    # an all-zero 16-value sub-block (Q6_K)
    x[8, 128:160] = 2.5                                    # a constant sub-block
    x[8, 160:176] = -1.25                                  # a constant negative 16-value sub-block (Q2_K: flat)
    x[9] = rng.integers(-3, 4, 256)                        # ties everywhere (few distinct values)
    x[10, :128] = np.repeat(rng.integers(-2, 3, 8), 16) * 0.5  # sub-blocks of one value each
    return x


def _differing_blocks(a: np.ndarray, b: np.ndarray, size: int) -> np.ndarray:
    return np.nonzero((a.reshape(-1, size) != b.reshape(-1, size)).any(axis=1))[0]


@pytest.mark.parametrize("use_imatrix", [False, True])
@pytest.mark.parametrize("name", FORMATS)
def test_crafted_rows_match_c(oracle, name, use_imatrix):
    fmt = gguf.get_format(name)
    x = _crafted()
    w = np.random.default_rng(1).uniform(0.01, 8.0, x.shape[1]).astype(np.float32) if use_imatrix else None
    want = oracle.quantize(x, fmt.type_id, w)
    for backend in ("reference", "cpu"):
        got = gguf.quantize(x, name, imatrix=w, backend=backend)
        assert _differing_blocks(got, want, fmt.type_size).tolist() == [], backend


@settings(max_examples=40)
@given(seed=st.integers(0, 2**32 - 1), name=st.sampled_from(FORMATS), use_imatrix=st.booleans())
def test_random_rows_match_c(oracle, seed, name, use_imatrix):
    fmt = gguf.get_format(name)
    x = _rows(seed)
    w = (np.random.default_rng(seed + 1).uniform(0.0, 5.0, x.shape[1]).astype(np.float32) ** 2
         if use_imatrix else None)
    assert _differing_blocks(gguf.quantize(x, name, imatrix=w), oracle.quantize(x, fmt.type_id, w),
                             fmt.type_size).tolist() == []


@pytest.mark.parametrize("use_imatrix", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_q2k_random_and_tie_heavy_rows_match_c(oracle, seed, use_imatrix):
    """Q2_K's searches (16-value sub-blocks, ``|x|``-weighted absolute errors without an importance matrix) on
    weight-like rows and on rows of few distinct values (ties at every 2-bit code), all blocks compared."""
    rng = np.random.default_rng(seed)
    ties = rng.integers(-3, 4, (8, 1024)).astype(np.float32) * np.float32(0.25)
    x = np.concatenate([_rows(seed, rows=8, n=1024), ties])
    w = rng.uniform(0.0, 5.0, x.shape[1]).astype(np.float32) ** 2 if use_imatrix else None
    want = oracle.quantize(x, 10, w)
    for backend in ("reference", "cpu"):
        assert _differing_blocks(gguf.quantize(x, "Q2_K", imatrix=w, backend=backend), want, 84).tolist() == [], \
            backend


@pytest.mark.parametrize("name", FORMATS)
def test_large_matrix_matches_c(oracle, name):
    fmt = gguf.get_format(name)
    x = _rows(123, rows=256, n=4096)
    assert _differing_blocks(gguf.quantize(x, name), oracle.quantize(x, fmt.type_id), fmt.type_size).tolist() == []


@pytest.mark.parametrize("name", FORMATS)
def test_dequantize_matches_gguf_py(gguf_py, name):
    """Random record bytes (NaN and inf scales included) and real records: gguf-py's floats, NaN where it has NaN."""
    fmt = gguf.get_format(name)
    qtype = gguf_py.GGMLQuantizationType[name]
    records = np.random.default_rng(9).integers(0, 256, (64, 8 * fmt.type_size), dtype=np.uint8)
    real = gguf.quantize(_rows(4, n=256), name)
    for data in (records, real):
        with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 in gguf-py's arithmetic on random bytes
            want = gguf_py.quants.dequantize(data, qtype)
        got = gguf.dequantize(data, name)
        assert got.shape == want.shape and got.dtype == want.dtype == np.float32
        nan = np.isnan(want)
        assert np.array_equal(nan, np.isnan(got))
        assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.parametrize("name", [f for f in FORMATS if f in GGUF_PY_QUANTIZERS])
def test_quantize_matches_gguf_py_away_from_signed_zeros(gguf_py, name):
    """gguf-py's quantizers (it has none for the K-quants and IQ4) agree with nbquant where no block holds signed
    zeros."""
    x = _rows(5, rows=32)
    qtype = gguf_py.GGMLQuantizationType[name]
    assert np.array_equal(gguf.quantize(x, name), gguf_py.quants.quantize(x, qtype))


def _mxfp4_exponent_edges() -> np.ndarray:
    """Blocks whose maximum is one of the 96 float32s at and below each power of two from 2**-148 to FLT_MAX.

    ``floorf(log2f(amax))`` rounds up to the power's exponent for the last few of them
    (more the farther the exponent is from 0); subnormal maxima included.
    """
    top = np.append(np.ldexp(1.0, np.arange(-148, 128)).astype(np.float32), np.float32(np.finfo(np.float32).max))
    v = np.maximum(top.view(np.int32)[:, None] - np.arange(96)[None, :], 1).astype(np.int32).view(np.float32).ravel()
    x = v[:, None] * np.random.default_rng(0).uniform(-1, 1, (v.size, 32)).astype(np.float32)
    x[:, 0] = np.where(np.arange(v.size) % 2, v, -v)
    return x.astype(np.float32).reshape(-1, 256)


def test_mxfp4_exponent_edges_match_c(oracle):
    x = _mxfp4_exponent_edges()
    want = oracle.quantize(x, 39)
    for backend in ("reference", "cpu"):
        assert _differing_blocks(gguf.quantize(x, "MXFP4", backend=backend), want, 17).tolist() == [], backend
