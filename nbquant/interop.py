"""Reading other libraries' arrays without a copy: NumPy protocols, DLPack, and CPU torch tensors (bfloat16 too).

torch is never imported here: a torch tensor can only exist once the caller has
imported torch, so the module is taken from ``sys.modules``.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

__all__ = ["as_host_array", "ACCEPTED"]

#: torch dtypes NumPy lacks, read through a same-width integer view: ``str(dtype)`` -> (torch view, ml_dtypes dtype).
_TORCH_BITS = {
    "torch.bfloat16": ("int16", ml_dtypes.bfloat16),
    "torch.float8_e4m3fn": ("uint8", ml_dtypes.float8_e4m3fn),
    "torch.float8_e5m2": ("uint8", ml_dtypes.float8_e5m2),
    "torch.float8_e8m0fnu": ("uint8", ml_dtypes.float8_e8m0fnu),
}
_ARRAY_PROTOCOLS = ("__array__", "__array_interface__", "__array_struct__")
#: What the error messages say nbquant reads.
ACCEPTED = ("nbquant accepts NumPy arrays, objects with __array__ or __array_interface__, objects with a CPU "
            "__dlpack__, and CPU torch tensors (bfloat16 and float8 included)")


def _torch_host_array(torch, t, name: str) -> np.ndarray:
    """A zero-copy NumPy view of the CPU torch tensor ``t``; bfloat16 / float8 through an integer view."""
    if t.device.type != "cpu":
        raise TypeError(f"{name} is a torch tensor on device {t.device}; nbquant reads CPU tensors here (CUDA "
                        f"tensors go to the cuda backend when it is available). Move it first: {name}.cpu()")
    t = t.detach()  # zero-copy; nbquant never writes to its inputs
    bits = _TORCH_BITS.get(str(t.dtype))
    try:
        return t.numpy() if bits is None else t.view(getattr(torch, bits[0])).numpy().view(bits[1])
    except (TypeError, RuntimeError) as exc:
        raise TypeError(f"{name} is a torch tensor of dtype {t.dtype} that NumPy cannot read ({exc}); nbquant reads "
                        "dense CPU tensors of NumPy dtypes, bfloat16 and float8. Convert it first") from None


def _short_repr(x) -> str:
    r = repr(x)
    return r if len(r) <= 60 else r[:57] + "..."


def as_host_array(x, name: str = "x") -> np.ndarray:
    """Return ``x`` as a NumPy array, zero-copy where its producer allows.

    Parameters
    ----------
    x : array_like
        A NumPy array; a CPU torch tensor (``detach().numpy()``; bfloat16 and
        float8 tensors through an integer view, as their ml_dtypes dtype); an object
        exposing only a CPU ``__dlpack__`` (``numpy.from_dlpack``); anything else
        ``numpy.asarray`` reads as numbers.
    name : str
        The argument's name, for error messages.

    Returns
    -------
    numpy.ndarray
        ``x`` itself, a view of its memory, or (lists, scalars) a new array.

    Raises
    ------
    TypeError
        If ``x`` is not an array of numbers: a torch tensor off the CPU or of a dtype
        NumPy cannot view, a DLPack object NumPy cannot import, or an object that
        would become a NumPy ``object`` array.

    Examples
    --------
    >>> import numpy as np
    >>> a = np.arange(3.0)
    >>> as_host_array(a) is a
    True
    """
    if isinstance(x, np.ndarray):
        return x
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return _torch_host_array(torch, x, name)
    if hasattr(x, "__dlpack__") and not any(hasattr(x, p) for p in _ARRAY_PROTOCOLS):
        try:
            return np.from_dlpack(x)
        except (BufferError, TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(f"{name} is a {type(x).__name__} DLPack object that NumPy cannot import "
                            f"({type(exc).__name__}: {exc}); {ACCEPTED}") from None
    try:
        arr = np.asarray(x)
    except ValueError:  # a ragged nest of sequences
        arr = np.empty((), object)
    if arr.dtype == object:
        raise TypeError(f"{name}={_short_repr(x)} of type {type(x).__name__} is not an array of numbers; {ACCEPTED}. "
                        "Convert it first (a torch tensor: t.detach().cpu().numpy())")
    return arr
