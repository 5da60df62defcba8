"""nbquant: Numba-compiled quantization kernels for CPU and CUDA from one source.

Examples
--------
>>> import numpy as np, nbquant
>>> x = np.array([[0.1, -0.7], [2.0, 0.5]], np.float32)
>>> q = nbquant.quantize(x, np.float32(2.0 / 127), "int8")
>>> nbquant.dequantize(q, np.float32(2.0 / 127)).round(3)
array([[ 0.094, -0.693],
       [ 2.   ,  0.504]], dtype=float32)
"""

import warnings

from . import _dask as _dask  # plugs the dask engine into nbquant.placement (dask itself is imported on first use)
from . import modelopt
from ._memory import output_pool_bytes, set_output_pool
from .api import dequantize, quantize
from .backends import (
    BackendInfo,
    BackendUnavailableError,
    NumbaCacheWarning,
    backends,
    get_backend,
    set_backend,
    use_backend,
)
from .block_formats import MX_FORMATS, BlockQuantized, dequantize_mx, dequantize_nvfp4, quantize_mx, quantize_nvfp4
from .codes import PackedCodes
from .dynamic import choose_qparams, quantize_dynamic
from .formats import FORMATS, QuantFormat, get_format
from .nf4 import NF4Quantized, quantize_nf4
from .reductions import reduce_amax, reduce_min_max
from .threads import get_num_threads, set_num_threads

__version__ = "0.1.0"

__all__ = [
    "FORMATS",
    "MX_FORMATS",
    "BackendInfo",
    "BackendUnavailableError",
    "BlockQuantized",
    "NF4Quantized",
    "NumbaCacheWarning",
    "PackedCodes",
    "QuantFormat",
    "__version__",
    "backends",
    "choose_qparams",
    "dequantize",
    "dequantize_mx",
    "dequantize_nvfp4",
    "get_backend",
    "get_format",
    "get_num_threads",
    "output_pool_bytes",
    "quantize",
    "quantize_dynamic",
    "quantize_mx",
    "quantize_nf4",
    "quantize_nvfp4",
    "reduce_amax",
    "reduce_min_max",
    "set_backend",
    "set_num_threads",
    "set_output_pool",
    "use_backend",
]

#: The modelopt vocabulary, now in :mod:`nbquant.modelopt`: at the root these names are deprecated aliases.
_MODELOPT_ALIASES = frozenset({
    "HistogramCalibrator", "MaxCalibrator", "dynamic_block_quant", "fake_affine_tensor_quant",
    "fake_affine_tensor_quant_backward", "fake_tensor_quant", "fake_tensor_quant_backward", "scaled_e4m3",
    "tensor_quant",
})


def __getattr__(name: str):
    """``nbquant.fake_tensor_quant`` & co.: :mod:`nbquant.modelopt`'s, with a DeprecationWarning."""
    if name in _MODELOPT_ALIASES:
        warnings.warn(f"nbquant.{name} is deprecated: modelopt's vocabulary lives in nbquant.modelopt; use "
                      f"nbquant.modelopt.{name}", DeprecationWarning, stacklevel=2)
        return getattr(modelopt, name)
    raise AttributeError(f"module 'nbquant' has no attribute {name!r}")
