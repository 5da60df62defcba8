"""Every public argument is checked before any kernel: an error that names it, shows its value, says what is allowed.

:data:`ROWS` is the table: for each public function (``nbquant.__all__`` and ``nbquant.compat.*``) a builder of
valid keyword arguments and, per argument, the kind of value it takes; each kind (:data:`BAD`) lists the values it
must refuse: bools (``True`` as a scale would silently be 1.0), strings, NaN, ±inf, 0, negatives, values beyond
float32, non-integral floats for integer arguments, None where it is not allowed, other types. A new public
function gets rows here. The reference backend runs the calls (the checks come before any kernel).
"""

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest

import nbquant
from nbquant.compat import modelopt, onnx, pypto, tensorrt, torchao, tripy

pytestmark = pytest.mark.filterwarnings("error")

R = {"backend": "reference"}
X = np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(2, 32)
Q8 = np.zeros((2, 32), np.int8)
U8 = np.zeros((2, 32), np.uint8)
TWO = np.ones(2, np.float32)
MX = nbquant.quantize_mx(X, "mxfp8_e4m3", **R)
NV = nbquant.quantize_nvfp4(X, **R)

BOOLS = [True, False, np.True_, np.array([True]), np.array(False)]
STRINGS = ["0.5", "abc"]
NON_FINITE = [math.nan, math.inf, -math.inf, np.float32(np.nan)]
OTHER = [1 + 1j, object()]
BAD = {
    # finite and > 0: scales, global scales, eps
    "positive": [*BOOLS, *STRINGS, *NON_FINITE, *OTHER, 0, 0.0, -1.0, -2, 1e300, 1e-50, None],
    # any finite value: zero points added before rounding or subtracted in dequantize, ranges
    "finite": [*BOOLS, *STRINGS, *NON_FINITE, *OTHER, 1e300, None],
    # modelopt's amax: >= 0; NaN and inf are modelopt's own (docs/dynamic.md), a finite value beyond float32 is not
    "amax": [*BOOLS, *STRINGS, *OTHER, -1.0, -3, 1e300],
    # an integer (an integral float such as 3.0 may be accepted)
    "int": [*BOOLS, *STRINGS, *NON_FINITE, *OTHER, 2.5, np.float32(0.5), None, [2]],
    # a positive integer
    "count": [*BOOLS, *STRINGS, *NON_FINITE, *OTHER, 2.5, 0, -1, None],
    # True or False
    "bool": ["yes", 2, 1.0, None, np.array([True, False])],
    # one of a few strings
    "choice": ["nope", 3, None, True],
}


def _rows(fn, build, arg, kind, *, allowed=(), extra=()):
    """``(fn, build, arg, value)`` for every bad value of ``kind`` that ``fn`` does not allow, and ``extra``."""
    values = [v for v in BAD[kind] if not any(_same(v, a) for a in allowed)]
    return [(fn, build, arg, v) for v in [*values, *extra]]


def _same(a, b) -> bool:
    if a is b:
        return True
    if type(a) is not type(b) or isinstance(a, np.ndarray):
        return False
    return a == b or (a != a and b != b)  # NaN is NaN


def _q(**kw):
    return {"x": X, "scale": 0.5, "dtype": "int8", **R, **kw}


def _dq(**kw):
    return {"q": Q8, "scale": 0.5, **R, **kw}


def _x(**kw):
    return {"x": X, **R, **kw}


def _mx():
    return {"data": MX.data, "scales": MX.scales, "format": MX.format, **R}


def _nv():
    return {"data": NV.data, "scales": NV.scales, "global_scale": NV.global_scale, **R}


def _affine():
    return _x(min_range=-1.0, max_range=1.0)


def _affine_backward():
    return {"grad_output": X, "x": X, "min_range": -1.0, "max_range": 1.0, **R}


def _ao(**kw):
    return {"input": X, "block_size": (2, 32), "scale": 0.5, "zero_point": 0, "output_dtype": "int8", **kw}


def _ao_dq(**kw):
    return {"input": Q8, "block_size": (2, 32), "scale": 0.5, "zero_point": 0, "input_dtype": "int8", **kw}


def _ao_qparams(**kw):
    return {"input": X, "mapping_type": "SYMMETRIC", "block_size": (2, 32), "target_dtype": "int8", **kw}


def _tinygemm(**kw):
    return {"input": X, "block_size": (2, 32), "scale": np.float32(0.2), "zero_point": np.float32(1.6),
            "output_dtype": "uint4", **kw}


def _tinygemm_dq(**kw):
    return {"input": U8, "block_size": (2, 32), "scale": np.float32(0.2), "zero_point": np.float32(1.6),
            "input_dtype": "uint4", **kw}


