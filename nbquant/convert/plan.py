"""What ``nbquant convert`` reads and writes, decided before any tensor is touched.

* :func:`open_checkpoint`: the source folder, its shards (the top-level files
  ``*.safetensors.index.json`` names, or every top-level ``*.safetensors`` without one), the
  headers, and the other files to copy (sub-folders included). The source is untrusted: a shard
  name with a folder, ``..`` or an absolute path, a tensor of a shard the index leaves out, and
  a symlink resolving outside the folder (:func:`trusted_roots`) are refused before any shard
  is opened.
* :func:`matches`: llm-compressor's choice of tensors to quantize (``match_quantizable_tensors``):
  every ``<module>.weight`` whose module name does not end with ``norm`` (the automatic ignore)
  and matches no ``--ignore`` entry (a module name, or ``re:<pattern>`` matched from the start
  with :func:`re.match`).
* :func:`jobs`: one job per output shard. For NVFP4 (a global scale shared by fused weights)
  the partners of a primary weight (``k_proj``/``v_proj`` of ``q_proj``, ``up_proj`` of
  ``gate_proj``, ``wkv_a_with_mqa`` of ``wq_a``, ``w3`` of ``w1``) move to the primary's shard,
  wherever they were, as ``model_free_ptq`` moves them.
* :func:`fused_groups`: the weights of a job that share one global scale (llm-compressor's
  ``get_fused_names``: natural order, complete sets only).
* :func:`items`: the output tensors of a source tensor: itself, or, for a 3-D fused MoE tensor
  (``gate_up_proj``, ``down_proj``), one 2-D weight per expert and projection
  (llm-compressor's ``split_fused_moe_experts``).

Examples
--------
>>> matches(["model.norm.weight", "lm_head.weight", "model.layers.0.mlp.up_proj.weight",
...          "model.layers.0.mlp.up_proj.bias"], ["lm_head"])
{'model.layers.0.mlp.up_proj.weight': 'model.layers.0.mlp.up_proj'}
>>> dependencies("model.layers.3.self_attn.q_proj.weight")
['model.layers.3.self_attn.k_proj.weight', 'model.layers.3.self_attn.v_proj.weight']
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field

from .safetensors import ConvertError, SafetensorsFile
from .untrusted_json import UntrustedJSONError, loads

__all__ = ["Checkpoint", "Item", "open_checkpoint", "is_within", "trusted_roots", "matches", "skip_reason",
           "dependencies", "jobs", "fused_groups", "items", "UNSPLIT_MODEL_TYPES"]

#: Primary weight pattern → its partners (llm-compressor's ``DEFAULT_FUSED_MAPPINGS``).
FUSED_PARTNERS: dict[str, list[str]] = {
    r"^(?P<prefix>.+?)\.(?P<attn>attn|attention|self_attn|self_attention)\.q_proj\.weight$":
        ["{prefix}.{attn}.k_proj.weight", "{prefix}.{attn}.v_proj.weight"],
    r"^(?P<prefix>.+?)\.(?P<attn>attn|attention|self_attn)\.wq_a\.weight$": ["{prefix}.{attn}.wkv_a_with_mqa.weight"],
    r"^(?P<prefix>.+?)\.(?P<mlp>mlp|feed_forward)\.gate_proj\.weight$": ["{prefix}.{mlp}.up_proj.weight"],
    r"^(?P<prefix>.+?)\.w1\.weight$": ["{prefix}.w3.weight"],
}
#: The sets whose weights share a global scale (llm-compressor's ``_DEFAULT_FUSED_MAPPINGS_LIST``).
FUSED_SETS: list[list[str]] = [
    [r"re:.*(attn|attention)\.q_proj\.weight$", r"re:.*(attn|attention)\.k_proj\.weight$",
     r"re:.*(attn|attention)\.v_proj\.weight$"],
    [r"re:.*(attn|attention)\.wq_a\.weight$", r"re:.*(attn|attention)\.wkv_a_with_mqa\.weight$"],
    [r"re:.*mlp\.gate_proj\.weight$", r"re:.*mlp\.up_proj\.weight$"],
    [r"re:.*w1\.weight$", r"re:.*w3\.weight$"],
]
#: Paths (relative to the source) that are neither copied nor read.
_SKIPPED_PATHS = (".cache", ".gitattributes")


@dataclass
class Checkpoint:
    """A source checkpoint folder.

    Attributes
    ----------
    root : str
    shards : dict[str, SafetensorsFile]
        Shard file name (relative to ``root``) → its header.
    weight_map : dict[str, str]
        Tensor name → shard file name, in the index's order (or the shards' order).
    index_name : str
        The index file name written to the destination (the source's, or
        ``model.safetensors.index.json``).
    other_files : list[str]
        Relative paths of the files copied as they are (tokenizer, generation config ...).
    config : dict
        ``config.json``.
    notes : list[str]
        What reading the source left out (a GGUF source: :mod:`nbquant.convert.sources.gguf`), for the report.
    generated : dict[str, str]
        Files written from the source's metadata: relative path → text (a GGUF source's tokenizer files).
    """

    root: str
    shards: dict[str, SafetensorsFile]
    weight_map: dict[str, str]
    index_name: str
    other_files: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    generated: dict[str, str] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        """The tensors' data bytes over all shards."""
        return sum(e.nbytes for f in self.shards.values() for e in f.entries.values())

    @property
    def roots(self) -> list[str]:
        """The real folders the source reads from (:func:`trusted_roots`), the source folder first."""
        return trusted_roots(self.root)


