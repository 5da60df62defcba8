"""Docstring text that several public objects share, filled into their docstrings when the module is imported.

A docstring names a shared piece on a line of its own, ``{name}``; :func:`fill_doc`
replaces that line with the piece, indented as the line is. The filled text is the
object's ``__doc__``, so ``help()``, doctest, Sphinx's autodoc and numpydoc all read
the complete docstring (nothing is filled at documentation build time).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from typing import TypeVar

__all__ = ["BACKEND", "DECODE_PARAMETERS", "DOCS", "OUT_DTYPE", "fill_doc"]

_T = TypeVar("_T")
_SLOT = re.compile(r"^([ \t]*)\{(\w+)\}[ \t]*$", re.MULTILINE)

#: The ``backend`` parameter of the functions that run on a backend.
BACKEND = """
backend : str, optional
    ``"auto"``, ``"reference"``, ``"cpu"`` or ``"cuda"``; default: the selected backend.
"""
#: The ``out_dtype`` parameter of the functions that decode to a float type.
OUT_DTYPE = """
out_dtype : dtype, optional
    float32 (default), float16 or bfloat16.
"""
#: The Parameters section of a container's ``dequantize(out_dtype, backend)`` method.
DECODE_PARAMETERS = "\n".join(["Parameters", "----------", OUT_DTYPE.strip("\n"), BACKEND.strip("\n")])
#: The pieces above by their slot names.
DOCS = {"backend": BACKEND, "out_dtype": OUT_DTYPE, "decode_parameters": DECODE_PARAMETERS}


def fill_doc(**pieces: str) -> Callable[[_T], _T]:
    """Return a decorator that fills the ``{name}`` lines of a docstring with ``pieces[name]``.

    Parameters
    ----------
    **pieces : str
        The text of each named piece (its common indentation and its blank first and last
        lines are dropped; it takes the indentation of the line it replaces).

    Returns
    -------
    callable
        The decorator: it sets the object's ``__doc__`` and returns the object. A ``{name}``
        line with no piece raises ``KeyError`` at import; a docstring stripped by
        ``python -OO`` stays None.

    Examples
    --------
    >>> @fill_doc(x="x : int\\n    The input.")
    ... def f(x):
    ...     '''Return x.
    ...
    ...     Parameters
    ...     ----------
    ...     {x}
    ...     '''
    ...     return x
    >>> print(f.__doc__.splitlines()[4:6])
    ['    x : int', '        The input.']
    """
    def fill(obj: _T) -> _T:
        if obj.__doc__:
            obj.__doc__ = _SLOT.sub(
                lambda m: textwrap.indent(textwrap.dedent(pieces[m[2]]).strip("\n"), m[1]), obj.__doc__)
        return obj

    return fill
