"""Bad input: one test per rule, each checking the exception type and that the message names the argument.

Validation runs in Python before any kernel, so these tests do not depend on the backend.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nbquant

pytestmark = pytest.mark.filterwarnings("error")

X = np.arange(24, dtype=np.float32).reshape(4, 6) / 8


def q(x=X, scale=0.5, dtype="int8", **kw):
    return nbquant.quantize(x, scale, dtype, backend="reference", **kw)


def dq(codes, scale=0.5, **kw):
    return nbquant.dequantize(codes, scale, backend="reference", **kw)


# --- scale and zero point shapes -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "kw"),
    [
        ((2,), {}),  # per-tensor: one value
        ((6,), {"axis": 0}),  # per-channel along axis 0: (4,) or (4, 1)
        ((1, 4), {"axis": 0}),
        ((4, 6), {"axis": 1}),
        ((4, 3), {"axis": 1, "block_size": 4}),  # grid (4, ceil(6 / 4) = 2)
        ((1, 6), {"axis": 0, "block_size": 3}),  # grid (ceil(4 / 3) = 2, 6)
        ((2, 2), {"block_size": (2, 2)}),  # grid (2, 3)
        ((4,), {"block_size": (1, 3)}),  # grid (4, 2)
        ((8,), {"block_size": (1, 3)}),  # same number of values, wrong shape
    ],
)
def test_scale_shape_must_fit_the_granularity(shape, kw):
    scale = np.ones(shape, np.float32)
    with pytest.raises(ValueError, match=r"^scale has shape .* expected shape"):
        q(scale=scale, **kw)
    codes = np.zeros(X.shape, np.int8)
    with pytest.raises(ValueError, match=r"^scale has shape"):
        dq(codes, scale, **kw)


def test_zero_point_shape_must_fit_the_granularity():
    with pytest.raises(ValueError, match=r"^zero_point has shape \(3,\)"):
        q(scale=np.ones(4, np.float32), axis=0, zero_point=np.zeros(3, np.int32))
    with pytest.raises(ValueError, match=r"^zero_point has shape \(2,\)"):
        q(zero_point=np.zeros(2, np.int32))
    with pytest.raises(ValueError, match=r"^zero_point has shape"):
        dq(np.zeros((4, 6), np.int8), np.ones(6, np.float32), axis=1, zero_point=np.zeros(4))


@pytest.mark.parametrize("bad", [0.0, -0.0, -1.0, np.nan, np.inf, -np.inf, 1e-50, 1e39])
def test_scale_must_be_finite_and_positive(bad):
    """1e-50 and 1e39 become 0 and inf in float32, so they are rejected too."""
    with pytest.raises(ValueError, match=r"^scale must be finite and > 0"):
        q(scale=bad)
    with pytest.raises(ValueError, match=r"^scale must be finite and > 0"):
        dq(np.zeros(3, np.int8), bad)


def test_scale_error_names_the_first_bad_index():
    s = np.array([1.0, 2.0, -3.0, 0.0], np.float32)
    with pytest.raises(ValueError, match=r"scale\[2\] is np.float32\(-3.0\)"):
        q(scale=s, axis=0)


@pytest.mark.parametrize("bad", ["0.5", 1 + 1j, np.array([1 + 1j]), None, object()])
def test_scale_must_be_a_real_number(bad):
    with pytest.raises(TypeError, match=r"^scale has dtype"):
        q(scale=bad)


@pytest.mark.parametrize(("dtype", "zp"), [("int8", 128), ("int8", -129), ("uint8", -1), ("uint8", 256),
                                           ("int4", 8), ("uint4", 16), ("int2", -3), ("uint2", 4)])
def test_zero_point_must_be_in_the_format_range(dtype, zp):
    with pytest.raises(ValueError, match=rf"^zero_point must be within the {dtype} range"):
        q(dtype=dtype, zero_point=zp)


def test_zero_point_must_be_integral_after_rounding():
    with pytest.raises(ValueError, match=r"^zero_point must be integers when added after rounding"):
        q(zero_point=0.5)
    with pytest.raises(ValueError, match=r"^zero_point must be integers"):
        q(scale=np.ones(4, np.float32), axis=0, zero_point=np.array([1, 2, 2.5, 3]))


def test_zero_point_may_be_fractional_or_out_of_range_before_rounding_and_in_dequantize():
    q(zero_point=0.5, zero_point_order="before_rounding")
    q(dtype="uint8", zero_point=-3.25, zero_point_order="before_rounding")
    dq(np.zeros(3, np.uint8), zero_point=300.5)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_zero_point_must_be_finite(bad):
    for kw in ({}, {"zero_point_order": "before_rounding"}):
        with pytest.raises(ValueError, match=r"^zero_point must be finite"):
            q(zero_point=bad, **kw)
    with pytest.raises(ValueError, match=r"^zero_point must be finite"):
        dq(np.zeros(3, np.int8), zero_point=bad)


def test_zero_point_must_be_a_real_number():
    with pytest.raises(TypeError, match=r"^zero_point has dtype"):
        q(zero_point="1")


# --- axis and block size ---------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [2, -3, 100])
def test_axis_out_of_range(axis):
    with pytest.raises(ValueError, match=rf"^axis={axis} is out of range"):
        q(scale=np.ones(4, np.float32), axis=axis)
    with pytest.raises(ValueError, match=rf"^axis={axis} is out of range"):
        q(axis=axis, block_size=2)
    with pytest.raises(ValueError, match=rf"^axis={axis} is out of range"):
        dq(np.zeros((4, 6), np.int8), axis=axis)


@pytest.mark.parametrize("axis", [1.0, "0", (0,), [1]])
def test_axis_must_be_an_int(axis):
    with pytest.raises(TypeError, match=r"^axis=.* must be an int"):
        q(scale=np.ones(4, np.float32), axis=axis)


def test_numpy_integer_axis_is_accepted():
    q(scale=np.ones(4, np.float32), axis=np.int64(0))


@pytest.mark.parametrize("block", [0, -2])
def test_block_size_must_be_positive(block):
    with pytest.raises(ValueError, match=rf"^block_size={block} must be >= 1"):
        q(axis=1, block_size=block)


def test_block_size_larger_than_the_dimension():
    with pytest.raises(ValueError, match=r"^block_size=7 is larger than dimension axis=1 of size 6"):
        q(axis=1, block_size=7)
    with pytest.raises(ValueError, match=r"^block_size=5 is larger than dimension axis=-2 of size 4"):
        q(axis=-2, block_size=5)


def test_int_block_size_needs_an_axis():
    with pytest.raises(ValueError, match=r"^block_size=2 needs axis="):
        q(block_size=2)


def test_block_size_must_be_an_int():
    with pytest.raises(TypeError, match=r"^block_size=2.0 must be an int"):
        q(axis=1, block_size=2.0)
    with pytest.raises(TypeError, match=r"^block_size=.* must be an int"):
        q(block_size=(2, 1.5))


@pytest.mark.parametrize("block", [(4, 4), (3, 6), (1, 0), (8, 6), (4, 12), (-1, 6)])
def test_tuple_block_size_must_divide_each_dimension(block):
    with pytest.raises(ValueError, match=r"^block_size=\(.*\): entry [01] is -?\d+, which does not divide"):
        q(block_size=block)


@pytest.mark.parametrize("block", [(2,), (2, 2, 1), ()])
def test_tuple_block_size_needs_one_entry_per_dimension(block):
    with pytest.raises(ValueError, match=r"^block_size=.* has \d entries but the input has 2 dimension"):
        q(block_size=block)


def test_tuple_block_size_excludes_axis():
    with pytest.raises(ValueError, match=r"^axis=0 cannot be combined with a tuple block_size=\(2, 3\)"):
        q(axis=0, block_size=(2, 3))
    with pytest.raises(ValueError, match=r"^axis=0 cannot be combined"):
        q(axis=0, block_size=[2, 3])


# --- formats and quant range -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int3", "float8", "int64", "", np.float32, np.int64, np.complex64, None, 8])
def test_unknown_dtype(dtype):
    with pytest.raises(ValueError, match=r"^dtype=.* is not a quantized format"):
        q(dtype=dtype)


def test_unknown_dtype_in_dequantize():
    with pytest.raises(ValueError, match=r"^dtype='int3' is not a quantized format"):
        dq(np.zeros(2, np.int8), dtype="int3")


@pytest.mark.parametrize(("dtype", "kw", "arg"), [
    ("int8", {"quant_min": -129}, "quant_min=-129"), ("int8", {"quant_max": 128}, "quant_max=128"),
    ("uint8", {"quant_min": -1}, "quant_min=-1"), ("int4", {"quant_max": 8}, "quant_max=8"),
    ("uint2", {"quant_max": 4}, "quant_max=4"), ("int2", {"quant_min": -3}, "quant_min=-3"),
])
def test_quant_range_must_lie_in_the_format(dtype, kw, arg):
    with pytest.raises(ValueError, match=rf"^{arg} is outside the {dtype} range"):
        q(dtype=dtype, **kw)


def test_quant_min_must_not_exceed_quant_max():
    with pytest.raises(ValueError, match=r"^quant_min=5 is greater than quant_max=3"):
        q(quant_min=5, quant_max=3)
    with pytest.raises(ValueError, match=r"^quant_min=1 is greater than quant_max=0"):
        q(dtype="uint4", quant_min=1, quant_max=0)


@pytest.mark.parametrize(("kw", "arg"), [({"quant_min": 1.5}, "quant_min"), ({"quant_max": "3"}, "quant_max"),
                                         ({"quant_max": np.nan}, "quant_max"), ({"quant_min": [1]}, "quant_min")])
def test_quant_range_must_be_integers(kw, arg):
    with pytest.raises(TypeError, match=rf"^{arg}=.* must be an integer"):
        q(**kw)


def test_integral_float_quant_range_is_accepted():
    out = q(x=np.array([-10, 10], np.float32), scale=1.0, quant_min=-3.0, quant_max=np.float32(4))
    assert out.tolist() == [-3, 4]


# --- packing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "float8_e4m3fn"])
def test_packed_needs_a_sub_byte_format(dtype):
    with pytest.raises(ValueError, match=rf"^packed=True needs a 2-, 4- or 6-bit format .* dtype is {dtype}"):
        q(dtype=dtype, packed=True)


@pytest.mark.parametrize(("dtype", "n", "k", "nbytes"), [("int4", 5, 2, 1), ("uint4", 1, 2, 1), ("int2", 6, 4, 1),
                                                    ("uint2", 2, 4, 1), ("float6_e3m2fn", 6, 4, 3)])
def test_packed_last_dim_must_be_a_multiple_of_codes_per_byte(dtype, n, k, nbytes):
    message = rf"^packed=True stores {k} {dtype} codes in {nbytes} byte\(s\) .* length {n} is not"
    with pytest.raises(ValueError, match=message):
        q(x=np.zeros((3, n), np.float32), dtype=dtype, packed=True)


def test_packed_must_be_a_bool():
    with pytest.raises(TypeError, match=r"^packed='yes' must be True or False"):
        q(dtype="int4", packed="yes")


# --- out= ------------------------------------------------------------------------------------------


def test_out_wrong_shape_or_dtype():
    with pytest.raises(ValueError, match=r"^out has shape \(6, 4\) and dtype int8; this call needs shape \(4, 6\)"):
        q(out=np.empty((6, 4), np.int8))
    with pytest.raises(ValueError, match=r"^out has shape \(4, 6\) and dtype uint8"):
        q(out=np.empty((4, 6), np.uint8))
    with pytest.raises(ValueError, match=r"^out has shape \(4, 6\) and dtype int4; .* shape \(4, 3\) and dtype uint8"):
        q(dtype="int4", packed=True, out=np.empty((4, 6), ml_dtypes.int4))
    with pytest.raises(ValueError, match=r"^out has shape \(4, 6\) and dtype float16"):
        dq(np.zeros((4, 6), np.int8), out=np.empty((4, 6), np.float16))
    with pytest.raises(ValueError, match=r"^out has shape \(24,\)"):
        dq(np.zeros((4, 6), np.int8), out=np.empty(24, np.float32))


def test_out_must_be_c_contiguous_and_writeable():
    with pytest.raises(ValueError, match=r"^out must be a writeable C-contiguous array"):
        q(out=np.empty((6, 4), np.int8).T)
    with pytest.raises(ValueError, match=r"^out must be a writeable C-contiguous array"):
        q(out=np.empty((4, 12), np.int8)[:, ::2])
    ro = np.empty((4, 6), np.int8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"^out must be a writeable"):
        q(out=ro)
    with pytest.raises(ValueError, match=r"^out must be a writeable C-contiguous array"):
        dq(np.zeros((4, 6), np.int8), out=np.empty((6, 4), np.float32).T)


def test_out_must_not_overlap_an_input():
    x = np.arange(8, dtype=np.float32)
    with pytest.raises(ValueError, match=r"^out shares memory with x; nbquant never modifies its inputs"):
        q(x=x, out=x.view(np.int8)[:8])
    buf = np.zeros(4, np.float32)
    codes = buf.view(np.int8)[4:8]
    with pytest.raises(ValueError, match=r"^out shares memory with q; nbquant never modifies its inputs"):
        dq(codes, out=buf)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_out_must_not_overlap_a_scale_a_zero_point_or_a_strided_input(backend):
    """Every argument the user passed is checked, as passed: not the contiguous copy nbquant makes of it."""
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
    scale = np.full((4, 8), 0.25, np.float32)  # 128 bytes; out (24 int8) can sit inside it
    with pytest.raises(ValueError, match=r"^out shares memory with scale; .*out=numpy.empty\(\(4, 6\), 'int8'\)"):
        nbquant.quantize(x, scale[:, :1], "int8", axis=0, out=scale.view(np.int8).reshape(-1)[:24].reshape(4, 6),
                         backend=backend)
    assert (scale == 0.25).all()
    zp = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match=r"^out shares memory with zero_point"):
        nbquant.quantize(x, np.full((4, 1), 0.25, np.float32), "uint8", zero_point=zp[:, :1], axis=0,
                         out=zp.view(np.uint8).reshape(-1)[:24].reshape(4, 6), backend=backend)
    wide = np.zeros((4, 12), np.float32)
    strided = wide[:, ::2]  # not contiguous: nbquant quantizes a copy, but out may still alias the original
    strided[...] = x
    with pytest.raises(ValueError, match=r"^out shares memory with x"):
        nbquant.quantize(strided, 0.25, "int8", out=wide.view(np.int8).reshape(-1)[:24].reshape(4, 6), backend=backend)
    buf = np.zeros(200, np.int8)
    codes = buf[:48:2].reshape(4, 6)  # strided codes in bytes 0, 2, ..., 46
    with pytest.raises(ValueError, match=r"^out shares memory with q"):
        nbquant.dequantize(codes, 0.5, out=buf[:96].view(np.float32).reshape(4, 6), backend=backend)


def test_out_inside_an_inputs_bounds_without_sharing_a_byte_is_accepted():
    """``numpy.shares_memory`` semantics: codes at bytes 0 and 100, out in bytes 40-47 of the same buffer."""
    buf = np.zeros(200, np.int8)
    codes = buf[::100]
    codes[...] = [3, -4]
    out = buf[40:48].view(np.float32)
    assert np.may_share_memory(out, codes) and not np.shares_memory(out, codes)
    got = nbquant.dequantize(codes, 0.5, out=out, backend="reference")
    assert got is out and got.tolist() == [1.5, -2.0] and codes.tolist() == [3, -4]


# --- input dtypes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("x", [np.arange(4), np.arange(4, dtype=np.int8), np.ones(3, np.complex64),
                               np.ones(2, bool), [1, 2], np.ones(2, ml_dtypes.float8_e4m3fn), np.array(["a"]),
                               np.float64(1.0).astype(np.longdouble)])
def test_quantize_needs_a_float_input(x):
    with pytest.raises(TypeError, match=r"^x has dtype .* nbquant quantizes float32, float16, bfloat16"):
        q(x=x)


# --- options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["div", "Divide", None, 1])
def test_bad_scale_op(op):
    with pytest.raises(ValueError, match=r"^scale_op=.* is not allowed; use one of \['divide', 'reciprocal'"):
        q(scale_op=op)


@pytest.mark.parametrize("order", ["after", "before", None, True])
def test_bad_zero_point_order(order):
    with pytest.raises(ValueError, match=r"^zero_point_order=.* is not allowed"):
        q(zero_point_order=order)


@pytest.mark.parametrize("name", ["gpu", "CPU", "", 0])
def test_bad_backend_name(name):
    with pytest.raises(ValueError, match=r"^backend=.* is not a backend; use one of \['auto', 'reference', 'cpu'"):
        nbquant.quantize(X, 1.0, "int8", backend=name)
    with pytest.raises(ValueError, match=r"^backend=.* is not a backend"):
        nbquant.dequantize(np.zeros(2, np.int8), 1.0, backend=name)


# --- dequantize-specific ---------------------------------------------------------------------------


@pytest.mark.parametrize(("codes", "dtype"), [
    (np.zeros(2, np.int8), "uint8"), (np.zeros(2, np.int8), "int4"), (np.zeros(2, np.uint8), "int8"),
    (np.zeros(2, np.int16), "int4"), (np.zeros(2, ml_dtypes.int4), "uint4"), (np.zeros(2, ml_dtypes.uint4), "int8"),
    (np.zeros(2, np.uint16), "uint8"),
])
def test_dequantize_q_dtype_must_hold_the_format(codes, dtype):
    with pytest.raises(TypeError, match=rf"^q has dtype {codes.dtype}, which does not hold {dtype} codes"):
        dq(codes, dtype=dtype)


@pytest.mark.parametrize("codes", [np.zeros(2, np.float32), np.zeros(2, np.uint32), np.zeros(2, np.int64)])
def test_dequantize_q_must_be_a_code_dtype(codes):
    with pytest.raises(TypeError, match=rf"^q has dtype {codes.dtype}, which holds no quantized codes"):
        dq(codes)


@pytest.mark.parametrize("out_dtype", [np.float64, np.int8, "int4", "float8", ml_dtypes.float8_e4m3fn, None])
def test_dequantize_bad_out_dtype(out_dtype):
    with pytest.raises(TypeError, match=r"^out_dtype=.* is not supported; use float32, float16 or ml_dtypes.bfloat16"):
        dq(np.zeros(2, np.int8), out_dtype=out_dtype)


def test_dequantize_packed_last_dim_describes_the_unpacked_shape():
    """A per-channel scale on packed int4 (3, 2) bytes covers the unpacked (3, 4) codes."""
    codes = np.zeros((3, 2), np.uint8)
    dq(codes, np.ones(4, np.float32), axis=1, dtype="int4")
    with pytest.raises(ValueError, match=r"^scale has shape \(2,\)"):
        dq(codes, np.ones(2, np.float32), axis=1, dtype="int4")