def _ao_asym(**kw):
    return {"input": X, "mapping_type": "ASYMMETRIC", "block_size": (2, 32), "target_dtype": "uint4", **kw}


def _ao_fake(**kw):
    return {"input": X, "block_size": (2, 32), "scale": 0.5, "zero_point": 0, "quant_dtype": "int8", **kw}


def _ao_minmax(**kw):
    return {"min_val": np.array([-1.0], np.float32), "max_val": np.array([1.0], np.float32),
            "mapping_type": "ASYMMETRIC", "block_size": (1, 32), "target_dtype": "uint8", **kw}


NONE_OK = {"allowed": [None]}
F8 = np.zeros((2, 32), ml_dtypes.float8_e4m3fn)
F8_SCALES = [0, 0.0, 1e-50, math.nan, np.float32(np.nan)]  # torchao's scales: 0 (an all-zero block) and NaN are its own
LIST_OK = {"allowed": [[2]]}  # a one-element list is a valid per-tensor value or a valid axis list here
BLOCK_TUPLES = [True, 2, None, "2", (True, 32), (2.5, 32), ("2", 32), (0, 32), (np.True_, 32)]
TINY_FLOATS = [np.float32(np.nan), np.float32(np.inf), np.True_, np.array([True]), "abc", None]

ROWS = [
    # --- nbquant.quantize / dequantize (api.py: only the shared checks in validation.py and layout.py apply)
    *_rows(nbquant.quantize, _q, "scale", "positive", extra=[np.array([np.nan], ml_dtypes.bfloat16)]),
    *_rows(nbquant.quantize, _q, "zero_point", "int", allowed=[None, [2]], extra=[0.5, 127.00001, 300, 1e300]),
    *_rows(nbquant.quantize, lambda: _q(zero_point_order="before_rounding"), "zero_point", "finite", **NONE_OK),
    *_rows(nbquant.quantize, lambda: _q(scale=TWO), "axis", "int", **NONE_OK),
    *_rows(nbquant.quantize, lambda: _q(axis=1), "block_size", "count", **NONE_OK),
    *_rows(nbquant.quantize, _q, "quant_min", "int", allowed=[None], extra=[-3.7, -200]),
    *_rows(nbquant.quantize, _q, "quant_max", "int", allowed=[None], extra=[3.7, 200]),
    *_rows(nbquant.quantize, lambda: _q(dtype="int4"), "packed", "bool"),
    *_rows(nbquant.quantize, lambda: _q(dtype="float8_e4m3fn"), "saturate", "bool"),
    *_rows(nbquant.quantize, _q, "scale_op", "choice"),
    *_rows(nbquant.quantize, _q, "zero_point_order", "choice"),
    *_rows(nbquant.quantize, _q, "compute_dtype", "choice", extra=["float64", np.float16]),
    *_rows(nbquant.quantize, lambda: _q(compute_dtype="float16"), "scale", "positive", extra=[1e-8, 7e4]),
    *_rows(nbquant.dequantize, _dq, "scale", "positive"),
    *_rows(nbquant.dequantize, _dq, "zero_point", "finite", **NONE_OK),
    *_rows(nbquant.dequantize, lambda: _dq(scale=TWO), "axis", "int", **NONE_OK),
    *_rows(nbquant.dequantize, lambda: _dq(axis=1), "block_size", "count", **NONE_OK),
    # --- block formats
    *_rows(nbquant.quantize_mx, _x, "axis", "int"),
    *_rows(nbquant.quantize_mx, _x, "block_size", "count"),
    *_rows(nbquant.quantize_mx, _x, "format", "choice"),
    *_rows(nbquant.quantize_mx, _x, "scale_rounding", "choice"),
    *_rows(nbquant.quantize_mx, lambda: _x(format="mxfp4"), "packed", "bool", **NONE_OK),
    *_rows(nbquant.dequantize_mx, _mx, "axis", "int"),
    *_rows(nbquant.dequantize_mx, _mx, "block_size", "count"),
    *_rows(nbquant.dequantize_mx, lambda: {**_mx(), "format": "mxfp4"}, "packed", "bool", **NONE_OK),
    *_rows(nbquant.quantize_nvfp4, _x, "global_scale", "positive", **NONE_OK),
    *_rows(nbquant.quantize_nvfp4, _x, "axis", "int"),
    *_rows(nbquant.quantize_nvfp4, _x, "block_size", "count", extra=[3]),
    *_rows(nbquant.dequantize_nvfp4, _nv, "global_scale", "positive", extra=[np.ones(2, np.float32)]),
    *_rows(nbquant.dequantize_nvfp4, _nv, "axis", "int"),
    *_rows(nbquant.dequantize_nvfp4, _nv, "block_size", "count"),
    *_rows(nbquant.quantize_nf4, _x, "block_size", "count", extra=[3]),
    *_rows(nbquant.quantize_nf4, lambda: _x(block_size=16), "scale_block_size", "count", **NONE_OK),
    *_rows(nbquant.quantize_nf4, lambda: _x(block_size=16, scale_block_size=2), "scale_bits", "count",
           extra=[1, 9]),
    *_rows(nbquant.quantize_nf4, lambda: _x(block_size=16), "scale_bits", "count", extra=[1, 9]),
    # --- dynamic quantization
    *_rows(nbquant.choose_qparams, lambda: _x(dtype="int8"), "eps", "positive", **NONE_OK),
    *_rows(nbquant.choose_qparams, lambda: _x(dtype="int8"), "quant_min", "int", allowed=[None], extra=[-3.7]),
    *_rows(nbquant.choose_qparams, lambda: _x(dtype="int8"), "quant_max", "int", allowed=[None], extra=[3.7]),
    *_rows(nbquant.choose_qparams, lambda: _x(dtype="int8"), "axis", "int", **NONE_OK),
    *_rows(nbquant.choose_qparams, lambda: _x(dtype="int8", axis=1), "block_size", "count", **NONE_OK),
    *_rows(nbquant.choose_qparams, lambda: _x(dtype="int8"), "mapping", "choice"),
    *_rows(nbquant.choose_qparams, lambda: _x(dtype="int8"), "narrow_range", "bool", **NONE_OK),
    *_rows(nbquant.choose_qparams, lambda: _x(dtype="int8", mapping="modelopt"), "scale_op", "choice",
           allowed=[None], extra=[np.array(["multiply", "divide"])]),
    *_rows(nbquant.quantize_dynamic, lambda: _x(dtype="int8"), "eps", "positive", **NONE_OK),
    *_rows(nbquant.quantize_dynamic, lambda: _x(dtype="int8"), "quant_max", "int", allowed=[None], extra=[3.7]),
    *_rows(nbquant.quantize_dynamic, lambda: _x(dtype="int4"), "packed", "bool"),
    # --- modelopt operations
    *_rows(nbquant.modelopt.fake_tensor_quant, _x, "amax", "amax"),
    *_rows(nbquant.modelopt.fake_tensor_quant, _x, "num_bits", "count", extra=[8.5, 1, 17]),
    *_rows(nbquant.modelopt.fake_tensor_quant, _x, "unsigned", "bool"),
    *_rows(nbquant.modelopt.fake_tensor_quant, _x, "narrow_range", "bool"),
    *_rows(nbquant.modelopt.fake_tensor_quant, _x, "axis", "int", **NONE_OK),
    *_rows(nbquant.modelopt.tensor_quant, _x, "amax", "amax"),
    *_rows(nbquant.modelopt.tensor_quant, _x, "num_bits", "count", extra=[8.5]),
    *_rows(nbquant.modelopt.scaled_e4m3, _x, "amax", "amax"),
    *_rows(nbquant.modelopt.scaled_e4m3, _x, "E", "count", extra=[np.array([4, 4])]),
    *_rows(nbquant.modelopt.scaled_e4m3, _x, "M", "count"),
    *_rows(nbquant.modelopt.dynamic_block_quant, lambda: _x(block_sizes={-1: 16}), "num_bits", "count", extra=[8.5]),
    *_rows(nbquant.modelopt.dynamic_block_quant, _x, "block_sizes", "int",
           extra=[{-1: True}, {-1: "16"}, {-1: 2.5}, {True: 16}, {-1: 0}, {-1: -4}, {np.True_: 16}]),
    *_rows(nbquant.reduce_min_max, _x, "axis", "int", **NONE_OK),
    *_rows(nbquant.reduce_amax, _x, "axis", "int", **NONE_OK),
    *_rows(nbquant.reduce_amax, _x, "layout", "choice", allowed=[None],
           extra=[nbquant.layout.resolve_layout((4, 16))]),
    (nbquant.reduce_amax, lambda: _x(axis=0), "layout", nbquant.layout.resolve_layout((2, 32), axis=0)),
    *_rows(nbquant.modelopt.fake_affine_tensor_quant, _affine, "min_range", "finite", extra=[2.0, 1.0]),
    *_rows(nbquant.modelopt.fake_affine_tensor_quant, _affine, "max_range", "finite", extra=[-2.0, -1.0]),
    *_rows(nbquant.modelopt.fake_affine_tensor_quant, _affine, "num_bits", "count", extra=[8.5, 1, 17]),
    *_rows(nbquant.modelopt.fake_tensor_quant_backward, lambda: {"grad_output": X, "x": X, "amax": 1.0, **R}, "amax",
           "amax"),
    *_rows(nbquant.modelopt.fake_affine_tensor_quant_backward, _affine_backward, "min_range", "finite",
           extra=[2.0, 1.0]),
    *_rows(nbquant.modelopt.fake_affine_tensor_quant_backward, _affine_backward, "max_range", "finite",
           extra=[-2.0, -1.0]),
    # --- nbquant.compat front-ends
    *_rows(tripy.quantize, lambda: {"input": X, "scale": 0.5, "dtype": "int8"}, "scale", "positive"),
    *_rows(tripy.quantize, lambda: {"input": X, "scale": TWO, "dtype": "int8"}, "dim", "int", allowed=[None]),
    *_rows(tripy.dequantize, lambda: {"input": Q8, "scale": 0.5, "dtype": "float32"}, "scale", "positive"),
    *_rows(tensorrt.quantize, lambda: {"input": X, "scale": 0.5}, "scale", "positive"),
    *_rows(tensorrt.quantize, lambda: {"input": X, "scale": 0.5}, "zero_point", "finite", allowed=[None],
           extra=[1]),
    *_rows(tensorrt.quantize, lambda: {"input": X, "scale": TWO}, "axis", "int"),
    *_rows(tensorrt.dequantize, lambda: {"input": Q8, "scale": 0.5}, "scale", "positive"),
    *_rows(pypto.quantize, lambda: {"input": X, "scale": TWO, "otype": "int8", "axis": -1}, "scale", "positive",
           extra=[np.array([1.0, np.nan], np.float32), np.array([1.0, 0.0], np.float32)]),
    *_rows(pypto.quantize, lambda: {"input": X, "scale": TWO, "otype": "int8", "axis": -1}, "axis", "int",
           extra=[5, -3]),
    *_rows(pypto.quantize, lambda: {"input": X, "scale": TWO, "otype": "uint8", "axis": -1,
                                    "zero_points": TWO}, "zero_points", "finite",
           extra=[np.array([1.0, np.inf], np.float32)]),
    *_rows(pypto.dequantize, lambda: {"input": Q8, "scale": TWO, "axis": -1}, "scale", "positive"),
    *_rows(pypto.dequantize, lambda: {"input": Q8, "scale": TWO, "axis": -1}, "zero_points", "finite",
           **NONE_OK),
    *_rows(torchao.quantize_affine, _ao, "scale", "positive",
           extra=[np.array([0.0], np.float16), np.array([np.nan], ml_dtypes.bfloat16)]),
    *_rows(torchao.quantize_affine, _ao, "zero_point", "int", **LIST_OK),
    *_rows(torchao.quantize_affine, _ao, "block_size", "int", extra=BLOCK_TUPLES),
    *_rows(torchao.quantize_affine, _ao, "quant_min", "int", allowed=[None], extra=[-3.7, -200]),
    *_rows(torchao.quantize_affine, _ao, "quant_max", "int", allowed=[None], extra=[3.7, 200]),
    *_rows(torchao.dequantize_affine, _ao_dq, "scale", "positive"),
    *_rows(torchao.dequantize_affine, _ao_dq, "zero_point", "finite", **NONE_OK),
    *_rows(torchao.dequantize_affine, _ao_dq, "quant_min", "int", allowed=[None], extra=[-3.7]),
    *_rows(torchao.choose_qparams_affine, _ao_qparams, "eps", "positive", **NONE_OK),
    *_rows(torchao.choose_qparams_affine, _ao_qparams, "quant_min", "int", allowed=[None], extra=[-3.7]),
    *_rows(torchao.choose_qparams_affine, _ao_qparams, "keepdim", "bool"),
    *_rows(torchao.choose_qparams_affine, _ao_qparams, "mapping_type", "choice",
           extra=[np.array(["SYMMETRIC"])]),
    *_rows(torchao._quantize_affine_no_zero_point, lambda: _ao(zero_point=None), "scale", "positive"),
    *_rows(torchao._quantize_affine_tinygemm, _tinygemm, "scale", "positive"),
    *_rows(torchao._quantize_affine_tinygemm, _tinygemm, "zero_point", "finite",
           allowed=[math.nan, math.inf, -math.inf, 1e300], extra=TINY_FLOATS),
    *_rows(torchao._dequantize_affine_tinygemm, _tinygemm_dq, "zero_point", "finite",
           allowed=[math.nan, math.inf, -math.inf, 1e300], extra=TINY_FLOATS),
    *_rows(torchao._choose_scale_float8, lambda: {"tensor": X, "block_size": (1, 32)}, "block_size", "count",
           extra=[(True, 32), (0, 32), (2.5, 32), (1, 3), (1,), (1, 1)]),
    *_rows(torchao._choose_scale_float8, lambda: {"tensor": X, "block_size": (1, 32)}, "hp_value_lb", "finite",
           **NONE_OK),
    *_rows(torchao._choose_scale_float8, lambda: {"tensor": X, "block_size": (1, 32)}, "float8_dtype", "choice",
           extra=["int8", "float8_e4m3fnuz"]),
    *_rows(torchao._quantize_affine_float8, lambda: {"tensor": X, "scale": 0.5}, "scale", "positive",
           allowed=F8_SCALES, extra=[np.ones((2, 3), np.float32)]),
    *_rows(torchao._dequantize_affine_float8, lambda: {"tensor": F8, "scale": 0.5}, "scale", "positive",
           allowed=F8_SCALES),
    *_rows(torchao._dequantize_affine_float8, lambda: {"tensor": F8, "scale": 0.5}, "output_dtype", "choice"),
    *_rows(torchao._fake_quantize_affine, _ao_fake, "scale", "positive"),
    *_rows(torchao._fake_quantize_affine, _ao_fake, "quant_min", "int", allowed=[None], extra=[-3.7, -200]),
    *_rows(torchao._fake_quantize_affine, _ao_fake, "zero_point_domain", "choice", extra=["FLOATING"]),
    *_rows(torchao._fake_quantize_affine_cachemask, _ao_fake, "zero_point", "int", extra=[0.5, 300], **LIST_OK),
    *_rows(torchao.choose_qparams_affine_with_min_max, _ao_minmax, "min_val", "finite",
           extra=[np.array([2.0], np.float32), np.array([-1.0, -2.0], np.float32), np.array([-1.0])]),
    *_rows(torchao.choose_qparams_affine_with_min_max, _ao_minmax, "mapping_type", "choice"),
    *_rows(torchao._choose_qparams_affine_tinygemm, _ao_asym, "eps", "positive", **NONE_OK),
    *_rows(torchao._choose_qparams_affine_tinygemm, _ao_asym, "mapping_type", "choice", extra=["SYMMETRIC"]),
    *_rows(torchao._choose_qparams_affine_dont_preserve_zero, _ao_asym, "quant_min", "int", allowed=[None],
           extra=[-3.7]),
    *_rows(torchao._choose_qparams_affine_dont_preserve_zero, _ao_asym, "block_size", "count",
           extra=[(True, 32), (0, 32), (2.5, 32)]),
    *_rows(torchao._choose_qparams_affine_floatx, lambda: {"tensor": X, "ebits": 3, "mbits": 2}, "ebits", "count",
           extra=[4, 9]),
    *_rows(torchao._quantize_affine_floatx, lambda: {"tensor": X, "scale": np.ones(2, np.float32), "ebits": 3,
                                                     "mbits": 2}, "scale", "positive"),
    *_rows(torchao._dequantize_affine_floatx, lambda: {"tensor": np.zeros((2, 32), np.uint8),
                                                       "scale": np.ones(2, np.float32), "ebits": 3, "mbits": 2},
           "mbits", "count", extra=[5]),
    *_rows(nbquant.set_output_pool, lambda: {"max_bytes": 1 << 20}, "max_bytes", "int", extra=[-1]),
    *_rows(modelopt.tensor_quant, lambda: {"inputs": X, "amax": 1.0}, "amax", "amax", **NONE_OK),
    *_rows(modelopt.tensor_quant, lambda: {"inputs": X, "amax": 1.0}, "num_bits", "count", extra=[8.5]),
    *_rows(modelopt.fake_tensor_quant, lambda: {"inputs": X, "amax": 1.0}, "amax", "amax", **NONE_OK),
    *_rows(modelopt.fake_tensor_quant, lambda: {"inputs": X, "amax": 1.0}, "unsigned", "bool"),
    *_rows(modelopt.fake_affine_tensor_quant, lambda: {"inputs": X, "min_range": -1.0, "max_range": 1.0},
           "max_range", "finite", extra=[-1.0]),
    *_rows(modelopt.fake_affine_tensor_quant, lambda: {"inputs": X, "min_range": -1.0, "max_range": 1.0},
           "num_bits", "count", extra=[8.5]),
    *_rows(modelopt.scaled_e4m3, lambda: {"inputs": X, "amax": 1.0}, "E", "int"),
    *_rows(modelopt.QuantDescriptor, dict, "num_bits", "count", extra=[8.5]),
    *_rows(modelopt.QuantDescriptor, dict, "axis", "int", allowed=[None, [2]], extra=[(0, True), (0, 1.5)]),
    *_rows(modelopt.QuantDescriptor, dict, "scale_amax", "finite", allowed=[*NON_FINITE, 1e300, None]),
    *_rows(modelopt.QuantDescriptor, dict, "amax", "amax", allowed=[-1.0, -3, 1e300], extra=[[True], ["a"]]),
    *_rows(modelopt.QuantDescriptor, dict, "block_sizes", "int", allowed=[None],
           extra=[{-1: True}, {-1: 2.5}, {True: 16}, {-1: 0}]),
    *_rows(onnx.quantize_linear, lambda: {"x": X, "y_scale": np.float32(0.5)}, "y_scale", "positive"),
    *_rows(onnx.quantize_linear, lambda: {"x": X, "y_scale": np.float32(0.5)}, "y_zero_point", "finite",
           **NONE_OK),
    *_rows(onnx.quantize_linear, lambda: {"x": X, "y_scale": TWO, "axis": 0}, "axis", "int"),
    *_rows(onnx.quantize_linear, lambda: {"x": X, "y_scale": np.ones((2, 2), np.float32), "block_size": 16},
           "block_size", "int", extra=[-1]),
    *_rows(onnx.quantize_linear, lambda: {"x": X, "y_scale": np.float32(0.5)}, "saturate", "bool",
           extra=[-1]),
    *_rows(onnx.dequantize_linear, lambda: {"x": Q8, "x_scale": np.float32(0.5)}, "x_scale", "positive",
           extra=[np.array([np.nan], ml_dtypes.bfloat16), np.array(-1, np.float16)]),
    *_rows(onnx.dequantize_linear, lambda: {"x": Q8, "x_scale": np.float32(0.5)}, "x_zero_point", "finite",
           **NONE_OK),
]


