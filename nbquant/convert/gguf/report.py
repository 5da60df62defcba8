"""The per-tensor report of ``nbquant convert`` on a GGUF file: type chosen, why, SQNR; a table and JSON.

Examples
--------
>>> r = GGUFReport("Q4_K_M", "in.gguf", "out.gguf", "llama")
>>> r.tensors.append(GGUFTensor("output.weight", (1000, 256), "BF16", "Q6_K", "output gets Q6_K", 30.1, 512000, 210000))
>>> print(format_gguf_table(r).splitlines()[1])
output.weight  1000x256  BF16  Q6_K  30.10  output gets Q6_K
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["GGUFTensor", "GGUFReport", "format_gguf_table", "gguf_summary"]


@dataclass
class GGUFTensor:
    """One tensor of the output: NumPy-order shape, source and target types, the reason, SQNR (dB; NaN when copied)."""

    name: str
    shape: tuple[int, ...]
    source: str
    target: str
    reason: str
    sqnr_db: float
    bytes_in: int
    bytes_out: int


@dataclass
class GGUFReport:
    """A GGUF conversion: scheme, paths, architecture, tensors in output order, notes, totals and time."""

    scheme: str
    src: str
    dst: str
    arch: str
    tensors: list[GGUFTensor] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def bytes_in(self) -> int:
        """Source tensor bytes."""
        return sum(t.bytes_in for t in self.tensors)

    @property
    def bytes_out(self) -> int:
        """Output tensor bytes (without padding)."""
        return sum(t.bytes_out for t in self.tensors)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (non-finite SQNR as null)."""
        def tensor(t: GGUFTensor) -> dict[str, Any]:
            d = asdict(t)
            d["shape"] = list(t.shape)
            d["sqnr_db"] = t.sqnr_db if math.isfinite(t.sqnr_db) else None
            return d
        return {"scheme": self.scheme, "src": self.src, "dst": self.dst, "architecture": self.arch,
                "notes": self.notes, "seconds": self.seconds, "bytes_in": self.bytes_in,
                "bytes_out": self.bytes_out, "tensors": [tensor(t) for t in self.tensors]}

    def write(self, path: str) -> None:
        """Write :meth:`to_json` to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=1)
            f.write("\n")


def format_gguf_table(report: GGUFReport) -> str:
    """The end table: one row a tensor (name, shape, source and target types, SQNR, why), then the totals."""
    rows = [("tensor", "shape", "from", "to", "SQNR dB", "why")]
    for t in report.tensors:
        sqnr = "-" if math.isnan(t.sqnr_db) else "inf" if math.isinf(t.sqnr_db) else f"{t.sqnr_db:.2f}"
        rows.append((t.name, "x".join(map(str, t.shape)), t.source, t.target, sqnr, t.reason))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5] for r in rows]
    changed = sum(t.source != t.target for t in report.tensors)
    lines.append(f"{changed} converted, {len(report.tensors) - changed} copied; {report.bytes_in / 2**20:.1f} MiB -> "
                 f"{report.bytes_out / 2**20:.1f} MiB in {report.seconds:.2f} s")
    return "\n".join(lines)


def gguf_summary(report: GGUFReport) -> list[str]:
    """The demo's lines on a GGUF conversion: one a target type (tensors, bytes, SQNR range, why), then the sizes.

    Parameters
    ----------
    report : GGUFReport
        A conversion's report (:func:`nbquant.demo.gguf_step` prints these lines).

    Returns
    -------
    list of str
        One line per target type in first-seen order, then ``"size: ..."``.

    Examples
    --------
    >>> r = GGUFReport("Q8_0", "a.gguf", "b.gguf", "llama")
    >>> r.tensors += [GGUFTensor("output.weight", (64, 256), "BF16", "Q8_0", "output of Q8_0", 40.0, 32768, 17408),
    ...               GGUFTensor("output_norm.weight", (256,), "F32", "F32", "copied (kept: 1-D)", math.nan, 1024,
    ...                          1024)]
    >>> print("\\n".join(gguf_summary(r)))
    Q8_0   1 tensor(s)   0.02 MiB  SQNR 40.00 dB  output of Q8_0
    F32    1 tensor(s)   0.00 MiB  copied (kept: 1-D)
    size: 0.03 MiB -> 0.02 MiB (0.55x, 8.50 bits a weight in the converted tensors)
    """
    groups: dict[str, list] = {}
    for t in report.tensors:
        groups.setdefault(t.target, []).append(t)
    width = max(map(len, groups), default=0)
    lines = []
    for target, tensors in groups.items():
        sqnr = [t.sqnr_db for t in tensors if not math.isnan(t.sqnr_db)]
        reasons = ", ".join(dict.fromkeys(t.reason for t in tensors))
        span = "" if not sqnr else (f"  SQNR {min(sqnr):.2f} dB" if min(sqnr) == max(sqnr)
                                    else f"  SQNR {min(sqnr):.2f}..{max(sqnr):.2f} dB")
        size = sum(t.bytes_out for t in tensors) / 2**20
        lines.append(f"{target.ljust(width)}  {len(tensors):2d} tensor(s)  {size:5.2f} MiB{span}  {reasons}")
    converted = [t for t in report.tensors if t.source != t.target]
    values = sum(math.prod(t.shape) for t in converted)
    bits = 8 * sum(t.bytes_out for t in converted) / values if values else math.nan
    ratio = report.bytes_out / report.bytes_in if report.bytes_in else math.nan
    lines.append(f"size: {report.bytes_in / 2**20:.2f} MiB -> {report.bytes_out / 2**20:.2f} MiB ({ratio:.2f}x, "
                 f"{bits:.2f} bits a weight in the converted tensors)")
    return lines
