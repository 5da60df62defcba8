"""The cuda backend's static quantize and dequantize: the canonical views of a call, each run by one kernel.

The kernels are in :mod:`.elementwise`.
"""

from __future__ import annotations

import numpy as np

from ...layout import canonical_views
from .._views import kernel_float_view, output_float_like
from . import elementwise, runtime


def _kernel(operation: str, fmt, packed: bool) -> runtime.CudaKernel:
    """The kernel of ``operation`` (quantize or dequantize) for an integer or float format, packed or not."""
    name = operation + ("_float" if fmt.is_float else "") + ("_packed" if packed else "")
    return getattr(elementwise, name + "_kernel")


def _run(kernel, data, params, out, spec, last_divisors, make_args) -> None:
    """Copy host operands in, launch ``kernel`` once per canonical view, copy a host ``out`` back."""
    stream = runtime.current_stream()
    d_data = runtime.to_device(data, stream)
    d_out = runtime.result_on_device(out, stream)
    d_params = [runtime.to_device(p, stream) for p in params]
    group_bytes = max(g[1] if isinstance(g, tuple) else 1 for g in last_divisors)
    for (a3, o3), (s3, *z3), blocks in canonical_views(spec.layout, [d_data, kernel_float_view(d_out)], d_params,
                                                       last_divisors):
        has_zp = bool(z3)
        zp3 = z3[0] if has_zp else s3
        items = min(a3.shape[2], o3.shape[2]) // group_bytes  # columns, or packed groups
        grid, threads = runtime.grid_for_rows(a3.shape[0] * a3.shape[1], items)
        kernel.launch(grid, threads, stream, make_args(a3, s3, zp3, has_zp, blocks, o3), a3.dtype, o3.dtype)
    runtime.copy_back([(out, d_out)], stream)


class StaticOps:
    """Static quantize and dequantize (:class:`~nbquant.backends.interface.Backend`)."""

    def quantize(self, x, scale, zero_point, spec, out) -> None:
        """Quantize ``x`` (NumPy or device) into ``out`` (code storage, NumPy or device) on the GPU."""
        fmt = spec.format
        group = fmt.pack_group if spec.packed else (1, 1)
        params = [scale] if zero_point is None else [scale, zero_point]
        lo, hi = np.float32(spec.qmin), np.float32(spec.qmax)
        last = np.int64(fmt.bits if spec.packed else fmt.mask)
        op = int(spec.scale_op)

        def make_args(x3, s3, zp3, has_zp, blocks, o3):
            if fmt.is_float:
                return (x3, s3, op, fmt.fp_params, spec.saturate, *blocks, o3)
            return (x3, s3, zp3, has_zp, op, spec.zero_point_before, lo, hi, last, *blocks, o3)

        x = kernel_float_view(runtime.device_or_host(x))
        _run(_kernel("quantize", fmt, spec.packed), x, params, out, spec, [1, group], make_args)

    def dequantize(self, q, scale, zero_point, spec, out) -> None:
        """Dequantize ``q`` (code storage, NumPy or device) into ``out`` (NumPy or device) on the GPU."""
        fmt = spec.format
        group = fmt.pack_group if spec.packed else (1, 1)
        params = [scale] if zero_point is None else [scale, zero_point]
        like = output_float_like(spec.out_dtype)

        def make_args(q3, s3, zp3, has_zp, blocks, o3):
            if fmt.is_float:
                return (q3, s3, fmt.fp_params, *blocks, like, o3)
            return (q3, s3, zp3, has_zp, fmt.bits, fmt.signed, *blocks, like, o3)

        q = runtime.device_or_host(q)
        _run(_kernel("dequantize", fmt, spec.packed), q, params, out, spec, [group, 1], make_args)
