"""GGUF block formats: the compiled backends against the NumPy reference bit for bit, golden bytes, round trips, checks.

The golden records were written by ggml's C (``ggml_quantize_chunk`` of the llama.cpp the
``llama-cpp-python`` 0.3.36 sdist vendors, default x86-64 build; ``tools/ggml_oracle.py``)
once; tests/test_parity_gguf.py checks against the live C build.
"""

from __future__ import annotations

import hashlib

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbquant import gguf
from nbquant.compat import gguf as compat

FORMATS = gguf.implemented_formats()

#: A 64-value row (two blocks) and its importance, and ggml's records of it.
GOLDEN_X = ((np.arange(64, dtype=np.float32) * 37 % 64 - 31.5) / 8).astype(np.float32).reshape(1, 64)
GOLDEN_X[0, 7] = 9.25
GOLDEN_W = (1 + np.arange(64, dtype=np.float32) % 5).astype(np.float32)
GOLDEN = {
    ("Q4_0", False): "a0bcab679a5689a56890578ab679a5689b57a0b748bf158cf36ad037ae047ce259cf269d",
    ("Q4_0", True): "a1bcab679a5689a56890578ab679a5689b57adb748bf158cf36ad037ae047ce259cf269d",
    ("Q4_1", False): "093be0c3208541975318743f86420763297531861138a0c3c851ea731da63fc862fb841db740d962",
    ("Q4_1", True): "033b0ec4208542975318743f8642076329753196fd3777c3c851ea731da63fc862fb841db740d962",
    ("Q5_0", False): "a0b8556aa55637bf159df25ad030be146ce24ac026aea0b32bb55aa9706e2a09e5b3906e4c19f7d4928f4d2b",
    ("Q5_0", True): "96b8556aa55637bf159df35ad030be146ce24ac026ad05b42bb55aa9805d3b08e6b3916e4c19f7c4a27f5d2a",
    ("Q5_1", False): "ce36e0c3a0100a81500b833eb631e96f0c941fb742ea621ddf33a0c3d54aa55680a2d5f72a4c7f91c4e6193b6e80b3d5",
    ("Q5_1", True): "d03615c4a0100a81500b833eb631e96f1c941fc742fa722d05348ac3d44aa5567fa2c4f7194c6e91b3e6083b5d80a2d5",
    ("Q8_0", False): "a92cca09db1bec2cfd7f0fe020f13103d414e525f73608d919eb2afccd0ddf1ef02faf2702922cbb55e57f0f9e"
                     "38c862f1811bab45d46efe8d28b751e17b0a9a34c45eed",
}
GOLDEN.update({
    ("IQ4_NL", False): "a6acac579b467ab468a0478bc579b4589b46f727d841fb831eb63fd951fc941ec730ea62",
    ("IQ4_NL", True): "9aacac579b467ab468a0478bc579b4589b460728d851fb831eb63fd952fc941ec730ea62",
    ("MXFP4", False): "80ac319b4219b320a6310ac219a4209b317e60df750ef74be762cf751df75aef73af",
})
GOLDEN[("MXFP4", True)] = GOLDEN[("MXFP4", False)]  # ggml ignores an imatrix for MXFP4
GOLDEN[("Q8_0", True)] = GOLDEN[("Q8_0", False)]  # ggml ignores an imatrix for Q8_0
#: A 512-value row (two super-blocks, one all-zero 16-value sub-block) and its importance; the first 32 hex
#: digits of the SHA-256 of ggml's records.
GOLDEN_KX = ((np.arange(512, dtype=np.float32) * 37 % 256 - 127.5) / 32).astype(np.float32).reshape(1, 512)
GOLDEN_KX[0, 7] = 9.25
GOLDEN_KX[0, 300:316] = 0.0
GOLDEN_KW = (1 + np.arange(512, dtype=np.float32) % 7).astype(np.float32)
GOLDEN_K = {
    ("Q4_K", False): "95eb97797937a77de0854ceb33559cfe", ("Q4_K", True): "fa3054cf351eb1cc11f5f91366f54fa9",
    ("Q5_K", False): "06c06dff29e9b381164681bbf588db74", ("Q5_K", True): "8b3e2b2c56b0b632d3252d2a9a482897",
    ("Q6_K", False): "b07c75ea0a06c1ce797e6fdfad3818f7", ("Q6_K", True): "a630566cb16415dac9f2c1ccf59a8cfa",
    ("IQ4_XS", False): "97a1843e2a93eacf041eb939862c5b24", ("IQ4_XS", True): "ec95311043c91ff41bddf6292e4cef31",
    ("Q3_K", False): "5979c09885fb365de1cf9c9228d4bebe", ("Q3_K", True): "4ae7607ad98ec0e2367f6476ef60f020",
    ("Q2_K", False): "57e034f8693f5b8d4527025c65dfcd7c", ("Q2_K", True): "f1b6618e2d18a9009845e86d86df73fc",
}