def is_within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or inside it (both absolute, with their symlinks resolved).

    Examples
    --------
    >>> is_within("/a/b/c", "/a/b"), is_within("/a/bc", "/a/b"), is_within("/a/b", "/a/b")
    (True, False, True)
    """
    return path == root or path.startswith(os.path.join(root, ""))


def trusted_roots(src: str) -> list[str]:
    """The real folders the files of ``src`` may resolve into, ``src`` itself (symlinks resolved) first.

    A Hugging Face cache snapshot (``models--<org>--<name>/snapshots/<revision>``) holds symlinks
    into the ``blobs`` folder beside ``snapshots``: that folder is the second root.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> trusted_roots(d) == [os.path.realpath(d)]
    True
    """
    real = os.path.realpath(src)
    snapshots = os.path.dirname(real)
    blobs = os.path.join(os.path.dirname(snapshots), "blobs")
    hub = os.path.basename(snapshots) == "snapshots" and \
        os.path.basename(os.path.dirname(snapshots)).startswith("models--") and \
        os.path.isdir(blobs) and not os.path.islink(blobs)
    return [real, blobs] if hub else [real]


def _walk(src: str, roots: list[str]) -> list[str]:
    """Relative paths of the regular files under ``src``, symlinks followed only where they resolve into ``roots``.

    A symlink resolving anywhere else, a symlink loop, a special file (pipe, socket, device) or
    an unreadable entry raises :class:`ConvertError` naming it.
    """
    out: list[str] = []

    def visit(rel_folder: str, ancestors: set[str]) -> None:
        folder = os.path.join(src, rel_folder)
        try:
            names = sorted(os.listdir(folder))
        except OSError as e:
            raise ConvertError(f"{folder}: cannot read: {e.strerror or e}") from None
        for name in names:
            rel = os.path.join(rel_folder, name) if rel_folder else name
            if rel.startswith(_SKIPPED_PATHS):
                continue
            path = os.path.join(src, rel)
            real = os.path.realpath(path)
            if not any(is_within(real, root) for root in roots):
                raise ConvertError(f"{path}: a symlink to {real}, outside the source folder; nbquant reads nothing "
                                   "outside it: copy the file in or remove the link")
            try:
                mode = os.stat(real).st_mode
            except OSError as e:
                raise ConvertError(f"{path}: cannot read: {e.strerror or e}") from None
            if stat.S_ISDIR(mode):
                if real in ancestors:
                    raise ConvertError(f"{path}: a symlink to {real}, a folder that contains it (a loop); remove "
                                       "the link")
                visit(rel, ancestors | {real})
            elif stat.S_ISREG(mode):
                out.append(rel)
            else:
                raise ConvertError(f"{path}: not a regular file (a pipe, socket or device); remove it")

    visit("", {roots[0]})
    return out


def _load_json(path: str) -> dict:
    """The JSON object in file ``path`` (``config.json``, the index), or a one-line :class:`ConvertError`."""
    try:
        with open(path, encoding="utf-8") as f:
            data = loads(f.read())
    except OSError as e:
        raise ConvertError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConvertError(f"{path}: not valid UTF-8 ({e}); fix or re-download the file") from None
    except UntrustedJSONError as e:
        raise ConvertError(f"{path}: {e}; fix or re-download the file") from None
    if not isinstance(data, dict):
        raise ConvertError(f"{path}: expected a JSON object")
    return data


def open_checkpoint(src: str, quantized: bool = False) -> Checkpoint:
    """Read the folder ``src``: its config, index and shard headers (no tensor data).

    The shards are top-level ``*.safetensors`` files: those the index names (plain file names;
    a folder, ``..`` or an absolute path is refused before anything is opened), or every one
    without an index. Every other file, in sub-folders too, is copied as it is. Nothing outside
    :func:`trusted_roots` is read: a symlink resolving elsewhere is refused.

    Raises :class:`ConvertError` with one line naming the file for a missing or unreadable
    folder, a missing ``config.json``, no ``*.safetensors``, a damaged index or header, an
    index that names a missing shard or tensor or that leaves out a tensor of a shard, a
    symlink out of the folder, a symlink loop or a special file; and for a ``config.json`` with a
    ``quantization_config`` unless ``quantized`` (``nbquant inspect`` reads converted checkpoints).
    """
    if not os.path.isdir(src):
        raise ConvertError(f"{src}: no such directory" if not os.path.exists(src) else f"{src}: not a directory")
    if not os.access(src, os.R_OK | os.X_OK):
        raise ConvertError(f"{src}: cannot read the directory (permission denied)")
    files = _walk(src, trusted_roots(src))
    top = [f for f in files if os.sep not in f]
    if "config.json" not in top:
        raise ConvertError(f"{os.path.join(src, 'config.json')}: missing; a Hugging Face checkpoint folder has "
                           "config.json beside its *.safetensors shards")
    config = _load_json(os.path.join(src, "config.json"))
    if "quantization_config" in config and not quantized:
        raise ConvertError(f"{os.path.join(src, 'config.json')}: already has a quantization_config; convert an "
                           "unquantized checkpoint")
    indexes = [f for f in top if f.endswith("safetensors.index.json")]
    tensors_files = [f for f in top if f.endswith(".safetensors")]
    if not tensors_files:
        raise ConvertError(f"{src}: no *.safetensors files at its top level")
    if indexes:
        index_name = "model.safetensors.index.json" if "model.safetensors.index.json" in indexes else indexes[0]
        index_path = os.path.join(src, index_name)
        weight_map = _load_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ConvertError(f"{index_path}: no weight_map of tensor names to shard files")
        names = list(dict.fromkeys(weight_map.values()))
        for name in names:
            if name not in tensors_files and not re.fullmatch(r"[^/\\:\0]+\.safetensors", name):
                raise ConvertError(f"{index_path}: names the shard {name!r}, which is not a *.safetensors file name "
                                   "at the top of the folder (no folder, '..' or absolute path); fix the index")
            if name not in tensors_files:
                raise ConvertError(f"{os.path.join(src, name)}: missing (named in {index_name})")
        for extra in sorted(set(tensors_files) - set(names)):
            raise ConvertError(f"{os.path.join(src, extra)}: not in {index_name}; remove it or add it to the index")
        shards = {name: SafetensorsFile(os.path.join(src, name)) for name in names}
        for tensor, shard in weight_map.items():
            if tensor not in shards[shard].entries:
                raise ConvertError(f"{os.path.join(src, shard)}: has no tensor {tensor} (named in {index_name})")
        for name, f in shards.items():
            for tensor in f.entries:
                if weight_map.get(tensor) != name:
                    raise ConvertError(f"{os.path.join(src, name)}: tensor {tensor} is not in {index_name}" +
                                       (f" (it names {weight_map[tensor]})" if tensor in weight_map else "") +
                                       "; every tensor of a shard must be in the index's weight_map")
    else:
        index_name = "model.safetensors.index.json"
        shards = {name: SafetensorsFile(os.path.join(src, name)) for name in tensors_files}
        weight_map = {}
        for name, f in shards.items():
            for tensor in f.entries:
                if tensor in weight_map:
                    raise ConvertError(f"{os.path.join(src, name)}: tensor {tensor} is also in {weight_map[tensor]}")
                weight_map[tensor] = name
    other = [f for f in files if f not in tensors_files and f not in indexes and f != "config.json"]
    return Checkpoint(src, shards, weight_map, index_name, other, config)


def match_name(name: str, target: str) -> bool:
    """compressed-tensors' ``match_name``: ``re:<pattern>`` is :func:`re.match`, anything else equality."""
    return re.match(target[3:], name) is not None if target.startswith("re:") else target == name


