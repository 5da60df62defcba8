"""Draw the documentation's figures (matplotlib, Agg, deterministic, no network).

Usage: ``python docs/_scripts/figures.py OUTDIR`` draws every figure into ``OUTDIR`` (the docs build runs it into
``docs/_generated/``, see ``docs/_ext/nbquant_docs.py``); ``--list`` prints the file names it writes.

- ``sqnr_grid.svg`` and ``sqnr_vs_bits.svg``, with the table ``sqnr.csv``: the SQNR of every format and granularity
  on a weight-like matrix (``docs/_scripts/sqnr.py``, nbquant's reference backend);
- ``value_grids.svg``: the values of fp8 e4m3/e5m2, fp6 e2m3/e3m2, fp4 e2m1 and NF4, and their relative spacing
  against float32's;
- ``throughput.svg``, with ``bench_machine.txt``: GB/s of every benchmark case for nbquant, the roofline and the
  peers, from the newest ``docs/_data/bench-*.json`` (written by ``python -m benchmarks --json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "_data"
OUTPUTS = ("sqnr_grid.svg", "sqnr_vs_bits.svg", "sqnr.csv", "value_grids.svg", "throughput.svg",
           "bench_machine.txt")
FAMILY_COLORS = {"integer": "#1f77b4", "float": "#d62728", "mx": "#2ca02c", "nvfp4": "#9467bd", "nf4": "#ff7f0e"}
GRANULARITY_MARKERS = {"per-tensor": "o", "per-channel": "s", "group 128": "^", "group 32": "v", "own block": "D"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "nbquant-docs", "font.size": 9, "axes.titlesize": 10,
                         "figure.dpi": 100, "savefig.bbox": "tight"})
    return plt


def _save(fig, path: Path) -> None:
    fig.savefig(path, metadata={"Date": None, "Creator": None})  # no timestamp or version: same bytes every run
    fig.clear()


def draw_sqnr(out: Path) -> None:
    """The SQNR heat map (format x granularity), SQNR against bits per element, and the table."""
    import numpy as np
    from sqnr import COLS, ELEMENT_FORMATS, GRANULARITIES, NATIVE, ROWS, sqnr_results, write_csv

    plt = _pyplot()
    results = sqnr_results()
    write_csv(results, out / "sqnr.csv")
    labels = list(dict.fromkeys(r.label for r in results))
    columns = [*GRANULARITIES, NATIVE]
    grid = np.full((len(labels), len(columns)), np.nan)
    for r in results:
        grid[labels.index(r.label), columns.index(r.granularity)] = r.sqnr
    fig, ax = plt.subplots(figsize=(6.4, 6.6))
    image = ax.imshow(grid, cmap="viridis", aspect="auto", vmin=0, vmax=np.nanmax(grid))
    for (i, j), v in np.ndenumerate(grid):
        if not np.isnan(v):
            ax.text(j, i, f"{v:.1f}", ha="center", va="center", color="white" if v < 0.6 * np.nanmax(grid) else "k")
    ax.set_xticks(range(len(columns)), columns)
    ax.set_yticks(range(len(labels)), labels)
    ax.axhline(len(ELEMENT_FORMATS) - 0.5, color="w", lw=3)
    ax.xaxis.tick_top()
    fig.colorbar(image, ax=ax, label="SQNR (dB), higher is better", shrink=0.8)
    ax.set_title(f"dequantize(quantize(w)) on a {ROWS} x {COLS} heavy-tailed weight matrix", pad=28)
    _save(fig, out / "sqnr_grid.svg")

    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    for r in results:
        ax.scatter(r.bits, r.sqnr, color=FAMILY_COLORS[r.family], marker=GRANULARITY_MARKERS[r.granularity],
                   s=28, alpha=0.85, zorder=3)
    front, best = [], -np.inf
    for r in sorted(results, key=lambda r: (r.bits, -r.sqnr)):
        if r.sqnr > best + 0.05:
            front.append(r)
            best = r.sqnr
    ax.plot([r.bits for r in front], [r.sqnr for r in front], color="0.6", lw=1, zorder=1, label="best SQNR so far")
    labelled = [r for r, after in zip(front, [*front[1:], None], strict=True)
                if after is None or after.bits - r.bits > 0.3]  # of near-equal sizes, the best only
    for k, r in enumerate(labelled):
        name = r.label if r.granularity == NATIVE else f"{r.label} {r.granularity}"
        below = k % 2 == 0  # alternate below-right and above-left, so neighbours' labels do not overlap
        ax.annotate(name, (r.bits, r.sqnr), textcoords="offset points", xytext=(6, -10) if below else (-6, 5),
                    ha="left" if below else "right", fontsize=7)
    for family, color in FAMILY_COLORS.items():
        ax.scatter([], [], color=color, marker="o", label=family + (" element format" if family in
                                                                     ("integer", "float") else ""))
    for granularity, marker in GRANULARITY_MARKERS.items():
        ax.scatter([], [], color="0.3", marker=marker, label=granularity)
    ax.set_xlabel("bits per element (codes + their share of the scales)")
    ax.set_ylabel("SQNR (dB)")
    ax.set_xlim(1.5, 9.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    ax.set_title("Error against size: up and to the left is better")
    _save(fig, out / "sqnr_vs_bits.svg")


def format_values() -> dict[str, object]:
    """Every non-negative finite value of each format, divided by the format's largest (nbquant decodes them)."""
    import ml_dtypes
    import numpy as np

    import nbquant
    from nbquant.element import NF4_VALUES

    values = {}
    for label, name, bits in (("fp8 e4m3", "float8_e4m3fn", 8), ("fp8 e5m2", "float8_e5m2", 8),
                              ("fp6 e2m3", "float6_e2m3fn", 6), ("fp6 e3m2", "float6_e3m2fn", 6),
                              ("fp4 e2m1", "float4_e2m1fn", 4)):
        codes = np.arange(2 ** (bits - 1), dtype=np.uint8).view(getattr(ml_dtypes, name))  # the sign bit clear
        v = nbquant.dequantize(codes, np.float32(1), backend="reference").astype(np.float64)
        v = np.unique(v[np.isfinite(v)])
        values[label] = v / v.max()
    nf4 = np.asarray(NF4_VALUES, np.float64)
    values["NF4 (>= 0)"] = nf4[nf4 >= 0]  # NF4 is not symmetric: its negative half has 7 other values
    values["int8"] = np.arange(128) / 127
    values["int4"] = np.arange(8) / 7
    return values


