"""Subprocesses started when collection ends and collected by their tests, so they overlap the in-process tests.

The CUDA simulator run and the PTX check (tests/test_cuda_simulator.py, tests/test_ptx.py)
are single subprocesses of a minute or more; the in-process tests spend a cold run
compiling Numba kernels on one core. A test marked ``background(job=make_job)`` gets its
subprocess started by tests/conftest.py when collection ends (``make_job(full_tier)``
returns a :class:`Job`, or None when there is nothing to run) and reads its result
through the ``background_result`` fixture. Background processes run at a lower priority
(``nice -n 5`` where it exists), so the in-process tests keep one core. ``python tests/_background.py warm``
is the Numba cache warm-up job (:func:`warm_numba_cache`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

NICE = 5


@dataclass(frozen=True)
class Job:
    """A command to run in the background.

    Parameters
    ----------
    cmd : list of str
        The command line.
    cwd : pathlib.Path
        Its working directory.
    env : dict of str to str
        Its whole environment.
    timeout : float
        Seconds it may take from its start before :meth:`Running.result` kills it.
    """

    cmd: list[str]
    cwd: Path
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    timeout: float = 900.0

    def start(self) -> Running:
        """Start the command (at a lower priority where ``nice`` exists)."""
        return Running(self)


@dataclass(frozen=True)
class Finished:
    """What a background command did: exit status, output (stdout and stderr interleaved), wall seconds."""

    returncode: int
    output: str
    seconds: float


class Running:
    """A started :class:`Job`; :meth:`result` waits for it, :meth:`kill` stops it."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self._out = tempfile.TemporaryFile()
        self._start = time.perf_counter()
        nice = shutil.which("nice")
        cmd = [nice, "-n", str(NICE), *job.cmd] if nice else job.cmd
        self._proc = subprocess.Popen(cmd, cwd=job.cwd, env=job.env, stdout=self._out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL)

    def result(self) -> Finished:
        """Wait for the command (until ``timeout`` from its start), then return what it did.

        Raises
        ------
        subprocess.TimeoutExpired
            After killing a command that ran past its timeout.
        """
        left = self.job.timeout - (time.perf_counter() - self._start)
        try:
            self._proc.wait(timeout=max(left, 0.0))
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._out.seek(0)
        output = self._out.read().decode(errors="replace")
        self._out.close()
        return Finished(self._proc.returncode, output, time.perf_counter() - self._start)

    def kill(self) -> None:
        """Stop the command if it still runs."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


def warm_numba_cache() -> None:
    """Compile the cpu kernel signatures that cost the most to compile (a cold-cache speed-up, nothing else).

    A cold run compiles about 100 cpu kernel signatures, one after another, as tests
    first need them; ``dynamic_rows`` alone takes about half a minute per signature, and
    the GGUF K-quant and IQ4 kernels half a minute to three minutes each (half the cold
    default tier, measured 2026-11-27). Compiling these in a second process fills
    Numba's on-disk cache while the in-process tests compile the rest; a test that gets
    there first compiles it itself. The GGUF formats go first and in the reverse of the
    order ``tests/test_block_registry.py`` reaches them, so the two processes compile
    from opposite ends. What this calls changes no result, only when the compile happens.
    """
    import ml_dtypes
    import numpy as np

    import nbquant
    from nbquant import gguf

    for name in reversed(gguf.implemented_formats()):  # one quantize and one dequantize signature each (float32)
        block = gguf.get_format(name).block_size
        gguf.dequantize(gguf.quantize(np.ones((1, block), np.float32), name, backend="cpu"), name, backend="cpu")
    x = np.random.default_rng(0).standard_normal((6, 16)).astype(np.float32)
    nbquant.quantize_dynamic(x, "int16", axis=0, backend="cpu")
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float64):
        xx = x.astype(dtype)
        nbquant.modelopt.fake_tensor_quant(xx, None, 8, axis=0, backend="cpu")
        nbquant.quantize(xx, 0.5, "float4_e2m1fn", packed=True, backend="cpu")
        nbquant.quantize(xx, 0.5, "uint4", packed=True, backend="cpu")


if __name__ == "__main__":
    if sys.argv[1:] != ["warm"]:
        sys.exit(f"usage: {sys.argv[0]} warm")
    warm_numba_cache()
