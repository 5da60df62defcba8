"""Block formats as registered descriptors: one module per format family, found by name.

A block format (:class:`BlockFormat`) cuts the input along one axis into blocks and
stores each block as items of one or more tensors (:class:`Tensor`). Every public module
of this package defines formats and is imported here, so each subclass registers itself
(:func:`get_block_format`, :func:`block_format_names`); each backend's kernels register
with :func:`block_kernel`. :func:`quantize_blocks` and :func:`dequantize_blocks` run any
registered format (host, CUDA device or dask arrays); the named front doors
(:func:`nbquant.quantize_mx`, :func:`nbquant.quantize_nvfp4`, :func:`nbquant.quantize_nf4`)
wrap them.

Examples
--------
>>> import numpy as np
>>> from nbquant import blocks
>>> fmt = blocks.get_block_format("mxfp8_e4m3")
>>> (data, scales), _ = blocks.quantize_blocks(fmt, np.ones(32, np.float32))
>>> scales.view(np.uint8).tolist(), blocks.dequantize_blocks(fmt, (data, scales))[:2]
([119], array([1., 1.], dtype=float32))
"""

from __future__ import annotations

import importlib
import pkgutil

from ._format import (
    BlockFormat,
    BlockSpec,
    NoParams,
    Tensor,
    block_format_names,
    block_kernel,
    find_kernel,
    get_block_format,
    import_kernel_modules,
)

__all__ = ["BlockFormat", "BlockSpec", "Tensor", "NoParams", "get_block_format", "block_format_names",
           "block_kernel", "find_kernel", "import_kernel_modules", "quantize_blocks", "dequantize_blocks"]

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")


def __getattr__(name: str):
    """The call functions, imported on first use (they stand on the backends, which import this package's specs)."""
    if name in ("quantize_blocks", "dequantize_blocks"):
        from . import _rows

        return getattr(_rows, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
