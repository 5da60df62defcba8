"""Where a call's arrays live, decided once at the front door: on the host, on a CUDA device, or in dask.

Every front door reads ``p = placement(x, scale, zero_point, out=out)`` and then asks
``p`` for its inputs (:meth:`Host.float_input`, :meth:`Host.code_input`), its result
(:meth:`Host.result`, one allocator for every door) and the hand-off of a lazy call
(:meth:`Lazy.map`); :func:`nbquant.backends.resolve_backend` takes ``p`` too. The three
kinds are :class:`Host` (NumPy, and what :func:`nbquant.interop.as_host_array` reads),
:class:`Device` (CUDA arrays of any producer, processed on their device) and
:class:`Lazy` (a dask array among the arguments). This is numba-cuda's per-call
``GUFuncCallSteps`` for nbquant: the steps are the placement's, the kernels the backend's.

This module stands on the ground floor: it imports neither numba nor dask. The CUDA
backend (for :class:`Device`) and the dask engine (for :class:`Lazy`) are plugged in by
the floors that own them (:func:`plug`), so the arrow never runs up.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator

import ml_dtypes
import numpy as np

from ._memory import host_empty
from .codes import PackedCodes
from .interop import as_host_array

__all__ = [
    "FLOAT_INPUT_DTYPES",
    "HOST",
    "Device",
    "Host",
    "Lazy",
    "any_dask_array",
    "check_float_input",
    "check_known_chunks",
    "check_out",
    "device_code_input",
    "device_copy",
    "device_float_input",
    "device_result",
    "host_array",
    "is_dask_array",
    "is_device_array",
    "packed_format",
    "placement",
    "plug",
    "selected_stream",
    "use_cuda_stream",
]

FLOAT_INPUT_DTYPES = tuple(map(np.dtype, (np.float32, np.float16, ml_dtypes.bfloat16, np.float64)))
_FLOAT_NAMES = "float32, float16, bfloat16 (ml_dtypes) or float64"
#: DLPack device types of CUDA memory: kDLCUDA and kDLCUDAManaged.
_DLPACK_CUDA = (2, 13)
#: Arguments that are plainly on the host: the placement of a NumPy call is decided by these isinstance checks.
_PLAIN = (np.ndarray, np.generic, float, int)
#: The loaders the upper floors plug in: ``"device"`` -> the cuda backend, ``"lazy"`` -> :mod:`nbquant._dask.engine`.
_PLUGGED: dict[str, Callable[[], object]] = {}
_cuda_stream: contextvars.ContextVar[object | None] = contextvars.ContextVar("nbquant_cuda_stream", default=None)


def plug(kind: str, loader: Callable[[], object]) -> None:
    """Plug in what :class:`Device` (``kind="device"``) or :class:`Lazy` (``"lazy"``) hands its work to.

    ``loader`` is called on first use and returns the cuda backend (which raises
    :class:`~nbquant.BackendUnavailableError` when CUDA cannot run) or the dask engine
    module. :mod:`nbquant.backends` and :mod:`nbquant._dask` plug themselves in when imported.
    """
    if kind not in ("device", "lazy"):
        raise ValueError(f"kind={kind!r} is not a placement; use 'device' or 'lazy'")
    _PLUGGED[kind] = loader


def _plugged(kind: str):
    loader = _PLUGGED.get(kind)
    if loader is None:  # import nbquant plugs both in; only a half-imported package gets here
        raise RuntimeError(f"no {kind} engine is plugged into nbquant.placement; import nbquant first")
    return loader()


def is_device_array(a) -> bool:
    """Whether ``a`` is a CUDA array: a numba device array, ``__cuda_array_interface__`` or CUDA DLPack.

    Examples
    --------
    >>> is_device_array(np.zeros(3)), is_device_array(None)
    (False, False)
    """
    if a is None or isinstance(a, np.ndarray):
        return False
    if getattr(a, "__cuda_ndarray__", False) or hasattr(a, "__cuda_array_interface__"):
        return True
    device = getattr(a, "__dlpack_device__", None)
    try:
        return device is not None and int(device()[0]) in _DLPACK_CUDA
    except Exception:
        return False


def is_dask_array(x) -> bool:
    """Whether ``x`` is a ``dask.array.Array`` (or a subclass), decided without importing dask.

    Examples
    --------
    >>> import numpy as np
    >>> is_dask_array(np.zeros(2))
    False
    """
    module = type(x).__module__
    return (module == "dask" or module.startswith("dask.")) and hasattr(x, "chunks") and hasattr(x, "dask")


def any_dask_array(*values) -> bool:
    """Whether any of ``values`` is a dask array.

    Examples
    --------
    >>> any_dask_array(None, 1.0)
    False
    """
    return any(map(is_dask_array, values))


def check_known_chunks(x, name: str) -> None:
    """Refuse a dask array whose chunk sizes are unknown, with a ValueError naming the argument ``name``.

    A value-dependent operation (boolean indexing such as ``x[x > 0]``) leaves a dask array's
    chunk sizes unknown (NaN); nbquant needs them to align the chunks to its blocks, so every
    front door checks its dask arguments here, at call time. Anything else passes.

    Examples
    --------
    >>> check_known_chunks([1.0, 2.0], "x")  # not a dask array: nothing to check
    """
    if is_dask_array(x) and any(math.isnan(c) for sizes in x.chunks for c in sizes):
        raise ValueError(f"{name} is a dask array of unknown chunk sizes (shape {x.shape}, e.g. after boolean "
                         f"indexing); call {name}.compute_chunk_sizes() first: nbquant aligns the chunks to its "
                         "blocks")


def packed_format(q) -> str | None:
    """The format of packed codes: a :class:`~nbquant.PackedCodes`, or a dask array whose meta is one; else None.

    Examples
    --------
    >>> packed_format([1, 2]) is None
    True
    """
    if isinstance(q, PackedCodes):
        return q.format
    meta = getattr(q, "_meta", None) if is_dask_array(q) else None
    return getattr(meta, "format", None)


@contextlib.contextmanager
def use_cuda_stream(stream) -> Iterator[None]:
    """Queue the ``cuda`` backend's copies and kernels on ``stream`` inside the ``with`` block.

    ``stream`` is a ``numba.cuda`` stream, a CuPy or PyTorch stream, or a raw
    ``cudaStream_t`` handle (int). Without it the CUDA default stream is used.

    Examples
    --------
    >>> from nbquant.backends import use_cuda_stream
    >>> with use_cuda_stream(None):
    ...     pass
    """
    token = _cuda_stream.set(stream)
    try:
        yield
    finally:
        _cuda_stream.reset(token)


def selected_stream():
    """The stream of the innermost :func:`use_cuda_stream`, or None (the default stream)."""
    return _cuda_stream.get()


def _check_float_dtype(dtype: np.dtype, name: str) -> None:
    if dtype not in FLOAT_INPUT_DTYPES:
        raise TypeError(f"{name} has dtype {dtype}; nbquant quantizes {_FLOAT_NAMES} arrays. Convert it first, e.g. "
                        f"{name}.astype(numpy.float32) (NumPy) or {name}.float() (torch)")


def check_float_input(x, name: str = "x", *, lazy: bool = False) -> np.ndarray:
    """Return ``x`` as a C-contiguous NumPy array of a supported float dtype (copies only if not contiguous).

    ``x`` is read by :func:`nbquant.interop.as_host_array`: zero-copy for NumPy arrays,
    CPU torch tensors (bfloat16 included) and CPU DLPack objects. With ``lazy``, a dask
    array is returned as it is, its dtype and chunk sizes checked (its chunks' values are
    checked when computed).

    Examples
    --------
    >>> check_float_input([1.0, 2.0]).dtype
    dtype('float64')
    """
    if lazy and is_dask_array(x):
        check_known_chunks(x, name)
        _check_float_dtype(x.dtype, name)
        return x
    arr = as_host_array(x, name)
    _check_float_dtype(arr.dtype, name)
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)  # ascontiguousarray makes 0-d 1-d


def _overlaps(out: np.ndarray, value) -> bool:
    """Whether ``out`` shares a byte with ``value`` (an array, or an object NumPy views without a copy).

    Bounds first (``may_share_memory``), then the exact test; an overlap too hard to
    decide exactly counts as one.
    """
    if not isinstance(value, np.ndarray):
        if not (hasattr(value, "__array_interface__") or hasattr(value, "__array__")):
            return False  # Python scalars, lists: NumPy copies them, nothing to overlap
        value = np.asarray(value)
    if not np.may_share_memory(out, value):
        return False
    try:
        return bool(np.shares_memory(out, value, max_work=1 << 20))
    except np.exceptions.TooHardError:
        return True


def check_out(out, shape: tuple[int, ...], dtype: np.dtype, inputs: dict | None = None) -> np.ndarray:
    """Check a user ``out=`` array: exact shape and dtype, C-contiguous, writeable, not overlapping inputs.

    ``inputs`` maps argument names to the values the user passed (before any copy or
    conversion), so a view into a scale's bytes or a non-contiguous input is caught too.

    Examples
    --------
    >>> check_out(np.empty(2, np.int8), (2,), np.dtype(np.int8)).shape
    (2,)
    """
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype:
        raise ValueError(f"out has shape {out.shape} and dtype {out.dtype}; this call needs shape {shape} "
                         f"and dtype {np.dtype(dtype)}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be a writeable C-contiguous array; allocate it with numpy.empty(shape, dtype)")
    for name, value in (inputs or {}).items():
        if value is not None and _overlaps(out, value):
            raise ValueError(f"out shares memory with {name}; nbquant never modifies its inputs, so pass a separate "
                             f"array, e.g. out=numpy.empty({shape}, {np.dtype(dtype).name!r})")
    return out


class Host:
    """A call on host arrays: NumPy in, NumPy out (the steps every placement starts from).

    Examples
    --------
    >>> p = placement(np.zeros(3, np.float32))
    >>> p is HOST, p.result((2,), np.int8).dtype
    (True, dtype('int8'))
    """

    __slots__ = ()
    #: Whether results live on a CUDA device / are dask arrays.
    device = False
    lazy = False

    def float_input(self, x, name: str = "x"):
        """``x`` checked as float data: a C-contiguous NumPy array of a float dtype nbquant reads."""
        return check_float_input(x, name)

    def code_input(self, q, name: str = "q"):
        """Codes ``q`` as a C-contiguous NumPy array (read by :func:`nbquant.interop.as_host_array`)."""
        return np.asarray(as_host_array(q, name), order="C")

    def result(self, shape: tuple[int, ...], dtype, out=None, inputs: dict | None = None):
        """The array a call writes: a new one (from the host pool), or ``out`` checked against ``inputs``.

        ``inputs`` maps argument names to the values the caller passed, for the overlap check.
        """
        return host_empty(shape, dtype) if out is None else check_out(out, shape, dtype, inputs)

    def like_input(self, a: np.ndarray):
        """A small result computed on the host (qparams, an amax), placed where the inputs are."""
        return a

    def to_host(self, a) -> np.ndarray:
        """``a`` as a NumPy array (a copy of a device array)."""
        return np.asarray(a)

    def packed(self, codes, fmt: str):
        """New packed ``codes`` tagged with their format (:class:`~nbquant.PackedCodes`; device arrays as they are)."""
        return PackedCodes(codes, fmt)


#: The placement of every host call (stateless, shared: deciding it allocates nothing).
HOST = Host()


class Device(Host):
    """A call on CUDA arrays: inputs read zero-copy on their device, results allocated there.

    The cuda backend is looked up once per call, on first use (:attr:`backend`).
    """

    __slots__ = ("_backend",)
    device = True

    def __init__(self) -> None:
        self._backend = None

    @property
    def backend(self):
        """The cuda backend (raises :class:`~nbquant.BackendUnavailableError` when CUDA cannot run here)."""
        if self._backend is None:
            self._backend = _plugged("device")
        return self._backend

    def float_input(self, x, name: str = "x"):
        """A device ``x`` checked and viewed as a numba device array; a host one as :meth:`Host.float_input`."""
        return self.backend.device_float_input(x, name) if is_device_array(x) else check_float_input(x, name)

    def code_input(self, q, name: str = "q"):
        """Device codes as a C-contiguous numba device array; host ones as :meth:`Host.code_input`."""
        return self.backend.device_code_input(q, name) if is_device_array(q) else super().code_input(q, name)

    def result(self, shape: tuple[int, ...], dtype, out=None, inputs: dict | None = None):
        """A new device array, or ``out`` checked as one (shape, dtype, contiguity, no overlap with ``inputs``)."""
        if out is None:
            return self.backend.device_empty(shape, dtype)
        return self.backend.check_device_out(out, shape, dtype, tuple((inputs or {}).values()))

    def like_input(self, a: np.ndarray):
        """The host array ``a`` copied to the device (on the current stream)."""
        return self.backend.to_device(np.ascontiguousarray(a))

    def to_host(self, a) -> np.ndarray:
        """A host copy of a device array; anything else through ``numpy.asarray``."""
        return self.backend.to_host(a) if is_device_array(a) else np.asarray(a)

    def packed(self, codes, fmt: str):
        """Device codes carry no tag: returned as they are."""
        return codes


class Lazy(Host):
    """A call with a dask argument: arguments checked from shapes and dtypes, the work handed to the dask engine.

    The result is a new dask array (``out=`` is refused); each chunk runs the front door
    again on NumPy chunks, so a chunk's call is a :class:`Host` call.
    """

    __slots__ = ()
    lazy = True

    def float_input(self, x, name: str = "x"):
        """A dask ``x`` with its dtype and chunk sizes checked, as it is; a host ``x`` as :meth:`Host.float_input`."""
        return check_float_input(x, name, lazy=True)

    def code_input(self, q, name: str = "q"):
        """Dask codes of known chunk sizes, as they are; host codes as :meth:`Host.code_input`."""
        if is_dask_array(q):
            check_known_chunks(q, name)
            return q
        return super().code_input(q, name)

    def result(self, shape: tuple[int, ...], dtype, out=None, inputs: dict | None = None):
        """Never called: a lazy call's result is the dask engine's."""
        raise TypeError("a lazy (dask) call allocates no result; its chunks do")

    @property
    def engine(self):
        """The dask engine (:mod:`nbquant._dask.engine`, imported on first use: it imports dask)."""
        return _plugged("lazy")

    def map(self, fn: Callable, x, layout, outputs: list, **kwargs) -> list:
        """``fn`` on every chunk of ``x`` aligned to ``layout``'s blocks (:func:`nbquant._dask.engine.map_layout`)."""
        return self.engine.map_layout(fn, x, layout, outputs, **kwargs)


