"""The architecture rules of ``tools/check_architecture.py``: on the real tree, and the checker itself.

``test_tree_*`` run one rule each on this repository; a failure lists every offender. The other tests run the
checker on tiny synthetic trees in ``tmp_path``. The checker reads source text only, so none of this depends on a
backend (``nosim``: not re-run under the CUDA simulator).
"""

from __future__ import annotations

import ast
import doctest
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKER_PATH = ROOT / "tools" / "check_architecture.py"
_spec = importlib.util.spec_from_file_location("check_architecture", CHECKER_PATH)
checker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checker)

pytestmark = pytest.mark.nosim


def assert_rule_holds(rule: str, root: Path = ROOT) -> None:
    """Fail with ``rule: N offender(s)`` and one offender a line unless ``rule`` holds on ``root``.

    Offenders listed in the checker's ``PENDING`` pass (as the checker's own run prints them: warnings).
    """
    offenders, _ = checker.split_pending(rule, checker.RULES[rule](root))
    if offenders:
        pytest.fail(f"{rule}: {len(offenders)} offender(s)\n" + "\n".join(f"  {o}" for o in offenders), pytrace=False)


def make_tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> dedented text) under ``root``, with an empty ``nbquant/__init__.py``."""
    for relative, text in {"nbquant/__init__.py": "", **files}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


# --- the real tree -------------------------------------------------------------------------------------------


def test_tree_no_import_cycles():
    assert_rule_holds("import-cycles")


def test_tree_cuda_imports_no_cpu():
    assert_rule_holds("cuda-imports-no-cpu")


def test_tree_element_imports_no_backend():
    assert_rule_holds("element-imports-no-backend")


def test_tree_simulator_only_in_runtime():
    assert_rule_holds("simulator-only-in-runtime")


def test_tree_layers():
    assert_rule_holds("layers")


def test_tree_no_private_imports():
    assert_rule_holds("no-private-imports")


def test_tree_oracle_not_in_production():
    assert_rule_holds("oracle-not-in-production")


def test_tree_module_length_is_a_warning_only():
    assert "module-length" in checker.WARNINGS and "module-length" not in checker.RULES
    checker.check_module_length(ROOT)  # runs; its offenders are printed, never a failure


def test_tree_cited_files_exist():
    assert_rule_holds("cited-files-exist")


def test_tree_checker_runs_every_rule_from_a_cold_cache():
    """Every rule runs on the tree with nothing cached (its speed is not a test's business: a loaded machine
    must not turn a test red)."""
    checker._parse_cached.cache_clear()
    checker._import_graph_cached.cache_clear()
    for name, rule in {**checker.RULES, **checker.WARNINGS}.items():
        rule(ROOT)  # raises on a rule that cannot run; the test_tree_* tests assert each rule's verdict
        assert name


def test_tree_cli_prints_one_line_per_module():
    res = subprocess.run([sys.executable, str(CHECKER_PATH), "--tree"], capture_output=True, text=True, check=True)
    paths = [line.split()[0] for line in res.stdout.splitlines()]
    assert paths == [p.relative_to(ROOT).as_posix() for p in checker.iter_python_files(ROOT, ["nbquant"])]
    assert "nbquant/__init__.py" in paths


# --- the checker ---------------------------------------------------------------------------------------------


def test_checker_imports_only_the_standard_library():
    tree = ast.parse(CHECKER_PATH.read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_checker_doctests():
    results = doctest.testmod(checker)
    assert results.attempted and not results.failed


def test_cycle_through_a_lazy_import_is_found(tmp_path):
    make_tree(tmp_path, {
        "nbquant/a.py": "from . import b\n",
        "nbquant/b.py": "def load():\n    from .a import thing\n    return thing\n",
        "nbquant/c.py": "from .a import thing\n",
    })
    assert checker.check_import_cycles(tmp_path) == ["nbquant.a -> nbquant.b -> nbquant.a"]


def test_cycle_through_a_module_name_passed_to_import_module_is_found(tmp_path):
    make_tree(tmp_path, {
        "nbquant/registry.py": """
            import importlib
            _MODULES = {"cpu": "nbquant.cpu"}

            def load(name):
                return importlib.import_module(_MODULES[name])
        """,
        "nbquant/cpu.py": '"""nbquant.registry"""\nimport nbquant.registry\n',
        "nbquant/other.py": '"""nbquant.cpu"""\nLABEL = "nbquant"\n',
    })
    assert checker.check_import_cycles(tmp_path) == ["nbquant.cpu -> nbquant.registry -> nbquant.cpu"]
    graph = checker.import_graph(tmp_path)
    assert graph["nbquant.other"] == set()  # a docstring and the bare package name are no edges


def test_three_module_cycle_is_reported_once(tmp_path):
    make_tree(tmp_path, {
        "nbquant/x.py": "from .y import f\n",
        "nbquant/y.py": "from .z import f\n",
        "nbquant/z.py": "def f():\n    from . import x\n",
    })
    assert checker.check_import_cycles(tmp_path) == ["nbquant.x -> nbquant.y -> nbquant.z -> nbquant.x"]


def test_relative_imports_resolve(tmp_path):
    make_tree(tmp_path, {
        "nbquant/pkg/__init__.py": "from . import mod\nfrom .mod import thing\n",
        "nbquant/pkg/mod.py": "from ..other import thing\nfrom .. import helper\nfrom . import sibling\n",
        "nbquant/pkg/sibling.py": "",
        "nbquant/other.py": "thing = 1\n",
        "nbquant/helper.py": "",
    })
    graph = checker.import_graph(tmp_path)
    assert graph["nbquant.pkg"] == {"nbquant.pkg.mod"}
    assert graph["nbquant.pkg.mod"] == {"nbquant.other", "nbquant.helper", "nbquant.pkg.sibling"}
    assert checker.check_import_cycles(tmp_path) == []


def test_from_package_import_edges_to_the_submodule_and_dotted_import_to_the_leaf_only(tmp_path):
    make_tree(tmp_path, {
        "nbquant/backends/__init__.py": "def use_backend(): ...\n",
        "nbquant/backends/cpu.py": "",
        "nbquant/user.py": "from nbquant.backends import cpu, use_backend\n",
        "nbquant/dotted.py": "import numpy as np\nimport nbquant.backends.cpu\n",
    })
    graph = checker.import_graph(tmp_path)
    assert graph["nbquant.user"] == {"nbquant.backends.cpu", "nbquant.backends"}
    assert graph["nbquant.dotted"] == {"nbquant.backends.cpu"}


def test_cuda_reaching_cpu_is_reported_with_its_path(tmp_path):
    make_tree(tmp_path, {
        "nbquant/backends/__init__.py": "",
        "nbquant/backends/cuda/__init__.py": "from . import kernels\n",
        "nbquant/backends/cuda/kernels.py": "def f():\n    from nbquant import helpers\n",
        "nbquant/helpers.py": "from nbquant.backends.cpu import quantize\n",
        "nbquant/backends/cpu/__init__.py": "from .blocks import quantize\n",
        "nbquant/backends/cpu/blocks.py": "def quantize(): ...\n",
        "nbquant/backends/cudalike.py": "from .cpu import quantize\n",
    })
    assert checker.check_cuda_imports_no_cpu(tmp_path) == [
        "nbquant.backends.cuda.kernels -> nbquant.helpers -> nbquant.backends.cpu",
    ]


def test_element_reaching_a_backend_is_reported(tmp_path):
    make_tree(tmp_path, {
        "nbquant/element/__init__.py": "from .core import f\n",
        "nbquant/element/core.py": "def f():\n    from nbquant.backends import registry\n",
        "nbquant/backends/__init__.py": "registry = {}\n",
        "nbquant/backends_notes.py": "",
        "nbquant/elementary.py": "import nbquant.backends\n",
    })
    assert checker.check_element_imports_no_backend(tmp_path) == ["nbquant.element.core -> nbquant.backends"]


def test_simulator_in_docstrings_and_comments_is_allowed_but_not_in_code(tmp_path):
    make_tree(tmp_path, {
        "nbquant/kernels.py": '''
            """Kernels; under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) they run as Python."""
            # the simulator is slow
            similar = simple = simd_width = maximum = 1
            SIMULATOR = False


            def launch(n, simulator=False):
                """Launch; ``simulator`` picks the small simulator grid."""
                env = "NUMBA_ENABLE_CUDASIM"
                return _sim_grid(n), f"the simulator: {n}", env


            class _SimArray:
                pass
        ''',
        "nbquant/backends/cuda/runtime.py": "from numba.cuda.core import config\nSIMULATOR = config.ENABLE_CUDASIM\n",
    })
    assert checker.check_simulator_only_in_runtime(tmp_path) == [
        "nbquant/kernels.py:5: name 'SIMULATOR'",
        "nbquant/kernels.py:8: name 'simulator'",
        "nbquant/kernels.py:10: string 'NUMBA_ENABLE_CUDASIM'",
        "nbquant/kernels.py:11: name '_sim_grid'",
        "nbquant/kernels.py:11: string 'the simulator: '",
        "nbquant/kernels.py:14: name '_SimArray'",
    ]


@pytest.mark.parametrize(("name", "expected"), [
    ("SIMULATOR", True), ("_sim_array", True), ("_SIM_THREADS", True), ("_SimArray", True), ("simulator", True),
    ("ENABLE_CUDASIM", True), ("cudasim_plugin", True), ("simulated", True),
    ("similar", False), ("simple", False), ("simd", False), ("maximum", False), ("isSimilar", False), ("", False),
])
def test_mentions_simulator(name, expected):
    assert checker.mentions_simulator(name) is expected


def test_module_over_800_lines_is_a_warning(tmp_path, capsys):
    make_tree(tmp_path, {
        "nbquant/api.py": "x = 1\n" * 801,
        "nbquant/dynamic.py": "x = 1\n" * 800,
        "tools/long_tool.py": "x = 1\n" * 900,
        "tests/test_long.py": "x = 1\n" * 900,
    })
    assert checker.check_module_length(tmp_path) == [
        "nbquant/api.py: 801 lines (max 800)", "tools/long_tool.py: 900 lines (max 800)"]
    assert checker.main(["--root", str(tmp_path), "--rule", "module-length"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "module-length: ok", "  warning: nbquant/api.py: 801 lines (max 800)",
        "  warning: tools/long_tool.py: 900 lines (max 800)"]


def test_an_import_that_runs_up_a_layer_and_a_module_on_no_layer_are_reported(tmp_path):
    make_tree(tmp_path, {
        "nbquant/placement.py": "from ._dask import engine\n",  # ground -> engines: up
        "nbquant/_dask/__init__.py": "",
        "nbquant/_dask/engine.py": "from ..backends import registry\nfrom .. import placement\n",  # down: fine
        "nbquant/backends/__init__.py": "",
        "nbquant/backends/registry.py": "def lazy():\n    from ..api import quantize\n",  # lazy counts too
        "nbquant/api.py": "from . import dynamic\n",  # a sibling front door: same layer, fine
        "nbquant/dynamic.py": "",
        "nbquant/q9k.py": "",
    })
    assert checker.check_layers(tmp_path) == [
        "nbquant.backends.registry (backends) -> nbquant.api (front doors): runs up",
        "nbquant.placement (ground) -> nbquant._dask.engine (engines): runs up",
        "nbquant.q9k: on no layer; add it to LAYERS in tools/check_architecture.py",
    ]


def test_private_names_of_other_modules_are_reported(tmp_path):
    make_tree(tmp_path, {
        "nbquant/threads.py": "_requested = []\n_lock = None\n",
        "nbquant/peer.py": "__all__ = ['_peer_name']\ndef _peer_name(): ...\ndef _hidden(): ...\n",
        "nbquant/_memory.py": "def host_empty(): ...\n",
        "nbquant/user.py": """
            from . import _memory, threads as threads_module
            from .peer import _peer_name, _hidden
            from ._memory import host_empty
            from .threads import __doc__

            def f():
                return threads_module._requested, threads_module.__name__, _memory.host_empty, _hidden
        """,
        "nbquant/threads_user.py": "import nbquant.threads as t\nx = t._lock\n",
    })
    assert checker.check_no_private_imports(tmp_path) == [
        "nbquant/threads_user.py:2: nbquant.threads._lock",
        "nbquant/user.py:3: nbquant.peer._hidden",
        "nbquant/user.py:8: nbquant.threads._requested",
    ]


def test_the_reference_backend_imported_outside_the_registry_is_reported(tmp_path):
    make_tree(tmp_path, {
        "nbquant/backends/__init__.py": "PACKAGES = {'reference': 'nbquant.backends.reference'}\n",
        "nbquant/backends/reference/__init__.py": "from . import static\n",
        "nbquant/backends/reference/static.py": "",
        "nbquant/backends/cpu/__init__.py": "",
        "nbquant/backends/cpu/dynamic.py": "def fallback():\n    from ..reference import BACKEND\n",
    })
    assert checker.check_oracle_not_in_production(tmp_path) == [
        "nbquant.backends.cpu.dynamic -> nbquant.backends.reference"]


def test_pending_offenders_are_warnings_and_a_stale_entry_fails(monkeypatch):
    monkeypatch.setattr(checker, "PENDING", {"no-private-imports": ("a.py: nbquant.x._y", "b.py: nbquant.x._z")})
    failures, pending = checker.split_pending("no-private-imports", ["a.py:12: nbquant.x._y", "c.py:3: nbquant.x._w"])
    assert pending == ["a.py:12: nbquant.x._y"]
    assert failures == ["c.py:3: nbquant.x._w", "PENDING entry no longer offends: b.py: nbquant.x._z"]


def test_a_cited_cache_directory_is_a_build_output(tmp_path):
    make_tree(tmp_path, {"docs/dask.md": "the cache (`nbquant/backends/cpu/__pycache__`, or NUMBA_CACHE_DIR)\n",
                         "nbquant/backends/cpu/__init__.py": ""})
    assert checker.check_cited_files_exist(tmp_path) == []


def test_missing_cited_file_is_reported(tmp_path):
    make_tree(tmp_path, {
        "README.md": """
            See `docs/guide.md`, [the guide](docs/guide.md) and `docs/missing.md`.
            Tests: tests/test_*.py and tests/test_gone_*.py; https://example.com/nbquant/x.py; ../shared/notes.md.
        """,
        "docs/guide.md": "[index](compat/index.md), [gone](compat/gone.md#part), [web](https://x.org/a.md), (#top)\n",
        "docs/compat/index.md": "Back to [the guide](../guide.md); `docs/compat/index.md`; `.ci/run`.\n",
        "tests/test_a.py": "",
        "nbquant/api.py": '"""Api, see nbquant/backends/cpu.py."""\n# and tools/gone.py\n',
        "nbquant/backends/cpu.py": "",
        ".ci/run": "python tools/ptx_check.py\n",
    })
    assert checker.check_cited_files_exist(tmp_path) == [
        "README.md:2: missing path 'docs/missing.md'",
        "README.md:3: missing path 'tests/test_gone_*.py'",
        "docs/guide.md:1: broken link 'compat/gone.md'",
        ".ci/run:1: missing path 'tools/ptx_check.py'",
        "nbquant/api.py:2: missing path 'tools/gone.py'",
    ]


def test_stale_dotted_reference_is_reported(tmp_path):
    make_tree(tmp_path, {
        "nbquant/__init__.py": "from .api import quantize\n__all__ = ['quantize', 'lazy']\n",
        "nbquant/api.py": "try:\n    import numba\nexcept ImportError:\n    numba = None\nLIMIT: int = 3\n",
        "README.md": "`nbquant.api.numba`, `nbquant.api.LIMIT`, `nbquant.api.gone`, :func:`nbquant.quantize`\n"
                     "`nbquant.lazy`, `nbquant.backends.cpu`, `nbquant.__version__`, nbquant.api.numba.njit\n",
    })
    assert checker.check_cited_files_exist(tmp_path) == [
        "README.md:1: stale reference 'nbquant.api.gone'",
        "README.md:2: stale reference 'nbquant.backends.cpu'",
    ]


def test_main_prints_each_rule_and_exits_1_on_a_violation(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(checker, "PENDING", {})
    make_tree(tmp_path, {"nbquant/api.py": "from . import dynamic\n", "nbquant/dynamic.py": "from . import api\n"})
    assert checker.main(["--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == ["import-cycles: 1 offender(s)", "  nbquant.api -> nbquant.dynamic -> nbquant.api"]
    assert "module-length: ok" in out and "cited-files-exist: ok" in out
    (tmp_path / "nbquant" / "dynamic.py").write_text("VALUE = 2\n", encoding="utf-8")
    assert checker.main(["--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{rule}: ok" for rule in [*checker.RULES, *checker.WARNINGS]]


def test_tree_option_lists_path_lines_and_docstring(tmp_path, capsys):
    make_tree(tmp_path, {"nbquant/__init__.py": '"""The package.\n\nMore."""\n', "nbquant/bare.py": "x = 1\n"})
    assert checker.main(["--root", str(tmp_path), "--tree"]) == 0
    assert [line.split(None, 2) for line in capsys.readouterr().out.splitlines()] == [
        ["nbquant/__init__.py", "3", "The package."], ["nbquant/bare.py", "1"]]
