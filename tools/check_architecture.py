"""Check nbquant's architecture rules from source text alone (``ast`` and the file system; imports nothing).

Each rule is a function ``(root) -> list[str]`` of offenders (empty: it holds), named in :data:`RULES`:

- ``import-cycles``: no cycle among ``nbquant`` modules. Edges: ``import a.b.c`` (to ``a.b.c``, not its parents)
  and ``from x import y`` (relative ones resolved; to ``x.y`` if that is a module, else to ``x``), at module level
  or in functions (lazy imports count). Dynamic imports are seen without following data flow: EVERY non-docstring
  string literal equal to the dotted name of an existing nbquant submodule (``"nbquant.backends.cpu"`` passed to
  ``import_module`` or held in a dict of backend modules) is an edge too.
- ``cuda-imports-no-cpu``, ``element-imports-no-backend``: no import path from the cuda backend (:data:`CUDA_PACKAGE`)
  to the cpu one (:data:`CPU_PACKAGE`), nor from :data:`ELEMENT` to
  :data:`BACKENDS` or anything in it; each offender is a shortest path.
- ``simulator-only-in-runtime``: outside :data:`SIMULATOR_MODULE` no identifier has ``sim``/``simulat...`` as an
  underscore- or camel-case part or ``cudasim`` in it, and no non-docstring string says ``cudasim`` or
  ``simulator`` (case-insensitive). Comments and docstrings may.
- ``layers``: every ``nbquant`` module sits on one of the declared :data:`LAYERS` (ground first) and imports only
  from its own layer and the ones below it (an arrow that runs up is an offender, lazy imports included).
- ``no-private-imports``: no module imports another module's private name (``from x import _y``, or ``m._y`` on an
  imported nbquant module ``m``); private modules (``_memory``, ``_dask``) are the package's and may be imported.
- ``oracle-not-in-production``: no module outside the reference backend (:data:`REFERENCE`) and the registry that
  names it (:data:`BACKENDS`) imports it: the NumPy oracle checks the kernels and never stands in for them.
- ``module-length`` (a warning, never a failure): no ``.py`` file in :data:`LINE_LIMITED_DIRS` has over
  :data:`MAX_LINES` lines; the seams above decide where a module is cut, the line count only flags a long one.
- ``cited-files-exist``: cited paths (``docs/cuda.md``, ``.ci/run``, globs; not build outputs, :data:`BUILD_OUTPUTS`)
  and relative Markdown links exist, and each dotted ``nbquant.x.y`` resolves: its longest prefix is a module or
  package and the next part, if any, a top-level name of it. This file and its test cite the target layout and are
  not scanned.

Offenders listed in :data:`PENDING` (in modules other work is rewriting) are printed as warnings; an entry that no
longer offends fails its rule, so the list only shrinks.

Usage: ``python tools/check_architecture.py [--root DIR] [--rule NAME] [--tree]``; exit status 1 on a violation.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

PACKAGE = "nbquant"
CUDA_PACKAGE = "nbquant.backends.cuda"
CPU_PACKAGE = "nbquant.backends.cpu"
ELEMENT = "nbquant.element"
BACKENDS = "nbquant.backends"
REFERENCE = "nbquant.backends.reference"
SIMULATOR_MODULE = "nbquant/backends/cuda/runtime.py"
MAX_LINES = 800
#: The layers of the package, ground first: modules (or packages, with everything in them) on each. A module may
#: import from its own layer and the ones below; ``nbquant`` alone is the package's ``__init__``.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("nbquant.modes", "nbquant.formats", "nbquant.layout", "nbquant.placement", "nbquant.codes",
                "nbquant.interop", "nbquant.threads", "nbquant._memory", "nbquant._docstrings")),
    ("numerics", ("nbquant.element", "nbquant.spec", "nbquant.validation", "nbquant.blocks", "nbquant.gguf.formats")),
    ("backends", ("nbquant.backends",)),
    ("engines", ("nbquant._dask", "nbquant.reductions", "nbquant.block_rows")),
    ("front doors", ("nbquant.api", "nbquant.dynamic", "nbquant.block_formats", "nbquant.nf4", "nbquant.modelopt",
                     "nbquant.modelopt_ops", "nbquant.modelopt_grad", "nbquant.calibration", "nbquant.gguf")),
    ("front-ends", ("nbquant", "nbquant.compat", "nbquant.convert", "nbquant.demo", "nbquant.cli", "nbquant.precompile",
                    "nbquant.__main__")),
)
#: Known offenders, in modules other work is rewriting (2026-11-26), reported as warnings until they are gone.
#: Private-import entries read ``path: name`` (the line left out, so edits elsewhere in the file do not stale them).
PENDING: dict[str, tuple[str, ...]] = {
    "no-private-imports": (
    ),
    "oracle-not-in-production": (
    ),
}
LINE_LIMITED_DIRS = ("nbquant", "benchmarks", "tools")
CITING_PY_DIRS = ("nbquant", "tests", "tools", "benchmarks", "asv_bench")
CITED_TOP_DIRS = ("nbquant", "tests", "tools", "docs", "benchmarks", "asv_bench", ".ci")
EXCLUDED_PARTS = frozenset({".venv", ".git", "build", "__pycache__"})
#: asv's outputs (asv_bench/asv.conf.json): results, html, and the environments with a checkout of each built commit.
EXCLUDED_DIRS = ("asv_bench/results", "asv_bench/html", "asv_bench/.asv")
NOT_SCANNED_FOR_CITATIONS = ("tools/check_architecture.py", "tests/test_architecture.py")
#: Where builds write (ignored by git): a citation of a path under one names an output, which a clone lacks.
BUILD_OUTPUTS = ("docs/_build/", "docs/_generated/", "asv_bench/results/", "asv_bench/html/", "asv_bench/.asv/")

_TOP_DIRS = "|".join(map(re.escape, CITED_TOP_DIRS))
_CITED_PATH = re.compile(rf"(?<![\w./-])(?:\.\./shared/|(?:{_TOP_DIRS})/)[\w./*-]*")
_MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
_DOTTED_REFERENCE = re.compile(r"(?<![\w./-])nbquant(?:\.[A-Za-z_]\w*)+")
_NAME_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def iter_python_files(root: Path, dirs: Iterable[str]) -> Iterator[Path]:
    """Yield the ``.py`` files under ``root/dir`` for each of ``dirs``, sorted, skipping excluded folders."""
    for folder in dirs:
        for path in sorted((root / folder).rglob("*.py")):
            relative = path.relative_to(root)
            if not EXCLUDED_PARTS.intersection(relative.parts) and not relative.as_posix().startswith(EXCLUDED_DIRS):
                yield path


def file_version(path: Path) -> tuple[str, int, int]:
    """Return ``(path, mtime_ns, size)``: a cache key that changes when the file does."""
    stat = path.stat()
    return str(path), stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=512)
def _parse_cached(path: str, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)


def parse(path: Path) -> ast.Module:
    """Return the syntax tree of ``path``, cached while the file is unchanged."""
    return _parse_cached(*file_version(path))


def discover_modules(root: Path) -> dict[str, Path]:
    """Map each dotted module name under ``root/nbquant`` to its file (a package to its ``__init__.py``)."""
    modules = {}
    for path in iter_python_files(root, [PACKAGE]):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def docstring_nodes(tree: ast.Module) -> set[int]:
    """Return the ``id`` of every docstring constant (module, class and function docstrings) in ``tree``."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str):
                ids.add(id(first.value))
    return ids


