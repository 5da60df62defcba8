"""Collection rules for the whole repository (the tests' own fixtures and options are in tests/conftest.py)."""

from __future__ import annotations

import importlib.util


def pytest_ignore_collect(collection_path, config):
    """Skip the doctests of nbquant's dask engine where dask is not installed (the parity environment)."""
    if "_dask" in collection_path.parts and collection_path.suffix == ".py":
        return importlib.util.find_spec("dask") is None
    return None
