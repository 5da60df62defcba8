"""Collection rules for the whole repository (the tests' own fixtures and options are in tests/conftest.py)."""

from __future__ import annotations

import importlib.util


def pytest_ignore_collect(collection_path, config):
    """Skip the doctests of modules whose imports are not installed here: nbquant's dask engine without dask (the
    parity environment), the real-client harness ``tests/_clients.py`` without torch and transformers (the
    default environment)."""
    if "_dask" in collection_path.parts and collection_path.suffix == ".py":
        return importlib.util.find_spec("dask") is None
    if collection_path.name == "_clients.py":
        return any(importlib.util.find_spec(m) is None for m in ("torch", "transformers", "loguru"))
    return None
