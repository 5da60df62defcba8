"""GGUF's block formats (llama.cpp's ggml types) as registered block formats: one byte record per block.

Each implemented format of :mod:`nbquant.gguf.formats` registers as ``gguf_<name>``
(``gguf_q4_k``, ``gguf_mxfp4``, ...; ``family="gguf"``): blocks of 32 or 256 values along
one axis, each stored as one ``type_size``-byte record (the ``records`` tensor), exactly as
a GGUF file holds it. The one parameter is llama.cpp's importance matrix (``imatrix``:
one non-negative weight per value along the blocked axis). Kernels register per target in
``nbquant/backends/<target>/blocks_gguf.py``; :mod:`nbquant.gguf` is the GGUF-shaped front
door over them.

Examples
--------
>>> from nbquant.blocks import get_block_format
>>> fmt = get_block_format("gguf_q4_k")
>>> fmt.block_size, fmt.bytes_per_block(), fmt.bits_per_weight(), fmt.gguf.type_id
(256, 144, 4.5, 12)
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import numpy as np

from ..gguf.formats import FORMATS, GGUFFormat
from ..placement import is_dask_array
from ._format import BlockFormat, Tensor

__all__ = ["GGUFBlockFormat", "GGUFParams", "check_imatrix", "gguf_block_format"]

_FLOATS = (np.float16, np.float32, np.float64)


def check_imatrix(imatrix, n: int) -> np.ndarray | None:
    """``imatrix`` as a C-contiguous float32 vector of ``n`` finite, non-negative weights (or None), else an error.

    Examples
    --------
    >>> check_imatrix(np.ones(4), 4).dtype
    dtype('float32')
    >>> check_imatrix(np.ones(3), 4)
    Traceback (most recent call last):
    ...
    ValueError: imatrix must have shape (4,) (one weight per value along the blocked axis), got (3,)
    """
    if imatrix is None:
        return None
    if not isinstance(imatrix, np.ndarray) or imatrix.dtype not in _FLOATS:
        got = f"numpy.ndarray of {imatrix.dtype}" if isinstance(imatrix, np.ndarray) else type(imatrix).__name__
        raise TypeError(f"imatrix must be a float16, float32 or float64 numpy.ndarray, got {got}")
    if imatrix.shape != (n,):
        raise ValueError(f"imatrix must have shape ({n},) (one weight per value along the blocked axis), got "
                         f"{imatrix.shape}")
    weights = np.ascontiguousarray(imatrix, np.float32)
    if not np.isfinite(weights).all() or (weights < 0).any():
        raise ValueError("imatrix must hold finite, non-negative weights (llama.cpp's quant_weights)")
    return weights


@dataclass(frozen=True, eq=False)
class GGUFParams:
    """A GGUF call's importance matrix (``imatrix``, None: none), as llama.cpp's ``quant_weights``.

    Q8_0 and MXFP4 ignore it, as ggml does.
    """

    imatrix: np.ndarray | None = None


class GGUFBlockFormat(BlockFormat, family="gguf"):
    """A GGUF format: blocks of its ggml block size, one ``records`` byte record of ``type_size`` bytes each."""

    Params = GGUFParams
    #: The ggml format (type id, block size, record size).
    gguf: GGUFFormat

    def tensors(self, spec) -> tuple[Tensor, ...]:
        """One uint8 ``records`` tensor: ``type_size`` bytes per block."""
        return (Tensor("records", np.dtype(np.uint8), self.gguf.type_size),)

    def prepare(self, x, params: GGUFParams, impl) -> GGUFParams:
        """``params`` unchanged; an importance matrix with a dask input is refused (its chunks would need slices)."""
        if params.imatrix is not None and is_dask_array(x):
            raise NotImplementedError(f"{self.name}: an imatrix with a dask input is not supported; quantize with "
                                      "nbquant.gguf.quantize on NumPy rows, or drop the imatrix")
        return params


def _register(fmt: GGUFFormat) -> GGUFBlockFormat:
    def body(namespace: dict) -> None:
        namespace.update(gguf=fmt, block_size=fmt.block_size, block_sizes=(fmt.block_size,),
                         __doc__=f"GGUF {fmt.name}: blocks of {fmt.block_size}, {fmt.type_size}-byte records.")

    cls = types.new_class(f"GGUF_{fmt.name}", (GGUFBlockFormat,), {"name": f"gguf_{fmt.name.lower()}"}, body)
    cls.__module__ = __name__
    return cls


for _fmt in FORMATS.values():
    if _fmt.implemented:
        _register(_fmt)


def gguf_block_format(fmt: GGUFFormat) -> GGUFBlockFormat:
    """The registered block format of the GGUF format ``fmt``.

    Examples
    --------
    >>> from nbquant.gguf import get_format
    >>> gguf_block_format(get_format("Q8_0")).name
    'gguf_q8_0'
    """
    from ._format import get_block_format

    return get_block_format(f"gguf_{fmt.name.lower()}")