#: The placement of every lazy call (stateless, shared).
LAZY = Lazy()


def placement(*arrays, out=None) -> Host:
    """Decide once where a call runs: :data:`HOST`, a new :class:`Device`, or :data:`LAZY`.

    Parameters
    ----------
    *arrays
        The call's array arguments, data first (``x``, then ``scale``, ``zero_point``, ...).
        Any dask array among them makes the call lazy; a CUDA data array (the first) or a
        CUDA ``out`` puts it on the device.
    out : array, optional
        The caller's ``out=``.

    Returns
    -------
    Host
        The placement: :class:`Host`, :class:`Device` or :class:`Lazy`.

    Raises
    ------
    TypeError
        If ``out`` is given with a dask argument (dask arrays are immutable).

    Examples
    --------
    >>> import numpy as np
    >>> placement(np.zeros(4, np.float32), 0.5) is HOST
    True
    """
    for a in arrays:
        if a is not None and not isinstance(a, _PLAIN) and is_dask_array(a):
            if out is not None:
                raise TypeError("out= cannot be combined with dask arrays, whose result is a new dask array; leave "
                                "out=None and store the result with dask (e.g. dask.array.store or to_zarr)")
            return LAZY
    if (arrays and is_device_array(arrays[0])) or is_device_array(out):
        return Device()
    return HOST


