"""The cpu backend's static quantize and dequantize: the canonical views of a call, each run by one kernel.

The kernels are in :mod:`.elementwise` (integer codes) and :mod:`.floats` (fp8, fp6, fp4).
"""

from __future__ import annotations

import numpy as np

from ...layout import canonical_views
from ...modes import ScaleOp
from .._views import kernel_float_view, output_float_like
from . import elementwise as kernels
from . import floats
from ._kernel import PART_BYTES, row_tile

_NO_ZERO_POINT = np.zeros((1, 1, 1), np.float32)


def _zero_points(scale3: np.ndarray, bc: int) -> np.ndarray:
    """Zeros standing in for an absent zero point: scale-shaped when read per column (``bc == 1``)."""
    return np.zeros_like(scale3) if bc == 1 else _NO_ZERO_POINT


class StaticOps:
    """Static quantize and dequantize (:class:`~nbquant.backends.interface.Backend`)."""

    def quantize(self, x, scale, zero_point, spec, out) -> None:
        """Run the quantize kernel over every canonical block of ``x``."""
        fmt = spec.format
        group = fmt.pack_group if spec.packed else (1, 1)
        has_zp = zero_point is not None
        params = [scale, zero_point] if has_zp else [scale]
        xk = kernel_float_view(x)
        for (x3, o3), (s3, *z3), (bp, br, bc) in canonical_views(spec.layout, [xk, out], params, [1, group]):
            tile = row_tile(x3.shape[2], group[0])
            if fmt.is_float:
                if spec.scale_op == ScaleOp.DIVIDE and not spec.packed:  # the default mode: its own kernel
                    floats.quantize_float_divide_kernel(x3, s3, fmt.fp_params, spec.saturate, bp, br, bc, tile, o3)
                    continue
                kernel = floats.quantize_float_packed_kernel if spec.packed else floats.quantize_float_kernel
                kernel(x3, s3, int(spec.scale_op), fmt.fp_params, spec.saturate, bp, br, bc, tile, o3)
                continue
            qmin, qmax = np.float32(spec.qmin), np.float32(spec.qmax)
            if spec.scale_op == ScaleOp.DIVIDE and not has_zp and (bc > 1 or x3.shape[2] == 1):
                # the default mode: its own kernel (one loop to compile, not six)
                if spec.packed:
                    kernels.quantize_packed_kernel(x3, s3, qmin, qmax, fmt.bits, bp, br, bc, tile, o3)
                else:
                    kernels.quantize_blocks_kernel(x3, s3, qmin, qmax, fmt.mask, bp, br, bc, tile, o3)
                continue
            if spec.scale_op == ScaleOp.DIVIDE and has_zp and not spec.packed and (bc > 1 or x3.shape[2] == 1):
                kernels.quantize_zp_kernel(x3, s3, z3[0], spec.zero_point_before, qmin, qmax, fmt.mask, bp, br, bc,
                                           tile, o3)
                continue
            zp3 = z3[0] if has_zp else _zero_points(s3, bc)
            args = (x3, s3, zp3, has_zp, int(spec.scale_op), spec.zero_point_before, qmin, qmax)
            if spec.packed:
                kernels.quantize_packed_modes_kernel(*args, fmt.bits, bp, br, bc, tile, o3)
            else:
                kernels.quantize_modes_kernel(*args, fmt.mask, bp, br, bc, tile, o3)

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
        outk = kernel_float_view(out)
        for (q3, o3), (s3, *z3), (bp, br, bc) in canonical_views(spec.layout, [q, outk], params, [group, 1]):
            tile = row_tile(o3.shape[2], group[0])
            if fmt.is_float:
                kernel = floats.dequantize_float_packed_kernel if spec.packed else floats.dequantize_float_kernel
                kernel(q3, s3, fmt.fp_params, bp, br, bc, tile, like, o3)
                continue
            if not spec.packed and (bc > 1 or o3.shape[2] == 1):  # kernels of one loop each
                if has_zp:
                    kernels.dequantize_zp_kernel(q3, s3, z3[0], fmt.bits, fmt.signed, bp, br, bc, tile, like, o3)
                else:
                    kernels.dequantize_kernel(q3, s3, fmt.bits, fmt.signed, bp, br, bc, tile, like, o3)
                continue
            if not has_zp and (bc > 1 or o3.shape[2] == 1):  # the default mode, packed: its own kernel
                if fmt.bits == 4 and (bc % 2 == 0 or bc >= o3.shape[2]):
                    kernels.dequantize_packed_kernel(q3, s3, fmt.signed, bp, br, bc, tile, like, o3)
                    continue
            zp3 = z3[0] if has_zp else _zero_points(s3, bc)
            if spec.packed:
                kernels.dequantize_packed_modes_kernel(q3, s3, zp3, has_zp, fmt.bits, fmt.signed, bp, br, bc, tile,
                                                       like, o3)
            else:  # bc == 1
                kernels.dequantize_columns_kernel(q3, s3, zp3, has_zp, fmt.bits, fmt.signed, bp, br, tile, like, o3)
