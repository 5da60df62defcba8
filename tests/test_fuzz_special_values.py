"""Fuzz: every operation, with NaN (any sign and payload), ±inf, subnormals, ±0 and ties planted, gives the
reference backend's bits on every compiled backend — NaN outputs included (they are canonical, docs/semantics.md).

Every NaN in a float output is also checked to be the canonical one on each backend, the reference included.
Comparing with the reference alone could not see a NaN that merely flows through the arithmetic: on the CPU
both sides propagate the planted payload alike, while a GPU writes its own NaN (0x7fffffff) — the first GPU
run found 67 such failures (docs/cuda.md, "Checked on a GPU").

Arrays are small (at most 3 x 64) so the module also runs under the CUDA simulator
(tests/test_cuda_simulator.py runs it in the default tier).
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_same_bits, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nbquant

PROPERTY = settings(max_examples=examples(60), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

#: float32 bit patterns planted among ordinary values.
SPECIAL_BITS = [
    0x7FC00000, 0xFFC00000, 0x7FC00001, 0xFFFFFFFF, 0x7F800001, 0xFFA00000,  # quiet/signalling NaN, both signs
    0x7F800000, 0xFF800000,  # ±inf
    0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00400000,  # subnormals
    0x00000000, 0x80000000,  # ±0
    0x7F7FFFFF, 0xFF7FFFFF, 0x00800000,  # ±FLT_MAX, FLT_MIN
    0x3F000000, 0xBFC00000, 0x40200000,  # ties 0.5, -1.5, 2.5
]


@st.composite
def planted(draw, cols_multiple: int = 32, finite: bool = False):
    """A (rows, cols) float32 array of normal values times a random magnitude, with special values planted."""
    rows = draw(st.integers(1, 3))
    cols = cols_multiple * draw(st.integers(1, max(1, 64 // cols_multiple)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore", under="ignore"):
        x = (rng.standard_normal((rows, cols)) * 10.0 ** draw(st.integers(-40, 38))).astype(np.float32)
    bits = [b for b in SPECIAL_BITS if not finite or (b & 0x7F800000) != 0x7F800000]
    count = draw(st.integers(0, min(8, x.size)))
    flat = x.reshape(-1).view(np.uint32)
    for _ in range(count):
        flat[draw(st.integers(0, x.size - 1))] = draw(st.sampled_from(bits))
    return x


def _arrays(result) -> list[np.ndarray]:
    """The arrays of a result: a plain array, a tuple of them, or a BlockQuantized / NF4Quantized."""
    if isinstance(result, tuple):
        return [a for r in result for a in _arrays(r)]
    if hasattr(result, "scales"):
        extra = [result.double_scales] if getattr(result, "double_scales", None) is not None else []
        return [np.asarray(result.data), np.asarray(result.scales), *extra]
    return [np.asarray(result)]


def same_on_both(backend: str, fn, *args, **kwargs):
    """Call ``fn`` on the reference and on ``backend``: the same exception, or the same bits of every output.

    The reference must not warn (NaN and inf are results, not warnings); the CUDA
    simulator runs kernels as NumPy scalar code, which warns, so the backend may.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            expected = fn(*args, backend="reference", **kwargs)
    except (ValueError, TypeError, OverflowError) as error:
        with pytest.raises(type(error)):
            fn(*args, backend=backend, **kwargs)
        return None
    got = fn(*args, backend=backend, **kwargs)
    for g, e in zip(_arrays(got), _arrays(expected), strict=True):
        assert_canonical_nans(np.asarray(e), "reference")
        assert_canonical_nans(np.asarray(g), backend)
        assert_same_bits(np.asarray(g), np.asarray(e))
    return expected


_CANONICAL = {np.dtype(np.float32): np.uint32(0x7FC00000), np.dtype(np.float16): np.uint16(0x7E00),
              np.dtype(ml_dtypes.bfloat16): np.uint16(0x7FC0)}


def assert_canonical_nans(a: np.ndarray, where: str) -> None:
    """Every NaN of a float32/float16/bfloat16 output has ``numpy.nan``'s bits (docs/semantics.md)."""
    canonical = _CANONICAL.get(a.dtype)
    if canonical is None:
        return
    bits = a.reshape(-1).view(canonical.dtype)
    nan = np.isnan(a.reshape(-1).astype(np.float32))
    bad = np.flatnonzero(nan & (bits != canonical))
    assert bad.size == 0, f"{where}: NaN outputs with other bits than numpy.nan's: {[hex(b) for b in bits[bad][:4]]}"


