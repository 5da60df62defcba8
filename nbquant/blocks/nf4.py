"""NF4 (modelopt ``NF4QTensor`` numerics): 16-entry normal-float table, float32 block amax scales.

Each block of ``block_size`` (64) values gets its ``amax`` and each value the index of
the nearest table entry to ``x / amax`` (the first on a tie). Tensors: ``data`` (two
indices per byte, the first in the HIGH nibble, modelopt's layout) and ``scales``
(float32). Double quantization of the scales is the front door's (:mod:`nbquant.nf4`).
"""

from __future__ import annotations

import numpy as np

from ._format import BlockFormat, Tensor

__all__ = ["NF4"]


class NF4(BlockFormat, name="nf4"):
    """NF4: blocks of 64 (any even length), packed table indices and float32 scales."""

    block_size = 64

    def block_multiple(self, params) -> int:
        """2: the codes are packed two per byte."""
        return 2

    def tensors(self, spec) -> tuple[Tensor, ...]:
        """``data`` (packed indices, high nibble first) and float32 ``scales``, one per block."""
        return Tensor("data", np.dtype(np.uint8), spec.block_size // 2), Tensor("scales", np.dtype(np.float32), 1)
