"""The progress bar, the end table and the JSON report of ``nbquant convert``.

Examples
--------
>>> r = Report("W4A16", "src", "dst")
>>> r.quantized.append(TensorReport("a.weight", "W4A16", (8, 128), "BF16", 24.5, 0.01, 8))
>>> r.skipped.append({"name": "model.norm.weight", "reason": "module name ends with norm (automatic ignore)"})
>>> print(format_table(r).splitlines()[1])
a.weight  W4A16   8x128      24.50     0.01
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import IO, Any

__all__ = ["TensorReport", "Report", "Progress", "format_table", "sqnr_db"]


def sqnr_db(signal: float, noise: float) -> float:
    """``10 log10(signal / noise)`` (sums of squares); inf when the noise is 0.

    Examples
    --------
    >>> sqnr_db(100.0, 1.0), sqnr_db(1.0, 0.0)
    (20.0, inf)
    """
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 10 * math.log10(signal / noise)


@dataclass
class TensorReport:
    """One quantized weight: scheme, shape, dtype, and the accuracy of its dequantization on ``rows_checked`` rows."""

    name: str
    scheme: str
    shape: tuple[int, ...]
    dtype: str
    sqnr_db: float
    max_abs_err: float
    rows_checked: int
    encoding: str = ""
    """For a quantized source: ``exact`` (its codes and scales re-encoded unchanged), ``requantized`` (decoded,
    then quantized) or ``decoded`` (a BF16/F16/F32 target); empty for an unquantized one."""


@dataclass
class Report:
    """Everything a conversion did; :meth:`to_json` is the ``--report`` file.

    ``skipped`` lists each tensor kept as it is with its reason; ``notes`` the one-line remarks on
    the ``ignore`` patterns (one naming the head of a tied model).

    Examples
    --------
    >>> r = Report("W4A16", "src", "dst", bytes_in=10**6, seconds=0.5)
    >>> r.mb_per_s, r.to_json()["mb_per_s"]
    (2.0, 2.0)
    """

    scheme: str
    src: str
    dst: str
    quantized: list[TensorReport] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    shards: list[str] = field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    resumed_shards: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        """Source MB (10**6 bytes) per second of the whole conversion."""
        return self.bytes_in / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (non-finite SQNR as the strings ``"inf"``/``"-inf"``)."""
        def tensor(t: TensorReport) -> dict[str, Any]:
            d = asdict(t)
            d["shape"] = list(t.shape)
            d["sqnr_db"] = t.sqnr_db if math.isfinite(t.sqnr_db) else str(t.sqnr_db)
            if not t.encoding:
                del d["encoding"]
            return d
        return {"scheme": self.scheme, "src": self.src, "dst": self.dst, "shards": self.shards,
                "resumed_shards": self.resumed_shards, "quantized": [tensor(t) for t in self.quantized],
                "skipped": self.skipped, "notes": self.notes, "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
                "seconds": round(self.seconds, 4), "mb_per_s": round(self.mb_per_s, 2)}

    def write(self, path: str) -> None:
        """Write :meth:`to_json` to ``path`` (indented)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=2)
            f.write("\n")


def format_table(report: Report) -> str:
    """The end table: one line per quantized weight, then one line per reason tensors were kept (with the first two
    of them), then totals.

    Examples
    --------
    >>> r = Report("W4A16", "src", "dst", skipped=[{"name": f"l.{i}.mlp.gate.weight", "reason": "MoE router"}
    ...                                            for i in range(3)])
    >>> format_table(r).splitlines()[-1]
    'kept as they are: 3 tensor(s): MoE router: l.0.mlp.gate.weight, l.1.mlp.gate.weight and 1 more'
    """
    rows = [(t.name, f"{t.scheme} {t.encoding}".rstrip(), "x".join(map(str, t.shape)), f"{t.sqnr_db:.2f}",
             f"{t.max_abs_err:.4g}")
            for t in report.quantized]
    head = ("tensor", "scheme", "shape", "SQNR dB", "max abs err")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    lines = ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             .rstrip() for r in [head, *rows]]
    reasons: dict[str, list[str]] = {}
    for s in report.skipped:
        reasons.setdefault(s["reason"], []).append(s["name"])
    lines += [f"kept as they are: {len(names)} tensor(s): {why}: {', '.join(names[:2])}" +
              (f" and {len(names) - 2} more" if len(names) > 2 else "") for why, names in reasons.items()]
    if report.seconds:
        lines.append(f"{len(report.quantized)} quantized, {len(report.skipped)} kept, {len(report.shards)} shard(s); "
                     f"{report.bytes_in / 2**20:.1f} MiB -> {report.bytes_out / 2**20:.1f} MiB in "
                     f"{report.seconds:.2f} s ({report.mb_per_s:.1f} MB/s)")
    return "\n".join(lines)


class Progress:
    """A one-line progress bar on ``stream`` (stderr): tensors, MiB, rate and ETA; silent unless it is a TTY.

    Parameters
    ----------
    tensors, total_bytes : int
        The totals.
    enabled : bool, optional
        Default: ``stream.isatty()``.
    """

    def __init__(self, tensors: int, total_bytes: int, stream: IO[str] | None = None,
                 enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(self.stream.isatty()) if enabled is None else enabled
        self.tensors, self.total = tensors, max(total_bytes, 1)
        self.done_tensors = self.done_bytes = 0
        self.start = self.last = time.perf_counter()

    def line(self) -> str:
        """The current bar text."""
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        rate = self.done_bytes / elapsed
        eta = (self.total - self.done_bytes) / rate if rate > 0 else math.inf
        frac = min(self.done_bytes / self.total, 1.0)
        bar = "#" * int(frac * 24) + "." * (24 - int(frac * 24))
        eta_text = f"{eta:.0f}s" if math.isfinite(eta) else "?"
        return (f"[{bar}] {self.done_tensors}/{self.tensors} tensors  {self.done_bytes / 2**20:.0f}/"
                f"{self.total / 2**20:.0f} MiB  {rate / 2**20:.0f} MiB/s  ETA {eta_text}")

    def update(self, nbytes: int, tensors: int = 1) -> None:
        """Count ``tensors`` more tensors and ``nbytes`` more source bytes; redraw at most 10 times a second."""
        self.done_tensors += tensors
        self.done_bytes += nbytes
        now = time.perf_counter()
        if self.enabled and (now - self.last > 0.1 or self.done_tensors >= self.tensors):
            self.last = now
            self.stream.write("\r" + self.line())
            self.stream.flush()

    def close(self) -> None:
        """End the bar's line."""
        if self.enabled:
            self.stream.write("\r" + self.line() + "\n")
            self.stream.flush()
