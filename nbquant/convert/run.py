"""``convert``: a Hugging Face safetensors checkpoint in, a compressed-tensors checkpoint out, one tensor at a time.

The steps: read the source headers and plan every output shard (names, dtypes, shapes),
checking every weight against the scheme before anything is written; copy the other files;
write each shard to a temporary name (each weight mapped, quantized and written, then
dropped), sync it and rename it; then write the index and ``config.json``. A stamp file
(``.nbquant-convert.json``) records the run while it is in progress: rerunning the same
conversion keeps the shards already finished and redoes the rest; any other leftover in
``dst`` needs ``overwrite=True``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import nbquant

from .. import threads as threads_module
from .numerics import check_weight, dequantize_weight, global_scale, output_entries, quantize_weight, weight_amax
from .plan import Checkpoint, fused_groups, jobs, open_checkpoint, skip_reason
from .report import Progress, Report, TensorReport, sqnr_db
from .safetensors import ConvertError, ShardWriter, layout, sync_dir
from .schemes import Scheme, get_scheme, quantization_config

__all__ = ["convert", "STAMP", "CHECK_ELEMENTS"]

#: The file that marks a conversion in progress in the destination.
STAMP = ".nbquant-convert.json"
#: At most this many elements of each weight (whole rows, every k-th) are dequantized for the report.
CHECK_ELEMENTS = 1 << 16


def _plan(ckpt: Checkpoint, scheme: Scheme, ignore: list[str]):
    """Per output shard: its entries, and the weights it quantizes (name → module); every bad weight raises here."""
    shard_jobs = jobs(ckpt, fused=scheme.kind == "nvfp4")
    plans = {}
    for shard, names in shard_jobs.items():
        entries, quantized = [], {}
        for name in names:
            e = ckpt.shards[ckpt.weight_map[name]].entries[name]
            if skip_reason(name, ignore) is None:
                check_weight(name, e.numpy_dtype if e.numpy_dtype is not None else e.dtype, e.shape, scheme)
                module = name.rpartition(".")[0]
                quantized[name] = module
                entries += [(f"{module}.{suffix}", dt, shape) for suffix, dt, shape in
                            output_entries(scheme, e.shape, e.numpy_dtype)]
            else:
                entries.append((name, e.dtype, e.shape))
        seen: dict[str, str] = {}
        for out_name, _, _ in entries:
            if out_name in seen:
                raise ConvertError(f"tensor {out_name}: written twice in {shard} (the checkpoint already holds "
                                   "quantized tensors?)")
            seen[out_name] = shard
        plans[shard] = (entries, quantized, names)
    return plans


def _stamp(ckpt: Checkpoint, scheme_name: str, ignore: list[str]) -> dict:
    sources = {name: [os.path.getsize(f.path), os.path.getmtime(f.path)] for name, f in ckpt.shards.items()}
    return {"src": os.path.abspath(ckpt.root), "scheme": scheme_name, "ignore": ignore, "shards": sources}


def _prepare_dst(dst: str, stamp: dict, overwrite: bool, outputs: Iterable[str]) -> bool:
    """Make ``dst`` ready; True if it holds an unfinished run of this same conversion (resume)."""
    if os.path.exists(dst) and not os.path.isdir(dst):
        raise ConvertError(f"{dst}: exists and is not a directory")
    os.makedirs(dst, exist_ok=True)
    stamp_path = os.path.join(dst, STAMP)
    existing = set(os.listdir(dst))
    resume = False
    if STAMP in existing:
        try:
            with open(stamp_path, encoding="utf-8") as f:
                resume = json.load(f) == json.loads(json.dumps(stamp))
        except (OSError, ValueError):
            resume = False
    if existing and not resume and not overwrite:
        raise ConvertError(f"{dst}: exists and is not empty; pass --overwrite (overwrite=True) to replace its "
                           "checkpoint files")
    for name in existing:
        if name.endswith(".partial") or (not resume and (name in outputs or name.endswith(".safetensors"))):
            path = os.path.join(dst, name)
            if os.path.isfile(path):
                os.unlink(path)
    tmp = stamp_path + ".partial"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(stamp, f)
    os.replace(tmp, stamp_path)
    return resume


def _write_text(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = os.path.join(os.path.dirname(path) or ".", "." + os.path.basename(path) + ".partial")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _check(name: str, x: np.ndarray, out: dict, scheme: Scheme, full: bool) -> TensorReport:
    """SQNR and max abs error of the dequantized weight against ``x``, on every k-th row (all rows when ``full``)."""
    n, k = x.shape
    step = 1 if full else max(1, math.ceil(n * k / CHECK_ELEMENTS))
    chunk = max(1, (1 << 20) // k) * step
    signal = noise = 0.0
    worst = 0.0
    rows = 0
    for start in range(0, n, chunk):
        sl = slice(start, min(n, start + chunk), step)
        ref = np.asarray(x[sl], np.float32)
        err = dequantize_weight(out, scheme, x.dtype, sl).astype(np.float32) - ref
        signal += float(np.dot(ref.ravel().astype(np.float64), ref.ravel()))
        noise += float(np.dot(err.ravel().astype(np.float64), err.ravel()))
        worst = max(worst, float(np.abs(err).max()))
        rows += ref.shape[0]
    return TensorReport(name, scheme.name, (n, k), str(x.dtype), sqnr_db(signal, noise), worst, rows)


def _warm_up(scheme: Scheme, dtypes: set) -> threading.Thread:
    """Load the kernels ``scheme`` uses (Numba's import and cache load, ~0.4 s) on a thread, while files are copied."""
    k = scheme.group_size or 128

    def run() -> None:
        for h in dtypes:
            try:
                quantize_weight(np.ones((2, k), h), scheme)
            except Exception:  # noqa: BLE001 - the real call reports any error
                pass
    thread = threading.Thread(target=run, name="nbquant-convert-warm-up", daemon=True)
    thread.start()
    return thread


def _copy_kept(ckpt: Checkpoint, writer: ShardWriter, plan, progress: Progress) -> None:
    """Copy the tensors a shard keeps as they are (file to file, outside the interpreter lock)."""
    _, quantized, names = plan
    for name in names:
        if name not in quantized:
            f = ckpt.shards[ckpt.weight_map[name]]
            e = f.entries[name]
            writer.copy(name, f.path, e.begin)
            progress.update(e.nbytes)


def _quantize_shard(ckpt: Checkpoint, writer: ShardWriter, plan, scheme: Scheme, report: Report,
                    progress: Progress, check: tuple[bool, bool]) -> None:
    """Quantize and write the weights of one shard, one at a time (NVFP4: fused global scales first)."""
    _, quantized, names = plan
    entries = [ckpt.shards[ckpt.weight_map[n]].entries[n] for n in quantized]
    buffer = np.empty(max((math.prod(e.shape) for e in entries), default=0), np.uint8)  # codes, reused
    scales = {}
    if scheme.kind == "nvfp4":
        for group in fused_groups(names):
            members = [n for n in group if n in quantized]
            if not members:
                continue
            amax = 0.0
            for n in members:
                f = ckpt.shards[ckpt.weight_map[n]]
                amax = max(amax, float(weight_amax(n, f.tensor(n), None).max()))
            first = ckpt.shards[ckpt.weight_map[members[0]]].entries[members[0]]
            gs = global_scale(amax, first.numpy_dtype)
            scales.update(dict.fromkeys(members, gs))
    for name in names:
        if name not in quantized:
            continue
        f = ckpt.shards[ckpt.weight_map[name]]
        e = f.entries[name]
        x = f.tensor(name)
        out = quantize_weight(x, scheme, scales.get(name), name, buffer)
        for suffix, arr in out.items():
            writer.write(f"{quantized[name]}.{suffix}", arr)
        report.quantized.append(_check(name, x, out, scheme, check[1]) if check[0] else
                                TensorReport(name, scheme.name, tuple(e.shape), str(x.dtype), math.nan, math.nan, 0))
        del x, out
        progress.update(e.nbytes)


def convert(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    scheme: str,
    *,
    ignore: Iterable[str] = (),
    workers: int | None = None,
    report: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool | None = None,
    check: bool = True,
    full_check: bool = False,
    log: Callable[[str], None] | None = None,
) -> Report:
    """Quantize a Hugging Face safetensors checkpoint into the compressed-tensors format (vLLM loads it).

    The output is byte for byte what llm-compressor's ``model_free_ptq(src, dst, scheme=scheme,
    ignore=ignore)`` writes (compressed-tensors 0.19): the same tensors quantized, the same
    names, dtypes, shapes and bytes, the same index and ``quantization_config``.

    Parameters
    ----------
    src : path
        A folder with ``config.json`` and ``*.safetensors`` shards (with or without an index).
    dst : path
        The output folder: the shards, ``model.safetensors.index.json`` (or the source's index
        name), ``config.json`` with its ``quantization_config``, and every other file of ``src``.
    scheme : str
        A compressed-tensors preset: ``W4A16``, ``W4A16_ASYM``, ``W8A16``, ``W2A16``, ``W8A8``
        (``INT8``), ``W4A8`` ..., ``FP8_DYNAMIC``, ``FP8_BLOCK``, ``NVFP4A16``, ``MXFP4A16``,
        ``MXFP4``, ``MXFP8A16``, ``MXFP8`` (see :data:`nbquant.convert.schemes.SCHEMES`).
    ignore : iterable of str
        Module names, or ``re:`` patterns matched from the start of the module name, to keep
        unquantized (``["lm_head"]``). Modules whose name ends with ``norm`` are always kept.
    workers : int, optional
        Threads of nbquant's cpu kernels during the conversion (:func:`nbquant.set_num_threads`,
        restored after); default: nbquant's setting (``NBQUANT_NUM_THREADS``, else every core).
    report : path, optional
        Write the JSON report there.
    overwrite : bool
        Replace the checkpoint files of a non-empty ``dst`` (else it is an error, unless ``dst``
        holds an unfinished run of this same conversion, which is resumed).
    progress : bool, optional
        Draw a progress bar on stderr; default: when stderr is a terminal.
    check : bool
        Dequantize each weight (nbquant's kernels) and report its SQNR and max abs error
        against the source; False leaves them NaN (the CLI skips it with ``--quiet`` and no ``--report``).
    full_check : bool
        Check every row (default: every k-th row, about :data:`CHECK_ELEMENTS` values per weight).
    log : callable, optional
        Called with one line per step (shard written, files copied).

    Returns
    -------
    Report
        Per quantized weight its scheme, shape, SQNR and max abs error; the tensors kept as they
        are and why; bytes, seconds and MB/s.

    Raises
    ------
    ConvertError
        A bad input (one line naming the file or tensor); ``dst`` is left without partial shards.

    Examples
    --------
    >>> import tempfile, os
    >>> from nbquant.convert import convert, write_synthetic_checkpoint
    >>> src, dst = tempfile.mkdtemp(), os.path.join(tempfile.mkdtemp(), "out")
    >>> _ = write_synthetic_checkpoint(src, hidden=128, intermediate=256, layers=1, vocab=64)
    >>> r = convert(src, dst, "W4A16", ignore=["lm_head"], progress=False)
    >>> len(r.quantized), sorted(os.listdir(dst))[:2]
    (8, ['config.json', 'generation_config.json'])
    """
    start = time.perf_counter()
    src, dst = os.fspath(src), os.fspath(dst)
    sch = get_scheme(scheme)
    ignore = [str(i) for i in ignore]
    ckpt = open_checkpoint(src)
    if os.path.abspath(dst) == os.path.abspath(src):
        raise ConvertError(f"{dst}: the destination is the source folder")
    if os.path.abspath(dst).startswith(os.path.join(os.path.abspath(src), "")):
        raise ConvertError(f"{dst}: the destination is inside the source folder")
    plans = _plan(ckpt, sch, ignore)
    outputs = set(plans) | {ckpt.index_name, "config.json"} | {f.split(os.sep)[0] for f in ckpt.other_files}
    requested = list(threads_module._requested)  # the thread count as set (or not) before this call
    try:
        resume = _prepare_dst(dst, _stamp(ckpt, str(scheme), ignore), overwrite, outputs)
        if workers is not None:
            nbquant.set_num_threads(workers)
        rep = _run(ckpt, src, dst, sch, str(scheme), ignore, plans, resume, progress, (check, full_check),
                   log or (lambda line: None))
    except OSError as e:
        where = e.filename or dst
        raise ConvertError(f"{where}: {e.strerror or e}") from None
    finally:
        threads_module._requested[:] = requested
    rep.seconds = time.perf_counter() - start
    if report is not None:
        rep.write(os.fspath(report))
    return rep


def _run(ckpt: Checkpoint, src: str, dst: str, sch: Scheme, scheme: str, ignore: list[str], plans, resume: bool,
         progress: bool | None, check: tuple[bool, bool], say: Callable[[str], None]) -> Report:
    rep = Report(sch.name, src, dst)
    for rel in ckpt.other_files:
        target = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(src, rel), target)
    say(f"copied {len(ckpt.other_files)} file(s)")
    names = [n for _, _, names in plans.values() for n in names]
    rep.skipped = [{"name": n, "reason": skip_reason(n, ignore)} for n in names if skip_reason(n, ignore)]
    bar = Progress(len(names), sum(ckpt.shards[ckpt.weight_map[n]].entries[n].nbytes for n in names),
                   enabled=progress)
    weight_map: dict[str, str] = {}
    dtypes = {ckpt.shards[ckpt.weight_map[n]].entries[n].numpy_dtype for _, q, _ in plans.values() for n in q}
    todo = {}
    for shard, plan in plans.items():
        entries = plan[0]
        final = os.path.join(dst, shard)
        head, offsets = layout(entries)
        if resume and os.path.isfile(final) and os.path.getsize(final) == len(head) + max(
                [b for _, b in offsets.values()], default=0):
            rep.resumed_shards.append(shard)
            bar.update(sum(ckpt.shards[ckpt.weight_map[n]].entries[n].nbytes for n in plan[2]), len(plan[2]))
        else:
            todo[shard] = plan
        weight_map.update(dict.fromkeys((name for name, _, _ in entries), shard))
        rep.bytes_out += sum(b - a for a, b in offsets.values())
    warm = _warm_up(sch, dtypes) if todo else None
    writers: dict[str, ShardWriter] = {}
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="nbquant-convert-sync") as closer:
            for shard, plan in todo.items():  # the kept tensors first, while the kernels load
                writers[shard] = ShardWriter(os.path.join(dst, shard), plan[0])
                _copy_kept(ckpt, writers[shard], plan, bar)
            if warm is not None:
                warm.join()
            closing = []
            for shard, plan in todo.items():
                _quantize_shard(ckpt, writers[shard], plan, sch, rep, bar, check)
                closing.append(closer.submit(writers[shard].close))  # sync and rename while the next one runs
                say(f"wrote {shard}")
            for done in closing:
                done.result()
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    bar.close()
    rep.shards = list(plans)
    rep.bytes_in = ckpt.total_bytes
    quantized = any(plan[1] for plan in plans.values())
    config = dict(ckpt.config, quantization_config=quantization_config(scheme, sch, ignore, quantized))
    index = {"metadata": {"total_size": rep.bytes_out}, "weight_map": weight_map}
    _write_text(os.path.join(dst, ckpt.index_name), json.dumps(index, indent=2, sort_keys=True))
    _write_text(os.path.join(dst, "config.json"), json.dumps(config, indent=2, sort_keys=True))
    os.unlink(os.path.join(dst, STAMP))
    sync_dir(dst)
    return rep
