"""The documentation pages: their examples run, and the API reference lists every public name.

The examples of docs/compat/*.md are tests/test_compat_docs.py's; this module runs those of the other pages, as
``sphinx-build -b doctest`` does in CI (one namespace per page). Neither needs Sphinx; the build itself is
tests/test_docs_site.py (full tier).
"""

from __future__ import annotations

import doctest
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import nbquant

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md")
               if p.parent.name != "compat" and not ({"_build", "_data"} & set(p.parts)))
COMPAT_MODULES = ("tripy", "tensorrt", "pypto", "torchao", "modelopt", "modelopt_qtensor", "modelopt_quantizer",
                  "onnx")


def page_examples(page: Path) -> doctest.DocTest:
    """The ``>>>`` examples of a page as one doctest (the fence lines dropped, as they end no example)."""
    text = "\n".join("" if line.startswith("```") else line for line in page.read_text(encoding="utf-8").splitlines())
    return doctest.DocTestParser().get_doctest(text, {}, page.name, str(page), 0)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_page_examples(page):
    test = page_examples(page)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    runner.run(test)
    assert runner.failures == 0, f"{runner.failures} example(s) of {page.name} failed"


def test_the_tour_has_examples():
    assert len(page_examples(DOCS / "getting_started.md").examples) >= 15


def _listed(page: Path) -> list[str]:
    """The names in a reference page's autosummary tables."""
    text = page.read_text(encoding="utf-8")
    names = []
    for block in re.findall(r"\.\. autosummary::\n(.*?)```", text, re.S):
        names += [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith(":")]
    return names


def test_reference_lists_every_public_name():
    listed = set(_listed(DOCS / "reference" / "api.md"))
    public = {name for name in nbquant.__all__ if not name.startswith("__")}
    assert listed == public, f"missing: {sorted(public - listed)}, not public: {sorted(listed - public)}"


def test_modelopt_reference_lists_every_name_of_nbquant_modelopt():
    assert sorted(_listed(DOCS / "reference" / "modelopt.md")) == sorted(nbquant.modelopt.__all__)


def test_compat_reference_lists_every_name_of_each_module():
    text = (DOCS / "reference" / "compat.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"## `nbquant\.compat\.(\w+)`\n(.*?)(?=\n## |\Z)", text, re.S))
    assert sorted(sections) == sorted(COMPAT_MODULES)
    for name, section in sections.items():
        module = importlib.import_module(f"nbquant.compat.{name}")
        listed = [n for block in re.findall(r"\.\. autosummary::\n(.*?)```", section, re.S)
                  for n in (line.strip() for line in block.splitlines()) if n and not n.startswith(":")]
        assert sorted(listed) == sorted(module.__all__), name


def test_numpy_inventory_is_up_to_date():
    script = DOCS / "_scripts" / "numpy_inventory.py"
    assert subprocess.run([sys.executable, str(script), "--check"]).returncode == 0, (
        f"docs/_data/numpy-objects.inv differs from {script.name}'s entries; run python {script}")


def test_cli_reference_names_every_command_and_flag():
    """docs/reference/cli.md is generated from the parser (docs/_ext/cli_markdown.py, which imports no Sphinx, so
    this runs without the docs extra): every subcommand gets a section and every flag a row, whatever is added to
    nbquant/cli.py later."""
    import argparse

    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        from cli_markdown import cli_reference
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    from nbquant.cli import _build_parser

    parser = _build_parser(backend_names=False)
    text = "\n".join(cli_reference(parser))
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert sub.choices, "no subcommands"
    for name, command in sub.choices.items():
        assert f"(cli-{name})=\n## nbquant {name}" in text, name
        for action in command._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in text, (name, flag)
            if not action.option_strings:
                assert f"`{action.metavar or action.dest}`" in text, (name, action.dest)
