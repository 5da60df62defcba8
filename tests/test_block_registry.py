"""Every registered block format (nbquant.blocks), from its declaration alone: no per-format test code.

Each test is parametrised over :func:`nbquant.blocks.block_format_names`, so a new format
module (a :class:`~nbquant.blocks.BlockFormat` subclass and its kernels) is covered here
as soon as it is registered: compiled backends equal to the reference bit for bit (cpu;
cuda under the simulator run), round trips, odd shapes and axes, NaN/inf/subnormals/ties,
geometry against the bytes actually stored, dask, and the argument checks.
"""

from __future__ import annotations

import importlib
import importlib.util

import ml_dtypes
import numpy as np
import pytest
from _helpers import device_copy, host_copy

from nbquant.block_rows import dequantize_blocks, quantize_blocks
from nbquant.blocks import block_format_names, find_kernel, get_block_format

NAMES = block_format_names()
IN_DTYPES = (np.float32, np.float16, ml_dtypes.bfloat16, np.float64)
OUT_DTYPES = (np.float32, np.float16, ml_dtypes.bfloat16)


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a)).view(np.uint8)


def _sample(shape, seed=0) -> np.ndarray:
    """Heavy-tailed values with a scale that changes along the first axis (blocks of very different amax)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3, shape) * np.exp2(rng.integers(-8, 8, shape[:1] + (1,) * (len(shape) - 1)))
    return x.astype(np.float32)


def _both(backend, fmt, x, **kwargs):
    """Quantize on the reference and on ``backend``: the same tensors (dtype, shape, bits) and parameters."""
    ref, ref_params = quantize_blocks(fmt, x, backend="reference", **kwargs)
    got, got_params = quantize_blocks(fmt, x, backend=backend, **kwargs)
    assert len(got) == len(ref) == len(fmt.tensors(fmt.spec(kwargs.get("block_size"), ref_params)))
    for g, r in zip(got, ref, strict=True):
        assert g.dtype == r.dtype and g.shape == r.shape
        np.testing.assert_array_equal(_bits(g), _bits(r))
    assert repr(got_params) == repr(ref_params)
    return got, ref_params


def _same_dequantized(backend, fmt, tensors, params, **kwargs):
    for out_dtype in OUT_DTYPES:
        ref = dequantize_blocks(fmt, tensors, params=params, out_dtype=out_dtype, backend="reference", **kwargs)
        got = dequantize_blocks(fmt, tensors, params=params, out_dtype=out_dtype, backend=backend, **kwargs)
        assert got.dtype == ref.dtype == np.dtype(out_dtype) and got.shape == ref.shape
        np.testing.assert_array_equal(_bits(got), _bits(ref))
    return ref


def _shapes(b: int):
    """(shape, axis) pairs: one block, rows of several blocks, the blocked axis first, in the middle, 3-d."""
    return [((b,), -1), ((3, 2 * b), -1), ((2 * b, 3), 0), ((2, b, 3), 1), ((1, 1, 3 * b), 2)]


@pytest.mark.parametrize("name", NAMES)
def test_matches_reference_bit_for_bit(backend, name):
    fmt = get_block_format(name)
    for i, (shape, axis) in enumerate(_shapes(fmt.block_size)):
        x = _sample(shape, seed=i)
        for dtype in IN_DTYPES:
            tensors, params = _both(backend, fmt, x.astype(dtype), axis=axis)
            for t, decl in zip(tensors, fmt.tensors(fmt.spec(None, params)), strict=True):
                assert t.shape == decl.shape(shape, axis % len(shape), fmt.block_size)
            _same_dequantized(backend, fmt, tensors, params, axis=axis)


@pytest.mark.parametrize("name", NAMES)
def test_smaller_blocks_when_allowed(backend, name):
    fmt = get_block_format(name)
    sizes = fmt.block_sizes or (fmt.block_multiple(fmt.default_params()) * 4,)
    for b in sizes:
        tensors, params = _both(backend, fmt, _sample((3, 2 * b), seed=b), block_size=b)
        _same_dequantized(backend, fmt, tensors, params, block_size=b)


@pytest.mark.parametrize("name", NAMES)
def test_round_trip(backend, name):
    """Decoding gives the input's shape and a small error; the tensors' kernel-dtype bits decode alike."""
    fmt = get_block_format(name)
    x = np.random.default_rng(3).standard_normal((4, 4 * fmt.block_size)).astype(np.float32)
    tensors, params = quantize_blocks(fmt, x, backend=backend)
    y = dequantize_blocks(fmt, tensors, params=params, backend=backend)
    assert y.shape == x.shape and y.dtype == np.float32 and np.isfinite(y).all()
    assert np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2)) < 0.5
    raw = tuple(t.view(d.dtype) for t, d in zip(tensors, fmt.tensors(fmt.spec(None, params)), strict=True))
    np.testing.assert_array_equal(_bits(dequantize_blocks(fmt, raw, params=params, backend=backend)), _bits(y))


@pytest.mark.parametrize("name", NAMES)
def test_special_values(backend, name):
    """NaN, ±inf, subnormals, ±0 and halfway values, one kind per block: the reference's bits, or its exception."""
    fmt = get_block_format(name)
    b = fmt.block_size
    halfway = np.array([1.0, 1.25, 1.5, 1.75, 2.5, 3.0, 3.5, 5.0, 7.0, -1.25, -2.5, -5.0, 0.75, 0.375], np.float32)
    x = np.resize(halfway, (8, b)) * np.exp2(np.arange(8, dtype=np.float32) - 3)[:, None]
    x[0, 1] = np.nan
    x[1, 2] = np.inf
    x[2, 3] = -np.inf
    x[3] = np.resize(np.array([1e-40, -3e-42, 1.4e-45, 0.0], np.float32), b)
    x[4] = 0.0
    x[5] = -0.0
    x[6, ::2] = np.float32(2.0 ** -126)
    for rows in (x, x[3:]):  # with and without the non-finite blocks
        try:
            ref, params = quantize_blocks(fmt, rows, backend="reference")
        except ValueError as error:
            with pytest.raises(ValueError, match=str(error)[:20].replace("(", r"\(")):
                quantize_blocks(fmt, rows, backend=backend)
            continue
        tensors, _ = _both(backend, fmt, rows)
        _same_dequantized(backend, fmt, tensors, params)


