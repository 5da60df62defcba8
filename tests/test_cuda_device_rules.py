"""What a real GPU does that the CUDA simulator does not model, pinned without a GPU.

The first GPU run (docs/cuda.md, "Checked on a GPU") failed on rules of numba's real device
arrays and launches that the simulator's NumPy-backed arrays skip: numba reads host memory
through the buffer protocol, which cannot describe ml_dtypes' dtypes (``cannot include dtype
'E' in a buffer`` for every bfloat16 result); its device ``reshape`` takes an unchanged shape
only as a tuple ("operation requires copying" on every per-tensor call); DLPack's bfloat16
arrives as a 2-byte void; and numba-cuda warns about small grids with its own warning class.
"""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

runtime = pytest.importorskip("nbquant.backends.cuda.runtime", reason="numba-cuda is not installed")
dummyarray = pytest.importorskip("numba.cuda.cudadrv.dummyarray")

CUDA_PACKAGE = Path(__file__).resolve().parents[1] / "nbquant" / "backends" / "cuda"
DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int8, np.uint8, np.uint16, np.int16,
          np.int32, np.uint32, np.int64, ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.float8_e4m3fn,
          ml_dtypes.float8_e5m2, ml_dtypes.float6_e2m3fn, ml_dtypes.float4_e2m1fn, ml_dtypes.float8_e8m0fnu]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_host_buffer_is_readable_through_the_buffer_protocol(dtype):
    a = np.arange(6).astype(dtype).reshape(2, 3)
    h = runtime.host_buffer(a)
    memoryview(h)  # what numba's host_pointer asks for; raises for ml_dtypes' dtypes
    assert h.dtype.itemsize == a.dtype.itemsize and h.shape == a.shape
    np.testing.assert_array_equal(h.view(a.dtype).view(np.uint8), a.view(np.uint8))


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 3, 1), (2, 1, 4), (1,)])
def test_host_buffer_has_standard_strides(shape):
    """A broadcast array (stride 0, which NumPy calls C-contiguous and numba does not) is copied to NumPy's strides."""
    a = np.broadcast_to(np.float32(0.5), shape)
    h = runtime.host_buffer(a)
    assert h.strides == np.empty(shape, np.float32).strides
    assert dummyarray.Array.from_desc(0, h.shape, h.strides, h.itemsize).is_c_contig


class DeviceLike:
    """NumPy data with numba's device ``reshape`` rule: no copy, and an unchanged shape only as an equal tuple."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a
        self.shape = a.shape

    def reshape(self, *newshape):
        if len(newshape) == 1 and isinstance(newshape[0], (tuple, list)):
            newshape = newshape[0]
        if newshape == self.shape:
            return self
        d = dummyarray.Array.from_desc(0, self.a.shape, self.a.strides, self.a.itemsize)
        _, extents = d.reshape(*newshape)
        if extents != [d.extent]:
            raise NotImplementedError("operation requires copying")
        return DeviceLike(self.a.reshape(newshape))


@pytest.mark.parametrize(("shape", "block"), [((1, 1, 1), (1, 1, 1)), ((4, 6), (4, 6)), ((4, 6), (1, 6)),
                                              ((4, 6), (4, 1)), ((4, 6), (2, 3)), ((3, 5, 7, 12), (1, 5, 1, 4)),
                                              ((7,), (7,))])
def test_canonical_views_reshape_device_arrays_without_a_copy(shape, block):
    """The GPU's "operation requires copying" on per-tensor calls: canonical_views asked for an unchanged shape
    as a list, which numba's device reshape does not recognise as unchanged."""
    from nbquant.layout import BlockLayout, canonical_views

    layout = BlockLayout(shape, block, "block_size")
    x = DeviceLike(runtime.host_buffer(np.zeros(shape, np.float32)))
    s = DeviceLike(runtime.host_buffer(np.ones(layout.grid, np.float32)))
    for views, pviews, _ in canonical_views(layout, [x], [s], [1]):
        assert len(views[0].shape) == len(pviews[0].shape) == 3


def test_every_host_copy_goes_through_host_buffer():
    """numba's own host copies (``cuda.to_device``, ``copy_to_host``) appear only in runtime.py, behind
    host_buffer and ``_as_plain``: in the package, the benchmarks and the tests, every other copy calls
    ``runtime.to_device``/``to_host``. The second GPU run found three that did not (a benchmark's fp8 codes,
    tests' bfloat16 inputs, ``to_host`` itself)."""
    root = CUDA_PACKAGE.parents[2]
    offenders = []
    for path in [*root.glob("nbquant/**/*.py"), *root.glob("benchmarks/*.py"), *root.glob("tests/*.py")]:
        if path.name == Path(__file__).name:
            continue
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"cuda\.to_device\(|\.copy_to_host\(", text):
            line = text.count("\n", 0, m.start()) + 1
            source = text.splitlines()[line - 1]
            allowed = path.name == "runtime.py" and ("_as_plain(d).copy_to_host(" in source
                                                     or "cuda.to_device(h," in source
                                                     or "cuda.to_device(host_buffer(" in source)
            if not allowed:
                offenders.append(f"{path.relative_to(root)}:{line}")
    assert not offenders, f"host copies that bypass runtime.host_buffer: {offenders}"


