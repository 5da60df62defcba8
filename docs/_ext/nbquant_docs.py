"""Sphinx extension of nbquant's docs: draws the figures, and makes the pages' ``>>>`` blocks doctests.

- ``builder-inited``: runs ``docs/_scripts/figures.py`` into ``docs/_generated/`` (ignored by git) when a figure is
  missing or older than the script or the benchmark data it reads (``NBQUANT_DOCS_FIGURES=always`` redraws them
  every build). The script runs in a subprocess, with this checkout's nbquant first on the path.
- ``source-read``: a page's links to ``../README.md`` (right on GitHub) point at ``readme.md``, the page of the site
  that includes the README.
- ``autodoc-skip-member``: a named tuple's field aliases are left out (the class's docstring describes its fields).
- ``doctree-read``: a literal block of a Markdown page whose language is ``python`` or ``pycon`` and whose first line
  starts with ``>>>`` becomes a doctest of the page's ``default`` group, so ``sphinx-build -b doctest`` runs it (myst
  renders fenced code as literal blocks, which ``sphinx.ext.doctest`` would skip).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from docutils import nodes
from sphinx.util import logging

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
SCRIPT = DOCS / "_scripts" / "figures.py"
OUTPUT = DOCS / "_generated"
DOCTEST_LANGUAGES = ("python", "pycon", "default", "")

logger = logging.getLogger(__name__)


def figure_inputs() -> list[Path]:
    """The files the figures are drawn from: the script, its helpers and the benchmark data."""
    return [*sorted((DOCS / "_scripts").glob("*.py")), *sorted((DOCS / "_data").glob("bench-*.json"))]


def figures_stale(outputs: list[Path]) -> bool:
    """Whether a figure is missing or older than one of :func:`figure_inputs`."""
    if os.environ.get("NBQUANT_DOCS_FIGURES") == "always" or not all(p.exists() for p in outputs):
        return True
    newest_input = max(p.stat().st_mtime for p in figure_inputs())
    return min(p.stat().st_mtime for p in outputs) < newest_input


def draw_figures(app) -> None:
    """Run the figure script when its outputs are stale (``builder-inited``)."""
    listed = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, check=True)
    outputs = [OUTPUT / name for name in listed.stdout.split()]
    if not figures_stale(outputs):
        logger.info("nbquant_docs: figures up to date in %s", OUTPUT)
        return
    env = {**os.environ, "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(SCRIPT), str(OUTPUT)], capture_output=True, text=True, env=env,
                          cwd=ROOT)
    if done.returncode:
        raise RuntimeError(f"docs/_scripts/figures.py failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    logger.info("nbquant_docs: drew %d figures in %.1f s", len(outputs), time.perf_counter() - start)


def is_doctest_block(node: nodes.Node) -> bool:
    """Whether a literal block is a ``>>>`` example of a page (see the module docstring)."""
    return (isinstance(node, nodes.literal_block) and "testnodetype" not in node
            and node.get("language", "") in DOCTEST_LANGUAGES and node.astext().lstrip().startswith(">>>"))


def mark_doctests(app, doctree: nodes.document) -> None:
    """Make every ``>>>`` block of a page a doctest of its ``default`` group (``doctree-read``)."""
    for node in list(doctree.findall(is_doctest_block)):
        node["testnodetype"] = "doctest"
        node["groups"] = ["default"]
        node["options"] = {}


def link_readme(app, docname: str, source: list[str]) -> None:
    """Point the links to ``../README.md`` at the site's ``readme`` page (``source-read``)."""
    depth = docname.count("/")
    source[0] = source[0].replace("](" + "../" * (depth + 1) + "README.md", "](" + "../" * depth + "readme.md")


def skip_tuple_fields(app, what, name, obj, skip, options):
    """Leave out a named tuple's field aliases ("Alias for field number 0"): the class's Parameters describe them."""
    if what == "class" and (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


def setup(app):
    """Register the hooks."""
    app.connect("autodoc-skip-member", skip_tuple_fields)
    app.connect("builder-inited", draw_figures)
    app.connect("source-read", link_readme)
    app.connect("doctree-read", mark_doctests)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
