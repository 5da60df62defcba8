"""GGUF quantize with searches side by side (the cpu backend's lane row walks) against the NumPy reference.

The cpu kernels of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS and IQ4_NL search the sub-blocks of
a group of (super-)blocks as the lanes of one search; rows here hold a full group and a
partial one, each block a case the searches treat specially, so that every lane position
meets an all-zero, constant, tied, subnormal, huge or outlying block. IQ4's branchless
nearest-level function is checked against the reference's bisection on ties and edges.
"""

from __future__ import annotations

import numpy as np
import pytest

from nbquant import gguf
from nbquant.backends.cpu.gguf import KMIN_GROUP, LANES, Q6K_GROUP
from nbquant.backends.reference.gguf_iq4 import _best_index
from nbquant.element.gguf_iq4 import KVALUES, iq4_nearest

#: The formats whose cpu quantize searches side by side, and the blocks one lane group holds.
LANE_FORMATS = {"Q2_K": LANES // 16, "Q3_K": LANES // 16, "Q4_K": KMIN_GROUP, "Q5_K": KMIN_GROUP, "Q6_K": Q6K_GROUP,
                "IQ4_XS": LANES // 8, "IQ4_NL": LANES}


def _rows(block: int, blocks: int) -> np.ndarray:
    """Four rows of ``blocks`` blocks of ``block`` values, blocks of special cases among weight-like ones."""
    rng = np.random.default_rng(11)
    x = (rng.standard_t(4, (4, blocks * block)) * np.exp2(rng.integers(-6, 6, (4, 1)))).astype(np.float32)
    view = x.reshape(4, blocks, block)
    for b in range(blocks):
        case = b % 7
        if case == 0:
            view[b % 4, b, :] = 0.0
            view[b % 4, b, 3] = -0.0
        elif case == 1:
            view[b % 4, b, :] = 1.25
        elif case == 2:
            view[b % 4, b, :] = rng.integers(-3, 4, block) * np.float32(0.5)
        elif case == 3:
            view[b % 4, b, :] *= np.float32(1e-39)
        elif case == 4:
            view[b % 4, b, :] *= np.float32(1e30)
        elif case == 5:
            view[b % 4, b, 5] = 500.0
        else:
            view[b % 4, b, 16:32] = 0.0  # an all-zero 16-value sub-block
    return x


@pytest.mark.parametrize("use_imatrix", [False, True])
@pytest.mark.parametrize("name", sorted(LANE_FORMATS))
def test_lane_groups_equal_reference(name, use_imatrix):
    """A full lane group and a partial one (group + 3 blocks a row): the cpu records equal the reference's."""
    block = gguf.get_format(name).block_size
    x = _rows(block, LANE_FORMATS[name] + 3)
    imatrix = np.random.default_rng(2).uniform(0.0, 6.0, x.shape[1]).astype(np.float32) if use_imatrix else None
    want = gguf.quantize(x, name, imatrix=imatrix, backend="reference")
    got = gguf.quantize(x, name, imatrix=imatrix, backend="cpu")
    assert np.array_equal(got, want)


def test_iq4_nearest_equals_bisection():
    """The branchless nearest level equals ggml's bisection (as the reference computes it) on the table's entries,
    its midpoints and their float32 neighbours, beyond the ends, at +-inf and NaN; the value is the index's entry."""
    mids = (KVALUES[:-1] + KVALUES[1:]) / np.float32(2.0)
    points = np.concatenate([KVALUES, mids, [-200.0, 200.0, 0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(np.float32)
    v = np.concatenate([points, np.nextafter(points, np.float32(np.inf)), np.nextafter(points, np.float32(-np.inf)),
                        np.random.default_rng(0).uniform(-140, 140, 2000).astype(np.float32)])
    got = np.array([iq4_nearest(np.float32(t)) for t in v])
    want = _best_index(v)
    assert np.array_equal(got[:, 0].astype(np.int64), want)
    assert np.array_equal(got[:, 1].astype(np.float32), KVALUES[want])