def skip_reason(name: str, ignore: Iterable[str]) -> str | None:
    """Why tensor ``name`` is not quantized, or None if it is.

    Examples
    --------
    >>> skip_reason("model.norm.weight", []), skip_reason("lm_head.weight", ["re:lm_"])
    ('module name ends with norm (automatic ignore)', 'ignored (re:lm_)')
    """
    module, _, param = name.rpartition(".")
    if module.endswith("norm"):
        return "module name ends with norm (automatic ignore)"
    if param != "weight":
        return f"not a weight ({param})"
    for target in ignore:
        if match_name(module, target):
            return f"ignored ({target})"
    return None


def matches(names: Iterable[str], ignore: Iterable[str]) -> dict[str, str]:
    """The tensors to quantize, name → module name (see the module docstring)."""
    ignore = list(ignore)
    return {n: n.rpartition(".")[0] for n in names if skip_reason(n, ignore) is None}


def dependencies(name: str) -> list[str]:
    """The partners that must be quantized together with weight ``name`` (NVFP4), in pattern order."""
    deps: list[str] = []
    for pattern, partners in FUSED_PARTNERS.items():
        m = re.match(pattern, name)
        if m:
            deps += [p.format(**m.groupdict()) for p in partners if p.format(**m.groupdict()) not in deps]
    return deps


