"""Validated, backend-neutral descriptions of one call: the contract between the front doors and the backends.

The front doors (:mod:`nbquant.api`, :mod:`nbquant.blocks`,
:mod:`nbquant.dynamic`, :mod:`nbquant.modelopt_ops`) validate their arguments into
one of these frozen dataclasses; every :class:`~nbquant.backends.interface.Backend`
operation takes one. :class:`BlockSpec` is defined beside the block-format descriptors
(:mod:`nbquant.blocks`) and re-exported here. Nothing here imports numba.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .blocks._format import BlockSpec
from .formats import QuantFormat, get_format
from .layout import BlockLayout, row_blocks
from .modes import Mapping, ScaleOp

__all__ = ["QuantizeSpec", "DequantizeSpec", "BlockSpec", "DynamicSpec", "AmaxSpec", "NO_FLOAT_FORMAT"]

#: The format tuple kernels take where a call has no floating-point format (integer paths).
NO_FLOAT_FORMAT = (0, 0, 0, 0, 0, 0, 0)


@dataclass(frozen=True)
class QuantizeSpec:
    """Everything a backend needs besides the arrays to run a quantize kernel.

    ``scale_op`` is a :class:`~nbquant.modes.ScaleOp` (a reciprocal scale arrives
    already inverted); ``zero_point_before`` adds the zero point before rounding
    instead of after. ``saturate`` applies to floating-point formats: overflow clamps
    to the largest finite value instead of NaN/inf.
    """

    format: QuantFormat
    layout: BlockLayout
    qmin: int
    qmax: int
    scale_op: ScaleOp
    zero_point_before: bool
    packed: bool
    saturate: bool = True


@dataclass(frozen=True)
class DequantizeSpec:
    """Everything a backend needs besides the arrays to run a dequantize kernel.

    ``layout`` describes the unpacked codes; ``out_dtype`` is float32, float16 or
    bfloat16.
    """

    format: QuantFormat
    layout: BlockLayout
    packed: bool
    out_dtype: np.dtype


@dataclass(frozen=True)
class DynamicSpec:
    """A validated dynamic-quantization call, as the backends see it.

    ``reciprocal``: quantize with ``x * fl(1 / scale)``; ``scale_op`` is the
    :class:`~nbquant.modes.ScaleOp` of the equivalent static quantize.
    """

    format: QuantFormat
    layout: BlockLayout
    mapping: Mapping
    qmin: int
    qmax: int
    half_range: float
    eps: float
    zp_sym: int
    maxbound: float
    scale_op: ScaleOp
    reciprocal: bool
    packed: bool

    @classmethod
    def reduction(cls, layout: BlockLayout, use_minmax: bool = False) -> DynamicSpec:
        """A spec that only drives a block reduction: absmax bits, or min/max keys with ``use_minmax``."""
        mapping = Mapping.ASYMMETRIC if use_minmax else Mapping.SYMMETRIC
        return cls(get_format("int8"), layout, mapping, -128, 127, 127.5, 1.0, 0, 127.0, ScaleOp.DIVIDE, False,
                   False)

    @property
    def use_minmax(self) -> bool:
        """Whether the block reduction needs min and max (else the absmax suffices)."""
        return self.mapping.uses_min_and_max

    @property
    def kernel_scale_op(self) -> ScaleOp:
        """How the codes apply the scale: a reciprocal is applied as a multiplier."""
        return ScaleOp.MULTIPLY if self.reciprocal else self.scale_op

    @property
    def quantize_spec(self) -> QuantizeSpec:
        """The static quantize that, given the returned qparams, gives the same codes."""
        return QuantizeSpec(self.format, self.layout, self.qmin, self.qmax, self.kernel_scale_op, False, self.packed,
                            True)

    def fused_rows(self) -> tuple[int, int, int, int] | None:
        """``(rows, columns, block, codes per byte)`` when one fused pass can quantize, else None.

        The fused kernels take blocks that lie inside one row (per-row, per-group, ONNX
        blocks along the last axis), more than one block in all, and, when packed,
        blocks of whole bytes (or one block per row).
        """
        rv = row_blocks(self.layout)
        if rv is None or self.layout.num_blocks == 1:
            return None
        rows, columns, bc = rv
        k = self.format.codes_per_byte if self.packed else 1
        return None if bc % k and bc < columns else (rows, columns, bc, k)

    def qparams_arguments(self) -> tuple:
        """The qparams arguments of the compiled kernels (``element.block_qparams`` after the keys)."""
        return (self.use_minmax, int(self.mapping), np.float32(self.qmin), np.float32(self.qmax),
                np.float32(self.half_range), np.float32(self.eps), np.float32(self.zp_sym),
                np.float32(self.maxbound))


@dataclass(frozen=True)
class AmaxSpec:
    """A validated amax-based (modelopt) quantizer: integer (``qmin``/``qmax``/``maxbound``) or minifloat (``fp``)."""

    format: QuantFormat | None
    layout: BlockLayout
    is_float: bool
    maxbound: float
    qmin: int
    qmax: int
    fp: tuple[int, ...]
