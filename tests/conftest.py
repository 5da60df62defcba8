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
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

COMPILED_BACKENDS = [b for b in os.environ.get("NBQUANT_TEST_BACKENDS", "cpu").split(",") if b]
TIERS = ("default", "full")

# ``max_examples`` of a property that sets none; tests that set their own count scale it by
# ``default / full`` (``_helpers.examples``), so the full tier keeps each test's own count.
settings.register_profile("default", max_examples=25, deadline=None)
settings.register_profile("full", max_examples=100, deadline=None)


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", default=False,
                     help="nbquant: run the full test tier (tests marked 'full', full hypothesis counts, the whole "
                          "suite under the CUDA simulator, PTX for every arch); also NBQUANT_TEST_TIER=full")


def tier(config) -> str:
    """``"full"`` with ``--full`` or ``NBQUANT_TEST_TIER=full``, else ``"default"``."""
    env = os.environ.get("NBQUANT_TEST_TIER", "") or "default"
    if env not in TIERS:
        raise pytest.UsageError(f"NBQUANT_TEST_TIER={env!r}: expected one of {TIERS}")
    return "full" if config.getoption("--full") else env


def pytest_configure(config):
    chosen = tier(config)
    if not config.getoption("hypothesis_profile", None):  # an explicit --hypothesis-profile wins
        settings.load_profile(chosen)


def pytest_report_header(config):
    return f"nbquant test tier: {tier(config)} (hypothesis max_examples={settings.default.max_examples})"


def pytest_collection_modifyitems(config, items):
    if tier(config) == "full":
        return
    for item in items:
        marker = item.get_closest_marker("full")
        if marker is not None:
            why = marker.kwargs.get("reason", "full tier only")
            item.add_marker(pytest.mark.skip(reason=f"{why}; run with `python -m pytest --full` (docs/testing.md)"))


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