def _name(fn) -> str:
    return f"{fn.__module__.replace('nbquant.', '')}.{fn.__qualname__}"


def _shown(value) -> list[str]:
    """The texts one of which the message must hold to show a scalar ``value`` (arrays are named by dtype)."""
    if isinstance(value, (bool, int, float, complex, str, np.generic)):
        return [repr(value), str(value)]
    return []


@pytest.mark.parametrize(("fn", "build", "arg", "value"), ROWS,
                         ids=[f"{_name(fn)}-{arg}={value!r}" for fn, _, arg, value in ROWS])
def test_bad_argument_is_refused_naming_it_and_showing_its_value(fn, build, arg, value):
    kwargs = build()
    kwargs[arg] = value
    with pytest.raises((ValueError, TypeError)) as info:
        fn(**kwargs)
    message = str(info.value)
    assert re.search(rf"(?<![\w.]){re.escape(arg)}\b", message), message
    shown = _shown(value)
    assert not shown or any(s in message for s in shown), message


REFUSED = [torchao._choose_qparams_and_quantize_affine_hqq, torchao._choose_qparams_gguf, torchao._quantize_gguf,
           torchao._dequantize_gguf]


@pytest.mark.parametrize("fn", REFUSED, ids=lambda f: f.__name__)
def test_refused_calls_say_what_to_use_instead(fn):
    with pytest.raises(NotImplementedError, match=rf"^torchao's {fn.__name__} is not reproduced .*; \w"):
        fn(X, "ASYMMETRIC", (2, 32), "uint8")


