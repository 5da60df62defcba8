"""The integer format table and format lookup."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nbquant
from nbquant.formats import FORMATS, get_format

INT_ROWS = [
    # name, dtype, bits, signed, qmin, qmax, codes per packed byte, storage
    ("int8", np.int8, 8, True, -128, 127, 1, np.uint8),
    ("uint8", np.uint8, 8, False, 0, 255, 1, np.uint8),
    ("int16", np.int16, 16, True, -32768, 32767, 1, np.uint16),
    ("uint16", np.uint16, 16, False, 0, 65535, 1, np.uint16),
    ("int4", ml_dtypes.int4, 4, True, -8, 7, 2, np.uint8),
    ("uint4", ml_dtypes.uint4, 4, False, 0, 15, 2, np.uint8),
    ("int2", ml_dtypes.int2, 2, True, -2, 1, 4, np.uint8),
    ("uint2", ml_dtypes.uint2, 2, False, 0, 3, 4, np.uint8),
]


@pytest.mark.parametrize(("name", "dtype", "bits", "signed", "qmin", "qmax", "k", "storage"), INT_ROWS)
def test_integer_format_rows(name, dtype, bits, signed, qmin, qmax, k, storage):
    f = FORMATS[name]
    assert (f.name, f.dtype, f.bits, f.signed) == (name, np.dtype(dtype), bits, signed)
    assert (f.qmin, f.qmax, f.codes_per_byte, f.storage, f.mask) == (qmin, qmax, k, np.dtype(storage), 2**bits - 1)
    assert f.packable == (bits < 8)
    assert not getattr(f, "is_float", False)
    info = ml_dtypes.iinfo(dtype) if bits < 8 else np.iinfo(dtype)
    assert (int(info.min), int(info.max)) == (qmin, qmax)
    assert nbquant.FORMATS is FORMATS and nbquant.get_format is get_format


@pytest.mark.parametrize(("name", "dtype"), [(r[0], r[1]) for r in INT_ROWS])
def test_lookup_by_name_dtype_and_type(name, dtype):
    f = FORMATS[name]
    assert get_format(name) is f
    assert get_format(name.upper()) is f
    assert get_format(dtype) is f
    assert get_format(np.dtype(dtype)) is f


@pytest.mark.parametrize("name", [r[0] for r in INT_ROWS])
def test_quantize_accepts_the_dtype_object_as_the_format(name):
    dt = FORMATS[name].dtype
    x = np.array([-1.0, 1.0], np.float32)
    by_name = nbquant.quantize(x, 1.0, name, backend="reference")
    by_dtype = nbquant.quantize(x, 1.0, dt, backend="reference")
    assert by_name.dtype == by_dtype.dtype == dt
    np.testing.assert_array_equal(by_name.view(np.uint8), by_dtype.view(np.uint8))


@pytest.mark.parametrize("bad", ["int3", "int64", "uint1", "float32", "", np.float32, np.int64, bool, "int8 "])
def test_unknown_formats_list_the_known_ones(bad):
    with pytest.raises(ValueError, match=r"^dtype=.* is not a quantized format nbquant knows; use one of \[") as info:
        get_format(bad)
    for name in ("int8", "uint2"):
        assert repr(name) in str(info.value)


FLOAT_ROWS = [
    # name, (ebits, mbits, max code, overflow code, NaN code, NaN flips sign, NaN rule), emax: ml_dtypes' encodings
    ("float8_e4m3fn", (4, 3, 0x7E, 0x7F, 0x7F, 0, 1), 8),
    ("float8_e5m2", (5, 2, 0x7B, 0x7C, 0x7E, 0, 2), 15),
    ("float6_e2m3fn", (2, 3, 0x1F, 0x1F, 0, 1, 0), 2),
    ("float6_e3m2fn", (3, 2, 0x1F, 0x1F, 0, 1, 0), 4),
    ("float4_e2m1fn", (2, 1, 0x7, 0x7, 0, 1, 0), 2),
]


@pytest.mark.parametrize(("name", "fp", "emax"), FLOAT_ROWS)
def test_float_format_facts_derived_from_ml_dtypes(name, fp, emax):
    """The encoding tuple read off ml_dtypes (finfo and its casts) is the one the kernels were written for."""
    from nbquant.modes import NanRule

    f = FORMATS[name]
    assert f.fp_params == fp and f.emax == emax and f.is_float
    assert f.bits == ml_dtypes.finfo(f.dtype).bits and f.max_value == float(ml_dtypes.finfo(f.dtype).max)
    assert NanRule(f.nan_rule) in NanRule
