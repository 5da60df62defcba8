"""The checks of :func:`nbquant.convert.convert`'s arguments, every one made before a byte is read or written.

A bad value raises :class:`ArgumentError` (a :class:`ValueError`, and a
:class:`~nbquant.convert.ConvertError` like every other refusal of ``convert``), a value of the
wrong type :class:`TypeError`; each message is one line that names the argument, shows the
value passed and says what is allowed. ``nbquant convert`` prints it with the argument's
command-line spelling (``SRC``, ``--ignore``) and exits with status 1.

Examples
--------
>>> check_ignore("lm_head"), check_ignore(("lm_head", "re:.*mlp"))
(['lm_head'], ['lm_head', 're:.*mlp'])
>>> check_ignore(["re:model.layers.(0"])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
nbquant.convert.arguments.ArgumentError: ignore 're:model.layers.(0': not a valid regular expression (missing ), ...
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable
from numbers import Integral

from .safetensors import ConvertError
from .schemes import Scheme, get_scheme

__all__ = ["ArgumentError", "check_arguments", "check_ignore"]


class ArgumentError(ConvertError, ValueError):
    """A bad argument of :func:`~nbquant.convert.convert`: one line that names it, shows its value and the choices.

    Parameters
    ----------
    argument : str
        The parameter's name (``"ignore"``, ``"report"`` ...); the message starts with it.
    message : str
        The whole one-line message.
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument

    def __reduce__(self):
        return type(self), (self.argument, str(self))  # picklable (a dask client, multiprocessing)


def _path(argument: str, value) -> str:
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)) or \
            not isinstance(os.fspath(value), str):
        raise TypeError(f"{argument} must be a path (str or os.PathLike), got {type(value).__name__} {value!r}")
    path = os.fspath(value)
    if not path:
        raise ArgumentError(argument, f"{argument} '': empty; pass a path")
    return path


def check_ignore(ignore: str | Iterable[str]) -> list[str]:
    """The ``ignore`` patterns as a list: a str is one pattern; every ``re:`` pattern must compile.

    Raises
    ------
    TypeError
        ``ignore`` is neither a str nor an iterable of str.
    ArgumentError
        An empty pattern, or a ``re:`` pattern that is not a valid regular expression.
    """
    if isinstance(ignore, str):
        patterns = [ignore]
    elif isinstance(ignore, (bytes, os.PathLike)) or not isinstance(ignore, Iterable):
        raise TypeError(f"ignore must be a module name or re:<pattern> (str), or an iterable of them; got "
                        f"{type(ignore).__name__} {ignore!r}")
    else:
        patterns = list(ignore)
    for p in patterns:
        if not isinstance(p, str):
            raise TypeError(f"ignore holds {type(p).__name__} {p!r}; each pattern must be a str (a module name, "
                            "or re:<pattern>)")
        if p in ("", "re:"):
            raise ArgumentError("ignore", f"ignore {p!r}: empty; pass a module name (lm_head) or re:<pattern> "
                                          r"(re:.*mlp\.down_proj)")
        if p.startswith("re:"):
            try:
                re.compile(p[3:])
            except re.error as e:
                where = "" if e.pos is None else f" at position {e.pos + 3}"  # of the value, re: included
                raise ArgumentError("ignore", f"ignore {p!r}: not a valid regular expression ({e.msg}{where}); write "
                                              "re:<pattern> with a Python regular expression matched from the "
                                              r"start of the module name (re:.*mlp\.down_proj)") from None
    return patterns


def _check_src(src: str) -> None:
    if src.lower().endswith(".gguf") and os.path.isfile(src):  # a GGUF file (nbquant.convert.sources.gguf)
        return
    if not os.path.isdir(src):
        what = "no such directory" if not os.path.exists(src) else "not a directory"
        raise ArgumentError("src", f"src {src}: {what}; pass the folder that holds config.json and the "
                                   "*.safetensors shards, or a .gguf file")


