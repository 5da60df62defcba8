"""The documentation site builds with no warnings, and the doctest builder passes (full tier).

``sphinx-build -W -b html`` and ``-b doctest`` into a temporary folder, as CI's docs stage runs them; skipped
when the ``docs`` extra (Sphinx, myst-parser, pydata-sphinx-theme, numpydoc, matplotlib) is not installed.
The figures are drawn into the checkout's ``docs/_generated/`` (ignored by git), where later builds reuse them.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS_EXTRA = ("sphinx", "myst_parser", "pydata_sphinx_theme", "numpydoc", "matplotlib")
MISSING = [name for name in DOCS_EXTRA if importlib.util.find_spec(name) is None]

pytestmark = [
    pytest.mark.full(reason="builds the whole documentation site (about 20 s, more on a cold Numba cache)"),
    pytest.mark.nosim,
    pytest.mark.skipif(bool(MISSING), reason=f"the docs extra is not installed (missing {', '.join(MISSING)}); "
                                             "pip install -e '.[docs]'"),
]


def _sphinx(builder: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", builder,
                           str(ROOT / "docs"), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_html_builds_without_warnings(tmp_path):
    res = _sphinx("html", tmp_path / "html")
    assert res.returncode == 0, res.stdout + res.stderr
    html = tmp_path / "html"
    for page in ("index", "install", "getting_started", "choosing", "backends", "changelog", "performance",
                 "reference/index", "reference/api", "reference/cli", "reference/compat",
                 "reference/generated/nbquant.quantize"):
        assert (html / f"{page}.html").is_file(), page
    figures = {p.name for p in (html / "_images").iterdir()}
    assert {"sqnr_grid.svg", "sqnr_vs_bits.svg", "value_grids.svg", "throughput.svg"} <= figures
    assert "numpy.org/doc/stable/" in (html / "reference" / "generated" / "nbquant.quantize.html").read_text()


def test_doctest_builder_passes(tmp_path):
    res = _sphinx("doctest", tmp_path / "doctest")
    assert res.returncode == 0, res.stdout + res.stderr
    report = (tmp_path / "doctest" / "output.txt").read_text(encoding="utf-8")
    assert "0 failures in tests" in report and "Document: getting_started" in report
