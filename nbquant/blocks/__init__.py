"""Block formats as registered descriptors: one module per format family, found by name.

A block format (:class:`BlockFormat`) cuts the input along one axis into blocks and
stores each block as items of one or more tensors (:class:`Tensor`). Every public module
of this package defines formats and is imported here, so each subclass registers itself
(:func:`get_block_format`, :func:`block_format_names`); each backend's kernels register
with :func:`block_kernel`. :func:`nbquant.block_rows.quantize_blocks` and
:func:`~nbquant.block_rows.dequantize_blocks` run any registered format (host, CUDA device
or dask arrays); the named front doors (:func:`nbquant.quantize_mx`,
:func:`nbquant.quantize_nvfp4`, :func:`nbquant.quantize_nf4`) wrap them.

Adding a format touches new modules only:

1. ``nbquant/blocks/<family>.py``: ``class Q4K(BlockFormat, name="q4_k")`` declaring
   ``block_size`` (and ``block_sizes = (256,)`` for a fixed one), ``Params`` (a frozen
   dataclass, if any) and ``tensors(spec)``, e.g. ``(Tensor("blocks", np.dtype(np.uint8),
   144),)`` for one packed byte record per block; optionally ``prepare`` and
   ``block_multiple``. It registers when this package imports it.
2. Its element numerics in ``nbquant/element/`` (scalar functions shared by cpu and cuda).
3. ``nbquant/backends/{reference,cpu,cuda}/blocks_<family>.py``: one ``quantize`` and one
   ``dequantize`` function each, ``(x, spec, outputs)`` and ``(inputs, spec, out)`` on
   (rows, items) arrays, registered with ``@block_kernel("<target>", "<family>", op)``
   (cpu and cuda wrap their ``@cpu_kernel``/``@cuda_kernel`` kernels); each target's
   ``blocks.py`` imports every ``blocks_*`` module beside it.

tests/test_block_registry.py then covers it (every backend against the reference, dask,
device arrays, argument checks) with no new test code.

Examples
--------
>>> import numpy as np
>>> from nbquant import blocks
>>> from nbquant.block_rows import dequantize_blocks, quantize_blocks
>>> fmt = blocks.get_block_format("mxfp8_e4m3")
>>> (data, scales), _ = quantize_blocks(fmt, np.ones(32, np.float32))
>>> scales.view(np.uint8).tolist(), dequantize_blocks(fmt, (data, scales))[:2]
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
           "block_kernel", "find_kernel", "import_kernel_modules"]

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