def test_dlpack_bfloat16_is_read_as_bfloat16():
    assert runtime.dlpack_dtype(np.dtype("V2")) == np.dtype(ml_dtypes.bfloat16)
    assert runtime.dlpack_dtype(np.dtype(np.uint16)) == np.dtype(np.uint16)


@pytest.mark.parametrize("dtype", [np.dtype("V2"), np.dtype(np.float16), np.dtype(np.float32)], ids=str)
def test_dlpack_interface_typestr_is_a_numpy_type(dtype):
    """The second GPU run: a bfloat16 DLPack view went through ``__cuda_array_interface__`` as ``'<V2'``
    (ml_dtypes' ``bfloat16.str``), which numba reads back as a void, so torch's bfloat16 tensors were refused."""
    desc, view_as = runtime.dlpack_interface((4, 3), (3, 1), dtype, 4096, True)
    assert np.dtype(desc["typestr"]).kind in "uf" and np.dtype(desc["typestr"]).itemsize == dtype.itemsize
    assert view_as == runtime.dlpack_dtype(dtype)
    assert desc["strides"] == (3 * dtype.itemsize, dtype.itemsize) and desc["data"] == (4096, True)


@pytest.mark.parametrize("typestr", ["<V2", "|V2", "<u2", "<f2", "<f4", "|u1"])
def test_cuda_array_interface_bfloat16_is_read_as_bfloat16(typestr):
    """The third GPU run: torch (2.11 and later) exports a bfloat16 tensor's ``__cuda_array_interface__`` with
    ``typestr='<V2'`` (ml_dtypes' ``bfloat16.str``), which numba reads as a 2-byte void, so the tensor was refused
    as ``|V2``. Only that typestr changes: everything else in the interface, and every other type, is kept."""
    given = {"shape": (4, 3), "strides": None, "typestr": typestr, "data": (4096, True), "version": 3,
             "stream": 7}
    desc, view_as = runtime.cai_interface(given)
    assert {k: v for k, v in desc.items() if k != "typestr"} == {k: v for k, v in given.items() if k != "typestr"}
    if typestr.endswith("V2"):
        assert (desc["typestr"], view_as) == ("<u2", np.dtype(ml_dtypes.bfloat16))
    else:
        assert (desc["typestr"], view_as) == (typestr, np.dtype(typestr))
    assert np.dtype(desc["typestr"]).kind in "uf" and np.dtype(desc["typestr"]).itemsize == view_as.itemsize


def test_launches_silence_the_occupancy_warning_numba_cuda_raises():
    """numba-cuda warns about small grids with its own class; silencing numba's (another class) printed the
    warning on every small call on the GPU."""
    from numba.cuda.core import errors

    assert runtime.NumbaPerformanceWarning is errors.NumbaPerformanceWarning


#: NaNs of every sign and payload: x86's default (0xffc00000), NumPy's (0x7fc00000), a GPU's (0x7fffffff), its
#: negation, and payloads an input can carry.
NAN_BITS = [0xFFC00000, 0x7FC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00001, 0xFFA00000, 0x7F800001]


def test_gguf_observations_of_a_nan_read_no_nan_bits():
    """The second GPU run: 16 GGUF cases differed on rows whose squares overflow (``inf / inf``), because x86 makes
    its default NaN there and a GPU ``0x7fffffff``, and ggml's rounding and float16 store read the NaN's bits.
    Every place a GGUF element function reads a float's bits must give one answer for every NaN."""
    from numba import njit

    from nbquant.element.gguf_common import ggml_f16, nearest_int
    from nbquant.element.gguf_search import nearest_clamped

    @njit
    def observe(v):
        return nearest_int(v), nearest_clamped(v, -8, 7), nearest_clamped(v, 3, 15), ggml_f16(v)

    nans = np.array(NAN_BITS, np.uint32).view(np.float32)
    assert {observe(v) for v in nans} == {(0, 0.0, 3.0, 0xFE00)}
    assert observe(np.float32(-2.5)) == (-2, -2.0, 3.0, 0xC100)


def test_float_max_and_min_keep_the_cpu_semantics():
    """The second GPU run: numba-cuda's builtin ``max`` of floats is ``fmaxf`` (``max(-0.0, 0.0)`` is ``+0.0``
    there); the element layer's ``max_f32``/``min_f32`` compare, as Numba's cpu ``max``/``min`` do."""
    from numba import njit

    from nbquant.element.bits import max_f32, min_f32

    @njit
    def both(a, b):
        return max_f32(a, b), min_f32(a, b), max(a, b), min(a, b)

    nan = np.float32(np.nan)
    for a, b in [(-0.0, 0.0), (0.0, -0.0), (nan, 1.0), (1.0, nan), (2.0, 3.0)]:
        got = both(np.float32(a), np.float32(b))
        assert np.array(got[:2], np.float32).view(np.uint32).tolist() == \
            np.array(got[2:], np.float32).view(np.uint32).tolist()
