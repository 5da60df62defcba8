"""Every kernel family of the compiled backends on small odd shapes, bit for bit against ``reference``.

One module that touches every CUDA kernel family (static integer and float quantize and
dequantize, packed and unpacked; MX, NVFP4 and NF4; amax; the dynamic reductions,
qparams and fused rows; the modelopt fake-quant, STE and affine kernels; the calibrator
histogram) with few, small calls. It runs on the ``backend`` fixture: on ``cpu`` in the
normal run, and on ``cuda`` in the default tier's CUDA simulator run
(``tests/test_cuda_simulator.py``), where each CUDA thread is a Python thread, so the
shapes stay at a few hundred elements. Inputs carry NaN, ±inf, -0.0, a subnormal of the
input dtype and exact ties (values halfway between two codes at the element's scale).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_same_bits, dequantize_both, quantize_both

import nbquant

F32, F16, BF16, F64 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float64)


# --- inputs ----------------------------------------------------------------------------------------


def _element_scales(shape, scale, **layout) -> np.ndarray:
    """Each element's float32 scale: dequantizing codes of 1 gives exactly ``1 * scale``."""
    return nbquant.dequantize(np.ones(shape, np.int8), scale, backend="reference", **layout)


def _subnormal(dtype) -> float:
    return float(ml_dtypes.finfo(dtype).smallest_subnormal) * 3


