"""The reference backend's GGUF entry points: each format's rows to the NumPy oracle module that holds it.

:mod:`nbquant.gguf` calls ``legacy_*`` for 32-value blocks and ``kquant_*`` for 256-value
super-blocks, with the ggml type id as ``kind``; IQ4_NL (20) and IQ4_XS (23) live in
:mod:`~nbquant.backends.reference.gguf_iq4`, Q2_K (10) in :mod:`~nbquant.backends.reference.gguf_q2k`,
Q3_K (11) in :mod:`~nbquant.backends.reference.gguf_q3k`,
MXFP4 (39) in :mod:`~nbquant.backends.reference.gguf_mxfp4`, the rest in
:mod:`~nbquant.backends.reference.gguf` and :mod:`~nbquant.backends.reference.gguf_kquants`.
"""

from __future__ import annotations

import numpy as np

from . import gguf, gguf_iq4, gguf_kquants, gguf_mxfp4, gguf_q2k, gguf_q3k

__all__ = ["legacy_quantize", "legacy_dequantize", "kquant_quantize", "kquant_dequantize"]

_IQ4 = (20, 23)


def legacy_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """Records (rows, n / 32 * type_size) of ``x`` (rows, n) float32 in 32-value format ``kind``."""
    run = (gguf_iq4.iq4_quantize if kind in _IQ4 else gguf_mxfp4.mxfp4_quantize if kind == 39
           else gguf.legacy_quantize)
    return run(kind, x, imatrix, type_size)


def legacy_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of 32-value format ``kind`` records ``data`` (rows, row bytes)."""
    run = (gguf_iq4.iq4_dequantize if kind in _IQ4 else gguf_mxfp4.mxfp4_dequantize if kind == 39
           else gguf.legacy_dequantize)
    return run(kind, data, type_size)


def kquant_quantize(kind: int, x: np.ndarray, imatrix: np.ndarray | None, type_size: int) -> np.ndarray:
    """Records (rows, n / 256 * type_size) of ``x`` (rows, n) float32 in 256-value format ``kind``."""
    run = (gguf_iq4.iq4_quantize if kind in _IQ4 else gguf_q3k.q3k_quantize if kind == 11
           else gguf_q2k.q2k_quantize if kind == 10 else gguf_kquants.kquant_quantize)
    return run(kind, x, imatrix, type_size)


def kquant_dequantize(kind: int, data: np.ndarray, type_size: int) -> np.ndarray:
    """float32 (rows, n) of 256-value format ``kind`` records ``data`` (rows, row bytes)."""
    run = (gguf_iq4.iq4_dequantize if kind in _IQ4 else gguf_q3k.q3k_dequantize if kind == 11
           else gguf_q2k.q2k_dequantize if kind == 10 else gguf_kquants.kquant_dequantize)
    return run(kind, data, type_size)
