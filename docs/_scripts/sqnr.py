"""The SQNR of every format and granularity on a weight-like matrix, computed with nbquant's reference backend.

The matrix is :func:`nbquant.demo.make_weights` (heavy-tailed Student-t values, row magnitudes spread 100x), a
modest 512 x 4096 so that the docs build stays quick. Each scheme is quantized and dequantized with the NumPy
``reference`` backend (the oracle every compiled backend matches bit for bit), and scored by
``10 log10(sum x^2 / sum (x - x_hat)^2)``.

- Integer formats take torchao's scales from :func:`nbquant.choose_qparams` (``mapping="symmetric"`` for the signed
  formats, ``"asymmetric"`` with a zero point for ``uint8``/``uint4``).
- Floating-point element formats take ``amax / max_value`` per group (what torchao, modelopt and TensorRT do for
  fp8), so each group's largest value lands on the format's largest.
- The block formats compute their own scales: OCP MX (E8M0 per 32), NVFP4 (E4M3 per 16 and a float32 global
  scale), NF4 (block 64, its scales double-quantized to int8 in groups of 256, QLoRA's recipe).

Bits per element count the codes plus their share of the scales: float32 scales (and a zero point of the element's
width) per group for the element formats, 8-bit scales per block for MX and NVFP4, NF4's int8 scales and its
float32 second-level scales.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import nbquant
from nbquant.demo import make_weights, sqnr_db

ROWS, COLS, SEED = 512, 4096, 0
BACKEND = "reference"
#: Granularity label -> keyword arguments of the element-format calls (``None``: per-tensor).
GRANULARITIES = {
    "per-tensor": {},
    "per-channel": {"axis": 0},
    "group 128": {"block_size": (1, 128)},
    "group 32": {"block_size": (1, 32)},
}
NATIVE = "own block"
#: Element formats: label, nbquant format name, scale source.
ELEMENT_FORMATS = [
    ("int8", "int8", "symmetric"),
    ("uint8 asym", "uint8", "asymmetric"),
    ("int4", "int4", "symmetric"),
    ("uint4 asym", "uint4", "asymmetric"),
    ("int2", "int2", "symmetric"),
    ("fp8 e4m3", "float8_e4m3fn", "amax"),
    ("fp8 e5m2", "float8_e5m2", "amax"),
    ("fp6 e2m3", "float6_e2m3fn", "amax"),
    ("fp6 e3m2", "float6_e3m2fn", "amax"),
    ("fp4 e2m1", "float4_e2m1fn", "amax"),
]
#: Block formats: label, kind, MX format name (or None), block, bits of each block's scale.
BLOCK_FORMATS = [
    ("mxint8", "mx", "mxint8", 32, 8),
    ("mxfp8 e4m3", "mx", "mxfp8_e4m3", 32, 8),
    ("mxfp8 e5m2", "mx", "mxfp8_e5m2", 32, 8),
    ("mxfp6 e2m3", "mx", "mxfp6_e2m3", 32, 8),
    ("mxfp6 e3m2", "mx", "mxfp6_e3m2", 32, 8),
    ("mxfp4", "mx", "mxfp4", 32, 8),
    ("nvfp4", "nvfp4", None, 16, 8),
    ("nf4", "nf4", None, 64, 8),
]
NF4_SCALE_BLOCK = 256


@dataclass(frozen=True)
class Result:
    """One scheme's score."""

    label: str
    granularity: str
    bits: float
    sqnr: float
    family: str


def _groups(granularity: str) -> int:
    """How many scales a granularity gives the matrix."""
    return {"per-tensor": 1, "per-channel": ROWS, "group 128": ROWS * COLS // 128,
            "group 32": ROWS * COLS // 32}[granularity]


def _amax(x: np.ndarray, kwargs: dict) -> np.ndarray:
    """``max |x|`` per group of a granularity (float32)."""
    a = np.abs(x)
    if "axis" in kwargs:
        return a.max(axis=1)
    if "block_size" in kwargs:
        return a.reshape(ROWS, -1, kwargs["block_size"][1]).max(axis=2)
    return a.max()


def element_round_trip(x: np.ndarray, fmt: str, source: str, kwargs: dict) -> np.ndarray:
    """``dequantize(quantize(x))`` of one element format and granularity, on the reference backend."""
    if source == "amax":
        scale = (_amax(x, kwargs) / np.float32(nbquant.get_format(fmt).max_value)).astype(np.float32)
        q = nbquant.quantize(x, scale, fmt, backend=BACKEND, **kwargs)
        return nbquant.dequantize(q, scale, backend=BACKEND, **kwargs)
    scale, zp = nbquant.choose_qparams(x, fmt, mapping=source, backend=BACKEND, **kwargs)
    zp = zp if source == "asymmetric" else None
    q = nbquant.quantize(x, scale, fmt, zero_point=zp, scale_op="reciprocal", backend=BACKEND, **kwargs)
    return nbquant.dequantize(q, scale, zero_point=zp, backend=BACKEND, **kwargs)


def block_round_trip(x: np.ndarray, kind: str, name: str | None, block: int) -> np.ndarray:
    """``dequantize(quantize(x))`` of one block format, on the reference backend."""
    if kind == "mx":
        return nbquant.quantize_mx(x, name, backend=BACKEND).dequantize(backend=BACKEND)
    if kind == "nvfp4":
        return nbquant.quantize_nvfp4(x, backend=BACKEND).dequantize(backend=BACKEND)
    nq = nbquant.quantize_nf4(x, block_size=block, scale_block_size=NF4_SCALE_BLOCK, backend=BACKEND)
    return nq.dequantize(backend=BACKEND)


def sqnr_results() -> list[Result]:
    """Score every element format at every granularity, then every block format at its own block."""
    x = make_weights(ROWS, COLS, seed=SEED)
    n = x.size
    results = []
    for label, fmt, source in ELEMENT_FORMATS:
        info = nbquant.get_format(fmt)
        per_group = 32 + (info.bits if source == "asymmetric" else 0)
        family = "integer" if not info.is_float else "float"
        for granularity, kwargs in GRANULARITIES.items():
            bits = info.bits + per_group * _groups(granularity) / n
            results.append(Result(label, granularity, bits, sqnr_db(x, element_round_trip(x, fmt, source, kwargs)),
                                  family))
    for label, kind, name, block, scale_bits in BLOCK_FORMATS:
        element_bits = 8 if name in ("mxint8", "mxfp8_e4m3", "mxfp8_e5m2") else 6 if name and "fp6" in name else 4
        bits = element_bits + scale_bits / block
        if kind == "nvfp4":
            bits += 32 / n
        if kind == "nf4":
            bits += 32 / (block * NF4_SCALE_BLOCK)
        results.append(Result(label, NATIVE, bits, sqnr_db(x, block_round_trip(x, kind, name, block)), kind))
    return results


def write_csv(results: list[Result], path) -> None:
    """The table of the "which scheme" page: one row per format, one column per granularity.

    Each cell is ``SQNR (bits per element)``; a blank cell is a granularity the format does not have.
    """
    columns = [*GRANULARITIES, NATIVE]
    cells: dict[str, dict[str, str]] = {}
    for r in results:
        cells.setdefault(r.label, {})[r.granularity] = f"{r.sqnr:.1f} dB ({r.bits:.2f} b)"
    lines = [",".join(["format", *columns])]
    lines += [",".join([label, *(row.get(c, "") for c in columns)]) for label, row in cells.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
