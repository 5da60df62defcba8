"""Shared test configuration: the backend fixture and the two test tiers.

``NBQUANT_TEST_BACKENDS`` (comma-separated, default ``"cpu"``) lists the compiled
backends the backend-parametrised tests run on; every one is compared bit for bit
with the ``reference`` backend. The CUDA simulator run sets it to ``"cuda"``.

Tiers (docs/testing.md):

* **default** (``python -m pytest``): every test not marked ``full``, hypothesis
  profile ``default`` (fewer examples), the CUDA simulator on the kernel-family module
  only, the PTX check for one architecture.
* **full** (``python -m pytest --full``, or ``NBQUANT_TEST_TIER=full``): also the tests
  marked ``full`` (exhaustive sweeps, parity against installed peers), hypothesis profile
  ``full`` (today's example counts), the whole backend suite under the CUDA simulator, the
  PTX check for every architecture.
* **parity** (``python -m pytest --parity``, in an environment with ``pip install -e ".[parity]"``):
  only the tests marked ``parity``, against the live peers (torch CPU, torchao, onnx, onnxruntime,
  nvidia-modelopt); a missing peer is an error, not a skip. The other tiers skip these tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _background import Job, Running
from hypothesis import settings

COMPILED_BACKENDS = [b for b in os.environ.get("NBQUANT_TEST_BACKENDS", "cpu").split(",") if b]
TIERS = ("default", "full")
#: The peers the parity tier runs against (module names; docs/testing.md); installed by the ``parity`` extra.
PARITY_PEERS = ("torch", "torchao", "onnx", "onnxruntime", "modelopt.torch.quantization", "llmcompressor",
                "safetensors", "transformers", "sentencepiece")
ROOT = Path(__file__).resolve().parents[1]
#: A session with at least this many cpu-backend tests starts the Numba cache warm-up (tests/_background.py).
WARM_UP_FROM = 200
#: Background subprocesses of this session: the warm-up, and one per test marked ``background``.
_RUNNING: dict[str, Running] = {}

# ``max_examples`` of a property that sets none; tests that set their own count scale it by
# ``default / full`` (``_helpers.examples``), so the full tier keeps each test's own count.
settings.register_profile("default", max_examples=25, deadline=None)
settings.register_profile("full", max_examples=100, deadline=None)


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", default=False,
                     help="nbquant: run the full test tier (tests marked 'full', full hypothesis counts, the whole "
                          "suite under the CUDA simulator, PTX for every arch); also NBQUANT_TEST_TIER=full")
    parser.addoption("--parity", action="store_true", default=False,
                     help="nbquant: run only the tests marked 'parity', against the live peers (pip install -e "
                          "'.[parity]'); a missing peer is an error")


def tier(config) -> str:
    """``"full"`` with ``--full`` or ``NBQUANT_TEST_TIER=full``, else ``"default"``."""
    env = os.environ.get("NBQUANT_TEST_TIER", "") or "default"
    if env not in TIERS:
        raise pytest.UsageError(f"NBQUANT_TEST_TIER={env!r}: expected one of {TIERS}")
    return "full" if config.getoption("--full") else env


def pytest_configure(config):
    chosen = tier(config)
    if os.environ.get("NBQUANT_COMPILE_LOG"):  # which tests compile which kernels (tests/_compile_log.py)
        from _compile_log import CompileLog

        config.pluginmanager.register(CompileLog(os.environ["NBQUANT_COMPILE_LOG"]), "nbquant-compile-log")
    if config.getoption("--parity"):
        _require_peers()
    if not config.getoption("hypothesis_profile", None):  # an explicit --hypothesis-profile wins
        settings.load_profile("full" if config.getoption("--parity") else chosen)  # parity: full example counts


def _require_peers() -> None:
    """Import every parity peer, or stop the session naming the ones missing (a parity run never skips a peer)."""
    import importlib
    import warnings

    missing = []
    for name in PARITY_PEERS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importlib.import_module(name)
        except ImportError as e:
            missing.append(f"{name} ({e})")
    if missing:
        raise pytest.UsageError(f"--parity needs the peers installed: missing {', '.join(missing)}; run "
                                "`pip install -e '.[parity]'` (docs/testing.md)")


def pytest_report_header(config):
    return f"nbquant test tier: {tier(config)} (hypothesis max_examples={settings.default.max_examples})"


def pytest_collection_modifyitems(config, items):
    if config.getoption("--parity"):
        selected = [item for item in items if item.get_closest_marker("parity") is not None]
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("parity") is None])
        items[:] = selected
        return
    for item in items:
        if item.get_closest_marker("parity") is not None:
            item.add_marker(pytest.mark.skip(reason="parity against a live peer; run `python -m pytest --parity` "
                                                    "with the parity extra (docs/testing.md)"))
    if tier(config) == "full":
        return
    for item in items:
        marker = item.get_closest_marker("full")
        if marker is not None:
            why = marker.kwargs.get("reason", "full tier only")
            item.add_marker(pytest.mark.skip(reason=f"{why}; run with `python -m pytest --full` (docs/testing.md)"))


def pytest_collection_finish(session):
    """Start the subprocesses of the selected tests marked ``background``, and the cache warm-up of a broad run."""
    if session.config.option.collectonly:
        return
    full = tier(session.config) == "full"
    cpu_tests = sum(getattr(item, "callspec", None) is not None and item.callspec.params.get("backend") == "cpu"
                    for item in session.items)
    if cpu_tests >= WARM_UP_FROM:  # warm this checkout's cache: its nbquant first on the path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        _RUNNING["warm-up"] = Job([sys.executable, str(ROOT / "tests" / "_background.py"), "warm"], ROOT, env).start()
    for item in session.items:
        marker = item.get_closest_marker("background")
        job = marker.kwargs["job"](full) if marker is not None else None
        if job is not None:
            _RUNNING[item.nodeid] = job.start()


def pytest_sessionfinish(session):
    while _RUNNING:
        _RUNNING.popitem()[1].kill()


@pytest.fixture
def background_result(request, full_tier):
    """What this test's background subprocess did (``background(job=...)`` marker), or None when it had none.

    It was started when collection ended (and is started here if it was not).
    """
    running = _RUNNING.pop(request.node.nodeid, None)
    if running is None:
        job = request.node.get_closest_marker("background").kwargs["job"](full_tier)
        if job is None:
            return None
        running = job.start()
    try:
        return running.result()
    except subprocess.TimeoutExpired:
        pytest.fail(f"background job timed out after {running.job.timeout:.0f}s and was killed: {running.job.cmd}")


@pytest.fixture(scope="session")
def full_tier(pytestconfig) -> bool:
    """Whether this session runs the full tier (``--full`` or ``NBQUANT_TEST_TIER=full``)."""
    return tier(pytestconfig) == "full"


@pytest.fixture(params=COMPILED_BACKENDS)
def backend(request) -> str:
    """A compiled backend under test (compare its results with ``backend="reference"``).

    A test or module marked ``pytest.mark.not_on_backend("cuda", reason=...)`` is
    skipped for the backends named, with that reason (an operation that backend lacks).
    """
    marker = request.node.get_closest_marker("not_on_backend")
    if marker is not None and request.param in marker.args:
        pytest.skip(f"{request.param}: {marker.kwargs.get('reason', 'not available on this backend')}")
    return request.param
