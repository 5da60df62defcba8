"""The cpu backend's static quantize and dequantize: the canonical views of a call, each run by one kernel.

The kernels are :mod:`._codec` kernels of the families in :mod:`.elementwise` (integer
codes) and :mod:`.floats` (fp8, fp6, fp4), one per mode: a first call compiles the one
loop its mode runs.
"""

from __future__ import annotations

import numpy as np

from ...layout import canonical_views
from ...modes import ScaleOp
from .._views import kernel_float_view, output_float_like
from . import elementwise as kernels
from . import floats
from ._codec import RUNTIME_OP, codec_kernel
from ._kernel import PART_BYTES, row_tile

#: The zero point grid of a call without one (never read).
_NO_ZERO_POINT = np.zeros((1, 1, 1), np.float32)


def _kernel_op(scale_op: ScaleOp) -> int:
    """The scale op a kernel is compiled for: a float32 op itself, the half precision ones read at run time."""
    return int(scale_op) if scale_op in (ScaleOp.DIVIDE, ScaleOp.MULTIPLY) else RUNTIME_OP


class StaticOps:
    """Static quantize and dequantize (:class:`~nbquant.backends.interface.Backend`)."""

    def quantize(self, x, scale, zero_point, spec, out) -> None:
        """Run the quantize kernel over every canonical block of ``x``."""
        fmt = spec.format
        group = fmt.pack_group if spec.packed else (1, 1)
        has_zp = zero_point is not None
        params = [scale, zero_point] if has_zp else [scale]
        bits = fmt.bits if spec.packed else 8
        op = _kernel_op(spec.scale_op)
        if fmt.is_float:
            family, values = floats.QUANTIZE_FLOAT[bits], (int(spec.scale_op), fmt.fp_params, spec.saturate)
        else:
            family = kernels.QUANTIZE[bits]
            values = (int(spec.scale_op), spec.zero_point_before, np.float32(spec.qmin), np.float32(spec.qmax),
                      fmt.mask)
        xk = kernel_float_view(x)
        for (x3, o3), (s3, *z3), (bp, br, bc) in canonical_views(spec.layout, [xk, out], params, [1, group]):
            columns = bc == 1 and x3.shape[2] > 1
            kernel = codec_kernel(family, op, has_zp, columns)
            kernel(x3, s3, z3[0] if has_zp else _NO_ZERO_POINT, values, bp, br, bc, row_tile(x3.shape[2], group[0]),
                   o3)

    def quantize_per_tensor(self, x, s, fmt, qmin, qmax, out) -> None:
        """:meth:`quantize` of a C-contiguous float32 ``x`` with one float32 scale ``s``, divide mode, no zero point.

        The front door's short path (:func:`nbquant.api.quantize`): ``qmin``/``qmax`` are float32,
        ``out`` is ``x``'s shape in the format's storage. A call below :data:`~._kernel.PART_BYTES`
        calls Numba's dispatcher on the calling thread directly (no thread count, no worker thread).
        """
        xs, os = x.reshape(-1), out.reshape(-1)
        args = (xs, s, qmin, qmax, fmt.mask, os)
        if 8 * xs.size < PART_BYTES:  # float32 in, at most four bytes out: one part
            kernels.quantize_kernel.dispatcher(0, 1, *args)
        else:
            kernels.quantize_kernel(*args)

    def dequantize(self, q, scale, zero_point, spec, out) -> None:
        """Run the dequantize kernel over every canonical block of ``q``."""
        fmt = spec.format
        group = fmt.pack_group if spec.packed else (1, 1)
        has_zp = zero_point is not None
        params = [scale, zero_point] if has_zp else [scale]
        like = output_float_like(spec.out_dtype)
        bits = fmt.bits if spec.packed else 8
        values = (fmt.fp_params, like) if fmt.is_float else (fmt.bits, fmt.signed, like)
        outk = kernel_float_view(out)
        for (q3, o3), (s3, *z3), (bp, br, bc) in canonical_views(spec.layout, [q, outk], params, [group, 1]):
            C = o3.shape[2]
            columns = bc == 1 and C > 1
            if fmt.is_float:
                family = floats.DEQUANTIZE_FLOAT[bits]
            elif bits == 4 and (bc % 2 == 0 or bc >= C):  # scale blocks of whole bytes
                family = kernels.DEQUANTIZE_NIBBLES
            else:
                family = kernels.DEQUANTIZE[bits]
            kernel = codec_kernel(family, 0, has_zp, columns)
            kernel(q3, s3, z3[0] if has_zp else _NO_ZERO_POINT, values, bp, br, bc, row_tile(C, group[0]), o3)
