"""The one interface every backend implements: :class:`Backend`.

Each backend package (:mod:`nbquant.backends.reference`, :mod:`nbquant.backends.cpu`,
:mod:`nbquant.backends.cuda`) exposes one object, ``BACKEND``, with every operation
below. The front doors validate their arguments into a spec of :mod:`nbquant.spec`,
allocate the results, get a backend from :func:`nbquant.backends.resolve_backend` and
call one of these methods; the method fills the result arrays it is given.

Arrays: inputs are C-contiguous; float16 and bfloat16 inputs arrive as their dtypes
(the compiled backends view them as ``uint16``/``int16`` bits), codes as their
unsigned storage (``uint8``/``uint16``, or packed bytes). The cuda backend also takes
CUDA device arrays for every array argument.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..layout import BlockLayout
from ..spec import AmaxSpec, BlockSpec, DequantizeSpec, DynamicSpec, QuantizeSpec

__all__ = ["Backend", "OPERATIONS", "key_floats"]


@runtime_checkable
class Backend(Protocol):
    """The operations of a backend. ``name`` is ``"reference"``, ``"cpu"`` or ``"cuda"``."""

    name: str

    # --- static quantization (nbquant.api) ------------------------------------------------------

    def quantize(self, x, scale, zero_point, spec: QuantizeSpec, out) -> None:
        """Fill ``out`` (code storage, packed or not) with the codes of ``x``.

        ``scale`` and ``zero_point`` (or None) are float32 block-grid arrays of ``spec.layout``.
        """

    def dequantize(self, q, scale, zero_point, spec: DequantizeSpec, out) -> None:
        """Fill ``out`` (``spec.out_dtype``) with ``(code - zero_point) * scale`` of the codes ``q``."""

    # --- block formats (nbquant.blocks): (rows, n), blocks along the last axis ------------------------

    def block_quantize(self, x, spec: BlockSpec, outputs: tuple) -> None:
        """Fused quantize of ``x`` (rows, n) to ``spec.format``: fill ``outputs``, one (rows, n / block * per_block)
        array per :meth:`~nbquant.blocks.BlockFormat.tensors` entry, in its kernel dtype.

        Each backend runs the kernel registered for the format's family with
        :func:`~nbquant.blocks.block_kernel` (NotImplementedError naming it when there is none).
        """

    def block_dequantize(self, inputs: tuple, spec: BlockSpec, out) -> None:
        """Decode the format's tensors ``inputs`` (as :meth:`block_quantize` fills them) into ``out`` (rows, n)."""

    # --- reductions --------------------------------------------------------------------------

    def amax(self, x) -> np.float32:
        """``max |x|`` over the whole array (NaN if any element is NaN; 0 when empty)."""

    def reduce_keys(self, x, spec: DynamicSpec) -> tuple[np.ndarray, np.ndarray]:
        """Per-block ``(lo, hi)`` int64 keys over ``spec.layout``'s grid, flat and row-major, on the host.

        With ``spec.use_minmax`` the min and max :func:`~nbquant.element.range_keys` keys (a block
        holding NaN: NaN keys on both sides); otherwise ``hi`` holds the absmax float32 bits and ``lo`` is unspecified.
        """

    # --- dynamic quantization (nbquant.dynamic) -------------------------------------------------

    def choose_qparams(self, x, spec: DynamicSpec, scale, zero_point) -> None:
        """Fill the block-grid ``scale`` (float32) and ``zero_point`` (int32) chosen from ``x``."""

    def quantize_dynamic(self, x, spec: DynamicSpec, out, scale, zero_point) -> bool:
        """One fused pass over ``x``: qparams and codes; True when done, False when the backend has no fused pass.

        Called only where ``spec.fused_rows()`` is not None; otherwise (and after False) the
        front door runs :meth:`choose_qparams`, then :meth:`quantize` with those qparams.
        """

    # --- modelopt operations (nbquant.modelopt_ops) --------------------------------------------

    def fake_quant_amax(self, x, amax_grid, spec: AmaxSpec, out, codes=None) -> None:
        """modelopt fake quantization of ``x`` with a block-grid ``amax`` into ``out``; the float32 codes too."""

    def fake_affine(self, x, step, zero, minbound, maxbound, out) -> None:
        """modelopt's legacy per-tensor FakeAffine ``(clamp(rne(x / step) - zero) + zero) * step``."""

    def ste_backward(self, grad, x, lo_grid, hi_grid, layout: BlockLayout, out) -> None:
        """The straight-through gradient: ``grad`` where ``lo <= x <= hi`` (block-grid bounds), else 0."""

    # --- calibration (nbquant.calibration) ----------------------------------------------------

    def abs_histogram(self, x, nbins: int, top) -> np.ndarray:
        """int64 counts of ``|x|`` in ``nbins`` bins over ``[0, top]`` (torch.histc's rule; NaN not counted)."""


#: The names of every operation of :class:`Backend` (what a test checks each backend defines).
OPERATIONS = tuple(name for name, value in vars(Backend).items() if callable(value) and not name.startswith("_"))


def key_floats(keys) -> np.ndarray:
    """The float32 values of :meth:`Backend.reduce_keys` order keys, bit for bit (``-0.0`` kept); NaN the canonical one.

    Examples
    --------
    >>> key_floats(np.array([-1, 0, 0x3F800000, -0x7FC00002]))
    array([-0.,  0.,  1., nan], dtype=float32)
    """
    keys = np.asarray(keys, np.int64)
    values = np.where(keys >= 0, keys, (-keys - 1) | 0x80000000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(values), np.float32(np.nan), values)