def test_every_public_function_has_rows():
    """A function added to ``nbquant.__all__`` or a compat module needs rows in the table (or a reason here).

    Classes are left out (the calibrators are checked in tests/test_calibration.py), but ``QuantDescriptor``.
    """
    covered = {fn for fn, *_ in ROWS}
    no_numeric_arguments = {
        nbquant.get_backend, nbquant.backends, nbquant.set_backend, nbquant.use_backend,  # backend names
        nbquant.get_format, nbquant.get_num_threads, nbquant.output_pool_bytes,  # a format name; nothing
        nbquant.set_num_threads,  # threads.py: checked there (tests/test_threads.py)
        onnx.dynamic_quantize_linear,  # x only
        torchao._dequantize_affine_no_zero_point,  # dequantize_affine's checks, zero_point must be None
        *REFUSED,  # refuse every call (test_refused_calls_say_what_to_use_instead)
    }
    public = [getattr(nbquant, n) for n in nbquant.__all__]
    public += [getattr(m, n) for m in (nbquant.modelopt, modelopt, onnx, pypto, tensorrt, torchao, tripy)
               for n in m.__all__]
    functions = {f for f in public if callable(f) and not isinstance(f, type) or f in (modelopt.QuantDescriptor,)}
    missing = {_name(f) for f in functions - covered - no_numeric_arguments}
    assert not missing, f"add rows to ROWS for {sorted(missing)}"


