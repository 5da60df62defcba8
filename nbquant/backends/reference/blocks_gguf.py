"""The reference backend's GGUF block kernels: each format's NumPy oracle, found by its ggml type id.

IQ4_NL (20) and IQ4_XS (23) live in :mod:`.gguf_iq4`, Q2_K (10) in :mod:`.gguf_q2k`, Q3_K (11)
in :mod:`.gguf_q3k`, MXFP4 (39) in :mod:`.gguf_mxfp4`, the other K-quants in
:mod:`.gguf_kquants` and the other 32-value formats in :mod:`.gguf`.
"""

from __future__ import annotations

import numpy as np

from ...blocks._format import block_kernel
from ...blocks.gguf import check_imatrix
from . import gguf, gguf_iq4, gguf_kquants, gguf_mxfp4, gguf_q2k, gguf_q3k

__all__ = ["quantize_gguf", "dequantize_gguf", "ORACLES"]

_LEGACY = (gguf.legacy_quantize, gguf.legacy_dequantize)
_KQUANT = (gguf_kquants.kquant_quantize, gguf_kquants.kquant_dequantize)
_IQ4 = (gguf_iq4.iq4_quantize, gguf_iq4.iq4_dequantize)
#: ``(quantize, dequantize)`` of each format by ggml type id: ``quantize(kind, x, imatrix, type_size)`` gives the
#: records (rows, row bytes) of float32 ``x`` (rows, n); ``dequantize(kind, data, type_size)`` their float32 values.
ORACLES = {2: _LEGACY, 3: _LEGACY, 6: _LEGACY, 7: _LEGACY, 8: _LEGACY,
           10: (gguf_q2k.q2k_quantize, gguf_q2k.q2k_dequantize), 11: (gguf_q3k.q3k_quantize, gguf_q3k.q3k_dequantize),
           12: _KQUANT, 13: _KQUANT, 14: _KQUANT, 20: _IQ4, 23: _IQ4,
           39: (gguf_mxfp4.mxfp4_quantize, gguf_mxfp4.mxfp4_dequantize)}


@block_kernel("reference", "gguf", "quantize")
def quantize_gguf(x, spec, outputs) -> None:
    """Fill ``outputs[0]`` (rows, row bytes) with the records of ``x`` (rows, n), computed in float32."""
    fmt = spec.format.gguf
    weights = check_imatrix(spec.params.imatrix, x.shape[1])
    outputs[0][...] = ORACLES[fmt.type_id][0](fmt.type_id, np.ascontiguousarray(x, np.float32), weights,
                                              fmt.type_size)


@block_kernel("reference", "gguf", "dequantize")
def dequantize_gguf(inputs, spec, out) -> None:
    """Fill ``out`` (rows, n) with the float32 values of the records ``inputs[0]``, cast to ``out``'s dtype."""
    fmt = spec.format.gguf
    out[...] = ORACLES[fmt.type_id][1](fmt.type_id, np.ascontiguousarray(inputs[0], np.uint8), fmt.type_size)
