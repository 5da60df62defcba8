"""The text of ``nbquant demo``'s table: its header, one line a :class:`~nbquant.demo.DemoRow`, the legend under it,
and the line that describes this machine.

:mod:`nbquant.demo` computes the rows and :mod:`nbquant.cli` prints them; this module only formats.

Examples
--------
>>> from nbquant.demo.table import HEADER, LEGEND
>>> HEADER.split()[:3], LEGEND[0]
(['scheme', 'layout', 'backend'], 'legend:')
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Sequence
from typing import Any

from ..threads import get_num_threads

__all__ = ["HEADER", "LEGEND", "format_row", "machine_info", "machine_line"]

#: Column titles and widths of the demo table.
_COLUMNS = (
    ("scheme", 22), ("layout", 28), ("backend", 9), ("SQNR dB", 8), ("max abs err", 11),
    ("first ms", 9), ("median ms", 10), ("GB/s", 7), ("= reference", 11),
)


def _line(cells: Sequence[str]) -> str:
    """Cells padded to the column widths: the three text columns left-aligned, the numbers right-aligned."""
    padded = (c.ljust(w) if i < 3 else c.rjust(w) for i, (c, (_, w)) in enumerate(zip(cells, _COLUMNS, strict=True)))
    return " ".join(padded).rstrip()


HEADER = _line([title for title, _ in _COLUMNS])

#: The lines printed under the demo table: what each column means, and why low-bit rows have a low SQNR.
LEGEND = (
    "legend:",
    "  scheme, layout  the format, and which values share a scale: per-tensor = one scale, axis=0 = one per row,",
    "                  block_size = one per block of columns; MX and NVFP4 compute a scale per block of 32 or 16",
    "  backend         what quantized the whole matrix (the reference backend checks it on the checked rows)",
    "  SQNR dB         10 log10(sum x^2 / sum (x - dequantize(quantize(x)))^2) on the checked rows; higher is better",
    "  max abs err     the largest |x - dequantize(quantize(x))| on the checked rows",
    "  first ms        the first quantize call: includes the JIT compile (first run) or the load from numba's cache",
    "  median ms       the median time of the calls after it; GB/s = (input + scales + codes bytes) / median",
    "  = reference     yes: the codes of the checked rows equal the reference backend's bit for bit",
    "  A low SQNR on low-bit rows is expected, not a bug: on a Gaussian or heavy-tailed input each bit of a code",
    "  is worth ~6 dB, so int8 per-channel gets ~30 dB, the 4-bit formats ~15-20 dB, and int2, with 4 levels,",
    "  ~0-6 dB (its scale is set by each row's largest value, so almost every weight rounds to 0). Per-tensor",
    "  scales lose ~20 dB to the 100x spread of row magnitudes; per-channel, group and block scales win it back.",
)


def format_row(row) -> str:
    """One table line for a :class:`nbquant.demo.DemoRow`, aligned with :data:`HEADER`.

    Examples
    --------
    >>> from nbquant.demo import DemoRow
    >>> row = DemoRow("int8 per-tensor", "per-tensor", "cpu", 10.73, 0.06538, 4.2, 0.004, 2 * 10**7, True)
    >>> format_row(row).split()
    ['int8', 'per-tensor', 'per-tensor', 'cpu', '10.73', '0.06538', '4200.000', '4.000', '5', 'yes']
    >>> len(format_row(row)) == len(HEADER)
    True
    """
    cells = (
        row.scheme, row.layout, row.backend, f"{row.sqnr_db:.2f}", f"{row.max_abs_error:.4g}",
        f"{row.first_call_s * 1e3:.3f}", f"{row.median_s * 1e3:.3f}", f"{row.gb_per_s:.3g}",
        "yes" if row.equals_reference else "NO",
    )
    return _line(cells)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """Facts about this machine and the cpu backend's threads, for the demo's last line.

    Returns
    -------
    dict
        ``cpu``, ``cores`` (``os.cpu_count()``), ``usable_cores`` (the affinity
        mask), ``platform``, ``python``, ``numpy``, ``numba`` (its version, ``None``
        when it was never imported), ``threads`` (:func:`nbquant.get_num_threads`).

    Examples
    --------
    >>> sorted(machine_info())[:3]
    ['cores', 'cpu', 'numba']
    """
    import numpy as np

    affinity = getattr(os, "sched_getaffinity", None)
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": len(affinity(0)) if affinity else os.cpu_count(),
        "platform": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": getattr(sys.modules.get("numba"), "__version__", None),
        "threads": get_num_threads(),
    }
    return info


def machine_line(info: dict) -> str:
    """Return the demo's machine line: the machine, the versions and the cpu backend's threads.

    Parameters
    ----------
    info : dict
        :func:`machine_info`'s facts.

    Returns
    -------
    str
        One line, starting ``machine:``.

    Examples
    --------
    >>> machine_line(machine_info()).startswith("machine: ")
    True
    """
    numba = f"numba {info['numba']}" if info["numba"] else "numba not loaded"
    return (f"machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), {info['platform']}; "
            f"Python {info['python']}, numpy {info['numpy']}, {numba}; "
            f"cpu backend threads: {info['threads']} (set NBQUANT_NUM_THREADS or nbquant.set_num_threads to change)")
