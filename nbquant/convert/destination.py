"""Where ``nbquant convert`` writes: the destination checked against the source, then prepared for the run.

* :func:`check_destination`: the destination and the source compared as real paths (every
  symlink resolved): a destination equal to, inside, or containing the source folder (or the
  Hugging Face cache folder its links point into, :func:`nbquant.convert.plan.trusted_roots`)
  is refused.
* :func:`prepare_destination`: a run lists every file it writes in its stamp (:data:`STAMP`)
  before it writes any; the stamp goes when the run completes (a finished output holds no file
  of nbquant's own: it equals ``model_free_ptq``'s folder), and the output's index then names
  its shards. Only those files are ever removed: ``overwrite`` deletes the files an
  earlier nbquant run wrote there (those its stamp lists, or a finished output's
  ``config.json``, index and the shards the index names) and those this run writes; a
  destination holding anything else is refused, naming the files.
* :func:`copy_into`: nothing is written through a symlink. Files are written to a temporary
  name beside them and renamed over whatever was there; a symlinked folder on the way is refused.

Examples
--------
>>> import os, tempfile
>>> src = tempfile.mkdtemp()
>>> check_destination(os.path.join(src, "out"), [os.path.realpath(src)])  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
nbquant.convert.safetensors.ConvertError: .../out: the destination is inside the source folder; ...
"""

from __future__ import annotations

import json
import os
import shutil
import stat

from .plan import is_within
from .safetensors import ConvertError

__all__ = ["STAMP", "check_destination", "prepare_destination", "copy_into"]

#: The file that marks a conversion in progress in the destination and lists the files it writes.
STAMP = ".nbquant-convert.json"


def check_destination(dst: str, roots: list[str]) -> None:
    """Refuse a destination that is, is inside, or contains one of ``roots`` once its symlinks are resolved.

    Parameters
    ----------
    dst : str
        The destination folder (it need not exist).
    roots : list of str
        The real folders the source reads from, the source folder first
        (:attr:`nbquant.convert.plan.Checkpoint.roots`).

    Raises
    ------
    ConvertError
        One line naming ``dst`` (and the real path it resolves to, when that differs).
    """
    real = os.path.realpath(dst)
    resolved = "" if real == os.path.abspath(dst) else f" (it resolves to {real})"
    for i, root in enumerate(roots):
        what = "the source folder" if i == 0 else f"{root}, the cache folder the source's links point into"
        if real == root:
            relation = "is"
        elif is_within(real, root):
            relation = "is inside"
        elif is_within(root, real):
            relation = "contains"
        else:
            continue
        raise ConvertError(f"{dst}: the destination {relation} {what}{resolved}; choose a folder apart from the "
                           "source")


def _partial(rel: str) -> str:
    """The temporary name a file is written under before its rename (``a/b`` → ``a/.b.partial``)."""
    head, name = os.path.split(rel)
    return os.path.join(head, "." + name + ".partial")


def _raise(error: OSError) -> None:
    raise error


def _entries(dst: str) -> set[str]:
    """Relative paths of everything under ``dst`` but its folders; a symlink is an entry, never followed."""
    out = set()
    for folder, dirs, files in os.walk(dst, onerror=_raise):
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        out.update(os.path.normpath(os.path.relpath(os.path.join(folder, f), dst)) for f in files + links)
    return out


