"""Writing a file's data to disk while the job goes on: a background ``fdatasync`` every :data:`SYNC_BYTES`.

A converted file is synced before it takes its final name, so that a crash never leaves a complete-looking
file with missing data. Synced only at the end, a file of gigabytes waits seconds for the disk after the
last byte is written; synced in the background as it grows, the disk writes overlap the conversion and the
final ``fsync`` has little left to do. Both writers of ``nbquant convert`` use it: the safetensors shards
(:class:`~nbquant.convert.safetensors.ShardWriter`) and the GGUF job's output.

Examples
--------
>>> import os, tempfile
>>> fd = os.open(os.path.join(tempfile.mkdtemp(), "f"), os.O_RDWR | os.O_CREAT)
>>> sync = BackgroundSync(fd, every=4)
>>> _ = os.write(fd, b"abcd"); sync.written(4)   # a sync starts on the background thread
>>> sync.close(); os.close(fd)                   # waits for it (its error, if any, raised here)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["SYNC_BYTES", "BackgroundSync"]

#: Bytes written between two background syncs.
SYNC_BYTES = 64 << 20


def _datasync(fd: int) -> None:
    getattr(os, "fdatasync", os.fsync)(fd)


class BackgroundSync:
    """Hands the data written to ``fd`` to a thread to ``fdatasync`` every ``every`` bytes, one sync at a time.

    Parameters
    ----------
    fd : int
        The file descriptor; it must stay open until :meth:`close` returns.
    every : int, optional
        Bytes written between two syncs (default :data:`SYNC_BYTES`).
    before : callable, optional
        Called before each sync starts (a buffered file's ``flush``, so that its data is in the kernel).
    """

    def __init__(self, fd: int, every: int | None = None, before: Callable[[], None] | None = None) -> None:
        self.fd, self.every, self.before = fd, SYNC_BYTES if every is None else every, before
        self._unsynced = 0
        self._pending: Future | None = None
        self._pool: ThreadPoolExecutor | None = None

    def written(self, nbytes: int) -> None:
        """Count ``nbytes`` written; start a sync when enough are and none is in flight (an earlier one's error is
        raised here)."""
        self._unsynced += nbytes
        if self._unsynced >= self.every and (self._pending is None or self._pending.done()):
            self._unsynced = 0
            self.wait()
            if self.before is not None:
                self.before()
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="nbquant-sync")
            self._pending = self._pool.submit(_datasync, self.fd)

    def wait(self) -> None:
        """Wait for the sync in flight (its error raised here)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Wait for the sync in flight and stop the thread (the error of the sync, if any, raised here)."""
        try:
            self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
