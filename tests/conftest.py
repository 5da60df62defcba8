"""Shared test configuration.

``NBQUANT_TEST_BACKENDS`` (comma-separated, default ``"cpu"``) lists the compiled
backends the backend-parametrised tests run on; every one is compared bit for bit
with the ``reference`` backend. The CUDA simulator run sets it to ``"cuda"``.
"""

from __future__ import annotations

import os

import pytest

COMPILED_BACKENDS = [b for b in os.environ.get("NBQUANT_TEST_BACKENDS", "cpu").split(",") if b]


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
