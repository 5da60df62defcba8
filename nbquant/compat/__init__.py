"""Front-ends that mirror other systems' quantize/dequantize calls on top of :mod:`nbquant`.

One module per system, each with that system's function names, argument names,
defaults, validation rules and numerics, implemented by calling
:func:`nbquant.quantize` / :func:`nbquant.dequantize` (no kernels of their own):

================================  =====================================================
module                            mirrors
================================  =====================================================
:mod:`nbquant.compat.tripy`       ``nvtripy.quantize`` / ``nvtripy.dequantize``
:mod:`nbquant.compat.tensorrt`    TensorRT ``IQuantizeLayer`` / ``IDequantizeLayer``
:mod:`nbquant.compat.pypto`       ``pypto.quantize`` / ``pypto.dequantize`` (Ascend)
:mod:`nbquant.compat.torchao`     ``torchao.quantization.quant_primitives`` (0.18)
:mod:`nbquant.compat.modelopt`    ``modelopt.torch.quantization.tensor_quant``
:mod:`nbquant.compat.onnx`        ONNX ``QuantizeLinear`` / ``DequantizeLinear`` /
                                  ``DynamicQuantizeLinear`` (opset 25)
================================  =====================================================

Arrays are NumPy arrays; dtypes may be given as strings (``"int8"``,
``"torch.uint4"``), numpy/ml_dtypes dtypes, or the foreign dtype objects whose
``str()`` names them (``torch.int8``). None of the original packages is imported.

Examples
--------
>>> import numpy as np
>>> from nbquant.compat import pypto
>>> x = np.array([[1.1, -2.2, 3.3, -4.4]], np.float32)
>>> pypto.quantize(x, np.array([1.0], np.float32), "DT_INT8", -1)
array([[ 1, -2,  3, -4]], dtype=int8)
"""

__all__ = ["modelopt", "onnx", "pypto", "tensorrt", "torchao", "tripy"]