def draw_value_grids(out: Path) -> None:
    """The value grids (linear) and their relative spacing against float32 (log-log)."""
    import numpy as np

    plt = _pyplot()
    values = format_values()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.2, 7.0), height_ratios=(1, 1.25))
    for i, (label, v) in enumerate(values.items()):
        top.vlines(v, i - 0.35, i + 0.35, color="C1" if label.startswith("NF4") else "C0", lw=0.8)
    top.set_yticks(range(len(values)), list(values))
    top.invert_yaxis()
    top.set_xlim(-0.01, 1.01)
    top.set_xlabel("value / the format's largest value (non-negative half; each format is symmetric)")
    top.set_title("Where each format's values lie: floats crowd near zero, NF4 follows a normal's quantiles")
    for label, v in values.items():
        positive = v[v > 0]
        gap = np.diff(positive) / positive[:-1]
        style = {"ls": "--", "lw": 1} if label.startswith("int") else {"lw": 1.4}
        bottom.step(positive[:-1], gap, where="post", label=label, **style)
    f32 = np.finfo(np.float32)
    bottom.axhspan(float(f32.eps) / 2, float(f32.eps), color="k", alpha=0.25, label="float32 (2^-24 to 2^-23)")
    bottom.set_xscale("log")
    bottom.set_yscale("log")
    bottom.set_xlim(1e-6, 1.2)
    bottom.set_ylim(1e-8, 3)
    bottom.set_xlabel("value / the format's largest value")
    bottom.set_ylabel("gap to the next value / value")
    bottom.grid(alpha=0.3, which="major")
    bottom.legend(fontsize=7, ncol=3, loc="center left")
    bottom.set_title("Relative spacing: each mantissa bit halves it; float32's is ~10^-7")
    fig.tight_layout()
    _save(fig, out / "value_grids.svg")