def _check_report(report: str, dst: str) -> None:
    folder = os.path.dirname(os.path.abspath(report))
    if os.path.isdir(report):
        raise ArgumentError("report", f"report {report}: is a directory; pass a file name for the JSON report "
                                      f"(e.g. {os.path.join(report, 'report.json')})")
    if os.path.abspath(report) == os.path.abspath(dst):
        raise ArgumentError("report", f"report {report}: is the destination folder; pass a file name for the JSON "
                                      "report")
    if folder != os.path.abspath(dst) and not os.path.isdir(folder):
        raise ArgumentError("report", f"report {report}: the folder {folder} does not exist; create it first or "
                                      "pass a path in an existing folder")
    if os.path.isdir(folder) and not os.access(report if os.path.exists(report) else folder, os.W_OK):
        raise ArgumentError("report", f"report {report}: cannot write there (permission denied); pass a path "
                                      "in a folder you can write")


def _check_flags(workers, flags: dict[str, object], log, scheduler) -> None:
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, Integral)):
        raise TypeError(f"workers must be a positive int or None, got {type(workers).__name__} {workers!r}")
    if workers is not None and workers < 1:
        raise ArgumentError("workers", f"workers {workers!r}: must be a positive int (threads of the kernels), "
                                       "or None for nbquant's setting")
    for name, value in flags.items():
        if not isinstance(value, bool) and not (name == "progress" and value is None):
            allowed = "True, False or None (when stderr is a terminal)" if name == "progress" else "True or False"
            raise TypeError(f"{name} must be {allowed}, got {type(value).__name__} {value!r}")
    if log is not None and not callable(log):
        raise TypeError(f"log must be a callable taking one str, or None, got {type(log).__name__} {log!r}")
    if scheduler is not None:
        if not isinstance(scheduler, str):
            raise TypeError(f"scheduler must be a str address (tcp://host:8786) or None, got "
                            f"{type(scheduler).__name__} {scheduler!r}")
        if not scheduler.strip():
            raise ArgumentError("scheduler", f"scheduler {scheduler!r}: empty; pass a dask.distributed scheduler "
                                             "address (tcp://host:8786), or None to convert here")
        if importlib.util.find_spec("distributed") is None:
            raise ArgumentError("scheduler", f"scheduler {scheduler!r}: needs dask.distributed, which is not "
                                             'installed: pip install "nbquant[dask]"')


def check_arguments(src, dst, scheme, *, ignore, default_ignore, workers, report, overwrite, progress, check,
                    full_check, log, scheduler) -> tuple[str, str, Scheme, list[str], str | None]:
    """Check every argument of :func:`~nbquant.convert.convert` (same names); nothing is read or written.

    Returns
    -------
    tuple
        ``(src, dst, scheme, ignore, report)``: the paths as str, the :class:`Scheme`, the ignore
        patterns as a list and the report path (None without one).

    Raises
    ------
    TypeError
        An argument of the wrong type.
    ArgumentError
        A bad value (a :class:`ValueError`): ``src`` missing or not a folder; an empty path; an
        unknown scheme; an empty or invalid ignore pattern; ``workers`` < 1; ``report`` a folder,
        the destination, in a missing folder or not writable; an empty ``scheduler``, or one
        without dask.distributed installed. (``dst`` against the source is
        :func:`nbquant.convert.destination.check_destination`'s, once the source is read.)
    """
    src, dst = _path("src", src), _path("dst", dst)
    if not isinstance(scheme, str):
        raise TypeError(f"scheme must be a str (a preset name such as W4A16), got {type(scheme).__name__} {scheme!r}")
    try:
        sch = get_scheme(scheme)
    except ConvertError as e:
        raise ArgumentError("scheme", str(e)) from None
    patterns = check_ignore(ignore)
    _check_flags(workers, {"default_ignore": default_ignore, "overwrite": overwrite, "progress": progress,
                           "check": check, "full_check": full_check}, log, scheduler)
    _check_src(src)
    if report is not None:
        report = _path("report", report)
        _check_report(report, dst)
    return src, dst, sch, patterns, report
