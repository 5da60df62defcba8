"""One kernel per format from one template, each a function of its own (shared by the cpu and cuda backends).

A family of formats (GGUF's) gets a kernel per format, so that a first call compiles its
format alone. The kernels come from one template: :func:`format_kernel` makes the
template's code a new function with a name of its own and the format's objects (its
element function's walk, its sizes) among its globals. It is not a closure over them:
Numba's disk cache keys a kernel on its code and the pickled contents of its closure,
and a Numba dispatcher pickles with an id drawn by its process, so a closure over an
element function would miss the cache in every new process (and add an entry to it).
A function of its own name has a cache file of its own and a key that stays the same.
"""

from __future__ import annotations

import types
from collections.abc import Callable

__all__ = ["format_kernel"]


def format_kernel(template: Callable, name: str, doc: str, **bound: object) -> Callable:
    """``template``'s code as a new function ``name``, its globals ``template``'s with ``bound`` set.

    ``template`` reads each per-format object as a global of its module, where it is a
    placeholder; the new function's globals are a copy of the module's made now, so
    make the kernels after everything they call is defined.

    Parameters
    ----------
    template : callable
        A plain function (no closure, no defaults).
    name : str
        The new function's ``__name__`` and ``__qualname__`` (what Numba names its cache file after).
    doc : str
        Its docstring.
    **bound : object
        The globals to set.

    Returns
    -------
    callable
        The new function.

    Examples
    --------
    >>> STEP = None  # a placeholder
    >>> def template(v):
    ...     return STEP * v
    >>> triple = format_kernel(template, "triple", "Three times ``v``.", STEP=3)
    >>> triple(2), triple.__qualname__, STEP
    (6, 'triple', None)
    """
    fn = types.FunctionType(template.__code__, {**template.__globals__, **bound}, name)
    fn.__qualname__ = name
    fn.__doc__ = doc
    fn.__module__ = template.__module__
    return fn
