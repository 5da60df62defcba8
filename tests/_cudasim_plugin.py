"""pytest plugin for the CUDA-simulator run (loaded with ``-p _cudasim_plugin`` by test_cuda_simulator.py).

Keeps the tests that exercise a compiled backend, i.e. those that use the ``backend``
fixture (run here with ``NBQUANT_TEST_BACKENDS=cuda``), the tests in
``test_cuda_simulator.py`` and those marked ``gpu`` (which skip under the simulator; a run on a real
GPU uses this plugin too, ``tools/gpu_check.sh``); deselects everything else and every test marked ``nosim``
(the tests that spawn this run, the PTX compile check, CLI tests...).
"""

from __future__ import annotations


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        wanted = ("backend" in getattr(item, "fixturenames", ()) or item.path.name == "test_cuda_simulator.py"
                  or item.get_closest_marker("gpu") is not None)
        (keep if wanted and item.get_closest_marker("nosim") is None else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
