"""Layout normalisation: resolve_layout, param_grid, and the canonical (P, R, C) views kernels use."""

from __future__ import annotations

import numpy as np
import pytest
from _helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nbquant.layout import canonical_dims, canonical_views, param_grid, resolve_layout


def test_per_tensor():
    lay = resolve_layout((4, 6))
    assert (lay.block, lay.grid, lay.kind, lay.axis, lay.num_blocks) == ((4, 6), (1, 1), "per-tensor", None, 1)
    assert resolve_layout(()).shape == (1,)


def test_per_channel_axis_is_the_kept_dim():
    assert resolve_layout((4, 6), axis=0).grid == (4, 1)
    assert resolve_layout((4, 6), axis=1).grid == (1, 6)
    lay = resolve_layout((2, 3, 5), axis=-2)
    assert (lay.axis, lay.block, lay.grid, lay.kind) == (1, (2, 1, 5), (1, 3, 1), "per-channel")


def test_onnx_blocked_rounds_the_grid_up():
    lay = resolve_layout((4, 6), axis=1, block_size=4)
    assert (lay.block, lay.grid, lay.kind, lay.axis) == ((1, 4), (4, 2), "blocked", 1)
    assert resolve_layout((5, 3), axis=0, block_size=2).grid == (3, 3)
    assert resolve_layout((5, 3), axis=0, block_size=5).grid == (1, 3)


def test_torchao_tuple():
    lay = resolve_layout((4, 6), block_size=(2, 3))
    assert (lay.block, lay.grid, lay.kind, lay.axis) == ((2, 3), (2, 2), "block_size", None)
    assert resolve_layout((4, 6), block_size=[1, 6]).grid == (4, 1)


def test_param_grid_accepts_the_grid_and_the_squeezed_grid():
    lay = resolve_layout((4, 6), block_size=(1, 3))
    p = np.arange(8, dtype=np.float32)
    assert param_grid("scale", p.reshape(4, 2), lay).shape == (4, 2)
    with pytest.raises(ValueError, match="scale has shape"):
        param_grid("scale", p, lay)
    lay = resolve_layout((4, 6), axis=0)
    assert param_grid("scale", p[:4], lay).shape == (4, 1)
    assert param_grid("scale", p[:4].reshape(4, 1), lay).shape == (4, 1)
    lay = resolve_layout((4, 6))
    for shape in [(), (1,), (1, 1), (1, 1, 1)]:
        assert param_grid("scale", np.ones(shape, np.float32), lay).shape == (1, 1)


def test_param_grid_is_row_major_over_the_block_grid():
    lay = resolve_layout((2, 4), block_size=(1, 2))
    g = param_grid("scale", np.array([1, 2, 3, 4], np.float32).reshape(2, 2), lay)
    assert g.tolist() == [[1, 2], [3, 4]]


def test_canonical_dims_examples():
    assert canonical_dims((8, 4, 32), (1, 1, 16)) == [(1024, 16)]
    assert canonical_dims((8, 32), (2, 16)) == [(8, 2), (32, 16)]
    assert canonical_dims((4, 6), (4, 6)) == [(24, 24)]  # per-tensor: one block
    assert canonical_dims((4, 6), (1, 6)) == [(24, 6)]  # per-row
    assert canonical_dims((4, 6), (4, 1)) == [(4, 4), (6, 1)]  # per-column
    assert canonical_dims((1, 5, 1), (1, 1, 1)) == [(5, 1)]
    assert canonical_dims((3, 5), (1, 2)) == [(3, 1), (5, 2)]  # partial block: cannot merge


# --- property: the canonical views index the same scale for every element --------------------------


@st.composite
def shapes_and_layouts(draw):
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=4)))
    ndim = len(shape)
    kind = draw(st.sampled_from(["per-tensor", "per-channel", "blocked", "tuple"]))
    if kind == "per-tensor":
        return shape, {}
    if kind == "per-channel":
        return shape, {"axis": draw(st.integers(-ndim, ndim - 1))}
    if kind == "blocked":
        axis = draw(st.integers(-ndim, ndim - 1))
        return shape, {"axis": axis, "block_size": draw(st.integers(1, shape[axis]))}
    return shape, {"block_size": tuple(draw(st.sampled_from([b for b in range(1, n + 1) if n % b == 0]))
                                       for n in shape)}


def _block_of_each_element(layout) -> np.ndarray:
    """The flat block-grid index of every element, computed per dimension (no merging)."""
    idx = np.indices(layout.shape)
    blocks = tuple(i // b for i, b in zip(idx, layout.block, strict=True))
    return np.ravel_multi_index(blocks, layout.grid)


@settings(max_examples=examples(150), deadline=None)
@given(shapes_and_layouts())
def test_canonical_views_map_every_element_to_its_block(case):
    shape, kw = case
    layout = resolve_layout(shape, **kw)
    expected = _block_of_each_element(layout)
    assert layout.num_blocks == int(np.prod(layout.grid))
    dims = canonical_dims(layout.shape, layout.block)
    assert int(np.prod([n for n, _ in dims])) == int(np.prod(shape))
    data = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    params = np.arange(layout.num_blocks, dtype=np.int64).reshape(layout.grid)
    seen = np.zeros(data.size, np.int64)
    for (d3,), (p3,), (bp, br, bc) in canonical_views(layout, [data], [params], [1]):
        assert d3.ndim == 3 and p3.ndim == 3
        assert p3.shape == tuple(-(-n // b) for n, b in zip(d3.shape, (bp, br, bc), strict=True))
        for p, r, c in np.ndindex(*d3.shape):
            flat = d3[p, r, c]
            seen[flat] += 1
            assert p3[p // bp, r // br, c // bc] == expected.reshape(-1)[flat], (p, r, c)
    assert (seen == 1).all()


@settings(max_examples=examples(60), deadline=None)
@given(shapes_and_layouts(), st.sampled_from([2, 4]))
def test_canonical_views_with_packed_last_axis(case, k):
    """A packed array (last axis divided by k) is viewed consistently with the unpacked one."""
    shape, kw = case
    shape = shape[:-1] + (shape[-1] * k,)
    if "block_size" in kw and isinstance(kw["block_size"], tuple):
        kw = {"block_size": kw["block_size"][:-1] + (kw["block_size"][-1] * k,)}
    layout = resolve_layout(shape, **kw)
    data = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    packed = data[..., ::k] // k  # "byte" j holds the element index of its first code, divided by k
    params = np.zeros(layout.grid, np.int64)
    for (d3, q3), _, _ in canonical_views(layout, [data, np.ascontiguousarray(packed)], [params], [1, k]):
        assert q3.shape == d3.shape[:2] + (d3.shape[2] // k,)
        np.testing.assert_array_equal(q3, d3[..., ::k] // k)