@pytest.mark.parametrize("name", NAMES)
def test_empty_input(backend, name):
    fmt = get_block_format(name)
    tensors, params = _both(backend, fmt, np.zeros((0, fmt.block_size), np.float32))
    assert all(t.size == 0 for t in tensors)
    assert dequantize_blocks(fmt, tensors, params=params, backend=backend).shape == (0, fmt.block_size)


@pytest.mark.parametrize("name", NAMES)
def test_geometry_is_the_bytes_stored(name):
    """``bytes_per_block`` and ``bits_per_weight`` are what a quantized block actually occupies."""
    fmt = get_block_format(name)
    tensors, _ = quantize_blocks(fmt, _sample((5, fmt.block_size)), backend="reference")
    assert sum(t.nbytes for t in tensors) == 5 * fmt.bytes_per_block()
    assert fmt.bits_per_weight() == 8 * fmt.bytes_per_block() / fmt.block_size
    assert get_block_format(name) is fmt and fmt.name == name and name in repr(fmt)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("target", ["reference", "cpu", "cuda"])
def test_every_target_registers_both_kernels(name, target):
    if target == "cuda" and importlib.util.find_spec("numba_cuda") is None:
        pytest.skip("numba-cuda is not installed")
    importlib.import_module(f"nbquant.backends.{target}")
    fmt = get_block_format(name)
    assert callable(find_kernel(target, fmt, "quantize")) and callable(find_kernel(target, fmt, "dequantize"))