def special_rows(n: int = 64) -> np.ndarray:
    """Rows of ``n`` values with the cases the formats treat specially (one case per 32-value block)."""
    rng = np.random.default_rng(7)
    rows = rng.standard_t(4, (12, n)).astype(np.float32)
    rows[0, :32] = 0.0                       # all zero
    rows[0, 32:64] = 0.0
    rows[0, 40] = -0.0                       # all zero holding -0.0
    rows[1, :32] = 1.5                       # constant
    rows[1, 32:64] = rng.integers(-2, 3, 32)  # many ties
    rows[2, :32] *= 1e-39                    # subnormal
    rows[2, 32:64] *= 1e30                   # huge
    rows[3, 5] = 1000.0                      # a single outlier
    rows[3, 32:64] = -0.0
    rows[3, 33:35] = 0.0                     # minimum: -0.0 beside +0.0
    rows[4, :32] = np.abs(rows[4, :32])      # non-negative block (minimum clamps to 0 with an imatrix)
    rows[4, 32:64] = -np.abs(rows[4, 32:64])
    rows[5, 3], rows[5, 9] = 4.0, -4.0       # equal |max| of both signs, max on a power of two
    rows[5, 35], rows[5, 36] = -2.0, 2.0
    rows[6] *= 65504.0 * 2                   # scales beyond float16
    rows[7, 16:32] = 0.0                     # an all-zero 16-value sub-block (Q6_K)
    return rows


def _width(name: str) -> int:
    return 2 * gguf.get_format(name).block_size


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("use_imatrix", [False, True])
@pytest.mark.parametrize("name", FORMATS)
def test_golden_records(name, use_imatrix):
    kquant = gguf.get_format(name).block_size == 256
    x = GOLDEN_KX if kquant else GOLDEN_X
    imatrix = (GOLDEN_KW if kquant else GOLDEN_W) if use_imatrix else None
    for backend in ("reference", "cpu"):
        got = gguf.quantize(x, name, imatrix=imatrix, backend=backend).tobytes()
        if kquant:
            assert hashlib.sha256(got).hexdigest()[:32] == GOLDEN_K[(name, use_imatrix)], backend
        else:
            assert got.hex() == GOLDEN[(name, use_imatrix)], backend


@pytest.mark.parametrize("use_imatrix", [False, True])
@pytest.mark.parametrize("name", FORMATS)
def test_backend_equals_reference(backend, name, use_imatrix):
    x = special_rows(_width(name))
    imatrix = np.random.default_rng(3).uniform(0.0, 4.0, x.shape[1]).astype(np.float32) if use_imatrix else None
    want = gguf.quantize(x, name, imatrix=imatrix, backend="reference")
    got = gguf.quantize(x, name, imatrix=imatrix, backend=backend)
    assert _same(got, want)
    assert _same(gguf.dequantize(want, name, backend=backend), gguf.dequantize(want, name, backend="reference"))


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", FORMATS)
def test_half_inputs_quantize_as_their_float32_values(backend, name, half):
    """float16 and bfloat16 rows (bfloat16 was refused before) give the records of their float32 values, each
    value widened exactly: NaN, inf and subnormals included, a read-only input as a file's memory map is."""
    dtype = np.dtype(ml_dtypes.bfloat16) if half == "bfloat16" else np.dtype(np.float16)
    with np.errstate(over="ignore"):
        x = special_rows(_width(name)).astype(dtype)
    x[0, :4] = np.array([np.nan, -np.inf, 2.0**-133 if half == "bfloat16" else 2.0**-24, -0.0]).astype(dtype)
    x.flags.writeable = False  # as the file's memory map is
    assert _same(gguf.quantize(x, name, backend=backend),
                 gguf.quantize(x.astype(np.float32), name, backend="reference"))


@pytest.mark.parametrize("name", FORMATS)
def test_dequantize_random_records_equals_reference(backend, name):
    fmt = gguf.get_format(name)
    data = np.random.default_rng(5).integers(0, 256, (3, 2 * fmt.type_size), dtype=np.uint8)
    assert _same(gguf.dequantize(data, name, backend=backend), gguf.dequantize(data, name, backend="reference"))


