"""``convert``: a Hugging Face safetensors checkpoint in, a compressed-tensors checkpoint out, one tensor at a time.

The steps: read the source headers and plan every output shard (names, dtypes, shapes),
checking every weight against the scheme before anything is written; copy the other files;
write each shard to a temporary name (each weight mapped, quantized and written, then
dropped), sync it and rename it; then write the index and ``config.json``. A stamp file
(``.nbquant-convert.json``) records the run and every file it writes while it is in progress:
rerunning the same conversion keeps the shards already finished and redoes the rest; any other
leftover in ``dst`` needs ``overwrite=True``, which removes only what nbquant wrote there
(:mod:`nbquant.convert.destination`).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..threads import thread_limit
from .arguments import check_arguments
from .codecs import Codec, WeightError, dequantize_weight, quantize_weight
from .destination import STAMP, check_destination, copy_into, prepare_destination
from .plan import UNSPLIT_MODEL_TYPES, Checkpoint, Item, fused_groups, items, jobs, open_checkpoint
from .policy import Selection, select
from .report import Progress, Report, TensorReport, sqnr_db
from .safetensors import BITS, ConvertError, SafetensorsFile, ShardWriter, layout, sync_dir
from .schemes import Scheme, quantization_config
from .sources import Decoded, DecodedFile, codec_of, dense_kept, encode, encoding, first_decoded, open_source
from .sources.gguf import is_gguf, open_gguf

__all__ = ["convert", "Job", "STAMP", "CHECK_ELEMENTS"]

#: At most this many elements of each weight (whole rows, every k-th) are dequantized for the report.
CHECK_ELEMENTS = 1 << 16


@dataclass
class ShardPlan:
    """One output shard: its tensors' entries, its items, and which items it quantizes (name → module)."""

    entries: list
    items: list[Item]
    quantized: dict[str, str]
    sources: dict[str, SafetensorsFile]

    def entry(self, item: Item):
        """The source entry of ``item``."""
        return self.sources[item.source].entries[item.source]

    def nbytes(self, item: Item) -> int:
        """The source bytes of ``item``."""
        return math.prod(item.shape) * BITS[self.entry(item).dtype] // 8


@dataclass(frozen=True)
class Job:
    """One conversion as :func:`convert` was asked for it, every argument checked.

    Attributes
    ----------
    source, destination : str
        The checkpoint folders, as given.
    scheme : Scheme
        The preset; :attr:`codec` writes its weights.
    group_name : str
        The scheme as the caller spelled it: the config group's key, and the stamp's.
    ignore : list of str
        The ``ignore`` patterns; ``default_ignore`` adds :mod:`nbquant.convert.policy`'s.
    default_ignore, check, full_check, overwrite : bool
        As :func:`convert` takes them.
    progress : bool or None
        Draw the bar (None: when stderr is a terminal).
    log : callable
        Called with one line per step.
    scheduler : str or None
        A ``dask.distributed`` scheduler address (None: this process writes the shards).
    workers : int or None
        The kernels' threads (per task with a ``scheduler``).
    """

    source: str
    destination: str
    scheme: Scheme
    group_name: str
    ignore: list[str]
    default_ignore: bool
    check: bool
    full_check: bool
    overwrite: bool
    progress: bool | None
    log: Callable[[str], None]
    scheduler: str | None
    workers: int | None

    @cached_property
    def codec(self) -> Codec:
        """The codec of :attr:`scheme`'s format."""
        return codec_of(self.scheme)