def newest_benchmark() -> Path:
    """The newest ``docs/_data/bench-*.json`` (by the date in its name)."""
    files = sorted(DATA.glob("bench-*.json"))
    if not files:
        raise FileNotFoundError(f"no bench-*.json in {DATA}: run python -m benchmarks --json {DATA}/bench-DATE.json")
    return files[-1]


def contender(impl: str) -> str:
    """The group a benchmark row belongs to: nbquant, roofline, NumPy, torch, torchao or onnxruntime."""
    for prefix, group in (("nbquant", "nbquant"), ("roofline", "roofline"), ("numpy", "NumPy"),
                          ("torchao", "torchao"), ("torch", "torch (best path)"), ("onnxruntime", "onnxruntime")):
        if impl.startswith(prefix):
            return group
    return impl


def draw_throughput(out: Path) -> None:
    """GB/s of every case for nbquant, the roofline and the best row of each peer, from the benchmark's JSON."""
    plt = _pyplot()
    path = newest_benchmark()
    data = json.loads(path.read_text(encoding="utf-8"))
    best: dict[str, dict[str, float]] = {}
    for row in data["rows"]:
        group = best.setdefault(row["case"], {})
        name = contender(row["impl"])
        group[name] = max(group.get(name, 0.0), row["gbps"])
    cases = list(best)
    styles = {"roofline": ("|", "k", 140), "nbquant": ("o", "C0", 40), "NumPy": ("s", "C7", 22),
              "torch (best path)": ("^", "C3", 26), "torchao": ("v", "C1", 26), "onnxruntime": ("D", "C2", 20)}
    fig, ax = plt.subplots(figsize=(7.2, 0.26 * len(cases) + 1.6))
    for name, (marker, color, size) in styles.items():
        points = [(best[c][name], i) for i, c in enumerate(cases) if name in best[c]]
        if points:
            ax.scatter(*zip(*points, strict=True), marker=marker, color=color, s=size, label=name, zorder=3,
                       linewidths=2 if marker == "|" else 0.5)
    for i, c in enumerate(cases):
        if "roofline" in best[c] and "nbquant" in best[c]:
            share = best[c]["nbquant"] / best[c]["roofline"]
            ax.annotate(f"{share:.0%}", (best[c]["nbquant"], i), textcoords="offset points", xytext=(0, 5),
                        fontsize=6, ha="center", color="C0")
    ax.set_yticks(range(len(cases)), cases)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("GB/s = (bytes read + written) / median time; nbquant's share of the roofline above its dot")
    ax.grid(alpha=0.3, axis="x", which="both")
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=6, frameon=False)
    sizes = sorted({row["n"] for row in data["rows"]})
    ax.set_title(f"{data['date'][:10]}, {data['device']}, n = {', '.join(f'2^{n.bit_length() - 1}' for n in sizes)}, "
                 f"{data['repeats']} repeats", pad=22)
    _save(fig, out / "throughput.svg")
    (out / "bench_machine.txt").write_text(f"{path.name}: {data['date']}\n$ {data['command']}\n"
                                           + "\n".join(data["machine"]) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Draw every figure into the output folder (or list their names)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?", type=Path)
    parser.add_argument("--list", action="store_true", help="print the names of the files written, and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(OUTPUTS))
        return 0
    if args.outdir is None:
        parser.error("OUTDIR is required")
    args.outdir.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(HERE))
    draw_sqnr(args.outdir)
    draw_value_grids(args.outdir)
    draw_throughput(args.outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