def jobs(ckpt: Checkpoint, fused: bool) -> dict[str, list[str]]:
    """Output shard → the tensors it holds; with ``fused``, partners join their primary's shard.

    Shards left with no tensor are not written (``model_free_ptq`` fails on them).
    """
    deps = {n: _all_dependencies(n) for n in ckpt.weight_map} if fused else {}
    partners = set().union(*deps.values()) if deps else set()
    out: dict[str, list[str]] = {}
    for name, shard in ckpt.weight_map.items():
        if name in partners:
            continue
        job = out.setdefault(shard, [])
        for t in [name, *deps.get(name, [])]:
            if t not in ckpt.weight_map:
                raise ConvertError(f"tensor {t}: the fused partner of {name} is not in the checkpoint (NVFP4 shares "
                                   "one global scale across q/k/v and gate/up)")
            job.append(t)
    return {shard: out[shard] for shard in ckpt.shards if shard in out}


def _all_dependencies(name: str) -> set[str]:
    seen: set[str] = set()
    todo = dependencies(name)
    while todo:
        d = todo.pop()
        if d not in seen and d != name:
            seen.add(d)
            todo += dependencies(d)
    return seen


def _natural_key(s: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def fused_groups(names: Iterable[str]) -> list[list[str]]:
    """Complete fused sets among ``names`` (llm-compressor's ``get_fused_names``), each in set order.

    Examples
    --------
    >>> fused_groups(["l.1.mlp.up_proj.weight", "l.1.mlp.gate_proj.weight", "l.2.mlp.gate_proj.weight"])
    [['l.1.mlp.gate_proj.weight', 'l.1.mlp.up_proj.weight']]
    """
    ordered = sorted(names, key=_natural_key)
    groups: list[list[str]] = []
    for targets in FUSED_SETS:
        current: dict[str, str | None] = dict.fromkeys(targets)
        for name in ordered:
            for t in targets:
                if match_name(name, t):
                    if current[t] is not None:
                        raise ConvertError(f"tensor {name}: fused weights {current[t]} and {name} both match {t} "
                                           "before their set is complete")
                    current[t] = name
            if all(v is not None for v in current.values()):
                groups.append([current[t] for t in targets])
                current = dict.fromkeys(targets)
    return groups


#: Models whose 3-D expert tensors are not the layout :func:`items` cuts (``[E, 2I, H]``, gate rows then up rows):
#: gpt-oss stores ``gate_up_proj`` as ``[E, H, 2I]`` with gate and up columns interleaved, so its experts are never
#: cut; they are kept as they are (their names end in ``gate_up_proj``/``down_proj``: not a Linear ``weight``).
UNSPLIT_MODEL_TYPES = frozenset({"gpt_oss"})
#: 3-D fused MoE tensors → the per-expert projections they are cut into (``split_fused_moe_experts``).
MOE_SPLITS: dict[str, list[str]] = {"gate_up_proj": ["gate_proj", "up_proj"], "down_proj": ["down_proj"]}


@dataclass(frozen=True)
class Item:
    """One tensor of the output before quantization: a source tensor, or rows of one expert of a fused MoE tensor.

    Attributes
    ----------
    name : str
        Its name in the output (quantized: the module name plus the scheme's suffixes).
    source : str
        The source tensor.
    shape : tuple of int
    expert : int or None
        The expert index into a 3-D source (None: the whole source).
    rows : tuple of int
        ``(start, stop)`` rows of that expert's matrix.
    """

    name: str
    source: str
    shape: tuple[int, ...]
    expert: int | None = None
    rows: tuple[int, int] = (0, 0)

    def offset(self, begin: int, bits: int, source_shape: tuple[int, ...]) -> int:
        """Byte offset of the item's data in the file, given its source's ``begin`` offset, bits per element and shape.

        Bits, not bytes: the experts of a packed F4/F6 tensor are cut out of it only where they start on a byte.
        """
        if self.expert is None:
            return begin
        at = (self.expert * source_shape[1] + self.rows[0]) * source_shape[2] * bits
        if at % 8:
            raise ConvertError(f"tensor {self.source}: its experts' rows of {bits}-bit elements do not start on a "
                               "byte, so they cannot be cut out of it; convert without splitting this tensor")
        return begin + at // 8


def items(name: str, shape: tuple[int, ...]) -> list[Item]:
    """The output tensors of source tensor ``name``: itself, or its experts' 2-D projections.

    Examples
    --------
    >>> [i.name for i in items("m.experts.gate_up_proj", (2, 8, 4))]  # doctest: +NORMALIZE_WHITESPACE
    ['m.experts.0.gate_proj.weight', 'm.experts.0.up_proj.weight', 'm.experts.1.gate_proj.weight',
     'm.experts.1.up_proj.weight']
    >>> items("m.experts.1.down_proj.weight", (4, 8))[0].shape
    (4, 8)
    """
    keys = [k for k in MOE_SPLITS if k in name]
    if len(keys) >= 2:
        raise ConvertError(f"tensor {name}: its name holds both {' and '.join(keys)}; llm-compressor cannot tell "
                           "which fused MoE projection it is")
    if len(keys) == 1 and len(shape) == 3:
        parts = MOE_SPLITS[keys[0]]
        if shape[1] % len(parts):
            raise ConvertError(f"tensor {name}: a fused {keys[0]} of shape {tuple(shape)} needs dimension 1 "
                               f"divisible by {len(parts)}")
        rows = shape[1] // len(parts)
        out = []
        for e in range(shape[0]):
            for i, part in enumerate(parts):
                key = name.replace(keys[0], f"{e}.{part}")
                key = key if key.endswith(".weight") else key + ".weight"
                out.append(Item(key, name, (rows, shape[2]), e, (i * rows, (i + 1) * rows)))
        return out
    return [Item(name, name, tuple(shape))]