# --- messages show the value as passed, and why it fails -------------------------------------------------------


@pytest.mark.parametrize(("call", "exc", "message"), [
    (lambda: nbquant.quantize(X, 1e300, "int8", **R), ValueError,
     r"^scale must be finite and > 0; scale is 1e\+300, which overflows float32 \(largest finite value "
     r"3.4028235e\+38\)$"),
    (lambda: nbquant.quantize(X, [0.5, 1e-50], "int8", axis=0, **R), ValueError,
     r"^scale must be finite and > 0; scale\[1\] is 1e-50, which is 0 in float32 \(smallest subnormal 1.4e-45\)$"),
    (lambda: nbquant.quantize(X, 0.5, "int8", zero_point=300, **R), ValueError,
     r"^zero_point must be within the int8 range \[-128, 127\]; zero_point is 300$"),
    (lambda: nbquant.quantize(X, TWO, "int8", axis=0, zero_point=[1, 2.5], **R), ValueError,
     r"^zero_point must be integers .*; zero_point\[1\] is 2.5$"),
    (lambda: nbquant.quantize(X, 0.5, "int8", zero_point=127.00001, **R), ValueError,  # 127.0 in float32
     r"^zero_point must be integers .*; zero_point is 127.00001$"),
    (lambda: nbquant.quantize(X, True, "int8", **R), TypeError,
     r"^scale has dtype bool: scale=True is a bool, not a number; use a float"),
    (lambda: nbquant.quantize(X, np.array([True, True]), "int8", axis=0, **R), TypeError,
     r"^scale has dtype bool: scale=array\(\[ True,  True\]\) is a bool"),
    (lambda: nbquant.quantize(X, [0.5, True], "int8", axis=0, **R), TypeError,
     r"^scale=\[0.5, True\] holds a bool, not a number: scale\[1\] is True"),
    (lambda: nbquant.quantize(X, "0.1", "int8", **R), TypeError, r"^scale has dtype <U3: scale='0.1' is not a real"),
    (lambda: nbquant.quantize(X, 0.5, "int8", quant_min=-3.7, **R), TypeError,
     r"^quant_min=-3.7 must be an integer \(or an integral float such as 3.0\)$"),
    (lambda: torchao.quantize_affine(X, (2, 32), 0.5, 0, "int8", quant_min=-3.7), TypeError, r"^quant_min=-3.7 "),
    (lambda: nbquant.quantize(X, 0.5, "int8", axis=np.True_, **R), TypeError,
     r"^axis=np.True_ must be an integer or None, not a bool$"),
    (lambda: nbquant.dequantize_nvfp4(NV.data, NV.scales, None, **R), TypeError, r"^global_scale has dtype object"),
    (lambda: nbquant.dequantize_nvfp4(NV.data, NV.scales, np.nan, **R), ValueError,
     r"^global_scale=nan must be finite and > 0$"),
    (lambda: nbquant.dequantize_nvfp4(NV.data, NV.scales, -0.5, **R), ValueError, r"^global_scale=-0.5 must be"),
    (lambda: nbquant.dequantize_nvfp4(NV.data, NV.scales, 1e-50, **R), ValueError,
     r"^global_scale=1e-50 must be finite and > 0; 1e-50 is 0 in float32"),
    (lambda: nbquant.choose_qparams(X, "int8", eps=1e300, **R), ValueError,
     r"^eps=1e\+300 must be finite and > 0; 1e\+300 overflows float32"),
    (lambda: tripy.quantize(X.astype(np.float16), 1e5, "int8"), ValueError,
     r"^scale must be finite and > 0; scale is 100000.0, which overflows float16 \(largest finite value 65504\)$"),
    (lambda: nbquant.modelopt.fake_affine_tensor_quant(X, 0, 1e-44, **R), ValueError,
     r"^min_range=0, max_range=1e-44, num_bits=8: the step \(max_range - min_range\) / \(2\*\*8 - 1\) = 3.85e-47 "
     r"underflows to 0 in float32, so the output would be NaN or inf; use max_range - min_range >= 3.57e-43$"),
    (lambda: nbquant.modelopt.fake_affine_tensor_quant(X, -3e38, 3e38, **R), ValueError,
     r"^min_range=-3e\+38, max_range=3e\+38, num_bits=8: max_range - min_range overflows float32"),
    (lambda: nbquant.modelopt.fake_affine_tensor_quant(X, 0.0, 3.4028235e38, num_bits=16, **R), ValueError,
     r"num_bits=16: the highest output level \(q \+ zero point\) \* step overflows float32"),
    (lambda: nbquant.modelopt.fake_affine_tensor_quant(X, 1.0, 1.0000000001, **R), ValueError,
     r"^min_range=1.0 must be below max_range=1.0000000001 \(they are equal in float32\)$"),
    (lambda: nbquant.modelopt.fake_affine_tensor_quant_backward(X, X, 2.0, 1.0, **R), ValueError,
     r"^min_range=2.0 must be below max_range=1.0$"),
    (lambda: nbquant.modelopt.fake_affine_tensor_quant(X, 0.0, 1.0, 8.5, **R), TypeError,
     r"^num_bits=8.5 must be an integer$"),
    (lambda: nbquant.modelopt.fake_tensor_quant(X, 1e300, **R), ValueError,
     r"^amax must be within float32's range .*; amax is 1e\+300, which overflows float32"),
])
def test_message(call, exc, message):
    with pytest.raises(exc, match=message):
        call()


