"""nbquant's side of each case: ``call(problem, backend)`` returns the zero-argument call to time.

``backend`` is None (nbquant's default, the cpu backend on host arrays) or ``"cuda"``
(``--device cuda``, where the problem's arrays are on the device).
"""

from __future__ import annotations

import nbquant

from .problems import Bench, Problem, quantize_block_format


def _layout_kwargs(p: Problem) -> dict:
    return {k: v for k, v in p.kwargs.items() if k in ("axis", "block_size")}


def _beside(codes, scales):
    """``scales`` where ``codes`` are: a device copy when the codes are on the device (as a device quantize returns
    them; ``to_device`` carries ml_dtypes dtypes such as E8M0 too), else as they are."""
    if not hasattr(codes, "copy_to_host"):
        return scales
    from nbquant.backends.cuda.runtime import to_device

    return to_device(scales)


def nbq_quantize(p: Problem, backend: str | None = None, out: bool = False) -> Bench:
    """``nbquant.quantize`` of the problem, with its zero points if any (into ``p.out`` when ``out``)."""
    kw = dict(_layout_kwargs(p), zero_point=p.zero_point, packed=p.kwargs["packed"], backend=backend)
    if out:
        kw["out"] = p.out
    src, scale, dtype = p.src, p.scale, p.kwargs["dtype"]
    return lambda: nbquant.quantize(src, scale, dtype, **kw)


def nbq_dequantize(p: Problem, backend: str | None = None, out: bool = False) -> Bench:
    """``nbquant.dequantize`` of the problem, with its zero points if any (into ``p.out`` when ``out``)."""
    kw = dict(_layout_kwargs(p), zero_point=p.zero_point, backend=backend)
    if p.kwargs["packed"]:
        kw["dtype"] = p.kwargs["dtype"]
    if out:
        kw["out"] = p.out
    src, scale = p.src, p.scale
    return lambda: nbquant.dequantize(src, scale, **kw)


def nbq_mx_quantize(p: Problem, backend: str | None = None) -> Bench:
    """``nbquant.quantize_mx`` / ``quantize_nvfp4`` (fused amax, scale and encode; no ``out=``)."""
    x, fmt = p.src, p.kwargs["dtype"]
    return lambda: quantize_block_format(x, fmt, backend)


def nbq_mx_dequantize(p: Problem, backend: str | None = None) -> Bench:
    """``nbquant.dequantize_mx`` / ``dequantize_nvfp4`` into a fresh float32 array.

    The scales go where the codes are (a device copy with ``--device cuda``): both must be on one side.
    """
    r, data, fmt = p.kwargs["block_formats"], p.src, p.kwargs["dtype"]
    scales = _beside(data, r.scales)
    if fmt == "nvfp4":
        return lambda: nbquant.dequantize_nvfp4(data, scales, r.global_scale, backend=backend)
    return lambda: nbquant.dequantize_mx(data, scales, fmt, backend=backend)


def nbq_quantize_dynamic(p: Problem, backend: str | None = None) -> Bench:
    """``nbquant.quantize_dynamic`` (qparams and codes in one fused pass); returns (codes, scale, zero_point)."""
    kw = {k: v for k, v in p.kwargs.items() if k != "dtype"}
    src, dtype = p.src, p.kwargs["dtype"]
    return lambda: nbquant.quantize_dynamic(src, dtype, backend=backend, **kw)


def nbq_quantize_nf4(p: Problem, backend: str | None = None) -> Bench:
    """``nbquant.quantize_nf4`` (fused absmax and nearest NF4 code, packed).

    With a ``scale_block_size`` in ``p.kwargs``, the block scales are double-quantized
    too (a pass over the scales, 1/block_size of the data, on the host).
    """
    x, block, scale_block = p.src, p.kwargs["block_size"], p.kwargs.get("scale_block_size")
    return lambda: nbquant.quantize_nf4(x, block_size=block, scale_block_size=scale_block, backend=backend)


def nbq_dequantize_nf4(p: Problem, backend: str | None = None) -> Bench:
    """``NF4Quantized.dequantize`` of the codes ``p.src`` with float32 block scales, into a fresh float32 array.

    The scales go where the codes are, as :func:`nbq_mx_dequantize` places them.
    """
    ref = p.kwargs["nf4"]
    nq = nbquant.NF4Quantized(p.src, _beside(p.src, ref.scales), ref.shape, ref.block_size)
    return lambda: nq.dequantize(backend=backend)


def nbq_max_collect(p: Problem, backend: str | None = None) -> Bench:
    """``MaxCalibrator.collect`` (per tensor), then ``compute_amax`` (a copy of one float); returns the amax.

    One calibrator serves every call: its running max over the same batch stays that
    batch's amax, so each call is one steady-state ``collect`` with a result the peers
    can be compared with.
    """
    cal, x = nbquant.modelopt.MaxCalibrator(backend=backend), p.src

    def run():
        cal.collect(x)
        return cal.compute_amax()

    return run


def nbq_histogram_collect(p: Problem, backend: str | None = None) -> Bench:
    """``HistogramCalibrator.collect`` of the batch into a fresh calibrator; returns its counts.

    A fresh calibrator per call (its constructor is O(1)) keeps the timed call one
    ``collect`` of one batch whose result is that batch's histogram. A kept calibrator
    would add the same counts up call after call, and its later batches make the same
    two passes over ``x`` (the amax, then the counts), merely adding the old counts
    where the first batch builds the ``linspace`` edges.
    """
    x, bins = p.src, p.kwargs["num_bins"]

    def run():
        cal = nbquant.modelopt.HistogramCalibrator(bins, backend=backend)
        cal.collect(x)
        return cal.histogram

    return run