def _plan(ckpt: Checkpoint, codec: Codec, ignore: list[str],
          default_ignore: bool) -> tuple[dict[str, ShardPlan], Selection]:
    """Every output shard, planned, and what is kept: every bad weight or ignore pattern raises here, before
    anything is written. A BF16/F16/F32 scheme writes the decoded weights of a quantized source, and keeps the rest."""
    whole = codec.format == "dense" or ckpt.config.get("model_type") in UNSPLIT_MODEL_TYPES  # no tensor cut up
    split = (lambda n, s: [Item(n, n, tuple(s))]) if whole else items
    cut = {shard: [(name, split(name, ckpt.shards[ckpt.weight_map[name]].entries[name].shape)) for name in names]
           for shard, names in jobs(ckpt, fused=codec.fused).items()}
    sel = select(ckpt.config, {i.name: i.shape for job in cut.values() for _, its in job for i in its}, ignore,
                 default_ignore)
    if codec.format == "dense":  # the decoded weights are written, everything else kept
        sel.kept = dense_kept(sel.kept, [i.name for job in cut.values() for _, its in job for i in its], ckpt)
    plans = {}
    for shard, job in cut.items():
        entries, quantized, shard_items = [], {}, []
        sources = {n: ckpt.shards[ckpt.weight_map[n]] for n, _ in job}
        for name, name_items in job:
            e = sources[name].entries[name]
            for item in name_items:
                shard_items.append(item)
                if item.name not in sel.kept:
                    codec.check(item.name, e.numpy_dtype if e.numpy_dtype is not None else e.dtype, item.shape)
                    module = item.name.rpartition(".")[0]
                    quantized[item.name] = module
                    entries += [(_written(item.name, suffix, codec), dt, shape) for suffix, dt, shape in
                                codec.entries(item.shape, e.numpy_dtype)]
                else:
                    entries.append((item.name, e.dtype, item.shape))
        seen: set[str] = set()
        for out_name, _, _ in entries:
            if out_name in seen:
                raise ConvertError(f"tensor {out_name}: written twice in {shard} (the checkpoint already holds "
                                   "quantized tensors?)")
            seen.add(out_name)
        plans[shard] = ShardPlan(entries, shard_items, quantized, sources)
    return plans, sel


def _written(name: str, suffix: str, codec: Codec) -> str:
    """The output name of tensor ``suffix`` of weight ``name``: its module's, or for BF16/F16/F32 the weight's own
    (a decoded gpt-oss ``experts.gate_up_proj``)."""
    return name if codec.format == "dense" else f"{name.rpartition('.')[0]}.{suffix}"


def _stamp(ckpt: Checkpoint, scheme_name: str, ignore: list[str], default_ignore: bool = True) -> dict:
    """The run, as its stamp records it: source, scheme, ignore list (and whether the defaults apply), source shards
    and every file it writes."""
    sources = {name: [os.path.getsize(f.path), os.path.getmtime(f.path)] for name, f in ckpt.shards.items()}
    files = sorted({*ckpt.shards, ckpt.index_name, "config.json", *ckpt.other_files, *ckpt.generated})
    return {"src": os.path.abspath(ckpt.root), "scheme": scheme_name, "ignore": ignore, "shards": sources,
            "files": files, "default_ignore": default_ignore}


