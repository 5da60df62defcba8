"""compressed-tensors' formats as codecs on nbquant's kernels: the tensors one ``Linear`` weight becomes, and back.

One :class:`Codec` subclass per format, registered under the format's name (as compressed-tensors
registers its compressors): :class:`PackQuantized`, :class:`IntQuantized`, :class:`FloatQuantized`,
:class:`NVFP4PackQuantized`, :class:`MXFP4PackQuantized`, :class:`MXFP8Quantized`. A scheme's codec
is :func:`codec_for`; :func:`quantize_weight` and :func:`dequantize_weight` are the doors for one weight.

The element work (reductions, quantization, packing, dequantization) runs in nbquant's kernels
(:func:`nbquant.reduce_amax`, :func:`nbquant.reduce_min_max`, :func:`nbquant.quantize`,
:func:`nbquant.dequantize`). What is compressed-tensors' own is the scale formula on the block grid
(1/16 to 1/16384 of the data), evaluated as llm-compressor evaluates it: in the weight's dtype ``h``
(bfloat16, float16 or float32), each operation rounded to ``h``. The formulas are in each codec's
module and in docs/convert.md.

Examples
--------
>>> import numpy as np, ml_dtypes
>>> from nbquant.convert.codecs import quantize_weight, dequantize_weight
>>> from nbquant.convert.schemes import get_scheme
>>> x = np.linspace(-1, 1, 2 * 128, dtype=np.float32).reshape(2, 128).astype(ml_dtypes.bfloat16)
>>> out = quantize_weight(x, get_scheme("W4A16"))
>>> sorted(out), out["weight_packed"].dtype, out["weight_packed"].shape
(['weight_packed', 'weight_scale', 'weight_shape'], dtype('int32'), (2, 16))
>>> y = dequantize_weight(out, get_scheme("W4A16"), x.dtype)
>>> float(np.abs(y.astype(np.float32) - x.astype(np.float32)).max()) < 0.08
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..safetensors import dtype_name
from ..schemes import Scheme
from .base import WEIGHT_DTYPES, Codec, Context, WeightError, codec_for
from .floating import FloatQuantized, MXFP4PackQuantized, MXFP8Quantized
from .integer import IntQuantized, PackQuantized
from .nvfp4 import NVFP4PackQuantized, global_scale

__all__ = ["Codec", "Context", "WeightError", "WEIGHT_DTYPES", "codec_for", "quantize_weight", "dequantize_weight",
           "global_scale", "FloatQuantized", "IntQuantized", "MXFP4PackQuantized", "MXFP8Quantized",
           "NVFP4PackQuantized", "PackQuantized"]


def _codec(scheme: Scheme | Codec) -> Codec:
    return scheme if isinstance(scheme, Codec) else codec_for(scheme)


def quantize_weight(x: np.ndarray, scheme: Scheme | Codec, name: str = "weight", buffer: np.ndarray | None = None,
                    prepared: Any = None) -> dict[str, np.ndarray]:
    """The tensors (by suffix: ``weight_packed``, ``weight_scale`` ...) that ``scheme`` turns weight ``x`` into.

    Parameters
    ----------
    x : numpy.ndarray
        A 2-D bfloat16, float16 or float32 weight (see :meth:`Codec.check`).
    scheme : Scheme or Codec
        The preset, or its codec (:func:`codec_for`).
    name : str
        The tensor's name, for error messages.
    buffer : numpy.ndarray, optional
        uint8, at least ``x.size`` bytes: the codes are written there (a view of it is
        returned), so that a caller converting many weights reuses one allocation.
    prepared : object, optional
        What the codec's :meth:`~Codec.prepare` gave this weight with its fused set (NVFP4: the
        shared global scale and this weight's block amax); default: the weight alone.

    Returns
    -------
    dict of str to numpy.ndarray
        The compressed-tensors tensors of the weight, by suffix (prefix them with the module
        name), in the order and with the dtypes and shapes of :meth:`Codec.entries`.

    Raises
    ------
    ConvertError
        The weight cannot be quantized (its dtype, shape, a NaN), naming ``name``.
    ValueError
        A ``buffer`` that is not contiguous uint8 or is too small.

    Examples
    --------
    >>> import numpy as np, ml_dtypes
    >>> from nbquant.convert import get_scheme, quantize_weight
    >>> x = np.linspace(-1, 1, 4 * 32, dtype=np.float32).reshape(4, 32).astype(ml_dtypes.bfloat16)
    >>> out = quantize_weight(x, get_scheme("MXFP4A16"))
    >>> out["weight_packed"].shape, out["weight_scale"].ravel().tolist()
    ((4, 16), [125, 124, 124, 125])
    """
    codec = _codec(scheme)
    codec.check(name, x.dtype, x.shape)
    if buffer is not None and (buffer.dtype != np.uint8 or buffer.size < x.size or not buffer.flags.c_contiguous):
        raise ValueError(f"buffer must be a contiguous uint8 array of at least {x.size} bytes")
    out = codec.quantize(x, Context(name, buffer, prepared))
    made = [(suffix, dtype_name(a.dtype), a.shape) for suffix, a in out.items()]
    if made != codec.entries(x.shape, x.dtype):  # one source: what is planned is what is written
        raise RuntimeError(f"{type(codec).__name__} made {made} for {name}, its entries say "
                           f"{codec.entries(x.shape, x.dtype)}")
    return out


def dequantize_weight(t: Mapping[str, np.ndarray], scheme: Scheme | Codec, dtype: np.dtype,
                      rows: slice = slice(None)) -> np.ndarray:
    """Decode the tensors of :func:`quantize_weight` (rows ``rows`` of the weight) to ``dtype`` with nbquant.

    This is compressed-tensors' decompression: ``(q - zp) * s`` (int), ``e4m3 * s`` (fp8),
    ``e2m1 * fl32(scale / gs)`` (nvfp4), ``element * 2**(code - 127)`` (mx), each computed in
    float32 and rounded once to ``dtype``; the same call decodes a compressed-tensors checkpoint's
    tensors of that format.

    Examples
    --------
    >>> import numpy as np
    >>> from nbquant.convert import get_scheme, quantize_weight
    >>> x = np.array([[0.5, -1.0, 2.0, 6.0] * 4], np.float32)
    >>> y = dequantize_weight(quantize_weight(x, get_scheme("NVFP4A16")), get_scheme("NVFP4A16"), np.float32)
    >>> y[0, :4].tolist()
    [0.5, -1.0, 2.0, 6.0]
    """
    return _codec(scheme).dequantize(t, np.dtype(dtype), rows)