OUT_DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16]


@PROPERTY
@given(x=planted(), fmt=st.sampled_from(sorted(nbquant.MX_FORMATS)), rounding=st.sampled_from(["floor", "ceil"]),
       out_dtype=st.sampled_from(OUT_DTYPES))
def test_mx(backend, x, fmt, rounding, out_dtype):
    q = same_on_both(backend, nbquant.quantize_mx, x, fmt, scale_rounding=rounding)
    same_on_both(backend, nbquant.dequantize_mx, q.data, q.scales, fmt, out_dtype=out_dtype)


@PROPERTY
@given(x=planted(cols_multiple=16), g=st.sampled_from([1.0, 1e-3, 2.0**-20, 3e30]),
       out_dtype=st.sampled_from(OUT_DTYPES))
def test_nvfp4(backend, x, g, out_dtype):
    q = same_on_both(backend, nbquant.quantize_nvfp4, x, global_scale=np.float32(g))
    same_on_both(backend, nbquant.dequantize_nvfp4, q.data, q.scales, global_scale=np.float32(g),
                 out_dtype=out_dtype)


@PROPERTY
@given(x=planted(cols_multiple=64))
def test_nf4(backend, x):
    q = same_on_both(backend, nbquant.quantize_nf4, x)
    if q is None:  # NaN or inf in x: ValueError on both (docs/semantics.md)
        assert not np.isfinite(x).all()
        return
    same_on_both(backend, q.dequantize)


@PROPERTY
@given(x=planted(), fmt=st.sampled_from(["int8", "uint8", "int4", "uint4", "float8_e4m3fn", "float4_e2m1fn"]),
       scale=st.sampled_from([0.5, 1 / 3, 1e-30, 3e30]), out_dtype=st.sampled_from(OUT_DTYPES))
def test_static(backend, x, fmt, scale, out_dtype):
    packed = fmt in ("int4", "uint4", "float4_e2m1fn")
    q = same_on_both(backend, nbquant.quantize, x, np.float32(scale), fmt, packed=packed)
    same_on_both(backend, nbquant.dequantize, q, np.float32(scale), dtype=fmt, out_dtype=out_dtype)


@PROPERTY
@given(x=planted(), fmt=st.sampled_from(["int8", "uint8", "int4", "uint4"]),
       mapping=st.sampled_from(["symmetric", "asymmetric", "modelopt"]),
       layout=st.sampled_from([{}, {"axis": 0}, {"axis": 1}, {"block_size": (1, 32)}]))
def test_dynamic(backend, x, fmt, mapping, layout):
    if mapping == "modelopt" and fmt.startswith("u"):
        return  # modelopt's amax mapping is symmetric
    same_on_both(backend, nbquant.choose_qparams, x, fmt, mapping=mapping, **layout)
    same_on_both(backend, nbquant.quantize_dynamic, x, fmt, mapping=mapping, **layout)


@PROPERTY
@given(x=planted(), amax=st.sampled_from([None, 1.0, 3e38]), unsigned=st.booleans(),
       out_dtype=st.sampled_from([np.float32, np.float16]))
def test_modelopt_fake_quant(backend, x, amax, unsigned, out_dtype):
    with np.errstate(over="ignore"):  # beyond float16: inf, planted on purpose
        x = x.astype(out_dtype)
    same_on_both(backend, nbquant.modelopt.fake_tensor_quant, x, None if amax is None else np.float32(amax), 8,
                 unsigned=unsigned)
    same_on_both(backend, nbquant.modelopt.tensor_quant, x, None if amax is None else np.float32(amax), 8,
                 unsigned=unsigned)
    same_on_both(backend, nbquant.modelopt.scaled_e4m3, x, None if amax is None else np.float32(amax))
    same_on_both(backend, nbquant.reduce_amax, x, axis=0)


@PROPERTY
@given(x=planted(), layout=st.sampled_from([{}, {"axis": 0}, {"axis": 1}, {"block_size": (1, 32)},
                                            {"axis": 1, "block_size": 24}]))
def test_reduce_min_max(backend, x, layout):
    lo, hi = same_on_both(backend, nbquant.reduce_min_max, x, **layout)
    assert np.array_equal(np.isnan(lo), np.isnan(hi))  # a block holding NaN: NaN on both sides, whatever its sign