def _write_text(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = os.path.join(os.path.dirname(path) or ".", "." + os.path.basename(path) + ".partial")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _check(name: str, x: np.ndarray, out: dict, codec: Codec, full: bool) -> TensorReport:
    """SQNR and max abs error of the dequantized weight against ``x``, on every k-th row (all rows when ``full``)."""
    n, k = x.shape[0], math.prod(x.shape[1:])  # a decoded gpt-oss expert tensor is 3-D: experts as rows
    step = 1 if full else max(1, math.ceil(n * k / CHECK_ELEMENTS))
    chunk = max(1, (1 << 20) // k) * step
    signal = noise = 0.0
    worst = 0.0
    rows = 0
    for start in range(0, n, chunk):
        sl = slice(start, min(n, start + chunk), step)
        ref = np.asarray(x[sl], np.float32)
        err = dequantize_weight(out, codec, x.dtype, sl).astype(np.float32) - ref
        r64, e64 = ref.ravel().astype(np.float64), err.ravel().astype(np.float64)  # one dtype: BLAS, not a loop
        signal += float(np.dot(r64, r64))
        noise += float(np.dot(e64, e64))
        worst = max(worst, float(np.abs(err).max()))
        rows += ref.shape[0]
    return TensorReport(name, codec.scheme.name, tuple(x.shape), str(x.dtype), sqnr_db(signal, noise), worst, rows)


def _warm_up(codec: Codec, dtypes: set, decoded: Decoded | None = None) -> threading.Thread:
    """Load the kernels ``codec`` uses (Numba's import and cache load, ~0.4 s) on a thread, while files are copied;
    with ``decoded`` (a weight of a quantized source), its decoder's too (one row decoded)."""
    k = codec.scheme.group_size or 128

    def run() -> None:
        calls = [lambda: decoded[0:1]] if decoded is not None else []
        for call in calls + [lambda h=h: quantize_weight(np.ones((2, k), h), codec) for h in dtypes]:
            try:
                call()
            except Exception:  # noqa: BLE001 - the real call reports any error
                pass
    thread = threading.Thread(target=run, name="nbquant-convert-warm-up", daemon=True)
    thread.start()
    return thread


def _copy_kept(writer: ShardWriter, plan: ShardPlan, progress: Progress) -> None:
    """Copy the tensors a shard keeps as they are (file to file, outside the interpreter lock); write decoded ones."""
    for item in plan.items:
        if item.name not in plan.quantized:
            f, e = plan.sources[item.source], plan.entry(item)
            if isinstance(f, DecodedFile) and item.source in f.decoded:
                writer.write(item.name, np.asarray(f.tensor(item.source)))
            else:
                writer.copy(item.name, f.path, item.offset(e.begin, BITS[e.dtype], e.shape))
            progress.update(plan.nbytes(item))


def _load(plan: ShardPlan, item: Item) -> np.ndarray:
    """The 2-D weight of ``item``, mapped from its file."""
    x = plan.sources[item.source].tensor(item.source)
    return x if item.expert is None else x[item.expert, item.rows[0]:item.rows[1]]


def _in_file(plan: ShardPlan, item: Item, error: ConvertError) -> ConvertError:
    """``error`` (about the weight ``item``, from the numerics) with the file the weight is read from in front."""
    return ConvertError(f"{plan.sources[item.source].path}: {error}")


def _prepare(plan: ShardPlan, codec: Codec, todo: list[Item]) -> dict:
    """What ``codec`` prepares for each complete fused set among the shard's weights: weight name → its share."""
    by_name = {i.name: i for i in todo}
    prepared: dict = {}
    for group in fused_groups(i.name for i in plan.items):
        members = {n: by_name[n] for n in group if n in by_name}
        try:
            prepared.update(codec.prepare({n: np.asarray(_load(plan, i)) for n, i in members.items()})
                            if members else {})
        except WeightError as e:
            raise _in_file(plan, members[e.tensor], e) from None
    return prepared


def _quantize_shard(writer: ShardWriter, plan: ShardPlan, codec: Codec, report: Report, progress: Progress,
                    check: tuple[bool, bool], buffer: np.ndarray) -> None:
    """Quantize and write the weights of one shard, one at a time (a fused codec prepares each fused set first).

    ``buffer`` (uint8, at least the largest weight's element count) receives the codes of each weight in turn.
    A decoded weight of a quantized source is re-encoded exactly where ``codec`` holds its codes and scales
    (:func:`nbquant.convert.sources.encode`), else decoded and quantized; its report says which.
    """
    todo = [item for item in plan.items if item.name in plan.quantized]
    prepared = _prepare(plan, codec, todo) if codec.fused else {}
    for item in todo:
        x = _load(plan, item)
        how = encoding(x, out := encode(x, codec), codec)
        try:
            if out is None:
                x = np.asarray(x)
                out = quantize_weight(x, codec, item.name, buffer, prepared.pop(item.name, None))
        except ConvertError as e:
            raise _in_file(plan, item, e) from None
        for suffix, arr in out.items():
            writer.write(_written(item.name, suffix, codec), arr)
        report.quantized.append(_check(item.name, x, out, codec, check[1]) if check[0] else
                                TensorReport(item.name, codec.scheme.name, item.shape, str(x.dtype), math.nan,
                                             math.nan, 0))
        report.quantized[-1].encoding = how
        del x, out
        progress.update(plan.nbytes(item))


def convert(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    scheme: str,
    *,
    ignore: str | Iterable[str] = (),
    default_ignore: bool = True,
    workers: int | None = None,
    report: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool | None = None,
    check: bool = True,
    full_check: bool = False,
    log: Callable[[str], None] | None = None,
    scheduler: str | None = None,
) -> Report:
    """Quantize a Hugging Face safetensors checkpoint into the compressed-tensors format (vLLM loads it).

    The output is byte for byte what llm-compressor's ``model_free_ptq(src, dst, scheme=scheme,
    ignore=...)`` writes (compressed-tensors 0.19) given the ``ignore`` list recorded in the
    output's ``quantization_config``: the same tensors quantized, the same names, dtypes, shapes
    and bytes, the same index and config. By default that list adds, to ``ignore``, what the
    inference engines do not quantize (embeddings, the output head, MoE routers, vision and audio
    towers: :mod:`nbquant.convert.policy`); with ``default_ignore=False`` it is ``ignore`` itself.

    Parameters
    ----------
    src : path
        A folder with ``config.json`` and ``*.safetensors`` shards (with or without an index), or a GGUF
        file (``*.gguf``: its tensors decoded, :mod:`nbquant.convert.sources.gguf`).
    dst : path
        The output folder: the shards, ``model.safetensors.index.json`` (or the source's index
        name), ``config.json`` with its ``quantization_config``, and every other file of ``src``.
    scheme : str
        A compressed-tensors preset: ``W4A16``, ``W4A16_ASYM``, ``W8A16``, ``W2A16``, ``W8A8``
        (``INT8``), ``W4A8`` ..., ``FP8_DYNAMIC``, ``FP8_BLOCK``, ``NVFP4A16``, ``MXFP4A16``,
        ``MXFP4``, ``MXFP8A16``, ``MXFP8`` (see :data:`nbquant.convert.schemes.SCHEMES`).
    ignore : str or iterable of str
        Module names, or ``re:`` patterns matched from the start of the module name, to keep
        unquantized (``["re:.*k_proj$"]``); a single str is one pattern (``"lm_head"``). Modules whose
        name ends with ``norm`` are always kept. A pattern that matches no module is an error
        (but ``lm_head`` of a model whose head is tied to its embedding: a note in the report).
    default_ignore : bool
        Also keep, and record in the written ``ignore``, the tensors that vLLM and transformers
        load unquantized (:func:`nbquant.convert.policy.default_reason`); False: exactly
        ``model_free_ptq``'s choice (``--no-default-ignore``).
    workers : int, optional
        At most this many threads of nbquant's cpu kernels for this call's work
        (:func:`nbquant.threads.thread_limit`); default: nbquant's setting (``NBQUANT_NUM_THREADS``,
        else every core).
        With ``scheduler``: the threads of each shard's task (default: the worker's cores over its
        threads).
    report : path, optional
        Write the JSON report there.
    overwrite : bool
        Replace an earlier nbquant output in a non-empty ``dst`` (else it is an error, unless
        ``dst`` holds an unfinished run of this same conversion, which is resumed). Only the files
        nbquant wrote there are removed (those its stamp lists, or a finished output's
        ``config.json``, index and shards), and those this run writes; ``dst`` holding any other
        file is an error naming it.
    progress : bool, optional
        Draw a progress bar on stderr; default: when stderr is a terminal.
    check : bool
        Dequantize each weight (nbquant's kernels) and report its SQNR and max abs error
        against the source; False leaves them NaN (the CLI skips it with ``--quiet`` and no ``--report``).
    full_check : bool
        Check every row (default: every k-th row, about :data:`CHECK_ELEMENTS` values per weight).
    log : callable, optional
        Called with one line per step (shard written, files copied).
    scheduler : str, optional
        A ``dask.distributed`` scheduler address (``tcp://host:8786``): one task per output shard
        on the cluster's workers, which read ``src`` and write ``dst`` on a filesystem they share
        with this process; the bytes are those of a local run (docs/convert.md, "On a cluster").
        Needs ``pip install "nbquant[dask]"``; without it dask is never imported.

    Returns
    -------
    Report
        Per quantized weight its scheme, shape, SQNR and max abs error; the tensors kept as they
        are and why; the notes on ``ignore``; bytes, seconds and MB/s.

    Raises
    ------
    TypeError
        An argument of the wrong type (one line naming it and the value).
    ValueError
        A bad argument value, as :class:`~nbquant.convert.arguments.ArgumentError` (also a
        ``ConvertError``): one line naming the argument, the value and what is allowed. Every
        argument is checked before anything is read or written, an ``ignore`` pattern that
        matches no module of ``src`` before anything is written.
    ConvertError
        A bad input (one line naming the file or tensor, and what to do); ``dst`` is left without
        partial shards.
    KeyboardInterrupt
        Ctrl-C: the shards being written are deleted; the same call again resumes (unless
        ``overwrite``), keeping the shards already finished.

    Examples
    --------
    >>> import tempfile, os
    >>> from nbquant.convert import convert, write_synthetic_checkpoint
    >>> src, dst = tempfile.mkdtemp(), os.path.join(tempfile.mkdtemp(), "out")
    >>> _ = write_synthetic_checkpoint(src, hidden=128, intermediate=256, layers=1, vocab=64)
    >>> r = convert(src, dst, "W4A16", progress=False)
    >>> len(r.quantized), sorted(os.listdir(dst))[:2]
    (7, ['config.json', 'generation_config.json'])
    >>> import json; json.load(open(os.path.join(dst, "config.json")))["quantization_config"]["ignore"]
    ['model.embed_tokens', 'lm_head']
    """
    start = time.perf_counter()
    src, dst, preset, ignore, report = check_arguments(
        src, dst, scheme, ignore=ignore, default_ignore=default_ignore, workers=workers, report=report,
        overwrite=overwrite, progress=progress, check=check, full_check=full_check, log=log,
        scheduler=scheduler)  # all of them, before anything is read
    job = Job(src, dst, preset, str(scheme), ignore, default_ignore, check, full_check, overwrite, progress,
              log or (lambda line: None), scheduler, workers)
    where = os.path.abspath(src) if scheduler else src  # the workers' cwd is not ours
    if is_gguf(src):  # a GGUF file: every tensor decoded, under its transformers name
        ckpt = open_gguf(where, preset)
    else:  # a quantized source: its quantized modules become decoded weights
        ckpt = open_source(open_checkpoint(where, quantized=True), preset)
    check_destination(dst, ckpt.roots)
    plans, sel = _plan(ckpt, job.codec, job.ignore, job.default_ignore)
    dtypes = {plan.entry(i).numpy_dtype for plan in plans.values() for i in plan.items if i.name in plan.quantized}
    # Numba's import and cache load (~0.3 s) run while the files are prepared (on a cluster: in the workers)
    warm = _warm_up(job.codec, dtypes, first_decoded(ckpt)) if scheduler is None else None
    try:
        with thread_limit(None if job.scheduler else job.workers):  # this call's kernels only
            stamp = _stamp(ckpt, job.group_name, job.ignore, job.default_ignore)
            rep = _run(job, ckpt, plans, sel, prepare_destination(dst, stamp, job.overwrite), warm)
    except OSError as e:
        where = e.filename or dst
        raise ConvertError(f"{where}: {e.strerror or e}") from None
    rep.seconds = time.perf_counter() - start
    if report is not None:
        try:
            rep.write(report)
        except OSError as e:
            raise ConvertError(f"report {report}: cannot write: {e.strerror or e} (the checkpoint in {dst} is "
                               "complete)") from None
    return rep


def _run(job: Job, ckpt: Checkpoint, plans: dict[str, ShardPlan], sel: Selection, resume: bool,
         warm: threading.Thread | None) -> Report:
    """Write ``plans`` (the shards still to write unless ``resume`` finds them finished), the index and the config."""
    src, dst, say = job.source, job.destination, job.log
    check = (job.check, job.full_check)
    rep = Report(job.scheme.name, src, dst)
    for rel in ckpt.other_files:
        copy_into(dst, rel, os.path.join(src, rel))
    say(f"copied {len(ckpt.other_files)} file(s)")
    all_items = [(plan, item) for plan in plans.values() for item in plan.items]
    rep.skipped = [{"name": i.name, "reason": sel.kept[i.name]} for p, i in all_items if i.name not in p.quantized]
    rep.notes = ckpt.notes + list(sel.notes)
    bar = Progress(len(all_items), sum(plan.nbytes(item) for plan, item in all_items), enabled=job.progress)
    weight_map: dict[str, str] = {}
    todo = {}
    for shard, plan in plans.items():
        final = os.path.join(dst, shard)
        head, offsets = layout(plan.entries)
        if resume and os.path.isfile(final) and os.path.getsize(final) == len(head) + max(
                [b for _, b in offsets.values()], default=0):
            rep.resumed_shards.append(shard)
            bar.update(sum(plan.nbytes(i) for i in plan.items), len(plan.items))
        else:
            todo[shard] = plan
        weight_map.update(dict.fromkeys((name for name, _, _ in plan.entries), shard))
        rep.bytes_out += sum(b - a for a, b in offsets.values())
    if job.scheduler is None:
        _write_local(dst, todo, job.codec, rep, bar, check, say, warm)
    else:
        from .distributed import write_shards  # dask only here

        reports = write_shards(job.scheduler, os.path.abspath(dst), todo, job.codec, check, job.workers, bar, say,
                               write_shard)
        rep.quantized += [t for shard in todo for t in reports[shard]]  # the local run's order
    bar.close()
    rep.shards = list(plans)
    rep.bytes_in = ckpt.total_bytes
    quantized = any(plan.quantized for plan in plans.values())
    config = dict(ckpt.config) if job.scheme.kind == "dense" else \
        dict(ckpt.config, quantization_config=quantization_config(job.group_name, job.scheme, sel.ignore, quantized))
    index = {"metadata": {"total_size": rep.bytes_out}, "weight_map": weight_map}
    _write_text(os.path.join(dst, ckpt.index_name), json.dumps(index, indent=2, sort_keys=True))
    _write_text(os.path.join(dst, "config.json"), json.dumps(config, indent=2, sort_keys=True))
    for rel, text in ckpt.generated.items():
        _write_text(os.path.join(dst, rel), text)
    if ckpt.generated:
        say(f"wrote {', '.join(ckpt.generated)} from the source's metadata")
    os.unlink(os.path.join(dst, STAMP))
    sync_dir(dst)
    return rep


def _write_local(dst: str, todo: dict[str, ShardPlan], codec: Codec, rep: Report, bar: Progress,
                 check: tuple[bool, bool], say: Callable[[str], None], warm: threading.Thread) -> None:
    """Write the shards of ``todo`` here: all kept tensors first (while the kernels load), then the weights."""
    buffer = np.empty(max((math.prod(i.shape) for p in todo.values() for i in p.items if i.name in p.quantized),
                          default=0), np.uint8)  # the codes of each weight in turn: one allocation for the run
    writers: dict[str, ShardWriter] = {}
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="nbquant-convert-sync") as closer:
            for shard, plan in todo.items():  # the kept tensors first, while the kernels load
                writers[shard] = ShardWriter(os.path.join(dst, shard), plan.entries)
                _copy_kept(writers[shard], plan, bar)
                closer.submit(writers[shard].flush)  # their bytes go to disk while the weights are quantized
            buffer[::4096] = 0  # its pages, faulted in while the kernels load
            warm.join()
            closing = []
            for shard, plan in todo.items():
                _quantize_shard(writers[shard], plan, codec, rep, bar, check, buffer)
                closing.append(closer.submit(writers[shard].close))  # sync and rename while the next one runs
                say(f"wrote {shard}")
            for done in closing:
                done.result()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise


def write_shard(path: str, plan: ShardPlan, codec: Codec, check: tuple[bool, bool], progress,
                threads: int | None = None) -> list[TensorReport]:
    """Write one output shard whole at ``path`` (a task of a distributed run): kept tensors, weights, sync, rename.

    ``progress`` has ``update(nbytes, tensors=1)``; ``threads`` caps the kernels' threads
    (:func:`nbquant.threads.thread_limit`). A failure deletes the shard's temporary file.
    Returns the reports of the weights quantized, in the plan's order.
    """
    buffer = np.empty(max((math.prod(i.shape) for i in plan.items if i.name in plan.quantized), default=0), np.uint8)
    rep = Report(codec.scheme.name, "", "")
    writer = ShardWriter(path, plan.entries)
    try:
        with thread_limit(threads):
            _copy_kept(writer, plan, progress)
            _quantize_shard(writer, plan, codec, rep, progress, check, buffer)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return rep.quantized
