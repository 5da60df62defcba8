"""``nbquant convert --scheduler ADDRESS``: the output shards written by the workers of a ``dask.distributed`` cluster.

The client (:func:`nbquant.convert.convert`) plans, prepares ``dst`` and checks for a resumable
run exactly as a local run does; :func:`write_shards` then submits one task per shard still to
write. A task maps the source tensors from the paths in its plan (a filesystem the workers share
with the client), writes its shard to ``.<name>.partial``, syncs and renames it (or deletes it on
a failure), and sends its progress, a batch at most every 0.1 s, through a ``distributed.Queue``
that the client reads into its own progress bar. The shards are independent: NVFP4's fused
partners are planned into one shard, whose task computes their shared global scale. The index,
``config.json`` and the stamp's removal stay on the client, after every shard is written.

This module imports ``distributed`` only inside :func:`write_shards` and the task, so that a
local conversion never imports dask.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable

from .report import Progress, TensorReport
from .safetensors import ConvertError

__all__ = ["write_shards", "ShardFeed"]

#: The most often a task sends its progress, in seconds (the client polls as often).
INTERVAL = 0.1


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise ConvertError('--scheduler needs dask.distributed: pip install "nbquant[dask]"') from None
    return distributed


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


class ShardFeed:
    """A task's progress: ``update(nbytes, tensors=1)`` as :class:`~nbquant.convert.report.Progress`, sent in batches.

    Parameters
    ----------
    queue : str
        The name of the run's ``distributed.Queue``.
    shard : str
        The shard the task writes; each message is ``(shard, nbytes, tensors)``.

    Examples
    --------
    >>> sent = []
    >>> feed = ShardFeed("q", "a.safetensors", send=sent.append)
    >>> feed.update(10); feed.update(5); feed.flush()
    >>> sum(m[1] for m in sent), sum(m[2] for m in sent)
    (15, 2)
    """

    def __init__(self, queue: str, shard: str, send: Callable[[tuple], None] | None = None) -> None:
        self.queue, self.shard, self._send = queue, shard, send
        self.nbytes = self.tensors = 0
        self.last = time.perf_counter()

    def update(self, nbytes: int, tensors: int = 1) -> None:
        """Count ``tensors`` more tensors of ``nbytes`` source bytes; send them if :data:`INTERVAL` has passed."""
        self.nbytes += nbytes
        self.tensors += tensors
        if time.perf_counter() - self.last >= INTERVAL:
            self.flush()

    def flush(self) -> None:
        """Send what was counted since the last send (nothing if nothing was)."""
        if self.tensors or self.nbytes:
            if self._send is None:
                self._send = _import_distributed().Queue(self.queue).put
            self._send((self.shard, self.nbytes, self.tensors))
            self.nbytes = self.tensors = 0
        self.last = time.perf_counter()


def _task(write_shard: Callable, path: str, plan, codec, check: tuple[bool, bool], threads: int | None,
          queue: str, shard: str) -> list[TensorReport]:
    """One shard on a worker: ``write_shard`` (:func:`nbquant.convert.run.write_shard`) with a :class:`ShardFeed`."""
    if threads is None:  # the worker's cores shared among its task threads
        affinity = getattr(os, "sched_getaffinity", None)
        cores = len(affinity(0)) if affinity else (os.cpu_count() or 1)
        threads = max(1, cores // max(1, _import_distributed().get_worker().state.nthreads))
    feed = ShardFeed(queue, shard)
    try:
        return write_shard(path, plan, codec, check, feed, threads)
    finally:
        feed.flush()


def write_shards(address: str, dst: str, todo: dict, codec, check: tuple[bool, bool], threads: int | None,
                 bar: Progress, say: Callable[[str], None], write_shard: Callable) -> dict[str, list[TensorReport]]:
    """Write the shards of ``todo`` (name → ``ShardPlan``) into ``dst`` on the cluster at ``address``.

    Parameters
    ----------
    address : str
        The scheduler's address.
    dst : str
        The output folder, an absolute path the workers can write.
    todo : dict
        Shard name → its plan (picklable: entries, items and the source files' headers and paths).
    codec : Codec
        The codec writing the weights (:func:`nbquant.convert.codecs.codec_for`; pickled to the workers).
    check : tuple of bool
        ``(check, full_check)`` of :func:`~nbquant.convert.convert`.
    threads : int or None
        The kernels' threads in each task (None: the worker's cores over its threads).
    bar : Progress
        Fed with the tasks' progress.
    say : callable
        Called with ``wrote <shard>`` as each shard is finished.
    write_shard : callable
        The task body, :func:`nbquant.convert.run.write_shard` (passed in: this module does not import ``run``).

    Returns
    -------
    dict
        Shard name → the reports of its quantized weights.

    Raises
    ------
    ConvertError
        No ``distributed`` installed, or no scheduler at ``address``; a task's error is re-raised as
        it was raised on the worker, after the other tasks are cancelled.
    """
    distributed = _import_distributed()
    try:
        client = distributed.Client(address, set_as_default=False)
    except (OSError, ValueError, TypeError) as e:  # TimeoutError is an OSError
        raise ConvertError(f"scheduler {address}: cannot connect: {_first_line(e)}") from None
    with client:
        name = f"nbquant-convert-{uuid.uuid4().hex}"
        queue = distributed.Queue(name, client=client)
        futures = {client.submit(_task, write_shard, os.path.join(dst, shard), plan, codec, check, threads, name,
                                 shard, key=f"{name}-{i}", pure=False): shard
                   for i, (shard, plan) in enumerate(todo.items())}
        totals = {shard: [sum(plan.nbytes(i) for i in plan.items), len(plan.items)] for shard, plan in todo.items()}
        reports: dict[str, list[TensorReport]] = {}
        pending = set(futures)
        try:
            while pending:
                for shard, nbytes, tensors in queue.get(batch=True):
                    if shard not in reports:  # a late message of a shard already counted whole is dropped
                        totals[shard][0] -= nbytes
                        totals[shard][1] -= tensors
                        bar.update(nbytes, tensors)
                for future in [f for f in pending if f.done()]:
                    pending.discard(future)
                    shard = futures[future]
                    reports[shard] = future.result()  # a task's error is raised here
                    bar.update(max(totals[shard][0], 0), max(totals[shard][1], 0))
                    say(f"wrote {shard}")
                if pending:
                    time.sleep(INTERVAL)
        except BaseException:
            client.cancel(list(pending))  # a running task cannot be stopped: it finishes or deletes its file
            raise
    return reports