def test_integral_floats_are_accepted_for_integer_ranges():
    """``3.0`` may stand for 3 (quant_min/quant_max, scaled_e4m3's E and M); ``-3.7`` may not (above)."""
    assert nbquant.quantize(np.array([-9.0, 9.0], np.float32), 1.0, "int8", quant_min=-3.0, quant_max=np.float32(4),
                            **R).tolist() == [-3, 4]
    q = torchao.quantize_affine(np.array([[-9.0, 9.0]], np.float32), (1, 2), 1.0, 0, "int8", quant_min=-3.0,
                                quant_max=4.0)
    assert q.tolist() == [[-3, 4]]
    np.testing.assert_array_equal(nbquant.modelopt.scaled_e4m3(X, 1.0, E=4.0, M=3.0, **R),
                                  nbquant.modelopt.scaled_e4m3(X, 1.0, **R))


def _affine_outputs(lo, hi, n, x):
    """FakeAffine in NumPy float32 as docs/dynamic.md writes it (no nbquant code)."""
    lo, hi = np.float32(lo), np.float32(hi)
    with np.errstate(all="ignore"):
        step = np.float32((hi - lo) / np.float32(2 ** n - 1))
        qz = np.float32(np.rint(lo / step) + np.float32(2 ** (n - 1)))
        q = np.clip(np.rint(x / step) - qz, -(2 ** (n - 1)), 2 ** (n - 1) - 1).astype(np.float32)
        return (q + qz) * step


