"""The ``nbquant`` command line (also ``python -m nbquant``).

``nbquant demo`` quantizes a built-in weight-like matrix with several schemes on
every available compiled backend, checks the codes of a slice of rows against the
``reference`` backend, and prints a table of accuracy, speed and agreement, with a
legend. The work is done by :mod:`nbquant.demo` (the table's text by
:mod:`nbquant.demo.table`); this module parses arguments and prints.

Examples
--------
In a shell::

    $ nbquant demo                    # 4096 x 4096, every available compiled backend
    $ nbquant demo --size 1024x4096 --backend cpu --repeats 10
    $ python -m nbquant demo --size 256
    $ nbquant convert ./llama ./llama-w4a16 --scheme W4A16
    $ nbquant inspect ./llama-w4a16
    $ nbquant precompile demo W4A16 --dtype float32 bfloat16   # compile ahead into numba's cache
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence

from .demo.convert import DEMO_CHECKPOINT
from .demo.table import HEADER, LEGEND, format_row, machine_info, machine_line

__all__ = ["main", "run", "parse_size", "format_row", "machine_info", "HEADER", "LEGEND"]


def parse_size(text: str) -> tuple[int, int]:
    """Parse ``--size``: ``N`` for an N x N matrix or ``RxC``; the column count must be even.

    Examples
    --------
    >>> parse_size("256"), parse_size("128x4096")
    ((256, 256), (128, 4096))
    >>> parse_size("3")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: --size 3: the column count must be even (packed int4 stores two codes per byte)
    """
    parts = text.lower().split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        dims = []
    if len(dims) not in (1, 2) or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"--size {text}: use N (an N x N matrix) or ROWSxCOLS with positive integers,"
                                         " e.g. 4096 or 1024x4096")
    rows, cols = dims * 2 if len(dims) == 1 else dims
    if cols % 2:
        raise argparse.ArgumentTypeError(f"--size {text}: the column count must be even "
                                         "(packed int4 stores two codes per byte)")
    return rows, cols


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def _ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ..., ``11th``, ..., ``22nd``."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _check_line(rows: int, cols: int) -> str:
    """What the reference backend checks: every row of a small matrix, else every k-th row."""
    from nbquant.demo import check_step

    step = check_step(rows, cols)
    which = f"all {rows} rows" if step == 1 else f"every {_ordinal(step)} row ({-(-rows // step)} of {rows} rows)"
    return (f"check: the reference backend (NumPy) quantizes {which} with the same scales; "
            "SQNR dB, max abs err and = reference cover those rows")


def _build_parser(backend_names: bool = True) -> argparse.ArgumentParser:
    """The parser; ``backend_names=False`` skips listing the backends (which imports the CUDA target: ~0.5 s)."""
    import nbquant
    from nbquant.demo import DEFAULT_REPEATS

    parser = argparse.ArgumentParser(prog="nbquant", description="nbquant: Numba-compiled quantization kernels.")
    parser.add_argument("--version", action="version", version=f"nbquant {nbquant.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    names = [b.name for b in nbquant.backends()] if backend_names else ["reference", "cpu", "cuda"]
    demo = sub.add_parser(
        "demo",
        help="quantize a built-in weight-like matrix with several schemes on every compiled backend",
        description="Quantize a deterministic heavy-tailed float32 matrix (Student-t, per-row magnitudes) with "
                    "several schemes on every available compiled backend; print SQNR, max abs error, quantize "
                    "time (first call, which includes the JIT compile or cache load, and the median of the "
                    "repeats), GB/s (bytes read + written / median time) and whether the codes equal the "
                    "reference backend's bit for bit on a slice of rows (every row of a matrix of up to 2^20 "
                    "values), and a legend. Exits 1 if any backend disagrees with reference, 2 if a backend "
                    "named with --backend cannot run here.",
    )
    demo.add_argument("--size", type=parse_size, default="4096",
                      help="N (an N x N matrix) or ROWSxCOLS; COLS must be even (default: 4096)")
    demo.add_argument("--backend", action="append", choices=names, dest="backends", metavar="NAME",
                      help=f"run only this backend (repeatable; one of {', '.join(names)}; default: every "
                           "available one but reference, which checks them)")
    demo.add_argument("--repeats", type=_positive_int, default=DEFAULT_REPEATS,
                      help=f"timed quantize calls after the first, per scheme and backend (default: {DEFAULT_REPEATS})")
    demo.add_argument("--seed", type=int, default=0, help="seed of the input matrix (default: 0)")
    demo.add_argument("--no-convert", dest="convert", action="store_false",
                      help="skip the last part: nbquant convert on a small synthetic Llama-shaped checkpoint and on "
                           "a small synthetic GGUF model")
    _add_convert_parser(sub)
    inspect = sub.add_parser("inspect", help="what a safetensors checkpoint holds: scheme, shape, bytes a weight",
                             description="Print a checkpoint folder's quantization_config, a table of its weights "
                                         "(scheme as stored, or kept and why; shape, dtypes, bytes; layers that "
                                         "agree grouped) and totals. Exit status 1 with one line on a missing or "
                                         "broken folder.")
    inspect.add_argument("path", metavar="PATH", help="folder with config.json and *.safetensors shards")
    inspect.add_argument("--json", action="store_true", help="print every tensor and row as JSON")
    inspect.add_argument("--all", action="store_true", help="one row a weight: no grouping of layers")
    inspect.error = functools.partial(_one_line_error, inspect, command="inspect")
    _add_precompile_parser(sub)
    return parser


def _add_precompile_parser(sub) -> None:
    from nbquant.precompile import DTYPES, GROUPS

    precompile = sub.add_parser(
        "precompile", help="compile the cpu kernels of chosen schemes ahead of time, into numba's on-disk cache",
        description="Compile the cpu kernels that the chosen targets call (each `nbquant demo` scheme, nf4, "
                    "dynamic-int8, each `nbquant convert` preset as convert:NAME or NAME, each GGUF format as "
                    "gguf:NAME or NAME) for the chosen input dtypes, in parallel worker processes, into numba's "
                    "on-disk cache (NUMBA_CACHE_DIR if set): "
                    "later processes load them in milliseconds instead of compiling them on their first call. "
                    "Prints a progress line per target on stderr and a summary.")
    precompile.add_argument("targets", nargs="*", metavar="TARGET",
                            help=f"targets or groups ({', '.join(GROUPS)}; default: demo); --list names them")
    precompile.add_argument("--dtype", nargs="+", action="extend", choices=DTYPES, metavar="DTYPE",
                            help=f"input dtypes to prepare ({', '.join(DTYPES)}; default: float32)")
    precompile.add_argument("--jobs", type=_positive_int, default=None, metavar="N",
                            help="worker processes (default: the usable CPUs; 1 compiles in this process)")
    precompile.add_argument("--list", action="store_true", help="print the targets and groups, compile nothing")
    precompile.add_argument("--quiet", action="store_true", help="no progress lines, only the summary")


def _precompile(args: argparse.Namespace) -> int:
    """``nbquant precompile``: 0 once every target is compiled (or listed); 1 with one line on an unknown target."""
    import time

    from nbquant.precompile import GROUPS, TARGETS, cache_location, precompile, resolve_targets

    if args.list:
        print("targets: " + " ".join(TARGETS))
        print("\n".join(f"group {name}: {' '.join(members)}" for name, members in GROUPS.items()))
        return 0
    try:
        names = resolve_targets(args.targets)
    except ValueError as e:
        print(f"nbquant precompile: error: {e}", file=sys.stderr)
        return 1
    start = time.perf_counter()
    done = precompile(names, args.dtype or ["float32"], jobs=args.jobs, progress=False if args.quiet else None)
    print(f"nbquant precompile: {len(done)} target(s), {sum(p.signatures for p in done)} kernel signature(s) "
          f"compiled in {time.perf_counter() - start:.1f} s into {cache_location()}; later processes load them "
          "from there")
    return 0


def _add_convert_parser(sub) -> None:
    convert = sub.add_parser(
        "convert",
        help="quantize a Hugging Face safetensors checkpoint into the compressed-tensors format (vLLM)",
        description="Quantize the Linear weights of a Hugging Face safetensors checkpoint with a compressed-tensors "
                    "preset scheme, without torch, one tensor at a time. By default token embeddings, the output "
                    "head, MoE routers and vision/audio towers stay unquantized, as vLLM and transformers expect, "
                    "and quantization_config.ignore names them; the output is what llm-compressor's model_free_ptq "
                    "writes given that ignore list (the same bytes). Prints a progress bar on stderr (when it is a "
                    "terminal) and a table of the quantized weights (SQNR dB, max abs error on sampled rows) and "
                    "of the tensors kept and why. Every argument is checked before anything is written. Exit status "
                    "1 with a one-line error naming the argument, file or tensor and what to do on bad input (2 for "
                    "a malformed command line); on Ctrl-C, 130 "
                    "and one line: the same command again resumes, keeping the shards already written. A quantized "
                    "SRC (compressed-tensors, or FP8 with weight_scale_inv) is detected and decoded: --scheme BF16, "
                    "F16 or F32 writes a plain checkpoint, any other scheme re-quantizes, exactly where the scheme "
                    "holds the source's codes and scales.",
    )
    convert.add_argument("src", metavar="SRC", help="folder with config.json and *.safetensors shards, or a .gguf "
                                                    "file (to a folder with --scheme BF16, W4A16 ...)")
    convert.add_argument("dst", metavar="DST", help="output folder (created; must be empty unless --overwrite)")
    convert.add_argument("--scheme", required=True, metavar="NAME",
                         help="compressed-tensors preset: W4A16, W4A16_ASYM, W8A16, W2A16, W8A8, FP8_DYNAMIC, "
                              "FP8_BLOCK, NVFP4A16, MXFP4A16, MXFP8A16, ...; or BF16, F16, F32 to dequantize a "
                              "quantized SRC (see docs/convert.md)")
    convert.add_argument("--ignore", nargs="+", action="extend", default=[], metavar="PATTERN",
                         help="module names or re:<regex> patterns to keep unquantized as well (e.g. "
                              "re:.*k_proj$); one that matches no module is an error; modules ending with norm are "
                              "always kept")
    convert.add_argument("--no-default-ignore", dest="default_ignore", action="store_false",
                         help="quantize what llm-compressor's model_free_ptq quantizes with the same --ignore, "
                              "token embeddings, output head, MoE routers and vision/audio towers included (by "
                              "default they are kept and listed in quantization_config.ignore; see docs/convert.md)")
    convert.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                         help="threads of the quantization kernels (default: nbquant's, NBQUANT_NUM_THREADS; with "
                              "--scheduler: per task, default the worker's cores over its threads)")
    convert.add_argument("--report", metavar="FILE", help="write the JSON report there")
    convert.add_argument("--overwrite", action="store_true", help="replace the checkpoint files of a non-empty DST")
    convert.add_argument("--quiet", action="store_true",
                         help="no progress bar and no table (nor the accuracy check, unless --report asks for it)")
    convert.add_argument("--full-check", action="store_true",
                         help="compute SQNR and max abs error over every row (default: sampled rows)")
    convert.add_argument("--scheduler", metavar="ADDRESS",
                         help="a dask.distributed scheduler (tcp://host:8786): write the shards on its workers, which "
                              "share SRC and DST's filesystem (needs nbquant[dask]; see docs/convert.md)")
    gguf = convert.add_argument_group("GGUF files (SRC ending in .gguf: llama-quantize's output, byte for byte; "
                                      "--scheme Q4_K_M, Q8_0, ... see docs/convert.md)")
    gguf.add_argument("--imatrix", metavar="FILE", help="importance matrix (llama-imatrix's GGUF or legacy .dat)")
    gguf.add_argument("--pure", action="store_true", help="every quantized tensor in the scheme's default type")
    gguf.add_argument("--output-tensor-type", metavar="TYPE", help="type of output.weight (e.g. Q8_0)")
    gguf.add_argument("--token-embedding-type", metavar="TYPE", help="type of token_embd.weight")
    gguf.add_argument("--leave-output-tensor", action="store_true", help="keep output.weight as it is")
    gguf.add_argument("--include-weights", action="append", metavar="NAME",
                      help="use the importance matrix only for tensors whose names contain NAME (repeatable)")
    gguf.add_argument("--exclude-weights", action="append", metavar="NAME",
                      help="do not use the importance matrix for tensors whose names contain NAME (repeatable)")
    gguf.add_argument("--tensor-type", action="append", metavar="PATTERN=TYPE", dest="tensor_types",
                      help="TYPE for the tensors whose names match the regular expression PATTERN, instead of the "
                           "scheme's mix (repeatable; the first match wins; e.g. attn_q=Q8_0)")
    gguf.add_argument("--override-kv", action="append", metavar="KEY=TYPE:VALUE", dest="override_kv",
                      help="set metadata KEY in the output; TYPE int (written as u32), float, bool or str "
                           "(repeatable; e.g. general.name=str:mine)")
    gguf.add_argument("--prune-layers", metavar="L0,L1,...", dest="prune_layers",
                      help="leave out these layers (blk.N.); the later ones are numbered on and the layer count "
                           "is updated")
    gguf.add_argument("--keep-split", action="store_true",
                      help="write one file per part of a split source: DST less .gguf, then -00001-of-0000N.gguf")
    convert.error = functools.partial(_one_line_error, convert)


#: ``convert()``'s parameters as the command line spells them (the others are ``--`` and their name).
_SPELLING = {"src": "SRC", "dst": "DST"}


def _spelled(text: str, name: str) -> str:
    """``text`` (an :class:`~nbquant.convert.arguments.ArgumentError`'s message, or a note about an argument) with
    the argument ``name`` it starts with spelled as the command line spells it."""
    return _SPELLING.get(name, "--" + name) + text[len(name):] if text.startswith(name + " ") else text


def _one_line_error(parser: argparse.ArgumentParser, message: str, command: str = "convert") -> None:
    """argparse's error for ``nbquant convert`` (or ``inspect``): one line on stderr (no usage), exit status 2."""
    parser.exit(2, f"nbquant {command}: error: {message} (see nbquant {command} --help)\n")


def _convert(args: argparse.Namespace) -> int:
    """``nbquant convert``: 0, or 1 with one line on stderr, or 130 on Ctrl-C with one line saying how to resume."""
    try:
        return _run_convert(args)
    except KeyboardInterrupt:
        again = " without --overwrite" if args.overwrite else ""  # --overwrite starts clean
        print(("\n" if sys.stderr.isatty() else "") +  # after the progress bar or the terminal's ^C
              f"nbquant convert: interrupted; run the same command again{again} to resume", file=sys.stderr)
        return 130


def _run_gguf(args: argparse.Namespace) -> int:
    """``nbquant convert IN OUT.gguf --scheme S`` (IN a GGUF file or a Hugging Face folder): 0, or 1 with one line
    on stderr."""
    from nbquant.convert import ConvertError
    from nbquant.convert.gguf import convert_gguf, convert_hf_gguf, format_gguf_table

    job = convert_gguf if args.src.lower().endswith(".gguf") else convert_hf_gguf  # a GGUF or a safetensors source
    try:
        report = job(args.src, args.dst, args.scheme, imatrix=args.imatrix, pure=args.pure,
                              output_tensor_type=args.output_tensor_type,
                              token_embedding_type=args.token_embedding_type,
                              leave_output_tensor=args.leave_output_tensor, include_weights=args.include_weights,
                              exclude_weights=args.exclude_weights, tensor_types=args.tensor_types,
                              override_kv=args.override_kv, prune_layers=args.prune_layers,
                              keep_split=args.keep_split, overwrite=args.overwrite,
                              progress=False if args.quiet else None, workers=args.workers,
                              check=not args.quiet or args.report is not None)
    except ConvertError as e:
        print(f"nbquant convert: error: {e}", file=sys.stderr)
        return 1
    for note in report.notes:
        print(f"nbquant convert: {note}", file=sys.stderr)
    if args.report:
        report.write(args.report)
    if not args.quiet:
        print(format_gguf_table(report))
    return 0


#: The options of GGUF sources (argparse's dest: the flag).
_GGUF_OPTIONS = {"imatrix": "--imatrix", "pure": "--pure", "output_tensor_type": "--output-tensor-type",
                 "token_embedding_type": "--token-embedding-type", "leave_output_tensor": "--leave-output-tensor",
                 "include_weights": "--include-weights", "exclude_weights": "--exclude-weights",
                 "tensor_types": "--tensor-type", "override_kv": "--override-kv", "prune_layers": "--prune-layers",
                 "keep_split": "--keep-split"}


def _to_folder(args: argparse.Namespace) -> bool:
    """Whether a SRC ending in .gguf is written as a Hugging Face folder: DST not a .gguf and a convert() scheme."""
    from nbquant.convert import ConvertError, get_scheme

    try:
        get_scheme(args.scheme)
    except ConvertError:
        return False
    return not args.dst.lower().endswith(".gguf")


def _run_convert(args: argparse.Namespace) -> int:
    if args.src.lower().endswith(".gguf") and not _to_folder(args) or args.dst.lower().endswith(".gguf"):
        return _run_gguf(args)
    given = [flag for dest, flag in _GGUF_OPTIONS.items() if getattr(args, dest) not in (None, False)]
    if given:
        print(f"nbquant convert: error: {given[0]} applies to GGUF sources written as GGUF (SRC and DST ending in "
              f".gguf, a GGUF scheme such as Q4_K_M), not to {args.src!r} -> {args.dst!r}", file=sys.stderr)
        return 1
    from nbquant.convert import ConvertError, convert
    from nbquant.convert.arguments import ArgumentError
    from nbquant.convert.report import format_table

    try:
        report = convert(args.src, args.dst, args.scheme, ignore=args.ignore, default_ignore=args.default_ignore,
                         workers=args.workers, report=args.report, overwrite=args.overwrite,
                         progress=False if args.quiet else None, check=not args.quiet or args.report is not None,
                         full_check=args.full_check,
                         scheduler=args.scheduler)
    except ConvertError as e:
        print(f"nbquant convert: error: {_spelled(str(e), e.argument) if isinstance(e, ArgumentError) else e}",
              file=sys.stderr)
        return 1
    for note in report.notes:
        print(f"nbquant convert: {_spelled(note, 'ignore')}", file=sys.stderr)
    if not args.quiet:
        print(format_table(report))
    return 0


def _demo(args: argparse.Namespace) -> int:
    import nbquant
    from nbquant import demo
    from nbquant.precompile import compile_ahead, compile_note, compile_watch

    if args.backends:
        run, skipped = list(dict.fromkeys(args.backends)), []
        unavailable = demo.unavailable_backends(run)
        for name, why in unavailable:
            print(f"nbquant demo: backend {name} cannot run here: {why}", file=sys.stderr)
        if unavailable:
            return 2
    else:
        run, skipped = demo.default_backends(), demo.unavailable_backends()
    rows, cols = args.size
    x = demo.make_weights(rows, cols, args.seed)
    print(f"nbquant {nbquant.__version__} demo: {rows}x{cols} float32 weight-like matrix ({x.nbytes / 2**20:.1f} MiB; "
          f"Student-t df={demo.T_DOF}, per-row magnitudes x0.1..x10, seed {args.seed})")
    print(f"backends: {', '.join(run)}" + "".join(f"; skipped {n}: {why}" for n, why in skipped))
    print(_check_line(rows, cols))
    print(f"time: quantize of the whole matrix; first call (includes JIT compile or cache load), then median of "
          f"{args.repeats}; GB/s = (input + scales + codes bytes) / median"
          + ("; cuda times include copying the NumPy arrays to and from the GPU" if "cuda" in run else ""))
    ahead = compile_ahead(announce=_announce_compile) if "cpu" in run else None
    print(HEADER, flush=True)
    mismatches, first_calls = 0, 0.0
    with compile_watch() as watch:
        for row in demo.run_demo(backends=run, repeats=args.repeats, x=x):
            mismatches += not row.equals_reference
            first_calls += row.first_call_s
            print(format_row(row), flush=True)
    print("\n".join(LEGEND))
    print(machine_line(machine_info()))
    print(compile_note(watch.signatures, watch.seconds, first_calls, ahead))
    if args.convert:
        _demo_convert()
    if mismatches:
        print(f"error: {mismatches} row(s) differ from the reference backend", file=sys.stderr)
        return 1
    return 0


def _announce_compile(targets: int, jobs: int) -> None:
    print(f"compile: numba's on-disk cache is empty, so the demo first compiles the cpu kernels of its {targets + 1} "
          f"targets, {jobs} at a time (once: later runs load them; `nbquant precompile` does it ahead)", flush=True)


def _demo_convert() -> None:
    """``nbquant convert`` on a synthetic Llama-shaped checkpoint, then on a synthetic GGUF, in a temporary folder."""
    import tempfile

    from nbquant import demo
    from nbquant.convert import convert, write_synthetic_checkpoint
    from nbquant.convert.gguf import gguf_summary
    from nbquant.convert.report import format_table

    with tempfile.TemporaryDirectory(prefix="nbquant-demo-") as tmp:
        src, dst = os.path.join(tmp, "llama"), os.path.join(tmp, "llama-w4a16")
        write_synthetic_checkpoint(src, **DEMO_CHECKPOINT)
        shards = [f for f in os.listdir(src) if f.endswith(".safetensors")]
        size = sum(os.path.getsize(os.path.join(src, f)) for f in shards)
        print(f"\nconvert: nbquant convert {src} {dst} --scheme W4A16  (a synthetic Llama-shaped "
              f"float32 checkpoint, {size / 2**20:.1f} MiB in {len(shards)} shards, into the compressed-tensors "
              "format vLLM loads, embedding and output head kept: what llm-compressor's model_free_ptq writes with "
              "the ignore list recorded, byte for byte; SQNR and max abs err of every k-th row)", flush=True)
        report = convert(src, dst, "W4A16")
        print(format_table(report))
        gguf = demo.gguf_step(tmp)
        model = demo.GGUF_MODEL
        print(f"\ngguf: nbquant convert model-BF16.gguf model-{gguf.scheme}.gguf --scheme {gguf.scheme}  (a synthetic "
              f"Llama-shaped BF16 GGUF, {model['layers']} layers, hidden {model['hidden']}: the file llama.cpp's "
              f"llama-quantize writes, byte for byte; types chosen, SQNR of every k-th row)", flush=True)
        print("\n".join(gguf_summary(gguf)) + f" in {gguf.seconds:.2f} s")


def _inspect(args: argparse.Namespace) -> int:
    from nbquant.convert.inspect import run as inspect_run

    return inspect_run(args.path, as_json=args.json, group=not args.all)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nbquant`` command line and return its exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success; 1 if a backend's codes differ from the reference backend's; 2,
        with the reason on stderr, if a backend named with ``--backend`` cannot run here.
        ``convert``: 1 with one line on stderr on a bad argument or input; 130 on Ctrl-C.
        ``inspect``: 1 with one line on stderr on a missing or broken folder.
        Bad arguments raise :class:`SystemExit` with status 2 and a message on stderr (one line
        for ``convert``).

    Examples
    --------
    >>> import contextlib, io
    >>> with contextlib.redirect_stdout(io.StringIO()) as out:
    ...     status = main(["demo", "--size", "4x32", "--backend", "reference", "--repeats", "1"])
    >>> status, out.getvalue().splitlines()[2]  # doctest: +ELLIPSIS
    (0, 'check: the reference backend (NumPy) quantizes all 4 rows with the same scales; ...')
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser(backend_names=argv[:1] not in (["convert"], ["inspect"], ["precompile"]))
    if argv[:1] in (["convert"], ["inspect"]):  # an unrecognized argument of these is the top parser's error
        parser.error = functools.partial(_one_line_error, parser, command=argv[0])
    args = parser.parse_args(argv)
    commands = {"inspect": _inspect, "convert": _convert, "precompile": _precompile, "demo": _demo}
    try:
        return commands[args.command](args)
    except BrokenPipeError:  # e.g. `nbquant inspect DIR | head`: stop quietly, as other Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def run() -> None:
    """The ``nbquant`` script: :func:`main`, then exit at once.

    The interpreter's teardown of Numba's modules costs ~0.1 s of a command that runs for
    well under a second; the output streams are flushed first, and every file a command
    writes is closed before :func:`main` returns.
    """
    status = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass
    os._exit(status)


if __name__ == "__main__":
    run()
