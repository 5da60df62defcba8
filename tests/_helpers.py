"""Helpers shared by the test modules: bit-exact comparison and calls on two backends at once."""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
from hypothesis import settings
from hypothesis.errors import InvalidArgument

import nbquant

INT_FORMATS = ("int8", "uint8", "int16", "uint16", "int4", "uint4", "int2", "uint2")
SUB_BYTE_FORMATS = ("int4", "uint4", "int2", "uint2")
INPUT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float64))
OUTPUT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def examples(full_tier_count: int) -> int:
    """``max_examples`` for a property that runs ``full_tier_count`` examples in the full tier.

    The count is scaled by the loaded hypothesis profile against the ``full`` one
    (tests/conftest.py): the full tier runs ``full_tier_count``, the default tier a
    quarter of it. Outside a pytest session (no ``full`` profile) it is ``full_tier_count``.

    Parameters
    ----------
    full_tier_count : int
        The test's example count in the full tier.

    Returns
    -------
    int
        At least 1.
    """
    try:
        full = settings.get_profile("full").max_examples
    except InvalidArgument:  # no such profile registered
        return full_tier_count
    return max(1, math.ceil(full_tier_count * settings.default.max_examples / full))


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    """Assert equal type, dtype, shape and bytes (NaN payloads and the sign of zero included).

    Both are plain ``numpy.ndarray``, or both :class:`nbquant.PackedCodes` of one format.
    """
    assert type(actual) is type(expected) and type(actual) in (np.ndarray, nbquant.PackedCodes), type(actual)
    assert getattr(actual, "format", None) == getattr(expected, "format", None)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    a = np.ascontiguousarray(actual).reshape(-1).view(np.uint8)
    e = np.ascontiguousarray(expected).reshape(-1).view(np.uint8)
    if not np.array_equal(a, e):
        bad = np.flatnonzero(a != e)[:8] // actual.dtype.itemsize
        flat_a, flat_e = actual.reshape(-1), expected.reshape(-1)
        raise AssertionError(f"bits differ at flat indices {bad.tolist()}: got {flat_a[bad]!r}, "
                             f"reference {flat_e[bad]!r}")


def canonical_nan(peer: np.ndarray) -> np.ndarray:
    """A peer's float result with each NaN replaced by nbquant's canonical quiet NaN (``numpy.nan``'s bits).

    nbquant writes one NaN on every backend (docs/semantics.md, "Non-finite and extreme
    inputs"); peers keep the sign or payload of the NaN they decoded. Only NaN payloads
    change: every other bit of the peer's result is still compared.
    """
    out = np.array(peer, copy=True)
    out[np.isnan(out.astype(np.float32))] = np.nan
    return out


def _reference(fn, *args, **kwargs) -> np.ndarray:
    """Run ``fn`` on the reference backend, which must not warn on valid input (e.g. overflow to inf).

    Compiled backends are not held to this: the CUDA simulator runs kernels as NumPy
    scalar code, which warns where the hardware silently produces inf.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args, backend="reference", **kwargs)


def quantize_both(backend: str, *args, **kwargs) -> np.ndarray:
    """``nbquant.quantize`` on ``backend`` and on ``"reference"``; assert the same bits, return the result."""
    ref = _reference(nbquant.quantize, *args, **kwargs)
    got = nbquant.quantize(*args, backend=backend, **kwargs)
    assert_same_bits(got, ref)
    return got


def dequantize_both(backend: str, *args, **kwargs) -> np.ndarray:
    """``nbquant.dequantize`` on ``backend`` and on ``"reference"``; assert the same bits, return the result."""
    ref = _reference(nbquant.dequantize, *args, **kwargs)
    got = nbquant.dequantize(*args, backend=backend, **kwargs)
    assert_same_bits(got, ref)
    return got


def ints(a: np.ndarray) -> list:
    """Integer codes as a nested Python list (works for ml_dtypes sub-byte arrays)."""
    return np.asarray(a).astype(np.int64).tolist()


def device_copy(a, stream=None):
    """``a`` copied to the GPU, ml_dtypes dtypes included (numba's ``cuda.to_device`` refuses them on a real GPU:
    its buffer-protocol read has no format for them; the simulator does not check)."""
    from nbquant.backends.cuda.runtime import to_device

    return to_device(a, stream)


def host_copy(a) -> np.ndarray:
    """A host copy of the device array ``a``, ml_dtypes dtypes included (see :func:`device_copy`)."""
    from nbquant.backends.cuda.runtime import to_host

    return to_host(a)