def _read_json(path: str) -> dict | None:
    """The JSON object in the regular file ``path`` (a symlink is not followed), or None."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _earlier_run(dst: str) -> tuple[dict | None, set[str]]:
    """The stamp of an unfinished run in ``dst`` (None: none), and the files earlier nbquant runs wrote there.

    Those files are the ones the stamp lists, or, for a finished output (``config.json`` with a
    ``quantization_config``), its ``config.json``, its index and the shards the index names.
    """
    stamp = _read_json(os.path.join(dst, STAMP))
    files = stamp.get("files") if stamp is not None else None
    known = {os.path.normpath(f) for f in files if isinstance(f, str)} if isinstance(files, list) else set()
    config = _read_json(os.path.join(dst, "config.json"))
    if config is not None and "quantization_config" in config:
        for name in os.listdir(dst):
            index = _read_json(os.path.join(dst, name)) if name.endswith("safetensors.index.json") else None
            if index is not None and isinstance(index.get("weight_map"), dict):
                known |= {"config.json", name} | {os.path.normpath(v) for v in index["weight_map"].values()
                                                  if isinstance(v, str) and v.endswith(".safetensors")}
    return stamp, known


def _listed(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def prepare_destination(dst: str, stamp: dict, overwrite: bool) -> bool:
    """Make ``dst`` ready for the run ``stamp`` describes and write the stamp there.

    Parameters
    ----------
    dst : str
        The destination folder (created, with its parents, if missing).
    stamp : dict
        The run: its source, scheme and ignore list, the source shards' sizes and times, and
        ``files``, the relative path of every file it writes.
    overwrite : bool
        Remove the files earlier nbquant runs wrote in ``dst`` (see the module docstring).

    Returns
    -------
    bool
        True if ``dst`` holds an unfinished run of this same conversion (its finished shards are kept).

    Raises
    ------
    ConvertError
        ``dst`` is not a folder; it is not empty and neither ``overwrite`` nor a resume applies;
        or it holds files no nbquant run wrote (named).
    """
    if os.path.lexists(dst) and not os.path.isdir(dst):
        raise ConvertError(f"{dst}: exists and is not a directory" + (" (a broken symlink)" if os.path.islink(dst)
                                                                      else ""))
    os.makedirs(dst, exist_ok=True)
    existing = _entries(dst)
    earlier, known = _earlier_run(dst)
    resume = not overwrite and earlier == json.loads(json.dumps(stamp))
    if existing and not resume and not overwrite:
        raise ConvertError(f"{dst}: exists and is not empty; pass --overwrite (overwrite=True) to replace the output "
                           "of an earlier nbquant run there")
    ours = known | set(stamp["files"]) | {STAMP}
    partials = {_partial(f) for f in ours}
    unexpected = sorted(existing - ours - partials)
    if unexpected:
        raise ConvertError(f"{dst}: holds files no nbquant run wrote: {_listed(unexpected)}; move them away or "
                           "choose another destination (--overwrite removes only an earlier nbquant output)")
    for rel in sorted(existing if overwrite else existing & partials):
        os.unlink(os.path.join(dst, rel))  # a symlink goes, not what it points to
        head = os.path.dirname(rel)
        while head and not os.listdir(os.path.join(dst, head)):  # the folders this emptied
            os.rmdir(os.path.join(dst, head))
            head = os.path.dirname(head)
    tmp = os.path.join(dst, _partial(STAMP))
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(stamp, f)
    os.replace(tmp, os.path.join(dst, STAMP))
    return resume


def copy_into(dst: str, rel: str, source: str) -> None:
    """Copy the file ``source`` to ``dst/rel``: written beside it under a temporary name, then renamed.

    Parameters
    ----------
    dst : str
        The destination folder.
    rel : str
        The file's path relative to ``dst``; its folders are created.
    source : str
        The file to copy (its content: a symlink is read through).

    Raises
    ------
    ConvertError
        A folder on the way in ``dst`` is a symlink (nothing is written through a link; a
        symlink at ``dst/rel`` itself is replaced, not followed).
    """
    folder = dst
    for part in rel.split(os.sep)[:-1]:
        folder = os.path.join(folder, part)
        if os.path.islink(folder):
            raise ConvertError(f"{folder}: a symlink in the destination; remove it (nothing is written through a "
                               "link)")
        if not os.path.isdir(folder):
            os.mkdir(folder)
    tmp = os.path.join(dst, _partial(rel))
    shutil.copyfile(source, tmp)
    os.replace(tmp, os.path.join(dst, rel))
