"""choose_qparams / quantize_dynamic: compiled backends bit-exact against the NumPy oracle, torchao, and quantize."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbquant
from tests._helpers import assert_same_bits

MAPPINGS = ("symmetric", "asymmetric", "symmetric_no_clipping_err", "modelopt")
DTYPES = ("int8", "uint8", "int4", "uint4", "int2", "int16")
GRANULARITIES = (
    {},
    {"axis": 0},
    {"axis": 1},
    {"axis": 1, "block_size": 5},
    {"axis": 0, "block_size": 4},
    {"block_size": (1, 12)},
    {"block_size": (3, 4)},
)


def _ok(mapping: str, dtype: str) -> bool:
    return not (mapping == "symmetric_no_clipping_err" and dtype.startswith("u"))


def _data(shape=(9, 24), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * rng.uniform(0.01, 10, shape[-1])).astype(np.float32)
    x[0, :4] = 0.0  # an all-zero group
    return x


def _scale_op(mapping: str) -> str:
    return "multiply" if mapping == "modelopt" else "reciprocal"


def _narrow(mapping: str, dtype: str) -> dict:
    fmt = nbquant.get_format(dtype)
    return {"quant_min": -fmt.qmax} if mapping == "modelopt" and fmt.signed else {}


@pytest.mark.parametrize("mapping", MAPPINGS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gran", GRANULARITIES, ids=str)
def test_backend_matches_reference_and_quantize(backend, mapping, dtype, gran):
    if not _ok(mapping, dtype):
        pytest.skip("symmetric_no_clipping_err needs a signed format")
    x = _data()
    x_copy = x.copy()
    packs = (False, True) if nbquant.get_format(dtype).packable else (False,)
    for packed in packs:
        got = nbquant.quantize_dynamic(x, dtype, mapping=mapping, packed=packed, backend=backend, **gran)
        ref = nbquant.quantize_dynamic(x, dtype, mapping=mapping, packed=packed, backend="reference", **gran)
        for a, b in zip(got, ref, strict=True):
            assert_same_bits(a, b)
        s, z = nbquant.choose_qparams(x, dtype, mapping=mapping, backend=backend, **gran)
        assert_same_bits(s, got[1])
        assert_same_bits(z, got[2])
        again = nbquant.quantize(x, s, dtype, zero_point=z, scale_op=_scale_op(mapping), packed=packed,
                                 backend=backend, **gran, **_narrow(mapping, dtype))
        assert_same_bits(got[0], again)
    assert_same_bits(x, x_copy)


@pytest.mark.full(reason="redundant in the default tier, and 35-57 s of cold compiling each (one more dynamic_rows "
                         "signature per dtype): test_cuda_kernel_families.py::test_choose_qparams_and_quantize_dynamic "
                         "covers float16, bfloat16 and float64 inputs to the dynamic kernels on cpu, every mapping")
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
def test_half_and_double_inputs(backend, dtype):
    x = _data((5, 16)).astype(dtype)
    for mapping in ("symmetric", "asymmetric"):
        got = nbquant.quantize_dynamic(x, "int4", block_size=(1, 8), mapping=mapping, backend=backend)
        ref = nbquant.quantize_dynamic(x, "int4", block_size=(1, 8), mapping=mapping, backend="reference")
        for a, b in zip(got, ref, strict=True):
            assert_same_bits(a, b)


def test_param_shapes():
    x = _data((6, 8))
    assert nbquant.choose_qparams(x, "int8")[0].shape == ()
    assert nbquant.choose_qparams(x, "int8", axis=0)[0].shape == (6,)
    assert nbquant.choose_qparams(x, "int8", axis=1, block_size=3)[0].shape == (6, 3)
    assert nbquant.choose_qparams(x, "int8", block_size=(1, 4))[0].shape == (6, 2)
    assert nbquant.choose_qparams(x, "int8", block_size=(6, 4))[1].shape == (2,)
    assert nbquant.choose_qparams(x, "int8")[1].dtype == np.int32


def test_hand_examples():
    x = np.array([[-1.0, 0.5], [2.0, 4.0]], np.float32)
    s, z = nbquant.choose_qparams(x, "int8", axis=0)
    assert_same_bits(s, np.array([1 / 127.5, 4 / 127.5], np.float32))
    assert z.tolist() == [0, 0]
    s, z = nbquant.choose_qparams(x, "uint8", mapping="asymmetric")
    assert s == np.float32(5.0) / np.float32(255) and int(z) == 51  # 0 - rne(-1 / (5/255)) = 51
    s, z = nbquant.choose_qparams(x, "uint8")
    assert int(z) == 128 and s == np.float32(4.0 / 127.5)
    s, z = nbquant.choose_qparams(x, "int4", mapping="symmetric_no_clipping_err")
    assert s == max(np.float32(-1.0) / np.float32(-8), np.float32(4.0) / np.float32(7))
    s, z = nbquant.choose_qparams(x, "int8", mapping="modelopt")
    assert s == np.float32(127) / np.float32(4) and int(z) == 0
    q, s, z = nbquant.quantize_dynamic(np.array([4.0, -4.0, 2.0], np.float32), "int8")
    # x * fl(1 / fl(4 / 127.5)): 4 → 127.49999 → 127 and -4 → -127 (the reciprocal rounds down), 2 → 64
    assert q.tolist() == [127, -127, 64]


def test_all_zero_and_tiny_blocks():
    x = np.zeros((2, 4), np.float32)
    s, z = nbquant.choose_qparams(x, "int8", axis=0)
    assert_same_bits(s, np.full(2, np.finfo(np.float32).smallest_normal, np.float32))
    s, z = nbquant.choose_qparams(x, "int8", axis=0, mapping="asymmetric")
    assert z.tolist() == [-128, -128]
    s, z = nbquant.choose_qparams(x, "int8", axis=0, eps=1e-7)
    assert s[0] == np.float32(1e-7)
    tiny = np.full((1, 4), 2.0 ** -25, np.float32)
    q, s, _ = nbquant.quantize_dynamic(tiny, "int8", mapping="modelopt")
    assert float(s) == 1.0 and q.tolist() == [[0, 0, 0, 0]]


@pytest.mark.parametrize("mapping", ["symmetric", "asymmetric", "modelopt"])
def test_nan_inf_blocks(backend, mapping):
    x = _data((4, 8))
    x[1, 2] = np.nan
    x[2, 3] = np.inf
    x[3, 0] = -np.nan
    got = nbquant.quantize_dynamic(x, "int8", axis=0, mapping=mapping, backend=backend)
    ref = nbquant.quantize_dynamic(x, "int8", axis=0, mapping=mapping, backend="reference")
    for a, b in zip(got, ref, strict=True):
        assert_same_bits(a, b)
    q, s, z = got
    assert np.isnan(s[1]) and np.isnan(s[3])
    assert np.isinf(s[2]) or (mapping == "modelopt" and s[2] == 0)
    for row in (1, 2, 3):
        assert (q[row].astype(np.int64) == z[row]).all()  # blocks with NaN/inf → zero point


def test_scale_op_divide(backend):
    x = _data()
    q, s, z = nbquant.quantize_dynamic(x, "int8", axis=0, scale_op="divide", backend=backend)
    assert_same_bits(q, nbquant.quantize(x, s, "int8", zero_point=z, axis=0, scale_op="divide"))


def test_empty_input():
    q, s, z = nbquant.quantize_dynamic(np.zeros((0, 4), np.float32), "int8", axis=1)
    assert q.shape == (0, 4) and s.shape == (4,)


@pytest.mark.parity
@pytest.mark.parametrize(("mapping", "bounds"), [  # SYMMETRIC_NO_CLIPPING_ERR divides by quant_min: signed only
    (m, b) for m in ("SYMMETRIC", "ASYMMETRIC", "SYMMETRIC_NO_CLIPPING_ERR")
    for b in [(-128, 127), (0, 255), (-8, 7), (0, 15)] if not (m.endswith("ERR") and b[0] == 0)])
@pytest.mark.parametrize("block", [(1, 12), (3, 24), (9, 24), (9, 1)])
def test_matches_torchao(backend, mapping, bounds, block):
    import torch
    from torchao.quantization.quant_primitives import MappingType, choose_qparams_affine, quantize_affine

    lo, hi = bounds
    dtype = {(-128, 127): "int8", (0, 255): "uint8", (-8, 7): "int4", (0, 15): "uint4"}[bounds]
    x = _data()
    xt = torch.from_numpy(x)
    tdt = torch.uint8 if lo == 0 else torch.int8
    s, z = choose_qparams_affine(xt, getattr(MappingType, mapping), list(block), tdt, quant_min=lo, quant_max=hi)
    q = quantize_affine(xt, list(block), s, z, tdt, quant_min=lo, quant_max=hi)
    qn, sn, zn = nbquant.quantize_dynamic(x, dtype, block_size=block, mapping=mapping.lower(), backend=backend)
    assert_same_bits(sn.reshape(-1), s.numpy().reshape(-1))
    assert np.array_equal(zn.reshape(-1), z.numpy().reshape(-1).astype(np.int32))
    assert np.array_equal(qn.astype(np.int64), q.numpy().astype(np.int64))


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=12),
                    elements=st.floats(-1e6, 1e6, width=32)),
       mapping=st.sampled_from(["symmetric", "asymmetric", "modelopt"]), group=st.integers(1, 12))
def test_property_fused_equals_two_pass(backend, x, mapping, group):
    g = min(group, x.shape[1])
    got = nbquant.quantize_dynamic(x, "int4", axis=1, block_size=g, mapping=mapping, backend=backend)
    ref = nbquant.quantize_dynamic(x, "int4", axis=1, block_size=g, mapping=mapping, backend="reference")
    for a, b in zip(got, ref, strict=True):
        assert_same_bits(a, b)
    q, s, z = got
    fmt = nbquant.get_format("int4")
    assert (q.astype(np.int64) >= fmt.qmin).all() and (q.astype(np.int64) <= fmt.qmax).all()


@pytest.mark.parametrize("mapping", ["symmetric", "asymmetric"])
@pytest.mark.parametrize(("dtype", "packed"), [("int8", False), ("uint4", False), ("uint4", True), ("int2", True)])
def test_fused_rows_span_chunks_and_a_partial_block(backend, mapping, dtype, packed):
    """Rows longer than the cpu kernel's L1 chunk, a partial last block, special values in some blocks."""
    cols = 8200 if backend != "cuda" else 264  # 256 (cuda: 8) blocks of 32 and one of 8 per row; the simulator is slow
    x = _data((3, cols), seed=3)
    x[0, 40], x[1, cols - 5], x[2, cols // 2] = np.nan, -np.inf, -0.0
    x[2, 33] = np.inf
    got = nbquant.quantize_dynamic(x, dtype, axis=1, block_size=32, mapping=mapping, packed=packed, backend=backend)
    ref = nbquant.quantize_dynamic(x, dtype, axis=1, block_size=32, mapping=mapping, packed=packed,
                                   backend="reference")
    for a, b in zip(got, ref, strict=True):
        assert_same_bits(a, b)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=hnp.arrays(np.float32, st.tuples(st.integers(1, 5), st.integers(1, 12).map(lambda n: 4 * n)),
                    elements=st.floats(width=32)),
       dtype=st.sampled_from(["int4", "uint4", "int2"]), group=st.sampled_from([4, 8, 12, 48]),
       mapping=st.sampled_from(["symmetric", "asymmetric", "modelopt"]))