def _planted(x: np.ndarray, step: np.ndarray, ties: np.ndarray, dtype, seed: int) -> np.ndarray:
    """``x`` (float32) with NaN, ±inf, -0.0, a subnormal of ``dtype``, and ``ties * step`` on a third of it."""
    rng = np.random.default_rng(seed)
    flat, step = x.reshape(-1).copy(), np.broadcast_to(step, x.shape).reshape(-1)
    at = rng.permutation(flat.size)
    k = at[5:5 + flat.size // 3]
    flat[k] = rng.choice(ties, k.size) * step[k]
    flat[at[:5]] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    out = flat.reshape(x.shape).astype(dtype)
    out.reshape(-1)[at[4]] = _subnormal(dtype)
    return out


def _int_input(shape, step, fmt: str, dtype, seed: int) -> np.ndarray:
    """Values spread over (and beyond) the code range of ``fmt`` at each element's step, with specials and ties."""
    f = nbquant.get_format(fmt)
    rng = np.random.default_rng(seed)
    x = (rng.uniform(f.qmin - 4, f.qmax + 4, shape) * step).astype(np.float32)
    ties = np.arange(max(f.qmin, -40) - 2, min(f.qmax, 40) + 2) + 0.5  # exact in bfloat16 too
    return _planted(x, step, ties, dtype, seed)


def _float_grid(fmt: str) -> np.ndarray:
    """The finite values of a float element format, ascending."""
    f = nbquant.get_format(fmt)
    values = np.arange(1 << f.bits, dtype=np.uint8).view(f.dtype).astype(np.float32)
    return np.unique(values[np.isfinite(values)])


def _float_input(shape, step, fmt: str, dtype, seed: int) -> np.ndarray:
    """Codes' values, midpoints between neighbouring codes (ties), overflow, specials, at each element's step."""
    grid = _float_grid(fmt)
    rng = np.random.default_rng(seed)
    top = grid[-1]
    x = (rng.uniform(-1.2 * top, 1.2 * top, shape) * step).astype(np.float32)
    ties = np.concatenate([(grid[1:] + grid[:-1]) / 2, [top * 1.0625, top * 4]])
    return _planted(x, step, ties.astype(np.float32), dtype, seed)


def _pow2(shape, seed: int) -> np.ndarray:
    return np.exp2(np.random.default_rng(seed).integers(-3, 4, shape)).astype(np.float32)


def _grid(shape, layout) -> tuple[int, ...]:
    return nbquant.layout.resolve_layout(shape, layout.get("axis"), layout.get("block_size")).grid


def _both(backend: str, fn, *args, **kwargs):
    """``fn`` on ``backend`` and on ``"reference"``: assert the same bits, return the backend's result."""
    got = fn(*args, backend=backend, **kwargs)
    _same(got, fn(*args, backend="reference", **kwargs))
    return got


def _same(got, ref) -> None:
    """Tuples, arrays and float32 scalars: the same bits."""
    if isinstance(ref, tuple):
        assert isinstance(got, tuple) and len(got) == len(ref)
        for g, r in zip(got, ref, strict=True):
            _same(g, r)
        return
    if np.ndim(ref) == 0:  # float32 scalars and 0-d arrays
        got, ref = np.asarray(got), np.asarray(ref)
    assert_same_bits(got, ref)


# --- static integer formats ------------------------------------------------------------------------

INT_CASES = [
    # format, shape, layout, zero point ("int" after rounding, "half" before rounding), scale_op, packed, x, out
    ("int8", (3, 5, 7), {}, None, "divide", False, F32, F32),
    ("uint8", (3, 5, 7), {"axis": 1}, "int", "reciprocal", False, F16, F16),
    ("int16", (3, 5, 7), {"axis": -1, "block_size": 3}, None, "multiply", False, BF16, BF16),
    ("uint16", (5, 18), {"block_size": (1, 6)}, "int", "divide", False, F64, F32),
    ("int8", (5, 18), {"axis": 0}, "half", "divide", False, F32, BF16),
    ("int4", (3, 5, 7), {"axis": 0, "block_size": 2}, None, "reciprocal", False, F16, F32),
    ("uint2", (5, 7), {"block_size": (5, 1)}, "int", "divide", False, BF16, F16),
    ("int4", (5, 18), {}, None, "divide", True, F32, F32),
    ("uint4", (3, 5, 6), {"axis": 1}, "int", "reciprocal", True, BF16, F16),
    ("int2", (3, 5, 12), {"axis": -1, "block_size": 5}, None, "multiply", True, F64, BF16),
    ("uint4", (5, 18), {"block_size": (5, 3)}, "half", "divide", True, F16, F32),
    ("uint2", (3, 8), {"axis": 0}, None, "divide", True, F32, F32),
    ("int32", (3, 5, 7), {"axis": 1}, "int", "divide", False, F32, F32),
    ("int32", (5, 18), {"block_size": (1, 6)}, None, "reciprocal", False, BF16, F16),
]


@pytest.mark.parametrize(("fmt", "shape", "layout", "zp", "scale_op", "packed", "x_dtype", "out_dtype"), INT_CASES,
                         ids=[f"{c[0]}-{c[2]}-{c[3]}-{c[4]}-{'packed' if c[5] else 'unpacked'}" for c in INT_CASES])
def test_integer_quantize_and_dequantize(backend, fmt, shape, layout, zp, scale_op, packed, x_dtype, out_dtype):
    f = nbquant.get_format(fmt)
    grid = _grid(shape, layout)
    scale = _pow2(grid, seed=len(shape) + f.bits)
    kw = dict(layout, scale_op=scale_op, packed=packed)
    rng = np.random.default_rng(f.bits)
    if zp == "int":  # int32: zero points float32 holds exactly
        kw["zero_point"] = rng.integers(max(f.qmin, -2 ** 24), min(f.qmax, 2 ** 24) + 1, grid).astype(np.int32)
    elif zp == "half":
        kw.update(zero_point=(rng.integers(2 * f.qmin, 2 * f.qmax + 1, grid) / 2).astype(np.float32),
                  zero_point_order="before_rounding")
    step = _element_scales(shape, scale, **layout)
    x = _int_input(shape, np.float32(1) / step if scale_op == "multiply" else step, fmt, x_dtype, seed=f.bits)
    q = quantize_both(backend, x, scale, fmt, **kw)
    dkw = {k: kw[k] for k in ("axis", "block_size", "zero_point") if k in kw}
    dequantize_both(backend, q, scale, dtype=fmt, out_dtype=out_dtype, **dkw)
    if fmt == "int8" and not packed:  # quant_min / quant_max narrowing on the same kernel
        quantize_both(backend, x, scale, fmt, quant_min=-100, quant_max=90, **kw)


# --- static float formats --------------------------------------------------------------------------

FLOAT_CASES = [
    # format, shape, layout, scale_op, saturate, packed, x, out
    ("float8_e4m3fn", (3, 5, 7), {}, "divide", True, False, F32, F16),
    ("float8_e5m2", (3, 5, 7), {"axis": 2}, "divide", False, False, BF16, F32),
    ("float8_e4m3fn", (5, 18), {"axis": 1, "block_size": 4}, "reciprocal", False, False, F64, BF16),
    ("float4_e2m1fn", (5, 18), {"axis": 0}, "divide", True, True, F16, F32),
    ("float4_e2m1fn", (3, 5, 6), {"block_size": (1, 5, 2)}, "multiply", False, True, F32, BF16),
    ("float6_e2m3fn", (3, 5, 12), {"axis": -1, "block_size": 5}, "divide", True, True, BF16, F16),
    ("float6_e3m2fn", (5, 8), {}, "reciprocal", False, True, F32, F32),
]


@pytest.mark.parametrize(("fmt", "shape", "layout", "scale_op", "saturate", "packed", "x_dtype", "out_dtype"),
                         FLOAT_CASES, ids=[f"{c[0]}-{c[2]}-{c[3]}-sat{c[4]}-{'packed' if c[5] else 'unpacked'}"
                                           for c in FLOAT_CASES])
def test_float_quantize_and_dequantize(backend, fmt, shape, layout, scale_op, saturate, packed, x_dtype, out_dtype):
    scale = _pow2(_grid(shape, layout), seed=len(fmt))
    step = _element_scales(shape, scale, **layout)
    x = _float_input(shape, np.float32(1) / step if scale_op == "multiply" else step, fmt, x_dtype, seed=len(shape))
    q = quantize_both(backend, x, scale, fmt, scale_op=scale_op, saturate=saturate, packed=packed, **layout)
    dequantize_both(backend, q, scale, dtype=fmt, out_dtype=out_dtype, **layout)


# --- half-precision arithmetic (compute_dtype) ------------------------------------------------------

HALF_CASES = [
    # format, shape, layout, zero point, scale_op, packed, x dtype / compute dtype
    ("int8", (3, 5, 7), {"axis": 1}, None, "divide", False, F16),
    ("uint8", (5, 18), {"block_size": (1, 6)}, "half", "reciprocal", False, BF16),
    ("int16", (3, 5, 7), {}, "int", "multiply", False, BF16),
    ("int4", (5, 18), {"axis": 0}, "int", "divide", True, F16),
    ("float8_e4m3fn", (3, 5, 7), {"axis": -1, "block_size": 3}, None, "reciprocal", False, BF16),
    ("float4_e2m1fn", (5, 18), {}, None, "divide", True, F16),
]


@pytest.mark.parametrize(("fmt", "shape", "layout", "zp", "scale_op", "packed", "x_dtype"), HALF_CASES,
                         ids=[f"{c[0]}-{c[4]}-{c[6]}-{'packed' if c[5] else 'unpacked'}" for c in HALF_CASES])
def test_half_precision_arithmetic(backend, fmt, shape, layout, zp, scale_op, packed, x_dtype):
    """``compute_dtype`` float16/bfloat16: scales that are not powers of two, so every rounding shows."""
    f = nbquant.get_format(fmt)
    rng = np.random.default_rng(f.bits + len(shape))
    scale = rng.uniform(0.05, 3, _grid(shape, layout)).astype(np.float32)
    step = _element_scales(shape, scale, **layout)
    kw = dict(layout, scale_op=scale_op, packed=packed, compute_dtype=str(x_dtype))
    if zp == "int":
        kw["zero_point"] = rng.integers(max(f.qmin, -60), min(f.qmax, 60) + 1, scale.shape).astype(np.int32)
    elif zp == "half":
        kw.update(zero_point=(rng.integers(0, 511, scale.shape) / 2).astype(np.float32),
                  zero_point_order="before_rounding")
    x = (_float_input if f.is_float else _int_input)(shape, step, fmt, x_dtype, seed=f.bits)
    quantize_both(backend, x, scale, fmt, **kw)


# --- MX, NVFP4, NF4 --------------------------------------------------------------------------------


def _block_input(shape, seed: int, dtype=F32, element: str | None = None, nan_inf: bool = True) -> np.ndarray:
    """Heavy-tailed rows with a zero block, NaN, ±inf, -0.0, a subnormal and (for ``element``) exact ties."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_t(3, shape) * np.exp2(rng.integers(-6, 6, shape[:-1] + (1,)))).astype(np.float32)
    rows = x.reshape(-1, shape[-1])
    rows[0, :8] = 0.0
    rows[3, 3], rows[3, 9] = -0.0, 1e-40
    if nan_inf:
        rows[1, 1], rows[2, 2], rows[2, 6] = np.nan, np.inf, -np.inf
    if element is not None:  # one block of the element format's top value and midpoints between its codes
        grid = _float_grid(element) if element != "int8" else np.arange(-127, 128, dtype=np.float32) / 64
        mids = (grid[1:] + grid[:-1]) / 2
        rows[-1, :8] = np.concatenate([[grid[-1]], rng.choice(mids, 7)]) * np.float32(4)
    x = x.astype(dtype)
    x.reshape(-1, shape[-1])[4, 4] = _subnormal(dtype)
    return x


@pytest.mark.parametrize("rounding", ["floor", "ceil"])
@pytest.mark.parametrize(("fmt", "x_dtype"), list(zip(nbquant.MX_FORMATS, [F16, F32, BF16, F64, F16, BF16],
                                                      strict=True)))
def test_mx(backend, fmt, x_dtype, rounding):
    x = _block_input((3, 5, 16), seed=len(fmt), dtype=x_dtype, element=nbquant.MX_FORMATS[fmt][0])
    ref = nbquant.quantize_mx(x, fmt, block_size=8, scale_rounding=rounding, backend="reference")
    got = nbquant.quantize_mx(x, fmt, block_size=8, scale_rounding=rounding, backend=backend)
    assert got.packed == ref.packed == (fmt == "mxfp4")
    _same((got.data, got.scales), (ref.data, ref.scales))
    for out_dtype in (F32, F16, BF16):
        _same(got.dequantize(out_dtype, backend=backend), ref.dequantize(out_dtype, backend="reference"))


@pytest.mark.parametrize("global_scale", [None, 0.01])
def test_nvfp4(backend, global_scale):
    # without a global scale, NaN or inf is refused (test_nvfp4_and_nf4_refuse_nan_and_inf)
    x = _block_input((3, 5, 32), seed=7, dtype=BF16 if global_scale else F32, element="float4_e2m1fn",
                     nan_inf=global_scale is not None)
    ref = nbquant.quantize_nvfp4(x, global_scale=global_scale, backend="reference")
    got = nbquant.quantize_nvfp4(x, global_scale=global_scale, backend=backend)
    _same((got.data, got.scales, np.float32(got.global_scale)), (ref.data, ref.scales, np.float32(ref.global_scale)))
    for out_dtype in (F32, F16, BF16):
        _same(got.dequantize(out_dtype, backend=backend), ref.dequantize(out_dtype, backend="reference"))


@pytest.mark.parametrize("scale_block_size", [None, 4])
def test_nf4(backend, scale_block_size):
    # NF4 refuses NaN and inf (test_nvfp4_and_nf4_refuse_nan_and_inf)
    x = _block_input((4, 3, 16), seed=8, dtype=F16 if scale_block_size else F64, nan_inf=False)
    # block 2 has amax 1: 0.039794921875 is halfway between NF4 entries 7 (0) and 8 (0.0795...), the first wins
    x.reshape(-1)[16:24] = [0.25, -0.5, 0.039794921875, 1.0, -0.0, -0.039794921875, 0.5, -1.0]
    ref = nbquant.quantize_nf4(x, block_size=8, scale_block_size=scale_block_size, backend="reference")
    got = nbquant.quantize_nf4(x, block_size=8, scale_block_size=scale_block_size, backend=backend)
    _same((got.data, got.scales), (ref.data, ref.scales))
    if scale_block_size:
        _same((got.double_scales, np.float32(got.scale_mean)), (ref.double_scales, np.float32(ref.scale_mean)))
    for out_dtype in (F32, BF16):
        _same(got.dequantize(out_dtype, backend=backend), ref.dequantize(out_dtype, backend="reference"))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nvfp4_and_nf4_refuse_nan_and_inf(backend, bad):
    """A NaN or inf would make every NVFP4 value NaN (through the global scale) or a whole NF4 block NaN or -inf."""
    x = _block_input((2, 3, 32), seed=3, nan_inf=False)
    x[1, 2, 17] = bad
    for b in ("reference", backend):
        with pytest.raises(ValueError, match=r"^x holds (NaN|inf): the global scale amax / \(6 \* 448\)"):
            nbquant.quantize_nvfp4(x, backend=b)
        with pytest.raises(ValueError, match=r"^x holds NaN or inf \(in elements 176 to 183 of the flattened"):
            nbquant.quantize_nf4(x, block_size=8, backend=b)


# --- amax, qparams, dynamic quantization ------------------------------------------------------------


def _dynamic_input(shape, seed: int, dtype=F32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * rng.uniform(0.01, 10, shape[-1])).astype(np.float32)
    x[0, :4] = 0.0  # an all-zero group
    x[1, 1], x[2, 3], x[3, 0], x[4, 5] = np.nan, np.inf, -np.inf, -0.0
    x[4, 6:9] = [2.5, -1.5, 0.5]  # ties at scale 1, and x[4, 6] / x[4, 7] at many power-of-two scales
    x = x.astype(dtype)
    x[2, 7] = _subnormal(dtype)
    return x


@pytest.mark.parametrize("layout", [{}, {"axis": 0}, {"axis": 1, "block_size": 4}, {"block_size": (3, 6)}], ids=str)
def test_reduce_amax(backend, layout):
    for x in (_dynamic_input((6, 18), seed=1), _dynamic_input((6, 18), seed=2, dtype=BF16)[:, ::-1].copy()):
        _both(backend, nbquant.reduce_amax, x, **layout)
        _both(backend, nbquant.reduce_amax, np.nan_to_num(x.astype(F32), posinf=0.0, neginf=0.0).astype(x.dtype),
              **layout)


DYNAMIC_CASES = [
    # granularity, format, packed, x dtype
    ({"axis": 0}, "int8", False, F32),  # per-row: the fused rows kernel
    ({"block_size": (1, 18)}, "uint8", False, F16),  # per-row as a torchao tuple
    ({"axis": 1, "block_size": 4}, "int4", True, BF16),  # per-group packed, partial last group
    ({"axis": 1, "block_size": 5}, "int2", False, F64),  # per-group unpacked, partial last group
    ({}, "int16", False, F32),  # per-tensor: flat reduction, then the static kernel
    ({"axis": 1}, "uint4", False, F32),  # per-channel along columns: block reduction
    ({"block_size": (3, 6)}, "int4", True, F32),  # 2-D blocks: block reduction, qparams, static kernel
]


@pytest.mark.parametrize("mapping", ["symmetric", "asymmetric", "symmetric_no_clipping_err", "modelopt"])
@pytest.mark.parametrize(("layout", "fmt", "packed", "x_dtype"), DYNAMIC_CASES,
                         ids=[f"{c[0]}-{c[1]}-{'packed' if c[2] else 'unpacked'}" for c in DYNAMIC_CASES])
def test_choose_qparams_and_quantize_dynamic(backend, layout, fmt, packed, x_dtype, mapping):
    if mapping == "symmetric_no_clipping_err" and fmt.startswith("u"):
        fmt = fmt[1:]  # needs a signed format
    x = _dynamic_input((6, 18), seed=len(layout), dtype=x_dtype)
    got = _both(backend, nbquant.quantize_dynamic, x, fmt, mapping=mapping, packed=packed, **layout)
    _same(_both(backend, nbquant.choose_qparams, x, fmt, mapping=mapping, **layout), got[1:])


@pytest.mark.parametrize("mapping", ["symmetric", "asymmetric"])
def test_more_than_three_unmergeable_block_dims(backend, mapping):
    """Blocks (2, 2, 3, 5) of a (4, 6, 6, 10) input stay four dims after merging: a 3-D reduction per leading
    index, folded, on every backend (the NumPy oracle never stands in)."""
    assert len(nbquant.layout.canonical_dims((4, 6, 6, 10), (2, 2, 3, 5))) == 4
    x = _dynamic_input((24, 60), seed=11, dtype=BF16).reshape(4, 6, 6, 10)  # NaN, inf, ties, a subnormal
    got = _both(backend, nbquant.quantize_dynamic, x, "int8", mapping=mapping, block_size=(2, 2, 3, 5))
    _same(_both(backend, nbquant.choose_qparams, x, "int8", mapping=mapping, block_size=(2, 2, 3, 5)), got[1:])


# --- modelopt ops ----------------------------------------------------------------------------------


#: modelopt's 8-bit scale is 127 / amax: exactly 64 for this amax, so k.5 / 64 are exact ties.
AMAX = np.float32(127 / 64)


def _modelopt_input(dtype=F32) -> np.ndarray:
    x = _dynamic_input((5, 18), seed=9, dtype=F32) * np.float32(0.5)
    x[3, 10:16] = np.float32([2.5, -1.5, 0.5, 127, -128, 127.5]) / 64  # ties and the clip edges at AMAX
    return x.astype(dtype)


@pytest.mark.parametrize(("amax", "layout"), [(AMAX, {}), (None, {"axis": 0}), (None, {"axis": 1, "block_size": 4}),
                                              ("rows", {})], ids=["scalar", "per-row", "blocks", "given-rows"])
@pytest.mark.parametrize("x_dtype", [F32, BF16])
def test_tensor_quant_and_fake_tensor_quant(backend, amax, layout, x_dtype):
    x = _modelopt_input(x_dtype)
    if isinstance(amax, str):
        amax = np.exp2(np.arange(-2, 3, dtype=np.float32)).reshape(5, 1)
    for num_bits in (8, 4, (4, 3)):
        for narrow in (True, False):
            kw = dict(amax=amax, num_bits=num_bits, narrow_range=narrow, **layout)
            _both(backend, nbquant.modelopt.fake_tensor_quant, x, **kw)
            if not isinstance(num_bits, tuple):
                _both(backend, nbquant.modelopt.tensor_quant, x, **kw)
    _both(backend, nbquant.modelopt.fake_tensor_quant, np.abs(x), amax=amax, num_bits=8, unsigned=True, **layout)


@pytest.mark.parametrize("amax", [None, AMAX, 0.0])
def test_scaled_e4m3(backend, amax):
    x = _modelopt_input(F16)
    _both(backend, nbquant.modelopt.scaled_e4m3, x, amax)
    _both(backend, nbquant.modelopt.scaled_e4m3, x, None, axis=0)


def test_fake_affine_tensor_quant(backend):
    x = _modelopt_input(F64)
    for lo, hi, bits in ((-1.5, 2.0, 8), (-1.0, 2.0, 2), (0.0, 3.0, 4), (-127 / 64, 128 / 64, 8)):
        _both(backend, nbquant.modelopt.fake_affine_tensor_quant, x, lo, hi, bits)


def test_backward_functions(backend):
    x = _modelopt_input()
    g = np.random.default_rng(3).standard_normal(x.shape).astype(np.float32)
    for amax, layout in ((AMAX, {}), (np.float32([0.5, 1, 1.75, 2, 4]).reshape(5, 1), {"axis": 0}),
                         (np.full((5, 5), 1.75, np.float32), {"axis": 1, "block_size": 4})):
        _both(backend, nbquant.modelopt.fake_tensor_quant_backward, g, x, amax, **layout)
    for gg in (g, g.astype(BF16)):
        _both(backend, nbquant.modelopt.fake_affine_tensor_quant_backward, gg, x, -1.75, 2.0)


def test_dynamic_block_quant(backend):
    x = _modelopt_input()
    for block_sizes, bits in (({-1: 6, "type": "dynamic"}, 4), ({-2: 5, -1: 6}, 8), ({-1: None}, (4, 3))):
        _both(backend, nbquant.modelopt.dynamic_block_quant, x, block_sizes, bits)


# --- calibrators -----------------------------------------------------------------------------------


def _batches() -> list[np.ndarray]:
    """Finite batches (calibration rejects NaN and inf): zeros, -0.0, a subnormal, values on bin boundaries.

    The second batch's larger maximum extends the bins; the third is float16.
    """
    rng = np.random.default_rng(11)
    out = []
    for s, dtype in ((1.0, F32), (3.0, F32), (0.5, F16)):
        b = (rng.standard_normal((5, 19)) * s).astype(np.float32)
        b[0, :3], b[1, 2] = 0.0, -0.0
        # |x| * 64 / top is exactly 16, 32, 48 and 64 for the first batch's top
        b[3, :4] = np.float32(np.abs(b).max()) * np.float32([0.25, 0.5, -0.75, 1.0])
        b = b.astype(dtype)
        b[2, 4] = _subnormal(dtype)
        out.append(b)
    return out


def test_max_calibrator(backend):
    for axis in (None, 0, 1):
        got = nbquant.modelopt.MaxCalibrator(axis, backend=backend)
        ref = nbquant.modelopt.MaxCalibrator(axis, backend="reference")
        for b in _batches():
            got.collect(b)
            ref.collect(b)
        _same(got.compute_amax(), ref.compute_amax())


@pytest.mark.parametrize(("skip_zeros", "huge"), [(False, False), (True, False), (False, True)])
def test_histogram_calibrator(backend, skip_zeros, huge):
    """``huge``: a last batch up to float32's max (coarser bins, a partial last bin, ``|x| * nbins`` overflowing)."""
    got, ref = (nbquant.modelopt.HistogramCalibrator(num_bins=64, skip_zeros=skip_zeros, backend=b)
                for b in (backend, "reference"))
    fmax = np.finfo(np.float32).max
    extra = [np.append(np.random.default_rng(12).uniform(-fmax, fmax, 40), fmax).astype(np.float32)] if huge else []
    for b in _batches() + extra:
        got.collect(b)
        ref.collect(b)
    _same((got.histogram, got.bin_edges), (ref.histogram, ref.bin_edges))
    for method in ("entropy", "mse", "percentile"):
        _same(got.compute_amax(method, start_bin=8), ref.compute_amax(method, start_bin=8))
