"""Sphinx directive ``nbquant-cli``: the command-line reference, generated from ``nbquant/cli.py``'s parser.

The page ``docs/reference/cli.md`` holds only the directive; each build walks the argparse parser the ``nbquant``
command runs, so a command, flag, default or help text added there appears here without an edit to the docs.
The Markdown comes from ``cli_markdown.py`` (plain Python, tested without Sphinx); the directive parses it into
the page (a MyST page, whose parser reads a directive's nested content).
"""

from __future__ import annotations

from cli_markdown import cli_reference
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


class NbquantCli(SphinxDirective):
    """``.. nbquant-cli::``: the reference of the ``nbquant`` command (see the module docstring)."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from nbquant import cli

        parser = cli._build_parser(backend_names=False)  # the backends' names without importing the CUDA target
        self.env.note_dependency(cli.__file__)
        self.env.note_dependency(__file__)
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(cli_reference(parser), "nbquant/cli.py"), container)
        return container.children


def setup(app):
    """Register the directive."""
    app.add_directive("nbquant-cli", NbquantCli)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