@given(st.integers(0, 2**32 - 1), st.sampled_from(FORMATS), st.booleans())
def test_cpu_equals_reference_property(seed, name, use_imatrix):
    rng = np.random.default_rng(seed)
    n = _width(name)
    x = (rng.standard_normal((2, n)) * np.exp2(rng.integers(-20, 20, (2, 1)))).astype(np.float32)
    x[rng.random((2, n)) < 0.1] = 0.0
    imatrix = rng.uniform(0.0, 10.0, n).astype(np.float32) if use_imatrix else None
    assert _same(gguf.quantize(x, name, imatrix=imatrix), gguf.quantize(x, name, imatrix=imatrix,
                                                                         backend="reference"))


@pytest.mark.parametrize("name", FORMATS)
def test_round_trip_error_is_bounded(name):
    x = np.random.default_rng(11).standard_normal((4, 3, _width(name))).astype(np.float32)
    q = gguf.quantize(x, name)
    assert q.shape == (4, 3, 2 * gguf.get_format(name).type_size) and q.dtype == np.uint8
    y = gguf.dequantize(q, name)
    assert y.shape == x.shape and y.dtype == np.float32
    steps = {"Q8_0": 1 / 127, "Q4_0": 1 / 8, "Q5_0": 1 / 16, "Q4_1": 2 / 15, "Q5_1": 2 / 31}
    if name in steps:
        # within half a step of the block's range; a whole step where Q4_0/Q5_0 clip the far side's extreme
        step = steps[name]
        blocks_amax = np.abs(x).reshape(-1, 32).max(axis=1, keepdims=True)
        assert (np.abs(y - x).reshape(-1, 32) <= blocks_amax * step * 1.01).all()
    else:
        # K-quants, IQ4 and MXFP4: no per-value bound (6-bit sub-block scales, searched minima, non-linear
        # grids, power-of-two scales); each row's relative RMS error stays below the bits' usual figure
        # (measured 0.075, 0.039, 0.019, 0.160, 0.311, 0.083, 0.079, 0.134 on this data)
        limit = {"Q4_K": 0.09, "Q5_K": 0.045, "Q6_K": 0.022, "Q3_K": 0.18, "Q2_K": 0.34, "IQ4_NL": 0.095,
                 "IQ4_XS": 0.09, "MXFP4": 0.15}[name]
        assert (np.sqrt(((y - x) ** 2).mean(axis=-1) / (x**2).mean(axis=-1)) < limit).all()


def test_signed_zeros_follow_c():
    x = np.zeros((1, 32), np.float32)
    x[0, 3] = -0.0
    assert gguf.quantize(x, "Q4_0")[0, :2].tolist() == [0, 0x80]  # d = 0 / -8 = -0.0
    y = np.zeros((1, 32), np.float32)
    y[0, 0] = -0.0
    y[0, 1] = 1.0
    assert gguf.quantize(y, "Q4_1")[0, 2:4].tolist() == [0, 0x80]  # m: the first minimal element, -0.0


def test_formats_table():
    assert {f.name: (f.block_size, f.type_size) for f in gguf.FORMATS.values()}["Q6_K"] == (256, 210)
    assert gguf.get_format("q5_1").bits_per_weight == 6.0
    assert gguf.get_format(39).name == "MXFP4"
    assert gguf.get_format(gguf.get_format(2)) is gguf.get_format("Q4_0")


