"""The command-line reference as Markdown, generated from ``nbquant/cli.py``'s argparse parser.

For the top-level parser and each subcommand: a section with the description, the usage line (argparse's own, 64
columns wide) and a table of the arguments: the spelling, what is required or the default, and the help text (with
the choices where argparse has them). Each subcommand's section has the label ``cli-<command>`` for ``{ref}`` links.
Plain Python (no Sphinx import), so the test tier checks it without the docs extra; ``nbquant_cli.py`` is the
directive that puts it on the page.
"""

from __future__ import annotations

import argparse
import re

USAGE_WIDTH = 64  # what a code block of the pydata theme shows at a 1280-pixel window


def _escape(text: str) -> str:
    """``text`` on one line, Markdown's inline markup characters taken literally and each ``--flag`` set as
    code (Sphinx's smart quotes would make its dashes an en dash)."""
    text = re.sub(r"([\\`*_<>\[\]|{}#])", r"\\\1", " ".join(text.split()))
    return re.sub(r"(?<![\w-])(--[a-z][\w-]*)", r"`\1`", text)


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _spelling(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest
    takes_value = action.nargs != 0
    metavar = action.metavar or action.dest.upper()
    return ", ".join(f"{flag} {metavar}" if takes_value else flag for flag in action.option_strings)


def _default(action: argparse.Action) -> str:
    if action.required or not action.option_strings:
        return "required"
    if action.nargs == 0:
        return "off"
    if action.default in (None, [], argparse.SUPPRESS):
        return "none"
    return f"`{action.default}`"


def _help(action: argparse.Action) -> str:
    text = _escape(action.help or "")
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text += " Choices: " + ", ".join(f"`{choice}`" for choice in action.choices) + "."
    return text or "-"


def _table(header: tuple[str, ...], widths: str, rows: list[tuple[str, ...]]) -> list[str]:
    """A MyST ``list-table``: the first row is the header."""
    lines = ["```{list-table}", ":header-rows: 1", f":widths: {widths}", ""]
    for row in [header, *rows]:
        lines += [f"{'* ' if i == 0 else '  '}- {cell}" for i, cell in enumerate(row)]
    return [*lines, "```", ""]


def _arguments(actions: list[argparse.Action]) -> list[str]:
    rows = [(f"`{_spelling(a)}`", _default(a), _help(a)) for a in actions]
    return _table(("argument", "default", "what it does"), "25 15 60", rows)


def _code(text: str) -> list[str]:
    return ["```text", *text.splitlines(), "```", ""]


def _subcommands(parser: argparse.ArgumentParser) -> tuple[argparse._SubParsersAction | None, dict[str, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action, {choice.dest: choice.help or "" for choice in action._choices_actions}
    return None, {}


def cli_reference(parser: argparse.ArgumentParser) -> list[str]:
    """The Markdown of the reference: the top-level parser, then one section per subcommand."""
    sub, helps = _subcommands(parser)
    lines = [_escape(parser.description or ""), "", *_code(_usage(parser))]
    top = [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
    if top:
        lines += _arguments(top)
    if sub is None:
        return lines
    lines += _table(("command", "for"), "25 75",
                    [(f"{{ref}}`{parser.prog} {name} <cli-{name}>`", _escape(helps.get(name, "")))
                     for name in sub.choices])
    for name, command in sub.choices.items():
        lines += [f"(cli-{name})=", f"## {command.prog}", "", _escape(command.description or helps[name]), "",
                  *_code(_usage(command))]
        lines += _arguments([a for a in command._actions if not isinstance(a, argparse._HelpAction)])
    return lines
