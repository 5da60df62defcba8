"""Shared parameters and inputs of the nbquant asv suite (no benchmarks here).

Sizes: ``NBQUANT_ASV_QUICK=1`` (CI smoke runs, not for timing) selects only 2^10
elements, the first two schemes of each class and only the backends usable here;
otherwise 2^20 and 2^24, plus 2^26 with ``NBQUANT_ASV_LARGE=1`` (2^26 times the same
memory-bound regime as 2^24 at four times the set-up cost, so a regression run leaves
it out; ``NBQUANT_ASV_LARGE=auto`` adds it when 8 GiB of memory are available).

Backends are an asv parameter: ``cpu``, ``reference`` and ``cuda``. A backend that
:func:`nbquant.backends` reports as unavailable (or does not list) makes ``setup``
raise ``NotImplementedError``, which asv records as skipped (``n/a``); so does the
``reference`` backend (vectorized NumPy, 10-50 ms at 2^20) above
:data:`REFERENCE_MAX_N` elements. CUDA inputs live on the device and every timed
CUDA call synchronises before returning.

Schemes are named ``<format>_<granularity>[_packed]``: the format is one of
:data:`FORMAT_NAMES` (``int8``, ``fp8_e4m3``, ...), the granularity ``per_tensor``,
``per_channel_axis0`` (a scale per row), ``per_channel_axis1`` (a scale per column)
or ``gN`` (groups of N along the last axis); :func:`parse_scheme` reads them.
"""

from __future__ import annotations

import os

import numpy as np

import nbquant

QUICK = os.environ.get("NBQUANT_ASV_QUICK", "0") == "1"
COLUMNS = 4096
_GIB = 1 << 30
#: Largest size the ``reference`` backend is timed at (larger sizes are skipped).
REFERENCE_MAX_N = 1 << 20


def _available_memory() -> int:
    """Bytes of available memory (``MemAvailable``), or 0 when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def sizes() -> list[int]:
    """Element counts to benchmark (see the module docstring)."""
    if QUICK:
        return [1 << 10]
    large = os.environ.get("NBQUANT_ASV_LARGE", "0")
    want_large = _available_memory() >= 8 * _GIB if large == "auto" else large == "1"
    return [1 << 20, 1 << 24] + ([1 << 26] if want_large else [])


def _usable(name: str) -> bool:
    return any(b.name == name and b.available for b in nbquant.backends())


def schemes(names: list[str]) -> list[str]:
    """A class's scheme list, cut to its first two in quick mode."""
    return names[:2] if QUICK else names


SIZES = sizes()
#: Backends; cuda stays a parameter (skipped in ``setup``) unless in quick mode.
BACKENDS = [b for b in ("cpu", "reference", "cuda") if not QUICK or _usable(b)]

#: Short scheme names of the element formats -> nbquant's format names.
FORMAT_NAMES = {
    "int8": "int8",
    "uint8": "uint8",
    "int4": "int4",
    "uint4": "uint4",
    "int2": "int2",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "fp6_e2m3": "float6_e2m3fn",
    "fp6_e3m2": "float6_e3m2fn",
    "fp4_e2m1": "float4_e2m1fn",
}
#: Scheme granularity names -> the granularity tokens of :func:`layout_kwargs`.
GRANULARITIES = {
    "per_tensor": "tensor",
    "per_channel_axis0": "axis0",
    "per_channel_axis1": "axis1",
    "g16": "g16",
    "g32": "g32",
    "g128": "g128",
}


def parse_scheme(name: str) -> tuple[str, str, bool]:
    """``(nbquant dtype, granularity token, packed)`` of a scheme name.

    >>> parse_scheme("int4_g32_packed")
    ('int4', 'g32', True)
    >>> parse_scheme("fp8_e4m3_per_channel_axis1")
    ('float8_e4m3fn', 'axis1', False)
    """
    packed = name.endswith("_packed")
    base = name.removesuffix("_packed")
    for short, dtype in FORMAT_NAMES.items():
        gran = base.removeprefix(short + "_")
        if gran != base and gran in GRANULARITIES:
            return dtype, GRANULARITIES[gran], packed
    raise ValueError(f"unknown scheme {name!r}")


def scheme_names(formats: list[str], granularities: list[str], packed: bool = False) -> list[str]:
    """Every ``<format>_<granularity>[_packed]`` of the given formats and granularities."""
    suffix = "_packed" if packed else ""
    return [f"{f}_{g}{suffix}" for f in formats for g in granularities]


def ordered(*groups: list[str]) -> list[str]:
    """The concatenation of scheme lists without repeats, first occurrence kept (quick mode runs the first two)."""
    return list(dict.fromkeys(n for g in groups for n in g))


def require_backend(name: str) -> None:
    """Raise ``NotImplementedError`` (asv: skip) when backend ``name`` cannot run here."""
    info = {b.name: b for b in nbquant.backends()}
    if name not in info:
        raise NotImplementedError(f"nbquant has no {name} backend")
    if not info[name].available:
        raise NotImplementedError(f"backend {name} unavailable: {info[name].reason}")