def test_compat_matches_native_and_casts():
    x = special_rows()
    assert _same(compat.quantize(x, 2), gguf.quantize(x, "Q4_0"))
    assert _same(compat.dequantize(compat.quantize(x, "Q8_0"), 8), gguf.dequantize(gguf.quantize(x, 8), 8))
    assert compat.quantize(x, "F16").dtype == np.float16
    assert _same(compat.dequantize(x.view(np.uint8), 0), x)
    with pytest.raises(NotImplementedError, match="Quantization for IQ2_XXS is not yet implemented"):
        compat.quantize(x, "IQ2_XXS")
    with pytest.raises(compat.QuantError, match="Can't quantize tensor with shape"):
        compat.quantize(x[:, :40], "Q4_0")


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: gguf.quantize(np.ones((2, 33), np.float32), "Q4_0"), ValueError, "multiple of Q4_0's block size 32"),
    (lambda: gguf.quantize(np.ones((2, 32), np.int32), "Q4_0"), TypeError, "float16, bfloat16, float32 or float64"),
    (lambda: gguf.quantize([1.0] * 32, "Q4_0"), TypeError, "numpy.ndarray"),
    (lambda: gguf.quantize(np.ones(32, np.float32), "Q9_9"), ValueError, "not a GGUF block format"),
    (lambda: gguf.quantize(np.ones(32, np.float32), 2.0), TypeError, "qtype must be"),
    (lambda: gguf.quantize(np.ones(32, np.float32), gguf.GGUFFormat("X", 99, 32, 18, False)), NotImplementedError,
     "does not implement GGUF X"),
    (lambda: gguf.quantize(np.ones(128, np.float32), "Q6_K"), ValueError, "multiple of Q6_K's block size 256"),
    (lambda: gguf.quantize(np.ones(32, np.float32), "Q4_0", imatrix=np.ones(16, np.float32)), ValueError,
     r"imatrix must have shape \(32,\)"),
    (lambda: gguf.quantize(np.ones(32, np.float32), "Q4_0", imatrix=-np.ones(32, np.float32)), ValueError,
     "finite, non-negative"),
    (lambda: gguf.quantize(np.ones(32, np.float32), "Q4_0", backend="gpu"), ValueError, "backend must be one of"),
    (lambda: gguf.dequantize(np.ones((2, 17), np.uint8), "Q4_0"), ValueError, "record size 18"),
    (lambda: gguf.dequantize(np.ones((2, 18), np.float32), "Q4_0"), TypeError, "uint8 block records"),
])
def test_argument_checks(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_inputs_are_not_modified():
    x = special_rows()
    w = np.ones(64, np.float32)
    x0, w0 = x.copy(), w.copy()
    q = gguf.quantize(x, "Q4_1", imatrix=w)
    q0 = q.copy()
    gguf.dequantize(q, "Q4_1")
    assert _same(x, x0) and _same(w, w0) and _same(q, q0)




def test_every_format_has_its_element_functions_and_kernels():
    """One quantize and one dequantize element function per format, and a cpu kernel of each (a first call compiles
    its format alone)."""
    from nbquant.backends.cpu import gguf as cpu_gguf
    from nbquant.element.gguf_kquants import KQUANT_DEQUANTIZERS, KQUANT_QUANTIZERS
    from nbquant.element.gguf_legacy import LEGACY_DEQUANTIZERS, LEGACY_QUANTIZERS

    kinds = {gguf.get_format(name).type_id for name in FORMATS}
    assert set(LEGACY_QUANTIZERS) | set(KQUANT_QUANTIZERS) == kinds
    assert set(LEGACY_QUANTIZERS) == set(LEGACY_DEQUANTIZERS) and set(KQUANT_QUANTIZERS) == set(KQUANT_DEQUANTIZERS)
    assert set(cpu_gguf.QUANTIZE_KERNELS) == set(cpu_gguf.DEQUANTIZE_KERNELS) == kinds
    kernels = (*cpu_gguf.QUANTIZE_KERNELS.values(), *cpu_gguf.DEQUANTIZE_KERNELS.values())
    names = {k.__qualname__ for k in kernels}
    assert len(names) == 2 * len(kinds) and "q4_k_quantize_kernel" in names
    # no closure: Numba's disk cache keys a kernel on its code, its closure's pickle (a dispatcher's holds an id of
    # its process) and, for the file, its qualified name
    assert all(k.__wrapped__.__closure__ is None for k in kernels)


def test_c_float_to_int_conversions_of_every_kind_of_value():
    """``round_away`` is C's ``(int)roundf(v)`` and ``trunc_i64`` C's ``(int)v`` (their low bits, as ggml stores them):
    ties go away from zero, values just below a half stay, and NaN, infinities and ``|v| >= 2**31`` give 0. Both
    are branch-free (so that Q8_0's and Q4_0's code loops vectorize); this pins each edge."""
    from numba import njit

    from nbquant.element.gguf_common import round_away, trunc_i64

    @njit
    def both(v):
        return round_away(v), trunc_i64(v)

    below_half = np.nextafter(np.float32(0.5), np.float32(0))
    big = np.float32(2147483520.0)  # the largest float32 below 2**31
    cases = [(0.5, 1, 0), (-0.5, -1, 0), (1.5, 2, 1), (-1.5, -2, -1), (2.5, 3, 2), (-2.5, -3, -2),
             (below_half, 0, 0), (-below_half, 0, 0), (126.5, 127, 126), (-127.49998, -127, -127),
             (0.0, 0, 0), (-0.0, 0, 0), (1e-45, 0, 0), (big, 2147483520, 2147483520),
             (-big, -2147483520, -2147483520), (2.0**31, 0, 0), (-(2.0**31), 0, 0), (3e38, 0, 0),
             (np.inf, 0, 0), (-np.inf, 0, 0), (np.nan, 0, 0)]
    for v, *want in cases:
        assert both(np.float32(v)) == tuple(want), v
    for bits in (0xFFC00000, 0x7FFFFFFF, 0x7FC00001):
        assert both(np.array([bits], np.uint32).view(np.float32)[0]) == (0, 0)
