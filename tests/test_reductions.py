"""``reduce_min_max``: numpy.min and numpy.max per block on every backend, a block holding NaN NaN on both sides.

A NaN of either sign, quiet or signalling, with any payload, makes both the minimum and the
maximum of its block the canonical NaN (docs/semantics.md, "Non-finite and extreme inputs"):
the reference against NumPy per block, each compiled backend against the reference, bit for bit.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_same_bits

import nbquant
from nbquant.layout import resolve_layout

#: NaN bit patterns per input dtype: quiet positive, quiet negative, signalling with a payload, all ones.
NANS = {
    np.dtype(np.float32): [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF],
    np.dtype(np.float16): [0x7E00, 0xFE00, 0x7C01, 0xFFFF],
    np.dtype(ml_dtypes.bfloat16): [0x7FC0, 0xFFC0, 0x7F81, 0xFFFF],
}
CASES = [(dtype, bits) for dtype, patterns in NANS.items() for bits in patterns]
LAYOUTS = {"tensor": {}, "axis 0": {"axis": 0}, "axis 1": {"axis": 1}, "groups of 16": {"block_size": (1, 16)},
           "2-D tiles": {"block_size": (2, 16)}, "ONNX blocks of 20": {"axis": 1, "block_size": 20}}


def _planted(dtype: np.dtype, bits: int) -> np.ndarray:
    """A (6, 48) array of ``dtype`` with the NaN ``bits`` in two blocks and ±inf, -0.0 elsewhere."""
    x = np.random.default_rng(27).standard_normal((6, 48)).astype(np.float32).astype(dtype)
    raw = x.view(np.uint32 if dtype.itemsize == 4 else np.uint16)
    raw[0, 5] = raw[3, 40] = bits
    x[2, 17], x[4, 2], x[1, 30] = np.inf, -np.inf, -0.0
    return x


def numpy_min_max(x: np.ndarray, **layout) -> tuple[np.ndarray, np.ndarray]:
    """numpy.min and numpy.max of each block (float32), NaN as the canonical NaN: the oracle of the reference."""
    lay = resolve_layout(x.shape, layout.get("axis"), layout.get("block_size"))
    lo, hi = np.empty(lay.grid, np.float32), np.empty(lay.grid, np.float32)
    for g in itertools.product(*map(range, lay.grid)):
        block = x.astype(np.float32)[tuple(slice(i * b, (i + 1) * b) for i, b in zip(g, lay.block, strict=True))]
        lo[g], hi[g] = block.min(), block.max()
    nan = np.float32(np.nan)
    return np.where(np.isnan(lo), nan, lo), np.where(np.isnan(hi), nan, hi)


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS)
@pytest.mark.parametrize(("dtype", "bits"), CASES, ids=[f"{d}-{b:#x}" for d, b in CASES])
def test_a_nan_of_any_sign_and_payload_gives_nan_min_and_max(backend, dtype, bits, layout):
    x = _planted(dtype, bits)
    expected = nbquant.reduce_min_max(x, backend="reference", **layout)
    for got, oracle in zip(expected, numpy_min_max(x, **layout), strict=True):
        assert_same_bits(got, oracle)
    assert np.isnan(expected[0]).any()
    for got, want in zip(nbquant.reduce_min_max(x, backend=backend, **layout), expected, strict=True):
        assert_same_bits(got, want)


@pytest.mark.parametrize("bits", NANS[np.dtype(np.float32)], ids=hex)
@pytest.mark.parametrize("mapping", ["asymmetric", "symmetric", "modelopt"])
def test_dynamic_qparams_of_a_nan_block_are_unchanged(backend, bits, mapping):
    """The min/max keys also drive dynamic qparams: a block holding NaN of either sign gets the NaN scale."""
    x = _planted(np.dtype(np.float32), bits)
    dtype = "uint8" if mapping == "asymmetric" else "int8"
    expected = nbquant.choose_qparams(x, dtype, mapping=mapping, axis=0, backend="reference")
    got = nbquant.choose_qparams(x, dtype, mapping=mapping, axis=0, backend=backend)
    for g, e in zip(got, expected, strict=True):
        assert_same_bits(g, e)
    scale = expected[0]
    assert np.isnan(scale[[0, 3]]).all() and not np.isnan(scale[[1, 2, 4, 5]]).any()
    assert scale[0].view(np.uint32) == 0x7FC00000