@pytest.mark.parametrize("name", NAMES)
def test_inputs_are_not_modified(name):
    fmt = get_block_format(name)
    x = _sample((2, 2 * fmt.block_size))
    before = x.copy()
    tensors, params = quantize_blocks(fmt, x)
    copies = [t.copy() for t in tensors]
    dequantize_blocks(fmt, tensors, params=params)
    np.testing.assert_array_equal(x, before)
    for t, c in zip(tensors, copies, strict=True):
        np.testing.assert_array_equal(_bits(t), _bits(c))


@pytest.mark.parametrize("name", NAMES)
def test_argument_checks(name):
    fmt = get_block_format(name)
    b = fmt.block_size
    x = _sample((2, 2 * b))
    bad_length = 2 * b + 1 if fmt.block_sizes else 2 * b + fmt.block_multiple(fmt.default_params())
    with pytest.raises(ValueError, match=f"not a multiple of block_size={b}; pad it"):
        quantize_blocks(fmt, _sample((2, bad_length)))
    with pytest.raises(ValueError, match="block_size=0"):
        quantize_blocks(fmt, x, block_size=0)
    with pytest.raises(ValueError, match="axis=2 is out of range"):
        quantize_blocks(fmt, x, axis=2)
    with pytest.raises(TypeError, match="dtype"):
        quantize_blocks(fmt, x.astype(np.int32))
    with pytest.raises(TypeError, match="params"):
        quantize_blocks(fmt, x, params=object())
    tensors, params = quantize_blocks(fmt, x)
    decl = fmt.tensors(fmt.spec(None, params))
    with pytest.raises(ValueError, match=f"{name} stores {len(decl)}"):
        dequantize_blocks(fmt, tensors[:-1] + (tensors[-1], tensors[-1]), params=params)
    wrong = np.int16 if np.dtype(decl[0].dtype).itemsize != 2 else np.int32
    with pytest.raises(TypeError, match=f"{decl[0].name} has dtype"):
        dequantize_blocks(fmt, (tensors[0].view(np.uint8).astype(wrong),) + tensors[1:], params=params)
    if len(tensors) > 1:
        with pytest.raises(ValueError, match=f"{decl[-1].name} has shape"):
            dequantize_blocks(fmt, tensors[:-1] + (tensors[-1][:1],), params=params)
    with pytest.raises(TypeError, match="out_dtype"):
        dequantize_blocks(fmt, tensors, params=params, out_dtype=np.int8)
    with pytest.raises(ValueError, match="unknown block format 'no-such-format'"):
        get_block_format("no-such-format")


@pytest.mark.parametrize("name", NAMES)
def test_dask_same_bits_as_numpy(name):
    da = pytest.importorskip("dask.array")
    import dask

    fmt = get_block_format(name)
    x = _sample((6, 4 * fmt.block_size), seed=7)
    tensors, params = quantize_blocks(fmt, x)
    with dask.config.set(scheduler="synchronous"):
        for chunks in ((6, 4 * fmt.block_size), (4, fmt.block_size + 3)):
            lazy, lazy_params = quantize_blocks(fmt, da.from_array(x, chunks=chunks), params=params)
            assert all(isinstance(t, da.Array) for t in lazy)
            for t, e in zip(dask.compute(*lazy), tensors, strict=True):
                assert t.dtype == e.dtype
                np.testing.assert_array_equal(_bits(t), _bits(e))
            y = dequantize_blocks(fmt, tuple(da.from_array(t, chunks=2) for t in tensors), params=params)
            np.testing.assert_array_equal(_bits(y.compute()), _bits(dequantize_blocks(fmt, tensors, params=params)))


