"""onnxruntime peers of the ratio benchmark: one-node ``QuantizeLinear`` / ``DequantizeLinear`` models.

onnx and onnxruntime are imported when a factory is called, never at import time, so the
benchmark runs without them. Only int8 per-tensor and per-axis cases are built (opset 21,
zero point 0, ``CPUExecutionProvider``); a factory raises for the others, which skips the row.

Every session runs on nbquant's thread count (``intra_op_num_threads`` =
``nbquant.get_num_threads()``, ``inter_op_num_threads = 1``) with
``session.intra_op.allow_spinning = 0``: by default onnxruntime's idle worker threads spin
between runs, and on a small machine they then take the cores away from nbquant, the roofline
and the other peers timed interleaved with them (the header says so: :mod:`benchmarks.machine`).
"""

from __future__ import annotations

import importlib

import numpy as np

import nbquant

from .problems import Bench, Problem


def session_options(ort):
    """``ort.SessionOptions`` of every peer session: nbquant's thread count, one inter-op thread, no spinning."""
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.intra_op_num_threads = nbquant.get_num_threads()
    so.inter_op_num_threads = 1
    return so


def _ort_session(p: Problem, op: str) -> Bench:
    """A session running ``op`` on ``p.src`` with the problem's scales, as a zero-argument call."""
    src = p.src
    onnx, ort = importlib.import_module("onnx"), importlib.import_module("onnxruntime")
    helper, tp = onnx.helper, onnx.TensorProto
    if p.kwargs["dtype"] != "int8" or "block_size" in p.kwargs:
        raise NotImplementedError("only int8 per-tensor / per-axis")
    scale = p.scale.reshape(-1) if p.scale.size > 1 else p.scale.reshape(())
    init = [helper.make_tensor("s", tp.FLOAT, scale.shape, scale.ravel()),
            helper.make_tensor("z", tp.INT8, scale.shape, np.zeros(scale.size, np.int8))]
    attrs = {"axis": p.kwargs["axis"]} if p.scale.size > 1 else {}
    in_t, out_t = (tp.FLOAT, tp.INT8) if op == "QuantizeLinear" else (tp.INT8, tp.FLOAT)
    graph = helper.make_graph([helper.make_node(op, ["x", "s", "z"], ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info("x", in_t, src.shape)],
                              [helper.make_tensor_value_info("y", out_t, src.shape)], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), session_options(ort), providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"x": src})


def ort_quantize(p: Problem) -> Bench:
    """onnxruntime ``QuantizeLinear`` (int8, per-tensor or per-axis)."""
    return _ort_session(p, "QuantizeLinear")


def ort_dequantize(p: Problem) -> Bench:
    """onnxruntime ``DequantizeLinear`` (int8, per-tensor or per-axis)."""
    return _ort_session(p, "DequantizeLinear")
