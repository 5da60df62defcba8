"""Shared parameters and inputs of the nbquant asv suite (no benchmarks here).

Sizes: ``NBQUANT_ASV_QUICK=1`` (CI smoke runs, not for timing) selects only 2^10
elements, the first two schemes of each class and only the backends usable here;
otherwise 2^20 and 2^24, plus 2^26 when at least 8 GiB of memory is available
(``NBQUANT_ASV_LARGE=0`` drops it, ``=1`` forces it).

Backends are an asv parameter: ``cpu`` and ``cuda``. A backend that
:func:`nbquant.backends` reports as unavailable (or does not list) makes ``setup``
raise ``NotImplementedError``, which asv records as skipped. CUDA inputs live on the
device and every timed CUDA call synchronises before returning.
"""

from __future__ import annotations

import os

import numpy as np

import nbquant

QUICK = os.environ.get("NBQUANT_ASV_QUICK", "0") == "1"
COLUMNS = 4096
_GIB = 1 << 30


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
    large = os.environ.get("NBQUANT_ASV_LARGE")
    want_large = _available_memory() >= 8 * _GIB if large is None else large == "1"
    return [1 << 20, 1 << 24] + ([1 << 26] if want_large else [])


def _usable(name: str) -> bool:
    return any(b.name == name and b.available for b in nbquant.backends())


def schemes(names: list[str]) -> list[str]:
    """A class's scheme list, cut to its first two in quick mode."""
    return names[:2] if QUICK else names


SIZES = sizes()
#: Compiled backends; cuda stays a parameter (skipped in ``setup``) unless in quick mode.
BACKENDS = [b for b in ("cpu", "cuda") if not QUICK or _usable(b)]

#: Static schemes: name -> (dtype, granularity, packed). Granularity is "tensor",
#: "axis0", "axis1" or "gN" (groups of N along the last axis).
SCHEMES = {
    "int8_per_tensor": ("int8", "tensor", False),
    "int8_per_channel_axis0": ("int8", "axis0", False),
    "int8_per_channel_axis1": ("int8", "axis1", False),
    "uint8_per_tensor": ("uint8", "tensor", False),
    "int4_g32_packed": ("int4", "g32", True),
    "int4_g128_packed": ("int4", "g128", True),
    "uint4_g32_packed": ("uint4", "g32", True),
    "int4_g32": ("int4", "g32", False),
    "fp8_e4m3_per_tensor": ("float8_e4m3fn", "tensor", False),
    "fp8_e4m3_per_channel_axis0": ("float8_e4m3fn", "axis0", False),
    "fp8_e5m2_per_tensor": ("float8_e5m2", "tensor", False),
    "fp4_e2m1_g32_packed": ("float4_e2m1fn", "g32", True),
}


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
    """Inputs of one static scheme at one size: ``x``, ``scale``, ``zero_point`` and the keywords."""

    def __init__(self, scheme: str, n: int, seed: int = 0):
        dtype, granularity, packed = SCHEMES[scheme]
        self.dtype, self.packed = dtype, packed
        self.x = np.random.default_rng(seed).standard_normal(shape(n), dtype=np.float32)
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


def sqnr_db(x: np.ndarray, y: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio ``10 log10(sum x^2 / sum (x - y)^2)`` in dB."""
    x = np.asarray(x, np.float64)
    noise = np.sum((x - np.asarray(y, np.float64)) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(x * x) / noise))


class Device:
    """Moves arrays to the backend's device and synchronises after timed calls."""

    def __init__(self, backend: str):
        require_backend(backend)
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
