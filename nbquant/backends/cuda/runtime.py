"""The CUDA runtime of the ``cuda`` backend: kernel registration, launch sizes, device arrays and streams.

This is the one module that knows about the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``,
which runs every thread as a Python thread): launch sizes shrink there to a few
threads that each loop over many items (still several threads and blocks, so the
grid-stride and team loops are tested), and its device arrays get the small fixes
they need. Kernel modules call :func:`grid_for_rows`, :func:`team_size`,
:func:`team_grid` and :func:`reduction_grid` and never ask which target they run on.

Kernels are declared with :func:`cuda_kernel`, which records the Numba signatures
each one is launched with; :func:`all_signatures` lists them for the GPU-less PTX
check (``tools/ptx_check.py``), and :data:`launched` records the launches of this
process so a test can check that every launch is one of them.

Streams: work is queued on the stream from :func:`nbquant.backends.use_cuda_stream`
when one is in force, else on the CUDA default stream. Calls with device arrays
return as soon as the work is queued (like CuPy); calls with NumPy arrays copy the
result back and synchronise that stream before returning.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from collections.abc import Callable, Iterable

import ml_dtypes
import numpy as np
from numba import cuda, types
from numba.cuda.core import config as _cuda_config
from numba.cuda.core import inline_closurecall as _cuda_inliner
from numba.cuda.core import ir as _cuda_ir
from numba.cuda.core.errors import NumbaPerformanceWarning  # the class numba-cuda's launch warns with
from numba.np.numpy_support import from_dtype

from ...validation import FLOAT_INPUT_DTYPES
from .._device import is_device_array, selected_stream
from .._inlining import install as _install_fast_inlining
from .._views import kernel_float_view

__all__ = [
    "INPUT_DTYPES",
    "OUTPUT_DTYPES",
    "CODE_DTYPES",
    "I64",
    "F32",
    "B1",
    "FP_TUPLE",
    "CudaKernel",
    "cuda_kernel",
    "all_signatures",
    "launched",
    "array_type",
    "scalar_type",
    "grid_for_rows",
    "team_size",
    "team_grid",
    "reduction_grid",
    "unavailable_reason",
]

_SIMULATOR = bool(_cuda_config.ENABLE_CUDASIM)

#: Kernel-side float inputs: float32, float64, float16 bits (uint16), bfloat16 bits (int16).
INPUT_DTYPES = tuple(map(np.dtype, (np.float32, np.float64, np.uint16, np.int16)))
#: Kernel-side float outputs (float32, float16 bits, bfloat16 bits), also the ``like`` scalar types.
OUTPUT_DTYPES = tuple(map(np.dtype, (np.float32, np.uint16, np.int16)))
#: Unpacked integer code storage (8-, 16- and 32-bit formats).
CODE_DTYPES = tuple(map(np.dtype, (np.uint8, np.uint16, np.uint32)))

#: Numba scalar types of the kernels' arguments, and the minifloat format tuple (``QuantFormat.fp_params``).
I64, F32, B1 = types.int64, types.float32, types.boolean
FP_TUPLE = types.UniTuple(types.int64, 7)

#: Threads per block on a GPU (a multiple of the warp size).
THREADS = 256
#: Upper bound on blocks per launch; the grid-stride loops cover the rest.
MAX_BLOCKS = 8192
_MAX_GRID_Y = 65535
#: Threads per block of the team kernels; the largest team is a warp (coalesced 128-byte reads of float32).
TEAM_THREADS, MAX_TEAM = 256, 32
#: Threads per block of the tree reductions (a power of two) and their block cap.
REDUCE_THREADS, _REDUCE_MAX_BLOCKS = 256, 4096
#: Whether numba-cuda inlines the element functions with :mod:`nbquant.backends._inlining` (the same code, compiled
#: in a fraction of the time).
FAST_INLINING = _install_fast_inlining(_cuda_inliner, _cuda_ir, importlib.metadata.version("numba-cuda"), "0.30.")

# The simulator's launch sizes: a few threads that each loop over many items.
_SIM_THREADS, _SIM_BLOCKS_X, _SIM_BLOCKS_Y = 4, 2, 3
_SIM_TEAM_THREADS, _SIM_MAX_TEAM, _SIM_TEAM_BLOCKS = 8, 4, 2
_SIM_REDUCE_THREADS, _SIM_REDUCE_BLOCKS = 4, 2


def unavailable_reason() -> str:
    """Why the cuda backend cannot run here ("" when it can: a GPU with a driver, or the simulator)."""
    if cuda.is_available():
        return ""
    from numba.cuda.cudadrv.driver import driver

    detail = " ".join(str(driver.initialization_error or "").split())
    return "no CUDA driver or GPU found" + (f" ({detail})" if detail else "")


# ---------------------------------------------------------------------------------------------
# Kernels and their signatures.
# ---------------------------------------------------------------------------------------------


def array_type(dtype, ndim: int) -> types.Array:
    """The Numba type of a C-contiguous ``ndim``-d array of ``dtype``."""
    return types.Array(from_dtype(np.dtype(dtype)), ndim, "C")


def scalar_type(dtype):
    """The Numba type of a ``dtype`` scalar (the ``like`` argument of the dequantize kernels)."""
    return from_dtype(np.dtype(dtype))


#: ``(kernel name, signature)`` pairs launched in this process (checked against :func:`all_signatures`).
launched: set = set()


class CudaKernel:
    """A kernel function, the signatures it is launched with, and its compiled variants.

    ``signature(*dtypes)`` builds the Numba signature of one launch from the
    kernel-side dtypes of its arrays; ``variants`` lists the dtype tuples the backend
    launches (every signature the PTX check compiles).
    """

    def __init__(self, fn: Callable, signature: Callable, variants: Iterable[tuple]) -> None:
        self.fn = fn
        self.name = fn.__name__.removesuffix("_kernel")
        self.signature = signature
        self.variants = tuple(variants)
        self._compiled: dict = {}

    def signatures(self) -> list:
        """Every signature this kernel is compiled for."""
        return [self.signature(*v) for v in self.variants]

    def launch(self, grid, threads: int, stream, args: tuple, *dtypes) -> None:
        """Launch on ``grid`` x ``threads`` on ``stream`` with the signature of ``dtypes`` (compiled once)."""
        sig = self.signature(*dtypes)
        launched.add((self.name, sig))
        fn = self._compiled.get(sig)
        if fn is None:
            # cache=True: the compiled kernel is kept on disk (NUMBA_CACHE_DIR, beside the cpu backend's), so a
            # new process loads it instead of running NVVM again; the simulator has nothing to cache.
            fn = self._compiled[sig] = cuda.jit(sig, cache=not _SIMULATOR)(self.fn)
        with warnings.catch_warnings():  # small inputs give small grids; Numba's occupancy warning is noise here
            warnings.simplefilter("ignore", NumbaPerformanceWarning)
            fn[grid, threads, stream](*args)


#: Every kernel declared with :func:`cuda_kernel`, by name.
KERNELS: dict[str, CudaKernel] = {}


def cuda_kernel(signature: Callable, variants: Iterable[tuple]):
    """Declare a CUDA kernel: a plain function compiled per signature by :meth:`CudaKernel.launch`.

    Kernel bodies call only element functions (never an ``@intrinsic``: the simulator
    cannot run those) and the device helpers of the kernel modules.
    """

    def register(fn: Callable) -> CudaKernel:
        kernel = CudaKernel(fn, signature, variants)
        KERNELS[kernel.name] = kernel
        return kernel

    return register


def all_signatures() -> list[tuple[str, object]]:
    """Every ``(kernel name, signature)`` the backend can launch: what the PTX check compiles.

    Examples
    --------
    >>> from nbquant.backends import cuda
    >>> len(all_signatures())
    143
    """
    return [(k.name, sig) for k in KERNELS.values() for sig in k.signatures()]


# ---------------------------------------------------------------------------------------------
# Launch sizes.
# ---------------------------------------------------------------------------------------------


def grid_for_rows(rows: int, items: int, simulator: bool = _SIMULATOR) -> tuple[tuple[int, int], int]:
    """Grid and block size for ``rows`` canonical rows of ``items`` work items each.

    ``blockIdx.y`` walks rows and ``blockIdx.x``/``threadIdx.x`` the items of a row,
    both in grid-stride loops. Returns ``((grid_x, grid_y), threads)``.

    Examples
    --------
    >>> grid_for_rows(1, 1 << 24, simulator=False)
    ((8192, 1), 256)
    >>> grid_for_rows(4096, 47, simulator=False)
    ((1, 4096), 64)
    """
    rows, items = max(int(rows), 1), max(int(items), 1)
    if simulator:
        threads = min(_SIM_THREADS, items)
        return (min(_SIM_BLOCKS_X, -(-items // threads)), min(_SIM_BLOCKS_Y, rows)), threads
    threads = min(THREADS, -(-items // 32) * 32)
    grid_y = min(rows, _MAX_GRID_Y, MAX_BLOCKS)
    grid_x = max(1, min(-(-items // threads), MAX_BLOCKS // grid_y))
    return (grid_x, grid_y), threads


def team_size(block_len: int, simulator: bool = _SIMULATOR) -> int:
    """Threads that share a block of ``block_len`` elements along a row: about four elements each.

    A power of two, at most :data:`MAX_TEAM` (a warp), so that a block's reads are
    coalesced and a long block (a whole row) is not one thread's serial loop.

    Examples
    --------
    >>> [team_size(n, simulator=False) for n in (1, 5, 8, 32, 128, 4096)]
    [1, 1, 2, 8, 32, 32]
    """
    cap = _SIM_MAX_TEAM if simulator else MAX_TEAM
    team = 1
    while team < cap and 8 * team <= block_len:
        team *= 2
    return team


def team_grid(items: int, team: int) -> tuple[int, int]:
    """``(blocks, threads)`` for ``items`` team items (grid-stride rounds beyond the block cap)."""
    threads = _SIM_TEAM_THREADS if _SIMULATOR else TEAM_THREADS
    blocks = -(-items // (threads // team))
    return max(1, min(blocks, _SIM_TEAM_BLOCKS if _SIMULATOR else MAX_BLOCKS)), threads


def reduction_grid(n: int, max_blocks: int = _REDUCE_MAX_BLOCKS) -> tuple[int, int]:
    """``(blocks, threads)`` of a tree reduction over ``n`` elements (threads a power of two)."""
    if _SIMULATOR:
        return max(1, min(_SIM_REDUCE_BLOCKS, -(-n // _SIM_REDUCE_THREADS))), _SIM_REDUCE_THREADS
    return max(1, min(max_blocks, -(-n // REDUCE_THREADS))), REDUCE_THREADS


# ---------------------------------------------------------------------------------------------
# Arrays and streams.
# ---------------------------------------------------------------------------------------------


def as_device_array(a):
    """A zero-copy numba device array view of a CUDA array (numba, CAI or DLPack); None for host arrays."""
    if not is_device_array(a):
        return None
    if getattr(a, "__cuda_ndarray__", False):
        return a
    if hasattr(a, "__cuda_array_interface__"):
        desc, dtype = cai_interface(a.__cuda_array_interface__)
        d = cuda.from_cuda_array_interface(desc, owner=a)  # synchronizes on the producer's stream, as_cuda_array's way
        return d if d.dtype == dtype else d.view(dtype)
    from cuda.core.utils import StridedMemoryView  # DLPack-only producers (e.g. JAX)

    view = StridedMemoryView.from_dlpack(a, stream_ptr=-1)
    desc, dtype = dlpack_interface(view.shape, view.strides, view.dtype, view.ptr, view.readonly)
    d = cuda.from_cuda_array_interface(desc, owner=a, sync=False)
    return d if d.dtype == dtype else d.view(dtype)


def cai_interface(desc: dict) -> tuple[dict, np.dtype]:
    """A producer's ``__cuda_array_interface__`` as numba reads it, and the dtype to view the result as.

    torch (2.11 and later) and ml_dtypes write bfloat16 as ``typestr='<V2'``, which numba reads as a 2-byte
    void (found on a GPU: torch CUDA bfloat16 tensors were refused as ``|V2``). It is read as
    :func:`dlpack_dtype` reads a DLPack view's 2-byte void, and travels as :func:`numba_typestr` says.
    Every other interface is returned as it is.

    Examples
    --------
    >>> desc, dtype = cai_interface({"shape": (2,), "typestr": "<V2", "data": (1024, False), "version": 3})
    >>> desc["typestr"], dtype
    ('<u2', dtype(bfloat16))
    >>> cai_interface({"shape": (2,), "typestr": "<f4", "data": (1024, False), "version": 3})[1]
    dtype('float32')
    """
    dtype = dlpack_dtype(desc["typestr"])
    typestr = numba_typestr(dtype)
    return (desc if typestr == desc["typestr"] else {**desc, "typestr": typestr}), dtype


def dlpack_interface(shape, strides, dtype, ptr: int, readonly: bool) -> tuple[dict, np.dtype]:
    """The ``__cuda_array_interface__`` of a DLPack view (strides in elements), and the dtype to view it as.

    Examples
    --------
    >>> desc, dtype = dlpack_interface((2, 3), (3, 1), np.dtype("V2"), 1024, False)
    >>> desc["typestr"], desc["strides"], dtype
    ('<u2', (6, 2), dtype(bfloat16))
    """
    dtype = dlpack_dtype(dtype)
    strides = None if strides is None else tuple(s * dtype.itemsize for s in strides)
    desc = {"shape": tuple(shape), "strides": strides, "typestr": numba_typestr(dtype),
            "data": (int(ptr), bool(readonly)), "version": 3}
    return desc, dtype


def numba_typestr(dtype: np.dtype) -> str:
    """The ``typestr`` numba reads ``dtype`` through: its own for NumPy's built-in types, else unsigned integers of
    its size (ml_dtypes' ``bfloat16.str`` is ``'<V2'``, which numba reads back as a void), viewed as ``dtype`` after.

    Examples
    --------
    >>> import ml_dtypes
    >>> numba_typestr(np.dtype(np.float32)), numba_typestr(np.dtype(ml_dtypes.bfloat16))
    ('<f4', '<u2')
    """
    return dtype.str if dtype.isbuiltin == 1 else np.dtype(f"<u{dtype.itemsize}").str


def dlpack_dtype(dtype) -> np.dtype:
    """The NumPy dtype of a DLPack view's ``dtype``: bfloat16 (``kDLBfloat``, which cuda.core reports as
    ``V2``, a 2-byte void: DLPack's only 16-bit type without a NumPy equivalent) as ml_dtypes' bfloat16.

    Found on the GPU: torch CUDA bfloat16 tensors through DLPack were refused as ``dtype |V2``. torch (2.11 and
    later) writes the same 2-byte void into ``__cuda_array_interface__`` (:func:`cai_interface`).

    Examples
    --------
    >>> dlpack_dtype(np.dtype("V2")), dlpack_dtype(np.dtype(np.float16))
    (dtype(bfloat16), dtype('float16'))
    """
    d = np.dtype(dtype)
    return np.dtype(ml_dtypes.bfloat16) if d.kind == "V" and d.itemsize == 2 else d


def current_stream():
    """The stream this call runs on: :func:`nbquant.backends.use_cuda_stream`'s, else the default stream."""
    s = selected_stream()
    if s is None:
        return cuda.default_stream()
    if _SIMULATOR:
        return s if hasattr(s, "synchronize") else cuda.default_stream()
    if isinstance(s, cuda.cudadrv.driver.Stream):
        return s
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy.cuda.Stream
        if isinstance(getattr(s, attr, None), int):
            return cuda.external_stream(getattr(s, attr))
    return cuda.external_stream(int(s))


def _contiguous(d, name: str):
    if not d.is_c_contiguous():
        raise ValueError(f"{name} is a non-contiguous CUDA array; nbquant does not copy device arrays, so make it "
                         "C-contiguous first (e.g. cupy.ascontiguousarray or tensor.contiguous())")
    if _SIMULATOR and type(d).__name__ == "FakeCUDAArray":
        return _host_shaped(d)
    return d


_HostShaped = None


def _host_shaped(d):
    """The simulator's device arrays refuse ``shape[-1]`` on the host (real ones allow it); give a plain tuple."""
    global _HostShaped
    if _HostShaped is None:

        class _HostShaped(type(d)):
            @property
            def shape(self):
                return tuple(self._ary.shape)

    return _HostShaped(d._ary, d.stream)


def device_float_input(x, name: str = "x"):
    """Validate a device float input (dtype, C-contiguity) and return its numba device array."""
    d = as_device_array(x)
    if d.dtype not in FLOAT_INPUT_DTYPES:
        raise TypeError(f"{name} has dtype {d.dtype}; nbquant quantizes float32, float16, bfloat16 (ml_dtypes) "
                        f"or float64 arrays. Convert it on the device first")
    return _contiguous(d, name)


def device_code_input(q, name: str = "q"):
    """Return the numba device array of device codes ``q`` (must be C-contiguous)."""
    return _contiguous(as_device_array(q), name)


def device_empty(shape: tuple[int, ...], dtype):
    """A new device array for a result, allocated on the current stream."""
    return cuda.device_array(shape, np.dtype(dtype), stream=current_stream())


def _span(a) -> tuple[int, int]:
    if _SIMULATOR:
        ptr = a.__array_interface__["data"][0] if hasattr(a, "__array_interface__") else 0
    else:
        ptr = a.__cuda_array_interface__["data"][0]
    return ptr, ptr + int(a.size) * a.dtype.itemsize


def check_device_out(out, shape: tuple[int, ...], dtype, inputs=()):
    """Check a device ``out=`` array (exact shape and dtype, C-contiguous, no overlap with device inputs)."""
    d = as_device_array(out)
    if d is None:
        raise TypeError(f"out must be a CUDA device array when the input is one, got {type(out).__name__}")
    if tuple(d.shape) != tuple(shape) or d.dtype != np.dtype(dtype):
        raise ValueError(f"out has shape {tuple(d.shape)} and dtype {d.dtype}; this call needs shape {tuple(shape)} "
                         f"and dtype {np.dtype(dtype)}")
    _contiguous(d, "out")
    lo, hi = _span(d)
    for a in inputs:
        if is_device_array(a) and a.size and d.size:
            alo, ahi = _span(as_device_array(a))
            if lo < ahi and alo < hi:
                raise ValueError("out shares memory with an input; nbquant never modifies its inputs, "
                                 "so pass a separate array")
    return d


def host_buffer(a) -> np.ndarray:
    """``a`` as a host array that numba's driver copies as it is.

    Two things a real GPU refuses and the simulator (NumPy-backed device arrays) does not:

    * numba reads host memory through the buffer protocol, which has no format for ml_dtypes'
      dtypes (``cannot include dtype 'E' in a buffer`` for bfloat16): those go as unsigned
      integers of their size;
    * a device array keeps the host array's strides, and NumPy calls an array with a size-1
      dimension of stride 0 (a broadcast scale) C-contiguous; numba's device ``reshape`` then
      "requires copying". Such an array is copied to NumPy's standard strides first.

    Examples
    --------
    >>> import ml_dtypes, numpy as np
    >>> b = host_buffer(np.broadcast_to(np.zeros(1, ml_dtypes.bfloat16), (1, 1, 1)))
    >>> b.dtype, b.strides
    (dtype('uint16'), (2, 2, 2))
    """
    h = np.ascontiguousarray(a)
    if h.strides != _c_strides(h.shape, h.itemsize):
        h = h.copy()
    return _as_plain(h)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _as_plain(a):
    """``a`` (host or device) with an ml_dtypes dtype viewed as unsigned integers of its size, the dtype numba's
    driver copies (the same view on both sides of a copy)."""
    return a if a.dtype.isbuiltin == 1 else a.view(np.dtype(f"u{a.dtype.itemsize}"))


def to_device(a, stream=None):
    """``a`` on the device: a device array as it is, a host array copied (on ``stream``, else the current one)."""
    d = as_device_array(a)
    if d is not None:
        return d
    h = host_buffer(a)
    d = cuda.to_device(h, stream=current_stream() if stream is None else stream)
    dtype = np.asarray(a).dtype
    return d if d.dtype == dtype else d.view(dtype)


def to_host(a) -> np.ndarray:
    """A host copy of the device array ``a`` (synchronised), ml_dtypes dtypes included (see :func:`host_buffer`)."""
    stream = current_stream()
    d = as_device_array(a)
    h = _as_plain(d).copy_to_host(stream=stream)
    stream.synchronize()
    return h if h.dtype == d.dtype else h.view(d.dtype)


def device_float(x, stream):
    """``x`` (host or device) as a device kernel-float array: float16/bfloat16 as their bits."""
    d = as_device_array(x)
    if d is None:
        return cuda.to_device(host_buffer(kernel_float_view(np.asarray(x))), stream=stream)
    return kernel_float_view(device_float_input(d))


def device_or_host(a):
    """The numba device array of a CUDA array, or the host array itself."""
    d = as_device_array(a)
    return a if d is None else d


def result_on_device(out, stream):
    """The device array a kernel writes for the result ``out``: ``out`` itself, or a new one for a host ``out``."""
    d = as_device_array(out)
    return d if d is not None else cuda.device_array(out.shape, out.dtype, stream=stream)


def copy_back(pairs, stream) -> None:
    """Copy each ``(host result, device array)`` pair of a host result back, then synchronise once."""
    host = [(o, d) for o, d in pairs if not is_device_array(o)]
    for o, d in host:
        _as_plain(d).copy_to_host(_as_plain(o), stream=stream)
    if host:
        stream.synchronize()