@pytest.mark.parametrize("name", NAMES)
def test_device_arrays_stay_on_the_device(backend, name):
    if backend != "cuda":
        pytest.skip("device arrays are the cuda backend's")

    from nbquant.backends import is_device_array

    fmt = get_block_format(name)
    x = _sample((3, 2 * fmt.block_size), seed=5)
    ref, params = quantize_blocks(fmt, x, backend="reference")
    got, _ = quantize_blocks(fmt, device_copy(x), params=params)
    assert all(is_device_array(t) for t in got)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(_bits(host_copy(g)), _bits(r))
    back = dequantize_blocks(fmt, got, params=params)
    assert is_device_array(back)
    np.testing.assert_array_equal(_bits(host_copy(back)), _bits(dequantize_blocks(fmt, ref, params=params)))


# --- a GGUF-shaped format fits the descriptor: one packed byte record per block -------------------------


def _record_format(monkeypatch):
    """Register, for this test only, a Q8_0-like format: 32 values -> one 34-byte record (float16 d, 32 int8)."""
    from nbquant.blocks import BlockFormat, Tensor, _format, block_kernel

    monkeypatch.setattr(_format, "_FORMATS", dict(_format._FORMATS))
    monkeypatch.setattr(_format, "_KERNELS", dict(_format._KERNELS))

    class Records(BlockFormat, name="test_q8_records"):
        block_size = 32
        block_sizes = (32,)

        def tensors(self, spec):
            return (Tensor("blocks", np.dtype(np.uint8), 34),)

    def quantize(x, spec, outputs):
        (records,) = outputs
        blocks = np.asarray(x, np.float32).reshape(x.shape[0], -1, 32)
        d = (np.max(np.abs(blocks), axis=-1) / np.float32(127)).astype(np.float16)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.rint(blocks / d.astype(np.float32)[..., None])
        q = np.clip(np.nan_to_num(q), -127, 127).astype(np.int8)
        view = records.reshape(x.shape[0], -1, 34)
        view[..., :2] = d[..., None].view(np.uint8)
        view[..., 2:] = q.view(np.uint8)

    def dequantize(inputs, spec, out):
        view = inputs[0].reshape(out.shape[0], -1, 34)
        d = np.ascontiguousarray(view[..., :2]).view(np.float16).astype(np.float32)
        out[...] = (view[..., 2:].view(np.int8).astype(np.float32) * d).reshape(out.shape).astype(out.dtype)

    for target in ("reference", "cpu"):
        block_kernel(target, "test_q8_records", "quantize")(quantize)
        block_kernel(target, "test_q8_records", "dequantize")(dequantize)
    return Records


def test_a_record_format_registers_by_subclassing(monkeypatch):
    cls = _record_format(monkeypatch)
    fmt = get_block_format("test_q8_records")
    assert isinstance(fmt, cls) and fmt.bytes_per_block() == 34 and fmt.bits_per_weight() == 8.5
    x = _sample((3, 64), seed=2)
    (records,), params = _both("cpu", fmt, x)
    assert records.shape == (3, 68) and records.dtype == np.uint8
    _same_dequantized("cpu", fmt, (records,), params)
    y = dequantize_blocks(fmt, (records,))
    assert np.abs(y - x).max() <= np.abs(x).max() / 127
    with pytest.raises(ValueError, match="block_size=16 is not one of test_q8_records's"):
        quantize_blocks(fmt, x, block_size=16)
    with pytest.raises(NotImplementedError, match=r"@block_kernel\('cuda', 'test_q8_records', 'quantize'\)"):
        find_kernel("cuda", fmt, "quantize")
    da = pytest.importorskip("dask.array")
    (lazy,), _ = quantize_blocks(fmt, da.from_array(x, chunks=(2, 40)))
    np.testing.assert_array_equal(lazy.compute(scheduler="synchronous"), records)
    lazy_y = dequantize_blocks(fmt, (da.from_array(records, chunks=(1, 34)),))
    np.testing.assert_array_equal(lazy_y.compute(scheduler="synchronous"), y)