def shape(n: int) -> tuple[int, int]:
    """2-D shape of ``n`` elements with rows of :data:`COLUMNS` (fewer for tiny sizes)."""
    cols = min(COLUMNS, n)
    return n // cols, cols


def layout_kwargs(granularity: str, shp: tuple[int, int]) -> tuple[dict, tuple[int, int]]:
    """nbquant keywords (``axis`` / ``block_size``) and the scale block of a granularity."""
    r, c = shp
    if granularity == "tensor":
        return {}, (r, c)
    if granularity == "axis0":
        return {"axis": 0}, (1, c)
    if granularity == "axis1":
        return {"axis": 1}, (r, 1)
    g = min(int(granularity[1:]), c)
    return {"block_size": (1, g)}, (1, g)


def qparams(dtype: str) -> tuple[float, float]:
    """``(zero_point, largest code - zero_point)`` for symmetric scales (unsigned: mid zero point)."""
    fmt = nbquant.get_format(dtype)
    if getattr(fmt, "is_float", False):
        return 0.0, float(fmt.max_value)
    if fmt.signed:
        return 0.0, float(fmt.qmax)
    mid = float((fmt.qmax + 1) // 2)
    return mid, float(fmt.qmax) - mid


class Problem:
    """Inputs of one static scheme: ``x``, absmax ``scale``, ``zero_point`` and the keywords.

    ``x`` is a standard-normal matrix of ``n`` elements (:func:`shape`), or the given ``x``.
    """

    def __init__(self, scheme: str, n: int = 0, seed: int = 0, x: np.ndarray | None = None):
        dtype, granularity, packed = parse_scheme(scheme)
        self.dtype, self.packed = dtype, packed
        self.x = np.random.default_rng(seed).standard_normal(shape(n), dtype=np.float32) if x is None else x
        self.layout, (br, bc) = layout_kwargs(granularity, self.x.shape)
        r, c = self.x.shape
        amax = np.abs(self.x).reshape(r // br, br, c // bc, bc).max(axis=(1, 3))
        zp, span = qparams(dtype)
        self.scale = np.maximum(amax / np.float32(span), np.float32(1e-8)).astype(np.float32)
        self.zero_point = np.full_like(self.scale, zp) if zp else None

    @property
    def qkwargs(self) -> dict:
        """Keywords of :func:`nbquant.quantize` (besides ``x``, ``scale``, ``dtype``)."""
        return dict(self.layout, zero_point=self.zero_point, packed=self.packed)

    @property
    def dqkwargs(self) -> dict:
        """Keywords of :func:`nbquant.dequantize` (besides ``q`` and ``scale``)."""
        return dict(self.layout, zero_point=self.zero_point, dtype=self.dtype if self.packed else None)

    def codes(self) -> np.ndarray:
        """The quantized codes of ``x`` (on the CPU)."""
        return nbquant.quantize(self.x, self.scale, self.dtype, **self.qkwargs, backend="cpu")


def heavy_tailed(rows: int = 256, cols: int = 1024, seed: int = 1234) -> np.ndarray:
    """A fixed heavy-tailed float32 matrix for the numerics tracks (same bits on every run and commit).

    Student-t with 4 degrees of freedom (the tails of LLM weights), with 8 outlier
    columns scaled by 20 (the outlier channels of activations): per-tensor scales lose
    to the outliers, small blocks and float formats keep them.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_t(4, (rows, cols))
    x[:, rng.choice(cols, 8, replace=False)] *= 20
    return x.astype(np.float32)


def sqnr_db(x: np.ndarray, y: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio ``10 log10(sum x^2 / sum (x - y)^2)`` in dB."""
    x = np.asarray(x, np.float64)
    noise = np.sum((x - np.asarray(y, np.float64)) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(x * x) / noise))


class Device:
    """Moves arrays to the backend's device and synchronises after timed calls.

    Raises ``NotImplementedError`` (asv: skip) when the backend cannot run here, or when
    it is ``reference`` and ``n`` exceeds :data:`REFERENCE_MAX_N`.
    """

    def __init__(self, backend: str, n: int = 0):
        require_backend(backend)
        if backend == "reference" and n > REFERENCE_MAX_N:
            raise NotImplementedError(f"reference backend timed up to {REFERENCE_MAX_N} elements only")
        self.backend = backend
        self._cuda = None
        if backend == "cuda":
            from numba import cuda

            self._cuda = cuda

    def put(self, a: np.ndarray):
        """The array on this backend's device (unchanged on the CPU)."""
        return self._cuda.to_device(a) if self._cuda is not None else a

    def get(self, a) -> np.ndarray:
        """A host copy of a result."""
        return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)

    def sync(self) -> None:
        """Wait for queued device work (no-op on the CPU)."""
        if self._cuda is not None:
            self._cuda.synchronize()
