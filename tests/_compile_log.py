"""``NBQUANT_COMPILE_LOG=FILE python -m pytest``: which tests compile which Numba kernel signatures, how long.

A pytest plugin (tests/conftest.py registers it when the variable is set) that listens to
Numba's ``numba:compile`` events (outermost compiles only: one per kernel signature; a
signature loaded from the on-disk cache is no compile) and charges each to the test running.
At the end of the session it writes one JSON line per compile to ``FILE`` (test, kernel,
signature, wall and cpu seconds of the compiling thread) and prints the tests that spent the
most compiling. Run it with an empty ``NUMBA_CACHE_DIR`` to see what a cold run (a fresh
clone) compiles.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest


class CompileLog:
    """The plugin: the compiles of each test, written to ``path`` when the session ends."""

    def __init__(self, path: str) -> None:
        from numba.core import event

        self.path, self.test, self.rows, self.stack = path, "(collection)", [], []
        plugin = self

        class Listener(event.Listener):
            def on_start(self, ev) -> None:
                plugin.stack.append((time.perf_counter(), time.thread_time()))

            def on_end(self, ev) -> None:
                wall, cpu = plugin.stack.pop()
                if not plugin.stack:
                    d = ev.data["dispatcher"]
                    plugin.rows.append({"test": plugin.test, "kernel": d.py_func.__qualname__,
                                        "signature": ", ".join(map(str, ev.data["args"])),
                                        "wall_s": time.perf_counter() - wall, "cpu_s": time.thread_time() - cpu})

        event.register("numba:compile", Listener())

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.test = item.nodeid
        yield
        self.test = "(between tests)"

    def pytest_sessionfinish(self, session) -> None:
        with open(self.path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in self.rows)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        per_test = Counter()
        for row in self.rows:
            per_test[row["test"]] += row["cpu_s"]
        total = sum(per_test.values())
        terminalreporter.write_sep("=", f"numba compiles: {len(self.rows)} signatures, {total:.1f} s cpu "
                                        f"(written to {self.path})")
        for test, seconds in per_test.most_common(15):
            count = sum(row["test"] == test for row in self.rows)
            terminalreporter.write_line(f"{seconds:8.1f} s cpu {count:4d} signatures  {test}")