def test_property_fused_packed_with_special_values(backend, x, dtype, group, mapping):
    """Packed fused quantization, NaN and ±inf included, equals the oracle bit for bit."""
    kw = {"axis": 1, "block_size": min(group, x.shape[1]), "mapping": mapping, "packed": True}
    got = nbquant.quantize_dynamic(x, dtype, backend=backend, **kw)
    ref = nbquant.quantize_dynamic(x, dtype, backend="reference", **kw)
    for a, b in zip(got, ref, strict=True):
        assert_same_bits(a, b)


@pytest.mark.parametrize(("kwargs", "exc", "match"), [
    ({"mapping": "affine"}, ValueError, "mapping='affine'"),
    ({"dtype": "float8_e4m3fn"}, ValueError, "floating-point format"),
    ({"dtype": "int32x"}, ValueError, "int32x"),
    ({"eps": 0.0}, ValueError, "eps=0.0"),
    ({"eps": "small"}, TypeError, "eps='small'"),
    ({"narrow_range": 1}, TypeError, "narrow_range=1"),
    ({"narrow_range": True, "quant_min": -5}, ValueError, "quant_min=-5"),
    ({"quant_min": -300}, ValueError, "quant_min=-300"),
    ({"dtype": "uint8", "mapping": "symmetric_no_clipping_err"}, ValueError, "quant_min < 0 < quant_max"),
    ({"mapping": "modelopt", "quant_max": 100}, ValueError, "quant_max"),
    ({"mapping": "modelopt", "scale_op": "divide"}, ValueError, "scale_op='divide'"),
    ({"scale_op": "multiply"}, ValueError, "scale_op='multiply'"),
    ({"packed": 1}, TypeError, "packed=1"),
    ({"packed": True}, ValueError, "packed=True"),
    ({"axis": 5}, ValueError, "axis=5"),
    ({"block_size": (1, 5)}, ValueError, "block_size"),
])
def test_bad_arguments(kwargs, exc, match):
    kw = {"dtype": "int8", **kwargs}
    dtype = kw.pop("dtype")
    with pytest.raises(exc, match=match.replace("(", r"\(").replace(")", r"\)")):
        nbquant.quantize_dynamic(np.ones((4, 8), np.float32), dtype, **kw)


def test_bad_input_dtype():
    with pytest.raises(TypeError, match="dtype int32"):
        nbquant.choose_qparams(np.ones(4, np.int32), "int8")
