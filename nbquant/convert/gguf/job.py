"""``nbquant convert IN.gguf OUT.gguf --scheme Q4_K_M``: the file llama.cpp's ``llama-quantize`` writes.

The job reads the source memory-mapped (:mod:`nbquant.gguf.file`), picks each tensor's type by
llama-quantize's rules (:mod:`nbquant.gguf.policy`), and writes the output under a temporary
name beside it (``.NAME.partial``), renamed over ``dst`` once complete and synced:

* metadata: the source's keys in order without the ``split.*`` keys, then
  ``general.quantization_version`` (2) and ``general.file_type`` (the scheme's ``llama_ftype``)
  moved to the end, then the ``--override-kv`` keys (each moved to the end in turn), then, with an
  importance matrix, ``quantize.imatrix.file`` (the path as
  given, cut to 127 bytes), ``quantize.imatrix.dataset``, ``quantize.imatrix.entries_count`` and
  ``quantize.imatrix.chunks_count``, then, with ``--prune-layers``, ``{arch}.block_count``;
* tensors in llama-quantize's order, each padded with zeros to the alignment (32 bytes, or the
  source's ``general.alignment``); a tensor whose type does not change is copied byte for byte.

Memory stays bounded by a slab of rows (:data:`SLAB_ELEMENTS` float32 values) and its codes.
"""

from __future__ import annotations

import math
import os
import struct
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from nbquant import gguf
from nbquant.gguf.file import INT32, UINT16, UINT32, Field, GGUFError, TensorInfo, encode_metadata, type_name
from nbquant.gguf.imatrix import read_imatrix
from nbquant.gguf.policy import SCHEMES, Choice, PolicyOptions, choose_types, hyper_from
from nbquant.gguf.policy import prune_layers as _pruned
from nbquant.gguf.split import open_model

from ...threads import get_num_threads, thread_limit
from ..disksync import BackgroundSync
from ..report import Progress, sqnr_db
from ..safetensors import ConvertError
from . import options
from .report import GGUFReport, GGUFTensor

__all__ = ["AS_IS", "convert_gguf", "SLAB_ELEMENTS"]

#: Values converted to float32 at a time.
SLAB_ELEMENTS = 1 << 24
#: Values below which a float16/bfloat16 conversion is not split between threads.
WIDEN_GRAIN = 1 << 20
#: Values checked for the SQNR of each tensor (every k-th row).
CHECK_ELEMENTS = 1 << 20
_FLOAT_SOURCES = options.FLOAT_TYPES
_SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")
_QNT_VERSION = 2
#: The scheme that writes an open model (:func:`.from_hf.open_hf`) with its own types and metadata.
AS_IS = "AS_IS"


