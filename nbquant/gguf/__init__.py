"""GGUF block formats (llama.cpp's ``ggml`` quantization types), bit-exact with ggml's C quantizer.

:func:`quantize` gives the bytes ``ggml_quantize_chunk`` writes (llama.cpp's C built with
default x86-64 flags: no FMA contraction), with or without an importance matrix, and
:func:`dequantize` the floats gguf-py's ``dequantize`` gives. Formats are described by
:mod:`nbquant.gguf.formats`. The work runs on the ``reference`` (NumPy), ``cpu`` or
``cuda`` backend, chosen by name.

Examples
--------
>>> import numpy as np
>>> from nbquant import gguf
>>> x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
>>> q = gguf.quantize(x, "Q8_0")
>>> q.shape, q.dtype
((2, 34), dtype('uint8'))
>>> float(abs(gguf.dequantize(q, "Q8_0") - x).max()) < 0.004
True
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .formats import FORMATS, GGUFFormat, get_format, implemented_formats

__all__ = ["quantize", "dequantize", "get_format", "implemented_formats", "GGUFFormat", "FORMATS", "BACKENDS"]

#: The backends that run the GGUF kernels (registered on :mod:`nbquant.blocks` as ``gguf_<name>`` block formats).
BACKENDS = ("reference", "cpu", "cuda")
#: The input dtypes; every backend takes each value as the float32 gguf-py and llama.cpp convert it to.
_FLOATS = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32), np.dtype(np.float64))


def _backend(backend: str):
    """The backend object named ``backend`` (one of :data:`BACKENDS`), else a ValueError showing the value."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    from ..backends import resolve_backend  # not at import: nbquant.blocks registers this package's formats

    return resolve_backend(backend)


def _implemented(qtype) -> GGUFFormat:
    fmt = get_format(qtype)
    if not fmt.implemented:
        raise NotImplementedError(f"nbquant does not implement GGUF {fmt.name} yet; it implements "
                                  f"{', '.join(implemented_formats())}")
    return fmt


def quantize(x: np.ndarray, qtype, *, imatrix: np.ndarray | None = None, backend: str = "cpu") -> np.ndarray:
    """Quantize ``x`` along its last axis into GGUF ``qtype`` block records, as ggml's C does.

    Parameters
    ----------
    x : numpy.ndarray
        float16, bfloat16 (ml_dtypes), float32 or float64 values, each taken as the float32 that gguf-py and
        llama.cpp convert it to first; the last axis a multiple of the block size (32, or 256 for the K-quants
        and IQ4_XS).
    qtype : GGUFFormat, GGMLQuantizationType, int or str
        The format (see :func:`~nbquant.gguf.formats.get_format`).
    imatrix : numpy.ndarray, optional
        Importance of each column: a float32 vector as long as the last axis, finite and
        not negative (llama.cpp's ``quant_weights``). Q8_0 and MXFP4 ignore it, as ggml does.
        The 256-value formats take the last axis in super-blocks of 256.
    backend : {"cpu", "reference", "cuda"}
        Where to compute.

    Returns
    -------
    numpy.ndarray
        uint8 of shape ``x.shape[:-1] + (row bytes,)``.

    Examples
    --------
    >>> import numpy as np
    >>> quantize(np.ones((1, 32), np.float32), "Q4_0")[0, :4].tolist()  # d = 1 / -8 (float16 0xb000), codes 0
    [0, 176, 0, 0]
    """
    fmt = _implemented(qtype)
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype not in _FLOATS:
        raise TypeError(f"x must be float16, bfloat16, float32 or float64, got {x.dtype}")
    if x.ndim < 1 or x.shape[-1] % fmt.block_size:
        raise ValueError(f"x's last axis ({x.shape[-1] if x.ndim else 'none'}) must be a multiple of "
                         f"{fmt.name}'s block size {fmt.block_size}")
    from ..blocks.gguf import GGUFParams, check_imatrix, gguf_block_format

    n = x.shape[-1]
    weights = check_imatrix(imatrix, n)
    impl = _backend(backend)
    rows = np.ascontiguousarray(x.reshape(-1, n))
    out = np.empty((rows.shape[0], fmt.row_bytes(n)), np.uint8)
    if out.size:
        impl.block_quantize(rows, gguf_block_format(fmt).spec(params=GGUFParams(weights)), (out,))
    return out.reshape(*x.shape[:-1], fmt.row_bytes(n))


def dequantize(data: np.ndarray, qtype, *, backend: str = "cpu") -> np.ndarray:
    """Decode GGUF ``qtype`` block records (the last axis) into float32, as gguf-py's ``dequantize`` does.

    Parameters
    ----------
    data : numpy.ndarray
        uint8 (or int8) records; the last axis a multiple of the record size.
    qtype : GGUFFormat, GGMLQuantizationType, int or str
        The format.
    backend : {"cpu", "reference", "cuda"}
        Where to compute.

    Returns
    -------
    numpy.ndarray
        float32 of shape ``data.shape[:-1] + (values per row,)``; NaN as ``numpy.nan``.

    Examples
    --------
    >>> import numpy as np
    >>> dequantize(np.array([[0, 60] + [0x98] * 16], np.uint8), "Q4_0")[0, [0, 16]].tolist()  # d = 1, codes 8 and 9
    [0.0, 1.0]
    """
    fmt = _implemented(qtype)
    if not isinstance(data, np.ndarray):
        raise TypeError(f"data must be a numpy.ndarray, got {type(data).__name__}")
    if data.dtype not in (np.uint8, np.int8):
        raise TypeError(f"data must be uint8 block records, got {data.dtype}")
    if data.ndim < 1 or data.shape[-1] % fmt.type_size:
        raise ValueError(f"data's last axis ({data.shape[-1] if data.ndim else 'none'}) must be a multiple of "
                         f"{fmt.name}'s record size {fmt.type_size}")
    from ..blocks.gguf import gguf_block_format

    impl = _backend(backend)
    rows = np.ascontiguousarray(data.reshape(-1, data.shape[-1]).view(np.uint8))
    out = np.empty((rows.shape[0], rows.shape[1] // fmt.type_size * fmt.block_size), np.float32)
    if out.size:
        impl.block_dequantize((rows,), gguf_block_format(fmt).spec(), out)
    return out.reshape(*data.shape[:-1], out.shape[1])