def _longest_module_prefix(name: str, modules: dict[str, Path]) -> str | None:
    parts = name.split(".")
    return next((".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in modules), None)


def _resolve_from_base(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def module_imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Return the nbquant modules that ``module`` (its file: ``path``) imports; see the module docstring."""
    tree = parse(path)
    docstrings = docstring_nodes(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [_longest_module_prefix(alias.name, modules) or "" for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from_base(module, path, node)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.append(full if full in modules else _longest_module_prefix(base, modules) or "")
        elif isinstance(node, ast.Constant) and id(node) not in docstrings and isinstance(node.value, str):
            if "." in node.value and node.value in modules:
                targets = [node.value]
        found.update(targets)
    return found - {"", module}


def import_graph(root: Path) -> dict[str, set[str]]:
    """Return the import graph of ``root/nbquant``: each module mapped to the nbquant modules it imports."""
    modules = discover_modules(root)
    return {m: set(e) for m, e in _import_graph_cached(tuple((m, file_version(p)) for m, p in modules.items()))}


@functools.lru_cache(maxsize=8)
def _import_graph_cached(versions: tuple[tuple[str, tuple[str, int, int]], ...]) -> tuple[tuple[str, frozenset], ...]:
    modules = {module: Path(version[0]) for module, version in versions}
    return tuple((m, frozenset(module_imports(m, p, modules))) for m, p in modules.items())


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected components of ``graph`` (by mutual reachability), each sorted."""
    reach = {node: {node, *breadth_first_parents(graph, node)} for node in graph}
    return sorted({tuple(sorted(m for m in reach[node] if node in reach[m])) for node in graph})


def breadth_first_parents(graph: dict[str, set[str]], start: str, allowed: set[str] | None = None) -> dict[str, str]:
    """Map each node reachable from ``start`` by at least one edge to its predecessor on a shortest path."""
    parents: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph.get(node, ())):
            if child not in parents and (allowed is None or child in allowed):
                parents[child] = node
                if child != start:
                    queue.append(child)
    return parents


def path_from_parents(parents: dict[str, str], start: str, goal: str) -> list[str]:
    """Return the path ``start, ..., goal`` that :func:`breadth_first_parents` found (``goal`` may be ``start``)."""
    path, node = [goal], parents[goal]
    while node != start:
        path.append(node)
        node = parents[node]
    return [start, *reversed(path)]


def check_import_cycles(root: Path) -> list[str]:
    """Return one shortest cycle ``a -> b -> ... -> a`` through each module that lies on an import cycle."""
    graph = import_graph(root)
    cycles = set()
    for component in strongly_connected_components(graph):
        for node in component if len(component) > 1 or component[0] in graph[component[0]] else ():
            cycle = path_from_parents(breadth_first_parents(graph, node, set(component)), node, node)[:-1]
            first = cycle.index(min(cycle))
            cycles.add(" -> ".join([*cycle[first:], *cycle[:first], cycle[first]]))
    return sorted(cycles)


def in_package(module: str, package: str) -> bool:
    """Whether ``module`` is ``package`` or inside it."""
    return module == package or module.startswith(f"{package}.")


def forbidden_paths(root: Path, is_source: Callable[[str], bool], is_target: Callable[[str], bool]) -> list[str]:
    """Return a shortest import path from each source module to each target module it reaches first.

    Paths do not pass through another source module: that one reports its own.
    """
    graph = import_graph(root)
    offenders = []
    for source in sorted(filter(is_source, graph)):
        allowed = {m for m in graph if not is_source(m) or m == source}
        parents = breadth_first_parents({m: set() if is_target(m) else e for m, e in graph.items()}, source, allowed)
        for target in sorted(t for t in parents if is_target(t) and t != source):
            offenders.append(" -> ".join(path_from_parents(parents, source, target)))
    return offenders


def check_cuda_imports_no_cpu(root: Path) -> list[str]:
    """Return every import path from a cuda-backend module to a cpu-backend module."""
    return forbidden_paths(root, lambda m: in_package(m, CUDA_PACKAGE), lambda m: in_package(m, CPU_PACKAGE))


def check_element_imports_no_backend(root: Path) -> list[str]:
    """Return every import path from an element module to a backends module."""
    return forbidden_paths(root, lambda m: in_package(m, ELEMENT), lambda m: in_package(m, BACKENDS))


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the layer ``module`` sits on (its longest listed prefix), else None.

    Examples
    --------
    >>> [LAYERS[layer_of(m)][0] for m in ("nbquant.placement", "nbquant.backends.cpu.static", "nbquant")]
    ['ground', 'backends', 'front-ends']
    >>> layer_of("nbquant.unlisted") is None
    True
    """
    best: tuple[int, int] | None = None
    for index, (_, members) in enumerate(LAYERS):
        for member in members:
            if module == member or (member != PACKAGE and module.startswith(f"{member}.")):
                if best is None or len(member) > best[1]:
                    best = (index, len(member))
    return None if best is None else best[0]


def check_layers(root: Path) -> list[str]:
    """Return each module on no layer, and each import that runs up (``a (layer) -> b (higher layer)``)."""
    graph = import_graph(root)
    offenders = []
    for module in sorted(graph):
        own = layer_of(module)
        if own is None:
            offenders.append(f"{module}: on no layer; add it to LAYERS in tools/check_architecture.py")
            continue
        for target in sorted(graph[module]):
            above = layer_of(target)
            if above is not None and above > own:
                offenders.append(f"{module} ({LAYERS[own][0]}) -> {target} ({LAYERS[above][0]}): runs up")
    return offenders


def is_private(name: str) -> bool:
    """Whether ``name`` is private: one leading underscore, not a dunder.

    Examples
    --------
    >>> [is_private(n) for n in ("_check", "__version__", "check", "_")]
    [True, False, False, True]
    """
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def exported_names(path: Path) -> set[str]:
    """The names a module lists in its ``__all__`` (a literal list or tuple at top level); empty without one."""
    for node in parse(path).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and isinstance(node.value,
                                                                                             ast.List | ast.Tuple):
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def private_imports(module: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[int, str]]:
    """Yield ``(line, "x._y")`` for each private name of another nbquant module that ``module`` imports or reads.

    A private name the other module lists in its ``__all__`` is exported on purpose (a peer library's own
    underscore name, such as torchao's ``_choose_qparams_affine_floatx``) and is not reported.
    """
    tree = parse(path)
    bound: dict[str, str] = {}  # a local name -> the nbquant module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound.update({alias.asname: alias.name for alias in node.names if alias.asname and alias.name in modules})
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from_base(module, path, node)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    bound[alias.asname or alias.name] = full
                elif base in modules and base != module and is_private(alias.name) \
                        and alias.name not in exported_names(modules[base]):
                    yield node.lineno, full
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            full = f"{bound[node.value.id]}.{node.attr}"
            target = bound[node.value.id]
            if is_private(node.attr) and full not in modules and target != module \
                    and node.attr not in exported_names(modules[target]):
                yield node.lineno, full


def check_no_private_imports(root: Path) -> list[str]:
    """Return ``path:line: x._y`` for each private name a module takes from another (:func:`private_imports`)."""
    modules = discover_modules(root)
    offenders = []
    for module, path in sorted(modules.items()):
        relative = path.relative_to(root).as_posix()
        offenders += [f"{relative}:{line}: {name}" for line, name in sorted(set(private_imports(module, path,
                                                                                                  modules)))]
    return offenders


def check_oracle_not_in_production(root: Path) -> list[str]:
    """Return ``a -> b`` for each import of the reference backend (:data:`REFERENCE`) from outside it.

    The registry (:data:`BACKENDS`), which names every backend package, is the one module that may.
    """
    graph = import_graph(root)
    return [f"{module} -> {target}" for module in sorted(graph) if module != BACKENDS and not in_package(module,
            REFERENCE) for target in sorted(graph[module]) if in_package(target, REFERENCE)]


def mentions_simulator(identifier: str) -> bool:
    """Whether an identifier names the CUDA simulator.

    Examples
    --------
    >>> [mentions_simulator(n) for n in ("SIMULATOR", "_sim_array", "_SimArray", "ENABLE_CUDASIM", "simulator")]
    [True, True, True, True, True]
    >>> [mentions_simulator(n) for n in ("similar", "simple", "simd", "maximum", "is_simd_ok")]
    [False, False, False, False, False]
    """
    parts = (p.lower() for chunk in identifier.split("_") for p in _NAME_PART.findall(chunk))
    return "cudasim" in identifier.lower() or any(p in ("sim", "sims") or p.startswith("simulat") for p in parts)


def simulator_mentions(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Yield ``(line, description)`` for each identifier or non-docstring string in ``tree`` naming the simulator."""
    docstrings = docstring_nodes(tree)
    for node in ast.walk(tree):
        names: list[str | None] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.arg | ast.keyword):
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [*node.name.split("."), node.asname]
        elif isinstance(node, ast.ImportFrom):
            names = (node.module or "").split(".")
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names = list(node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if "cudasim" in node.value.lower() or "simulator" in node.value.lower():
                yield node.lineno, f"string {node.value!r}"
        for name in filter(None, names):
            if mentions_simulator(name):
                yield node.lineno, f"name {name!r}"


def check_simulator_only_in_runtime(root: Path) -> list[str]:
    """Return ``path:line: name 'x'`` for every simulator mention outside :data:`SIMULATOR_MODULE`."""
    offenders = []
    for path in iter_python_files(root, [PACKAGE]):
        relative = path.relative_to(root).as_posix()
        if relative != SIMULATOR_MODULE:
            offenders += [f"{relative}:{line}: {what}" for line, what in sorted(set(simulator_mentions(parse(path))))]
    return offenders


def count_lines(path: Path) -> int:
    """Return the number of lines of a text file."""
    return len(path.read_text(encoding="utf-8").splitlines())


def check_module_length(root: Path) -> list[str]:
    """Return ``path: N lines`` for each module over :data:`MAX_LINES` lines (a warning: see :data:`WARNINGS`)."""
    counted = ((p.relative_to(root).as_posix(), count_lines(p)) for p in iter_python_files(root, LINE_LIMITED_DIRS))
    return [f"{path}: {n} lines (max {MAX_LINES})" for path, n in counted if n > MAX_LINES]


def citing_files(root: Path) -> list[Path]:
    """Return the files scanned for citations: README, docs Markdown, ``.ci/run`` and the Python sources."""
    files = [root / "README.md", *sorted((root / "docs").rglob("*.md")), root / ".ci" / "run"]
    files += iter_python_files(root, CITING_PY_DIRS)
    return [p for p in files if p.is_file() and p.relative_to(root).as_posix() not in NOT_SCANNED_FOR_CITATIONS]


def top_level_names(tree: ast.Module) -> set[str] | None:
    """Return the names a module defines at top level (``None``: any name, after ``import *`` or ``__getattr__``)."""
    names: set[str] = set()
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if any(alias.name == "*" for alias in node.names):
                return None
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            assigned = {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
            names |= assigned
            if "__all__" in assigned and isinstance(node.value, ast.List | ast.Tuple):
                names.update(e.value for e in node.value.elts if isinstance(e, ast.Constant))
        elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
            pending += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            pending += [statement for handler in getattr(node, "handlers", []) for statement in handler.body]
    return None if "__getattr__" in names else names


def is_stale_reference(reference: str, modules: dict[str, Path]) -> bool:
    """Whether a dotted ``nbquant.x.y`` reference names no module, package or top-level name of one."""
    module = _longest_module_prefix(reference, modules)
    if module is None:
        return PACKAGE in modules
    rest = reference[len(module) + 1:].split(".")[0]
    if not rest or rest.startswith("__"):  # a module attribute such as ``__file__``
        return False
    names = top_level_names(parse(modules[module]))
    return names is not None and rest not in names


def is_build_output(cited: str) -> bool:
    """Whether a cited path names what a build or a run writes (a clone lacks it): :data:`BUILD_OUTPUTS`, or a
    path through an excluded folder such as ``__pycache__`` (Numba's cache directory).

    Examples
    --------
    >>> [is_build_output(p) for p in ("docs/_build/html", "nbquant/backends/cpu/__pycache__", "docs/dask.md")]
    [True, True, False]
    """
    return cited.startswith(BUILD_OUTPUTS) or not EXCLUDED_PARTS.isdisjoint(cited.split("/"))


def cited_path_exists(root: Path, citing: Path, cited: str) -> bool:
    """Whether ``cited`` (globs allowed) exists relative to ``root`` or, for Markdown, to the citing file's folder."""
    bases = [root, citing.parent] if citing.suffix == ".md" else [root]
    return any(any(base.glob(cited)) if "*" in cited else (base / cited).exists() for base in bases)


def citation_problems(root: Path, citing: Path, modules: dict[str, Path]) -> Iterator[tuple[int, str]]:
    """Yield ``(line, problem)`` for each missing path, broken Markdown link or stale dotted reference."""
    for number, line in enumerate(citing.read_text(encoding="utf-8").splitlines(), 1):
        for cited in (m.rstrip(".,;:") for m in _CITED_PATH.findall(line)):
            if is_build_output(cited):
                continue
            if not cited.startswith("../shared/") and not cited_path_exists(root, citing, cited):
                yield number, f"missing path {cited!r}"
        for target in _MARKDOWN_LINK.findall(line) if citing.suffix == ".md" else ():
            target = target.split("#")[0]
            if target and ":" not in target and not cited_path_exists(citing.parent, citing, target):
                yield number, f"broken link {target!r}"
        for reference in _DOTTED_REFERENCE.findall(line):
            if is_stale_reference(reference, modules):
                yield number, f"stale reference {reference!r}"


def check_cited_files_exist(root: Path) -> list[str]:
    """Return ``path:line: problem`` for each citation in code or docs that does not resolve."""
    modules = discover_modules(root)
    offenders = []
    for citing in citing_files(root):
        relative = citing.relative_to(root).as_posix()
        problems = dict.fromkeys(citation_problems(root, citing, modules))
        offenders += [f"{relative}:{line}: {problem}" for line, problem in problems]
    return offenders


RULES: dict[str, Callable[[Path], list[str]]] = {
    "import-cycles": check_import_cycles,
    "cuda-imports-no-cpu": check_cuda_imports_no_cpu,
    "element-imports-no-backend": check_element_imports_no_backend,
    "simulator-only-in-runtime": check_simulator_only_in_runtime,
    "layers": check_layers,
    "no-private-imports": check_no_private_imports,
    "oracle-not-in-production": check_oracle_not_in_production,
    "cited-files-exist": check_cited_files_exist,
}
#: Rules whose offenders are printed but never fail the check.
WARNINGS: dict[str, Callable[[Path], list[str]]] = {
    "module-length": check_module_length,
}
_LINE = re.compile(r":\d+:")


def split_pending(rule: str, offenders: list[str], table: dict[str, tuple[str, ...]] | None = None,
                  ) -> tuple[list[str], list[str]]:
    """Split a rule's offenders into ``(failures, pending)`` by ``table`` (default :data:`PENDING`); a stale entry
    is a failure.

    Examples
    --------
    >>> table = {"oracle-not-in-production": ("nbquant.a -> oracle", "nbquant.b -> oracle")}
    >>> failures, pending = split_pending("oracle-not-in-production", ["nbquant.b -> oracle", "nbquant.x -> oracle"],
    ...                                   table)
    >>> failures
    ['nbquant.x -> oracle', 'PENDING entry no longer offends: nbquant.a -> oracle']
    >>> pending
    ['nbquant.b -> oracle']
    """
    known = (PENDING if table is None else table).get(rule, ())
    keyed = {offender: _LINE.sub(":", offender, count=1) for offender in offenders}
    failures = [offender for offender, key in keyed.items() if key not in known]
    pending = [offender for offender, key in keyed.items() if key in known]
    failures += [f"PENDING entry no longer offends: {entry}" for entry in known if entry not in keyed.values()]
    return failures, pending


def module_tree(root: Path) -> list[str]:
    """Return one line per ``nbquant`` module: path, line count and the first line of its docstring."""
    lines = []
    for path in iter_python_files(root, [PACKAGE]):
        doc = (ast.get_docstring(parse(path)) or "").strip().splitlines()
        lines.append(f"{path.relative_to(root).as_posix():<44} {count_lines(path):>5}  {doc[0] if doc else ''}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print each rule's result (or the module tree with ``--tree``); return 1 if any rule fails, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="repository root")
    parser.add_argument("--tree", action="store_true", help="print path, lines and docstring of each module")
    parser.add_argument("--rule", action="append", choices=[*RULES, *WARNINGS],
                        help="run only this rule (repeatable)")
    args = parser.parse_args(argv)
    if args.tree:
        print("\n".join(module_tree(args.root)))
        return 0
    start = time.perf_counter()
    failed = False
    for name in args.rule or [*RULES, *WARNINGS]:
        if name in WARNINGS:
            failures, warnings = [], WARNINGS[name](args.root)
        else:
            failures, warnings = split_pending(name, RULES[name](args.root))
        failed = failed or bool(failures)
        print(f"{name}: ok" if not failures else f"{name}: {len(failures)} offender(s)")
        print("".join(f"  {offender}\n" for offender in failures), end="")
        print("".join(f"  warning: {offender}\n" for offender in warnings), end="")
    print(f"({time.perf_counter() - start:.2f} s)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
