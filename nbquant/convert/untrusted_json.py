"""JSON from files nbquant did not write, parsed within fixed limits, every refusal one line.

Python's :mod:`json` raises a bare :class:`RecursionError` on deeply nested input and a
:class:`ValueError` on an integer of more than 4300 digits. :func:`loads` refuses both with
:class:`UntrustedJSONError`, a one-line reason: nesting deeper than :data:`MAX_DEPTH` is found
before parsing, by counting brackets outside strings. ``strict=True`` also applies the rules of
``serde_json``, the parser of the Rust ``safetensors`` crate, for a safetensors header: no
``NaN`` or ``Infinity``, no number beyond the float range (a 309-digit integer included), no
lone surrogate escape (``"\\ud800"``), and ``-0`` read as the float ``-0.0`` (not a size).

Examples
--------
>>> loads('{"a": [1, 2.5]}')
{'a': [1, 2.5]}
>>> loads("[" * 200 + "]" * 200)
Traceback (most recent call last):
...
nbquant.convert.untrusted_json.UntrustedJSONError: JSON nested 200 levels deep (at most 127)
>>> loads('{"x": NaN}', strict=True)
Traceback (most recent call last):
...
nbquant.convert.untrusted_json.UntrustedJSONError: NaN is not JSON
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from itertools import accumulate

__all__ = ["MAX_DEPTH", "UntrustedJSONError", "loads"]

#: The deepest nesting accepted: ``serde_json``'s recursion limit (128) refuses a 128th level.
MAX_DEPTH = 127
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE = re.compile("[\ud800-\udfff]")
#: A surrogate escape in the text: only then can a parsed string hold a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_U64_MAX, _I64_MIN = (1 << 64) - 1, -(1 << 63)
#: Integers are parsed by a hook (slow) only where the text has one of these: ``-0`` and 309 digits or more, which
#: ``serde_json`` reads as floats (-0.0; past the float range: refused), :class:`int` refusing past 4300 digits.
#: Other integers past 64 bits, floats to ``serde_json``, are refused as sizes and ignored elsewhere either way.
_MINUS_ZERO = re.compile(r"-0(?![\d.eE])")
_LONG_INT = re.compile(r"[0-9]{309}")


class UntrustedJSONError(ValueError):
    """JSON refused: not JSON, or beyond a limit (the message is one line)."""


def _depth(bare: str) -> int:
    """The deepest nesting of ``[`` and ``{`` in JSON text without its strings."""
    brackets = _NOT_BRACKET.sub("", bare)
    return max(accumulate(_STEP[c] for c in brackets), default=0)


def _constant(name: str) -> float:
    raise UntrustedJSONError(f"{name} is not JSON")


def _float(token: str) -> float:
    value = float(token)
    if value in (float("inf"), float("-inf")):
        raise UntrustedJSONError(f"the number {token[:20]}{'...' if len(token) > 20 else ''} is beyond the float range")
    return value


def _serde_int(token: str) -> int | float:
    """An integer as ``serde_json`` reads it: a float outside u64 and i64 (and for ``-0``)."""
    value = int(token) if len(token) <= 21 else None
    if value is None or not _I64_MIN <= value <= _U64_MAX or token == "-0":
        return _float(token)
    return value


def _int(token: str) -> int:
    try:
        return int(token)
    except ValueError:  # more digits than sys.get_int_max_str_digits()
        raise UntrustedJSONError(f"an integer of {len(token.lstrip('-'))} digits (at most 4300)") from None


def _lone_surrogate(value: object) -> bool:
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                return True
        elif isinstance(v, dict):
            todo += v
            todo += v.values()
        elif isinstance(v, list):
            todo += v
    return False


def loads(text: str, *, strict: bool = False, object_pairs_hook: Callable[[list], object] = dict) -> object:
    """Parse ``text`` as JSON, or raise :class:`UntrustedJSONError` with a one-line reason.

    Parameters
    ----------
    text : str
    strict : bool
        Also apply ``serde_json``'s rules (see the module docstring).
    object_pairs_hook : callable
        Builds each object from its ``(key, value)`` pairs, as in :func:`json.loads`.

    Returns
    -------
    object
    """
    bare = _STRING.sub("", text)
    depth = _depth(bare)
    if depth > MAX_DEPTH:
        raise UntrustedJSONError(f"JSON nested {depth} levels deep (at most {MAX_DEPTH})")
    hooks = {"parse_constant": _constant, "parse_float": _float} if strict else {}
    if _MINUS_ZERO.search(bare) or _LONG_INT.search(bare):
        hooks["parse_int"] = _serde_int if strict else _int
    try:
        value = json.loads(text, object_pairs_hook=object_pairs_hook, **hooks)
    except json.JSONDecodeError as e:
        raise UntrustedJSONError(f"not valid JSON ({e})") from None
    if strict and _SURROGATE_ESCAPE.search(text) and _lone_surrogate(value):
        raise UntrustedJSONError("a string holds a lone UTF-16 surrogate escape (\\ud800 to \\udfff)")
    return value