@pytest.mark.parametrize("n", [2, 8, 16])
def test_fake_affine_refuses_exactly_the_ranges_whose_output_is_not_finite(n):
    """A range is refused iff some finite input (or ±inf) would give NaN or inf; a subnormal step is fine."""
    f32 = np.finfo(np.float32)
    x = np.array([-f32.max, -1e30, -1.0, -1e-40, 0.0, 1e-45, 1.0, 1e30, f32.max, np.inf, -np.inf], np.float32)
    edges = [0.0, 1e-45, 3e-45, 1e-44, 1e-43, 1e-41, 1e-39, 1e-37, 1e-30, 1.0, 1e37, 1.7e38, 3e38, float(f32.max)]
    refused = accepted = 0
    for a in edges:
        for b in edges:
            for lo, hi in ((-a, b), (a, b), (-a, -b)):
                if not np.float32(lo) < np.float32(hi):
                    continue
                finite = np.isfinite(_affine_outputs(lo, hi, n, x)).all()
                try:
                    got = nbquant.modelopt.fake_affine_tensor_quant(x, lo, hi, n, **R)
                except ValueError:
                    refused += 1
                    assert not finite, (lo, hi)
                else:
                    accepted += 1
                    assert finite and np.isfinite(got).all(), (lo, hi)
                    np.testing.assert_array_equal(got, _affine_outputs(lo, hi, n, x))
    assert refused and accepted


def test_nvfp4_container_decodes_its_own_zero_global_scale():
    """Data whose amax / 2688 underflows gets global scale 0 from quantize_nvfp4: .dequantize() decodes it (zeros),
    dequantize_nvfp4 refuses 0 as an argument."""
    bq = nbquant.quantize_nvfp4(np.full(16, 1e-44, np.float32), **R)
    assert bq.global_scale == 0
    assert (bq.dequantize(backend="reference") == 0).all()
    with pytest.raises(ValueError, match=r"^global_scale=np.float32\(0.0\) must be finite and > 0$"):
        nbquant.dequantize_nvfp4(bq.data, bq.scales, bq.global_scale, **R)
