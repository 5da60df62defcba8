"""The reader's pages speak to readers: no issue numbers, no words of the project's internal process.

Every Markdown page of the site (``docs/**/*.md``; not ``docs/_data/``, which holds records, not pages) is read
line by line, outside code blocks, for the patterns of :data:`FORBIDDEN`. A link to a public upstream thread
(``huggingface/transformers#48371``) is allowed: it names where to read more, not our tracker.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if not ({"_build", "_data", "_generated"} & set(p.parts)))
FORBIDDEN = {
    r"\bissues? #?\d+": "an issue number",
    r"(?<![\w/.-])#\d{1,6}\b": "a bare #number (link an upstream thread as owner/repo#N)",
    r"\bthe issue(?:'s)?\b": "the issue (say what the requirement is)",
    r"\b(?:this|next|the|GPU|a) session\b": "a work session",
    r"\blease\b": "a machine lease",
    r"\bworktree\b|\bthe lead\b|\bhelpers? (?:task|branch|session)\b": "the project's process",
}
PATTERN = re.compile("|".join(f"(?:{p})" for p in FORBIDDEN), re.IGNORECASE)


def prose_lines(page: Path) -> list[tuple[int, str]]:
    """The page's lines outside fenced code blocks, with their numbers."""
    lines, fence = [], None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        marker = re.match(r"\s*(```+|~~~+)", line)
        if marker and (fence is None or marker.group(1).startswith(fence)):
            fence = None if fence else marker.group(1)
            continue
        if fence is None:
            lines.append((number, line))
    return lines


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_no_issue_numbers_or_process_words(page):
    found = [f"{page.name}:{number}: {match.group(0)!r} in {line.strip()[:100]!r}"
             for number, line in prose_lines(page) for match in PATTERN.finditer(line)]
    assert not found, "\n".join(found)


def test_the_patterns_catch_what_they_name():
    for text in ("(issue 28)", "issue #5", "see #123", "the issue's bound", "for the next GPU session",
                 "a 15-minute lease", "the lead merges"):
        assert PATTERN.search(text), text
    for text in ("huggingface/transformers#48371", "an onnxruntime session's threads", "releases the GIL",
                 "a helper function", "session.intra_op.allow_spinning"):
        assert not PATTERN.search(text), text
