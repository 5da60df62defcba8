"""The calls the dask tests make (tests/test_dask.py, tests/test_dask_distributed.py), each on NumPy and on dask.

Every case is a function of the input alone, so the same function gives the NumPy result
(on the computed array) and the lazy dask one; :func:`check` compares them bit for bit.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _helpers import assert_same_bits

import nbquant

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")

SHAPE = (12, 96)
#: Chunkings of :data:`SHAPE`: on block boundaries, and off every one (rechunked to the nearest aligned ones).
CHUNKS = {"aligned": (4, 32), "misaligned": (5, 23)}


def _data(special: bool) -> np.ndarray:
    rng = np.random.default_rng(18)
    x = (rng.standard_normal(SHAPE) * np.geomspace(0.01, 100, SHAPE[0])[:, None]).astype(np.float32)
    x[3, 7] = 0.0
    x[8, :32] = 0.0  # an all-zero block
    if special:
        x[1, 40], x[6, 5], x[10, 90], x[2, 3] = np.nan, np.inf, -np.inf, -0.0
    return x


X = _data(False)
#: :data:`X` with NaN, +inf, -inf and -0.0 in different chunks.
SPECIAL = _data(True)
#: :data:`X` with one NaN: where several chunks are refused, the error names the one that failed first.
ONE_NAN = X.copy()
ONE_NAN[9, 70] = np.nan

_rows = np.abs(X).max(axis=1) / 7 + 1e-3
_cols = np.abs(X).max(axis=0) / 100 + 1e-3
_g32 = nbquant.choose_qparams(X, "int4", axis=1, block_size=32)[0]
_b40 = nbquant.choose_qparams(X, "int4", axis=1, block_size=40)[0]
_tiles = nbquant.choose_qparams(X, "uint4", block_size=(4, 16), mapping="asymmetric")
_zp_cols = (np.arange(96) % 200).astype(np.int32)
_zp_b40 = (np.arange(_b40.size) % 15 - 7).reshape(_b40.shape)


def _qdq_g32(x):
    x = np.clip(np.nan_to_num(x), -1e3, 1e3)  # dequantize refuses the NaN and inf scales of NaN and inf blocks
    q, s, zp = nbquant.quantize_dynamic(x, "int4", block_size=(1, 32), packed=True)
    return nbquant.dequantize(q, s, zero_point=zp, block_size=(1, 32))


def _mx_roundtrip(x):
    bq = nbquant.quantize_mx(x, "mxfp6_e3m2", axis=0, block_size=4)
    return nbquant.dequantize_mx(bq.data, bq.scales, "mxfp6_e3m2", axis=0, block_size=4, out_dtype=ml_dtypes.bfloat16)


def _nvfp4_roundtrip(x):
    bq = nbquant.quantize_nvfp4(x)
    return nbquant.dequantize_nvfp4(bq.data, bq.scales, bq.global_scale, out_dtype=np.float16)


def _max_calibrator(x):
    calibrator = nbquant.modelopt.MaxCalibrator(axis=1)
    calibrator.collect(x)
    calibrator.collect(x * 2)
    return calibrator.compute_amax()


def _histogram_calibrator(x):
    calibrator = nbquant.modelopt.HistogramCalibrator(num_bins=64, skip_zeros=True)
    calibrator.collect(x)
    calibrator.collect(x * 30)
    return calibrator.histogram, calibrator.bin_edges


#: Lazy calls: they return dask arrays (containers of them) for a dask input.
LAZY = {
    "quantize int8 per-tensor": lambda x: nbquant.quantize(x, 0.02, "int8"),
    "quantize int4 per-row packed": lambda x: nbquant.quantize(x, _rows, "int4", axis=0, packed=True),
    "quantize uint8 per-column, zero point": lambda x: nbquant.quantize(x, _cols, "uint8", axis=1, zero_point=_zp_cols),
    "quantize int4 ONNX blocks of 40 (partial last)": lambda x: nbquant.quantize(x, _b40, "int4", axis=1, block_size=40,
                                                                                zero_point=_zp_b40),
    "quantize uint4 2-D tiles packed": lambda x: nbquant.quantize(x, _tiles[0], "uint4", block_size=(4, 16),
                                                                  zero_point=_tiles[1], packed=True),
    "quantize fp8 bfloat16 reciprocal": lambda x: nbquant.quantize(x.astype(ml_dtypes.bfloat16), 0.01, "float8_e4m3fn",
                                                                   scale_op="reciprocal", compute_dtype="bfloat16"),
    "quantize fp4 packed per-row": lambda x: nbquant.quantize(x, _rows, "float4_e2m1fn", axis=0, packed=True),
    "dequantize int8 per-column, zero point": lambda x: nbquant.dequantize(
        nbquant.quantize(x, _cols, "uint8", axis=1, zero_point=_zp_cols), _cols, axis=1, zero_point=_zp_cols),
    "dequantize int4 g32 packed, dask qparams": _qdq_g32,
    "choose_qparams per-tensor asymmetric": lambda x: nbquant.choose_qparams(x, "uint8", mapping="asymmetric"),
    "choose_qparams per-channel across chunks": lambda x: nbquant.choose_qparams(x, "int8", axis=0),
    "quantize_dynamic per-tensor int8": lambda x: nbquant.quantize_dynamic(x, "int8"),
    "quantize_dynamic per-row uint4 asymmetric packed": lambda x: nbquant.quantize_dynamic(
        x, "uint4", block_size=(1, 96), mapping="asymmetric", packed=True),
    "quantize_dynamic int4 g32 packed": lambda x: nbquant.quantize_dynamic(x, "int4", axis=1, block_size=32,
                                                                           packed=True),
    "quantize_dynamic modelopt per-column": lambda x: nbquant.quantize_dynamic(x, "int8", axis=1, mapping="modelopt"),
    "quantize_dynamic ONNX blocks along axis 0": lambda x: nbquant.quantize_dynamic(
        x, "int2", axis=0, block_size=4, mapping="symmetric_no_clipping_err", scale_op="divide"),
    "quantize_dynamic per-tensor asymmetric, reference backend": lambda x: nbquant.quantize_dynamic(
        x, "uint8", mapping="asymmetric", backend="reference"),
    "choose_qparams per-column, reference backend": lambda x: nbquant.choose_qparams(x, "int4", axis=1,
                                                                                     backend="reference"),
    "quantize_dynamic float16 2-D tiles": lambda x: nbquant.quantize_dynamic(x.astype(np.float16), "uint8",
                                                                             block_size=(3, 32), mapping="asymmetric"),
    "quantize_mx mxfp4": lambda x: nbquant.quantize_mx(x, "mxfp4"),
    "quantize_mx mxint8 axis 0 ceil": lambda x: nbquant.quantize_mx(x, "mxint8", axis=0, block_size=4,
                                                                    scale_rounding="ceil"),
    "dequantize_mx mxfp6 axis 0": _mx_roundtrip,
    "BlockQuantized.dequantize mxfp8": lambda x: nbquant.quantize_mx(x, "mxfp8_e5m2", block_size=16).dequantize(),
    "quantize_nvfp4 explicit global scale, axis 0": lambda x: nbquant.quantize_nvfp4(x, global_scale=0.01, axis=0,
                                                                                     block_size=4),
}
#: Lazy calls that refuse NaN and inf (at compute time, as the NumPy call does at call time).
FINITE_LAZY = {
    "quantize_nvfp4 global amax": lambda x: nbquant.quantize_nvfp4(x),
    "dequantize_nvfp4": _nvfp4_roundtrip,
    "BlockQuantized.dequantize nvfp4": lambda x: nbquant.quantize_nvfp4(x, block_size=32).dequantize(),
    "quantize_nf4": lambda x: nbquant.quantize_nf4(x, block_size=32),
    "quantize_nf4 double quantized": lambda x: nbquant.quantize_nf4(x, block_size=16, scale_block_size=6),
    "NF4Quantized.dequantize double quantized": lambda x: nbquant.quantize_nf4(
        x, block_size=8, scale_block_size=4, scale_bits=4).dequantize(out_dtype=ml_dtypes.bfloat16),
}
#: Calls that compute (a calibrator folds each batch into its state), finite data only.
EAGER = {
    "MaxCalibrator per-channel": _max_calibrator,
    "HistogramCalibrator": _histogram_calibrator,
}


def arrays(result) -> list:
    """The arrays of a result: a tuple's items, a container's array fields, or the result itself."""
    if isinstance(result, tuple):
        return [a for r in result for a in arrays(r)]
    if isinstance(result, nbquant.BlockQuantized):
        return [result.data, result.scales, result.global_scale]
    if isinstance(result, nbquant.NF4Quantized):
        return [result.data, result.scales, result.double_scales, result.scale_mean]
    return [result]


def _host(a):
    """A computed array as the NumPy call returns its kind: NumPy scalars as 0-d arrays, None as None."""
    return None if a is None else np.asarray(a) if np.isscalar(a) or isinstance(a, np.generic) else a


def check(call, x: np.ndarray, chunks) -> None:
    """``call`` of a dask ``x`` (``chunks``) computes the bits of ``call`` of the NumPy ``x``; ``x`` stays as it was."""
    before = x.copy()
    expected = arrays(call(x))
    lazy = call(da.from_array(x, chunks=chunks))
    got = dask.compute(*arrays(lazy))
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        if e is None:
            assert g is None
        else:
            assert_same_bits(_host(g), _host(e))
    assert before.tobytes() == x.tobytes()


def check_error(call, x: np.ndarray, chunks) -> None:
    """``call`` raises the same error on a dask ``x`` (when computed) as on the NumPy ``x`` (when called)."""
    try:
        call(x)
    except Exception as exc:  # whatever the NumPy call raises
        expected = exc
    else:
        raise AssertionError("the NumPy call raised nothing")
    try:
        dask.compute(*arrays(call(da.from_array(x, chunks=chunks))))
    except Exception as exc:
        assert type(exc) is type(expected) and str(exc) == str(expected), (exc, expected)
    else:
        raise AssertionError(f"the dask call raised nothing; the NumPy call raised {expected!r}")