def _data_placement(x, lazy: bool) -> Host:
    """The placement of one data argument (dask only with ``lazy``, as the per-argument helpers below read it)."""
    if lazy and is_dask_array(x):
        return LAZY
    return Device() if is_device_array(x) else HOST


def device_float_input(x, name: str = "x", *, lazy: bool = False):
    """``x`` read as float data where it lives (one-argument form of :meth:`Host.float_input`).

    For front doors that place each argument on its own; with ``lazy``, a dask array is
    returned as it is, its dtype and chunk sizes checked.
    """
    return _data_placement(x, lazy).float_input(x, name)


def device_code_input(q, name: str = "q", *, lazy: bool = False):
    """Codes ``q`` read where they live (one-argument form of :meth:`Host.code_input`)."""
    return _data_placement(q, lazy).code_input(q, name)


def device_result(out, shape: tuple[int, ...], dtype, inputs=()):
    """A new device result array, or ``out`` checked as one (one-argument form of :meth:`Device.result`)."""
    return Device().result(shape, dtype, out, dict(enumerate(inputs)))


def device_copy(a: np.ndarray):
    """A new device array holding a copy of the host array ``a`` (:meth:`Device.like_input`)."""
    return Device().like_input(a)


def host_array(a) -> np.ndarray:
    """``a`` as a NumPy array: a copy of a device array, ``numpy.asarray`` of anything else."""
    return _data_placement(a, False).to_host(a)