def _to_float32(raw: memoryview, source: str, out: np.ndarray | None = None, pool: ThreadPoolExecutor | None = None,
                parts: int = 1) -> np.ndarray:
    """``raw`` (F32, F16 or BF16) as float32, into ``out`` (float32, at least as long) when given.

    With a ``pool``, the conversion runs as ``parts`` contiguous pieces at once (NumPy releases the GIL in its
    loops), one of them on the calling thread.
    """
    if source == "F32":
        return np.frombuffer(raw, "<f4")
    n = len(raw) // 2
    out = np.empty(n, np.float32) if out is None else out[:n]
    bits = np.frombuffer(raw, "<u2")

    def piece(first: int, last: int) -> None:
        if source == "F16":
            np.copyto(out[first:last], bits[first:last].view("<f2"))
        else:
            np.left_shift(bits[first:last], 16, out=out[first:last].view(np.uint32), dtype=np.uint32)

    parts = max(1, min(parts, n // WIDEN_GRAIN)) if pool is not None else 1
    bounds = [n * p // parts for p in range(parts + 1)]
    futures = [pool.submit(piece, bounds[p], bounds[p + 1]) for p in range(1, parts)] if parts > 1 else []
    piece(bounds[0], bounds[1])
    for future in futures:
        future.result()
    return out


def _from_float32(x: np.ndarray, target: str) -> np.ndarray:
    """``x`` in a float target as ggml's ``ggml_quantize_chunk`` writes it (RNE; ggml's NaN encodings)."""
    u = x.view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    if target == "F32":
        return x.view(np.uint8)
    if target == "F16":
        h = x.astype(np.float16).view(np.uint16)
        h = np.where(nan, (u >> 16).astype(np.uint16) & 0x8000 | 0x7E00, h)
        return h.astype("<u2").view(np.uint8)
    b = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
    b = np.where(nan, ((u >> 16) | 64).astype(np.uint16), b)
    return b.astype("<u2").view(np.uint8)


def _encode(x: np.ndarray, target: str, imatrix: np.ndarray | None) -> np.ndarray:
    if target in _FLOAT_SOURCES:
        return _from_float32(np.ascontiguousarray(x), target).reshape(x.shape[0], -1)
    return gguf.quantize(x, target, imatrix=imatrix)


def _decode(codes: np.ndarray, target: str) -> np.ndarray:
    if target in _FLOAT_SOURCES:
        return _to_float32(memoryview(np.ascontiguousarray(codes)).cast("B"), target).reshape(codes.shape[0], -1)
    return gguf.dequantize(codes, target)


class _Writer:
    """Writes tensors after the head, padding each to the alignment; tracks the SQNR of the sampled rows.

    Each write runs on a writer thread while the next slab is converted (at most one write in flight, so memory
    stays one slab ahead); :meth:`close` waits for the last one. Every
    :data:`~nbquant.convert.disksync.SYNC_BYTES` written, the file's data written so far goes to a second thread
    to ``fdatasync`` (:class:`~nbquant.convert.disksync.BackgroundSync`), so that the disk writes overlap the
    conversion instead of all waiting for the final ``fsync`` (0.4-0.5 s of a 330 MiB Q8_0 file).
    """

    def __init__(self, f, alignment: int, check: bool) -> None:
        self.f, self.alignment, self.check = f, alignment, check
        self.buffer = np.empty(0, np.float32)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="nbquant-gguf-writer")
        self._sync = BackgroundSync(f.fileno(), before=f.flush)
        self._threads = get_num_threads()
        self._widener = ThreadPoolExecutor(max(1, self._threads - 1), thread_name_prefix="nbquant-gguf-widen")
        self._pending: Future | None = None

    def write(self, data) -> None:
        """Write ``data`` after everything written before, on the writer thread (``data`` must stay unchanged)."""
        self.drain()
        self._pending = self._thread.submit(self._write, data)

    def _write(self, data) -> None:
        self.f.write(data)
        self._sync.written(memoryview(data).nbytes)

    def drain(self) -> None:
        """Wait for the write in flight (its error raised here)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        """Wait for the last write and the last background sync, and stop both threads."""
        try:
            self.drain()
        finally:
            try:
                self._sync.close()
            finally:
                self._thread.shutdown()
                self._widener.shutdown()

    def tensor(self, g, info: TensorInfo, target: str, imatrix: np.ndarray | None) -> tuple[float, int, bool]:
        """Write tensor ``info`` of ``g`` as ``target``: its SQNR, bytes written, and whether it was re-encoded
        exactly (the source's codes and scales, :meth:`HFModel.exact_records`)."""
        source = type_name(info.type_id)
        exact = g.exact_records(info.name, target) if target != source else None
        if exact is not None:
            self.write(exact.data)
            self.drain()
            self.write(bytes(-exact.nbytes % self.alignment))
            return math.inf, exact.nbytes, True
        raw = g.tensor_bytes(info.name)
        if target == source:
            self.write(raw)
            self.drain()  # the source's mapping is released below
            written = len(raw)
        else:
            written, signal, noise = self._convert(raw, info, source, target, imatrix)
        del raw
        g.release(info.name)
        self.write(bytes(-written % self.alignment))
        return (sqnr_db(signal, noise) if target != source and self.check else math.nan), written, False

    def _convert(self, raw, info: TensorInfo, source: str, target: str, imatrix):
        ne0 = info.ne[0]
        rows_per_mat, n_mat = info.ne[1], info.ne[2] * info.ne[3]
        if ne0 * rows_per_mat * n_mat == 0:  # an empty tensor: no bytes in either type
            return 0, 0.0, 0.0
        src_row = len(raw) // max(rows_per_mat * n_mat, 1)
        slab = max(1, min(rows_per_mat, SLAB_ELEMENTS // max(ne0, 1)))
        if self.buffer.size < slab * ne0:
            self.buffer = np.empty(slab * ne0, np.float32)
        step = max(1, math.ceil(rows_per_mat * n_mat * ne0 / CHECK_ELEMENTS)) if self.check else 0
        written, signal, noise = 0, 0.0, 0.0
        for mat in range(n_mat):
            weights = None if imatrix is None else imatrix[mat * ne0:(mat + 1) * ne0]
            for start in range(0, rows_per_mat, slab):
                stop = min(rows_per_mat, start + slab)
                first = mat * rows_per_mat
                x = _to_float32(raw[(first + start) * src_row:(first + stop) * src_row], source,
                                self.buffer, self._widener, self._threads).reshape(-1, ne0)
                codes = _encode(x, target, weights)
                self.write(codes.data)
                if np.may_share_memory(codes, self.buffer):  # an F32 target is a view of the slab buffer
                    self.drain()
                written += codes.nbytes
                pick = np.arange(-(first + start) % step, stop - start, step) if step else ()
                if len(pick):
                    ref = x[pick].astype(np.float64)
                    err = _decode(codes[pick], target).astype(np.float64) - ref
                    signal += float(np.einsum("ij,ij->", ref, ref))
                    noise += float(np.einsum("ij,ij->", err, err))
                del x, codes
        return written, signal, noise


def _check_destination(src: str, dst: str, overwrite: bool) -> None:
    if os.path.islink(dst):
        raise ConvertError(f"{dst}: the destination is a symlink; nbquant does not write through links")
    if os.path.isdir(dst):
        raise ConvertError(f"{dst}: the destination is a folder; give the output file's name")
    if os.path.exists(dst):
        if os.path.samefile(src, dst):
            raise ConvertError(f"{dst}: the destination is the source file")
        if not overwrite:
            raise ConvertError(f"{dst}: the destination exists; pass --overwrite to replace it")
    folder = os.path.dirname(os.path.abspath(dst))
    if not os.path.isdir(folder):
        raise ConvertError(f"{dst}: the folder {folder} does not exist")


def _open_partial(tmp: str):
    """A new file at ``tmp`` (a stale one from an interrupted run removed first), never through a symlink."""
    if os.path.lexists(tmp):
        os.remove(tmp)
    return os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644), "wb")


def _select(matrix, include: list[str] | None, exclude: list[str] | None):
    """The matrix's entries kept by ``--include-weights`` / ``--exclude-weights``; None when none is left."""
    if include and exclude:
        raise ConvertError("--include-weights and --exclude-weights cannot be used together")
    if exclude:
        matrix.entries = {k: v for k, v in matrix.entries.items() if not any(s in k for s in exclude)}
    if include:
        matrix.entries = {k: v for k, v in matrix.entries.items() if any(s in k for s in include)}
    return matrix if matrix.entries else None


def _imatrix_fields(path: str, matrix) -> list[Field]:
    fields = [Field.string("quantize.imatrix.file", os.fsencode(path)[:127])]
    if matrix.datasets:
        fields.append(Field.string("quantize.imatrix.dataset", matrix.datasets[0].encode()[:127]))
    fields.append(Field.u32("quantize.imatrix.entries_count", len(matrix.entries) & 0xFFFFFFFF))
    if matrix.chunk_count > 0:
        fields.append(Field.u32("quantize.imatrix.chunks_count", matrix.chunk_count & 0xFFFFFFFF))
    return fields


def _plan(g, scheme: str, opts: PolicyOptions, matrix, overrides: list[Field], prune: list[int], keep_split: bool):
    """The choices (by output part), output names, imatrix slices, with every refusal before anything is written."""
    ints = {f.key: f.value for f in overrides if f.vtype == UINT32}  # llama's loader reads int overrides

    def value(key: str, default=None):
        return ints[key] if key in ints else g.value(key, default)

    hyper = hyper_from(value, list(g.tensors))
    names, _ = _pruned(g.tensors, prune)
    if keep_split:  # llama-quantize's --keep-split visits the tensors by part, then offset
        names = dict(sorted(names.items(), key=lambda kv: (g.part_index(kv[1]), g.tensors[kv[1]].offset)))
    try:
        choices = choose_types(((new, g.tensors[old].ne, g.tensors[old].type_id) for new, old in names.items()),
                               scheme, hyper, opts, keep_order=keep_split)
    except ValueError as e:
        raise ConvertError(f"{g.path}: {e}") from None
    weights, parts = {}, {}
    for c in choices:
        parts.setdefault(g.part_index(names[c.name]) if keep_split else 0, []).append(c)
        info = g.tensors[names[c.name]]
        source, target = type_name(c.source), type_name(c.target)
        if c.source != c.target:
            if source not in _FLOAT_SOURCES:
                raise ConvertError(f"{g.path}: {c.name} is {source}; requantizing from {source} is disabled")
            if target not in gguf.implemented_formats() + _FLOAT_SOURCES:
                raise ConvertError(f"{c.name}: {scheme} gives it {target}, which nbquant does not implement yet "
                                   f"(it writes {', '.join(gguf.implemented_formats())})")
            entry = None if matrix is None else matrix.entries.get(names[c.name])  # the source layer's entry
            if entry is not None and entry.size != info.ne[0] * info.ne[2]:
                if c.name not in ("token_embd.weight", "per_layer_token_embd.weight"):
                    raise ConvertError(f"imatrix size {entry.size} is different from tensor size "
                                       f"{info.ne[0] * info.ne[2]} for {c.name}")
                entry = None
            if entry is not None and (entry < 0).any():
                raise ConvertError(f"{c.name}: the importance matrix holds negative weights")
            weights[c.name] = entry
    missing = [i for i in range(max(parts, default=0) + 1) if i not in parts]
    if missing:
        raise ConvertError(f"--keep-split: part {missing[0] + 1} of the source has no tensor left to write")
    return hyper, [parts[i] for i in sorted(parts)], weights, names


def _write_tensor(writer: _Writer, g, c, old: str, imatrix) -> GGUFTensor:
    """Write tensor ``old`` of the source as ``c`` chose; its report row."""
    source = g.tensors[old]
    sqnr, written, exact = writer.tensor(g, source, type_name(c.target), imatrix)
    reason = c.reason if c.source != c.target else f"copied ({c.reason})"
    reason += "; exact: the source's codes and scales" if exact else ""
    reason += f"; was {old}" if old != c.name else ""
    return GGUFTensor(c.name, source.shape, type_name(c.source), type_name(c.target), reason, sqnr, source.nbytes,
                      written)


def _part_paths(dst: str, n: int, keep_split: bool) -> list[str]:
    """The output file names: ``dst``, or with ``--keep-split`` ``STEM-00001-of-0000N.gguf`` (``dst`` less .gguf)."""
    if not keep_split:
        return [dst]
    stem = dst[:-5] if dst.endswith(".gguf") else dst
    return [f"{stem}-{i + 1:05d}-of-{n:05d}.gguf" for i in range(n)]


def _split_fields(i: int, n: int, count: int) -> list[Field]:
    """The ``split.*`` keys of output part ``i`` of ``n`` (``count`` tensors in all)."""
    return [Field("split.no", UINT16, struct.pack("<H", i)), Field("split.count", UINT16, struct.pack("<H", n)),
            Field("split.tensors.count", INT32, struct.pack("<i", count))]


def _head(fields: list[Field], part: list, g, names: dict[str, str]) -> bytes:
    """An output part's header: ``fields`` and the infos of its tensors, each at the next aligned offset."""
    infos, offset = [], 0
    for c in part:
        out = TensorInfo(c.name, g.tensors[names[c.name]].ne, c.target, offset)
        infos.append(out)
        offset += out.nbytes + (-out.nbytes % g.alignment)
    return encode_metadata(fields, infos, g.alignment)


def convert_gguf(src: str | os.PathLike, dst: str | os.PathLike, scheme: str, *, imatrix: str | None = None,
                 pure: bool = False, output_tensor_type: str | None = None, token_embedding_type: str | None = None,
                 leave_output_tensor: bool = False, include_weights: list[str] | None = None,
                 exclude_weights: list[str] | None = None, tensor_types: list[str] | None = None,
                 override_kv: list[str] | None = None, prune_layers: str | list[int] | None = None,
                 keep_split: bool = False, overwrite: bool = False,
                 progress: bool | None = None, check: bool = True, workers: int | None = None,
                 model=None) -> GGUFReport:
    """Quantize the GGUF file ``src`` into ``dst`` as ``llama-quantize src dst SCHEME`` does, byte for byte.

    Parameters
    ----------
    src, dst : str or os.PathLike
        The source GGUF (F32/F16/BF16 tensors; the first part ``NAME-00001-of-0000N.gguf`` of a split model
        reads all parts) and the output file (replaced only with ``overwrite``).
    scheme : str
        Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K, IQ4_NL, IQ4_XS or MXFP4_MOE.
    imatrix : str, optional
        An importance matrix (GGUF or legacy ``.dat``) as ``--imatrix`` takes it.
    pure, output_tensor_type, token_embedding_type, leave_output_tensor
        llama-quantize's ``--pure``, ``--output-tensor-type``, ``--token-embedding-type``, ``--leave-output-tensor``.
    include_weights, exclude_weights : list of str, optional
        llama-quantize's ``--include-weights`` / ``--exclude-weights`` (not both): use the importance matrix only
        for the tensors whose names contain one of these strings / none of them.
    tensor_types : list of str, optional
        llama-quantize's ``--tensor-type PATTERN=TYPE`` values: a tensor whose name holds a match of the first
        PATTERN that matches (a regular expression, lowercased; :func:`re.search`) gets TYPE instead of the scheme's
        mix (``--output-tensor-type`` and ``--token-embedding-type`` come first; the row-size fallback applies).
    override_kv : list of str, optional
        llama-quantize's ``--override-kv KEY=TYPE:VALUE`` values, TYPE ``int`` (written as u32 of the absolute
        value), ``float`` (f32), ``bool`` (``true``/``false``) or ``str`` (at most 127 bytes): each removes KEY
        where it is and appends it, after ``general.file_type`` and before the ``quantize.imatrix.*`` keys; an
        ``int`` override of a hyperparameter key (``{arch}.block_count``, ``{arch}.attention.head_count``, ...)
        counts in the type choice, as llama's model loader reads it.
    prune_layers : str or list of int, optional
        llama-quantize's ``--prune-layers L0,L1,...``: the layers ``blk.N.`` to leave out; the layers after the
        first one left out are numbered on (:func:`nbquant.gguf.policy.prune_layers`), ``{arch}.block_count`` is
        set to the new count (the last key), and the type choice counts the source's layers, as llama-quantize's.
    keep_split : bool
        llama-quantize's ``--keep-split``: write one file per part of the source, ``STEM-00001-of-0000N.gguf``
        (``STEM``: ``dst`` less ``.gguf``; ``-00001-of-00001`` for a source in one file), the tensors of each
        part in the source's order (which the type choice follows), the metadata in the first part, the
        ``split.*`` keys in every part when there are several.
    overwrite : bool
        Replace an existing ``dst``.
    progress : bool, optional
        Draw a progress bar on stderr (default: when stderr is a terminal).
    check : bool
        Compute each converted tensor's SQNR on sampled rows (else NaN in the report).
    workers : int, optional
        At most this many threads of the kernels (:func:`nbquant.threads.thread_limit`).
    model : HFModel, optional
        The source already open (a Hugging Face checkpoint seen as GGUF, :func:`.from_hf.open_hf`; ``src`` is
        then its folder); with ``scheme`` :data:`AS_IS` it is written as it is.

    Returns
    -------
    GGUFReport
        Each tensor's type, reason and SQNR.

    Raises
    ------
    ConvertError
        One line naming the file or tensor; nothing is left at ``dst`` (nor a partial file).

    Examples
    --------
    >>> import os, tempfile
    >>> from nbquant.convert.gguf import write_synthetic_gguf
    >>> d = tempfile.mkdtemp()
    >>> _ = write_synthetic_gguf(os.path.join(d, "m.gguf"), hidden=256, intermediate=512, layers=2, vocab=64)
    >>> r = convert_gguf(os.path.join(d, "m.gguf"), os.path.join(d, "q.gguf"), "Q8_0", progress=False)
    >>> sorted({t.target for t in r.tensors})
    ['F32', 'Q8_0']
    """
    start = time.perf_counter()
    src, dst = os.fspath(src), os.fspath(dst)
    if model is not None and scheme == AS_IS:
        return _write_as_is(model, dst, overwrite, progress, start)
    scheme = options.check_options(scheme, output_tensor_type, token_embedding_type)
    manual = options.tensor_types(tensor_types)
    overrides = options.kv_overrides(override_kv)
    prune = options.prune_list(prune_layers)
    try:
        matrix = None if imatrix is None else _select(read_imatrix(imatrix), include_weights, exclude_weights)
        g = open_model(src) if model is None else model
    except GGUFError as e:
        raise ConvertError(str(e)) from None
    with g:
        opts = PolicyOptions(pure, None if output_tensor_type is None else str(output_tensor_type).upper(),
                             None if token_embedding_type is None else str(token_embedding_type).upper(),
                             not leave_output_tensor, matrix is not None, manual)
        hyper, parts, weights, names = _plan(g, scheme, opts, matrix, overrides, prune, keep_split)
        paths = _part_paths(dst, len(parts), keep_split)
        for path in paths:
            _check_destination(src, path, overwrite)
        fields = list(g.fields.values())
        for field in [Field.u32("general.quantization_version", _QNT_VERSION),
                      Field.u32("general.file_type", SCHEMES[scheme][0])]:
            options.set_field(fields, field)
        fields = [f for f in fields if f.key not in _SPLIT_KEYS]
        for field in overrides + ([] if matrix is None else _imatrix_fields(imatrix, matrix)):
            options.set_field(fields, field)
        if prune:
            options.set_field(fields, Field.u32(f"{hyper.arch}.block_count", _pruned(g.tensors, prune)[1]))
        report = GGUFReport(scheme, src, dst, hyper.arch)
        if hyper.generic:
            report.notes.append(f"architecture {hyper.arch!r} is unknown to llama.cpp (llama-quantize refuses it): "
                                "nbquant's generic policy applied (see docs/convert.md)")
        if keep_split:
            report.notes.append(f"--keep-split: written as {len(paths)} part(s): {', '.join(paths)}")
        count = sum(map(len, parts))
        heads = [_head((fields if i == 0 else []) + (_split_fields(i, len(parts), count) if len(parts) > 1 else []),
                       part, g, names) for i, part in enumerate(parts)]
        _write_parts(g, dst, paths, heads, parts, names, weights, report, check, workers, progress)
    report.seconds = time.perf_counter() - start
    return report


def _write_parts(g, dst: str, paths: list[str], heads: list[bytes], parts: list, names: dict[str, str],
                 weights: dict, report: GGUFReport, check: bool, workers: int | None, progress: bool | None) -> None:
    """Write each part under a temporary name beside it, synced, then renamed over its path (none on failure)."""
    tmps = [os.path.join(os.path.dirname(os.path.abspath(p)), "." + os.path.basename(p) + ".partial") for p in paths]
    bar = Progress(sum(map(len, parts)), sum(g.tensors[old].nbytes for old in names.values()), enabled=progress)
    try:
        with thread_limit(workers):
            for tmp, head, part in zip(tmps, heads, parts, strict=True):
                with _open_partial(tmp) as f:
                    f.write(head)
                    writer = _Writer(f, g.alignment, check)
                    try:
                        for c in part:
                            report.tensors.append(_write_tensor(writer, g, c, names[c.name], weights.get(c.name)))
                            bar.update(g.tensors[names[c.name]].nbytes)
                    finally:
                        writer.close()
                    f.flush()
                    os.fsync(f.fileno())
        for tmp, path in zip(tmps, paths, strict=True):
            os.replace(tmp, path)
    except BaseException as e:
        for tmp in tmps:
            if os.path.lexists(tmp):
                os.remove(tmp)
        if isinstance(e, OSError):
            raise ConvertError(f"{dst}: cannot write: {e.strerror or e}") from None
        raise
    finally:
        bar.close()


def _write_as_is(g, dst: str, overwrite: bool, progress: bool | None, start: float) -> GGUFReport:
    """Write the model ``g`` with its own metadata and tensor types (the converter's file, no quantization)."""
    _check_destination(g.path, dst, overwrite)
    names = {n: n for n in g.tensors}
    part = [Choice(n, t.type_id, t.type_id, "as llama.cpp's converter writes it") for n, t in g.tensors.items()]
    report = GGUFReport(AS_IS, g.path, dst, g.value("general.architecture"))
    with g:
        head = encode_metadata(list(g.fields.values()), list(g.tensors.values()), g.alignment)
        _write_parts(g, dst, [dst], [head], [part], names, {}, report, False, None, progress)
    report.seconds = time.perf_counter() - start
    return report
