"""A Hugging Face checkpoint as a GGUF model: ``nbquant convert DIR OUT.gguf --scheme S`` without llama.cpp.

llama.cpp's route from a safetensors folder is two programs: ``convert_hf_to_gguf.py DIR --outtype T``
(the metadata, the tokenizer, the tensors renamed and in ``T``) and then ``llama-quantize`` for a
quantized scheme. :func:`open_hf` presents the folder as the file the first program writes (the
interface of :class:`nbquant.gguf.split.SplitModel`, each tensor made when read), so that the GGUF job
(:func:`~nbquant.convert.gguf.convert_gguf`) is the second program, with nothing on disk between:

* ``BF16`` / ``F16`` / ``F32``: the converter's file with ``--outtype`` that type;
* any quantized scheme: ``llama-quantize`` applied to the converter's file in the checkpoint's own
  dtype (bf16 for a quantized source, whose weights are decoded as transformers decodes them).

Only what can be done right is done: the architectures of :data:`ARCHITECTURES` (dense; rope scaling
none, linear, yarn or Llama 3's) with a SentencePiece tokenizer (:mod:`.hf_sentencepiece`) or a byte-level
BPE tokenizer whose pre-tokenizer nbquant recognizes (:mod:`.hf_tokenizer`). Anything else is refused with
one line that points to llama.cpp's converter. The descriptive keys the converter guesses from the folder's
name or copies from a model card (``general.basename``, ``finetune``, ``license``, ``tags`` ...) are not
written.

Exact re-encodings: a weight stored as symmetric integer codes of at most 4 (8) bits with groups of
32·k columns or one scale per row, its scales exact in float16, holds the same codes and scales as
``Q4_0`` (``Q8_0``) blocks. Where the scheme gives such a weight that type, the blocks are written from the
source's codes and scales (:meth:`HFModel.exact_records`): nothing is rounded, and llama.cpp decodes
``code x scale`` exactly (the source's own decoder rounds that product to bfloat16).

Examples
--------
>>> import os, tempfile
>>> from nbquant.convert import write_synthetic_checkpoint
>>> src = tempfile.mkdtemp()
>>> _ = write_synthetic_checkpoint(src, hidden=64, intermediate=128, layers=1, vocab=32, tokenizer=True)
>>> m = open_hf(src, "BF16")
>>> m.value("general.architecture"), m.tensors["blk.0.attn_q.weight"].shape
('llama', (64, 64))
"""

from __future__ import annotations

import math
import os

import ml_dtypes
import numpy as np

from nbquant.gguf.file import Field, TensorInfo, type_id, type_name
from nbquant.gguf.policy import ALIASES, SCHEMES

from ..plan import open_checkpoint
from ..safetensors import ConvertError, dtype_name
from ..schemes import get_scheme
from ..sources import Decoded, open_source
from ..sources.gguf import hf_tensors
from .hf_metadata import FILE_TYPES, hf_fields, rope_freqs, rope_parameters, with_defaults
from .job import AS_IS, convert_gguf
from .report import GGUFReport

__all__ = ["ARCHITECTURES", "HFModel", "convert_hf_gguf", "open_hf"]

#: transformers class → GGUF ``general.architecture``, as llama.cpp's converter maps them.
ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                 "Qwen3ForCausalLM": "qwen3"}
#: The checkpoint dtypes (safetensors names, which are also the GGUF type names) that are written.
_FLOAT_TYPES = ("BF16", "F16", "F32")
_ALIGNMENT = 32


def _gguf_name(hf: str, arch: str, layers: int) -> str | None:
    """The GGUF name of transformers tensor ``hf`` (None: not one the converter writes for ``arch``)."""
    table = hf_tensors(arch)
    if hf in table:
        return table[hf]
    parts = hf.split(".")
    if len(parts) > 3 and parts[:2] == ["model", "layers"] and parts[2].isdecimal() and int(parts[2]) < layers:
        name = table.get("model.layers.{i}." + ".".join(parts[3:]))
        return None if name is None else name.format(i=int(parts[2]))
    return None


def _as_type(x: np.ndarray, qtype: str) -> np.ndarray:
    """``x`` in GGUF float type ``qtype`` as the converter writes it (float32 first, then round to nearest even)."""
    if x.dtype == {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}[qtype]:
        return x
    x = x.astype(np.float32)
    if qtype == "F32":
        return x
    if qtype == "F16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16)
    u = x.view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    b = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
    b[nan] = ((u[nan] >> 16) | 64).astype(np.uint16)  # a NaN stays quiet
    return b.view(ml_dtypes.bfloat16)


def _permute(x: np.ndarray, heads: int) -> np.ndarray:
    """llama's Q/K rows in llama.cpp's rotary order: each head's two halves interleaved."""
    rows = x.shape[0]
    return x.reshape(heads, 2, rows // heads // 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def _exact_codes(w: Decoded, bits: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(codes, scales)`` of ``w`` for blocks of 32 (codes int8, scales float16 one per block), or None."""
    scheme = w.fmt.scheme
    if scheme.kind != "int" or not scheme.symmetric or scheme.bits > bits or not w.fmt.native or w.ndim != 2:
        return None
    rows, cols = w.shape
    if cols % 32 or scheme.strategy not in ("channel", "group") or \
            (scheme.strategy == "group" and scheme.group_size % 32):
        return None
    t = w.tensors
    s = np.asarray(t["weight_scale"]).astype(np.float32).reshape(rows, -1)
    h = s.astype(np.float16)
    if not np.isfinite(h).all() or not np.array_equal(h.astype(np.float32), s):
        return None
    unit = dict(t, weight_scale=np.ones(np.shape(t["weight_scale"]), np.float32))
    q = np.asarray(w.fmt.codec.dequantize(unit, np.dtype(np.float32))).reshape(rows, cols)
    per = cols // 32 if scheme.strategy == "channel" else scheme.group_size // 32
    return q.astype(np.int8).reshape(rows, cols // 32, 32), np.repeat(h, per, axis=1)[:, :cols // 32]


def _records(codes: np.ndarray, scales: np.ndarray, qtype: str) -> np.ndarray:
    """``Q4_0`` / ``Q8_0`` records (uint8, one row of blocks per row) holding ``codes`` with ``scales``."""
    rows, blocks, _ = codes.shape
    d = scales.reshape(rows, blocks, 1).view(np.uint8)
    if qtype == "Q8_0":
        return np.concatenate([d, codes.view(np.uint8)], axis=2).reshape(rows, -1)
    nib = (codes + 8).astype(np.uint8)
    return np.concatenate([d, nib[..., :16] | (nib[..., 16:] << 4)], axis=2).reshape(rows, -1)


class HFModel:
    """A Hugging Face checkpoint seen as the GGUF file llama.cpp's converter writes from it.

    :class:`~nbquant.gguf.split.SplitModel`'s interface: :attr:`fields`, :attr:`tensors` (each
    made from the checkpoint by :meth:`tensor_bytes` when read), :attr:`alignment`, one part.
    """

    parts = 1
    version = 3

    def __init__(self, path: str, fields: list[Field], plan: list[tuple[str, object, str, int | None]]) -> None:
        self.path, self.alignment = path, _ALIGNMENT
        self.fields = {f.key: f for f in fields}
        self._plan = {name: (x, heads) for name, x, _, heads in plan}
        self.tensors: dict[str, TensorInfo] = {}
        offset = 0
        for name, x, qtype, _ in plan:
            ne = tuple(reversed(x.shape)) + (1,) * (4 - len(x.shape))
            info = TensorInfo(name, ne, type_id(qtype), offset)
            self.tensors[name] = info
            offset += info.nbytes + (-info.nbytes % _ALIGNMENT)

    def part_index(self, name: str) -> int:
        """0: one part."""
        return 0

    def value(self, key: str, default=None):
        """The value of metadata ``key``."""
        f = self.fields.get(key)
        return default if f is None else f.value

    def tensor_bytes(self, name: str) -> memoryview:
        """Tensor ``name`` in its type (:attr:`tensors`), made from the checkpoint."""
        x, heads = self._plan[name]
        info = self.tensors[name]
        a = _as_type(np.asarray(x[:] if isinstance(x, Decoded) else x), type_name(info.type_id))
        if heads is not None:
            a = _permute(a, heads)
        return memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8))

    def exact_records(self, name: str, qtype: str) -> np.ndarray | None:
        """Tensor ``name`` as ``qtype`` records holding the source's codes and scales, or None (see the module)."""
        x, heads = self._plan[name]
        if qtype not in ("Q4_0", "Q8_0") or not isinstance(x, Decoded):
            return None
        found = _exact_codes(x, 4 if qtype == "Q4_0" else 8)
        if found is None:
            return None
        rec = _records(*found, qtype)
        return np.ascontiguousarray(_permute(rec, heads) if heads is not None else rec)

    def release(self, name: str) -> None:
        """Nothing to release: each tensor is made when read."""

    def close(self) -> None:
        """Nothing to close: the checkpoint's files are memory-mapped on demand."""

    def __enter__(self) -> HFModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _refuse(src: str, why: str) -> ConvertError:
    return ConvertError(f"{src}: {why}; nbquant writes GGUF from safetensors only where the mapping is simple "
                        "enough to do right: convert with llama.cpp's convert_hf_to_gguf.py, then run nbquant "
                        "convert on that .gguf")


def open_hf(src: str, outtype: str | None) -> HFModel:
    """The checkpoint folder ``src`` as the GGUF file ``convert_hf_to_gguf.py --outtype outtype`` writes from it.

    Parameters
    ----------
    src : str
        A Hugging Face folder: ``config.json``, ``*.safetensors`` (plain or quantized), ``tokenizer.json``.
    outtype : {"BF16", "F16", "F32"} or None
        The type of the 2-D weights; None: the checkpoint's own (bf16 for decoded quantized weights).

    Raises
    ------
    ConvertError
        One line: an architecture, tokenizer or config the mapping does not cover, or a checkpoint fault.
    """
    ckpt = open_checkpoint(src, quantized=True)
    config = ckpt.config
    quantized = "quantization_config" in config or "hf_quant_config.json" in ckpt.other_files
    if quantized:
        ckpt = open_source(ckpt, get_scheme("BF16"))
        config = ckpt.config
    archs = config.get("architectures")
    cls = archs[0] if isinstance(archs, list) and len(archs) == 1 else None
    if cls not in ARCHITECTURES:
        raise _refuse(src, f"architectures {archs!r} is not one nbquant maps to GGUF ({', '.join(ARCHITECTURES)})")
    arch = ARCHITECTURES[cls]
    config = with_defaults(config, cls, os.path.join(src, "config.json"))
    layers = config.get("num_hidden_layers")
    if not isinstance(layers, int) or isinstance(layers, bool) or layers <= 0:
        raise ConvertError(f"{src}/config.json: num_hidden_layers is {layers!r}; expected a positive integer")
    tensors, appended = [], []
    for hf in _converter_order(ckpt):
        x = ckpt.shards[ckpt.weight_map[hf]].tensor(hf)
        name = _gguf_name(hf, arch, layers)
        if name is None:
            if hf == "lm_head.weight" and config.get("tie_word_embeddings"):
                continue
            raise _refuse(src, f"tensor {hf} has no place in llama.cpp's {arch} model")
        dtype = dtype_name(x.dtype)
        if dtype not in _FLOAT_TYPES:
            raise _refuse(src, f"tensor {hf} is {dtype}")
        qtype = "F32" if x.ndim == 1 else (outtype or dtype)
        heads = None
        if arch == "llama" and name.endswith((".attn_q.weight", ".attn_k.weight")):
            heads = config["num_attention_heads"] if ".attn_q." in name else config["num_key_value_heads"]
        packed = isinstance(x, Decoded) and x.fmt.codes == "weight_packed"  # the converter appends these
        (appended if packed else tensors).append((name, x, qtype, heads))
    tensors += appended
    rope = rope_parameters(config)
    if arch == "llama" and str(rope.get("rope_type", "")).lower() == "llama3":
        head_dim = config["head_dim"]
        tensors.insert(0, ("rope_freqs.weight", rope_freqs(rope, head_dim), "F32", None))
    params = sum(math.prod(x.shape) for _, x, _, _ in tensors)
    source = {q for _, x, q, _ in tensors if x.ndim > 1}  # outtype None: the job sets the scheme's file type
    file_type = FILE_TYPES[outtype or (source.pop() if len(source) == 1 else "BF16")]
    return HFModel(src, hf_fields(src, config, arch, params, file_type), tensors)


def _converter_order(ckpt) -> list[str]:
    """The tensor names in the order the converter reads them: the shards by file name, each shard's names sorted
    (a decoded weight under its own name)."""
    return [name for shard in sorted(ckpt.shards) for name in sorted(ckpt.shards[shard].entries)]



def convert_hf_gguf(src: str | os.PathLike, dst: str | os.PathLike, scheme: str, **options) -> GGUFReport:
    """Write the Hugging Face checkpoint ``src`` as the GGUF file ``dst``: llama.cpp's converter, then
    ``llama-quantize`` for a quantized ``scheme`` (see the module docstring).

    Parameters
    ----------
    src, dst : str or os.PathLike
        The checkpoint folder (plain or quantized, with ``tokenizer.json``) and the output file.
    scheme : str
        ``BF16``, ``F16`` or ``F32`` (``convert_hf_to_gguf.py --outtype``), or any scheme of
        :func:`~nbquant.convert.gguf.convert_gguf` (Q8_0, Q4_0, Q4_K_M ...).
    **options
        :func:`~nbquant.convert.gguf.convert_gguf`'s keyword arguments; a BF16/F16/F32 scheme takes only
        ``overwrite`` and ``progress``.

    Returns
    -------
    GGUFReport
        Each tensor's type and why; ``exact`` in the reason where the source's codes and scales were kept.

    Examples
    --------
    >>> import os, tempfile
    >>> from nbquant.convert import write_synthetic_checkpoint
    >>> src, out = tempfile.mkdtemp(), tempfile.mkdtemp()
    >>> _ = write_synthetic_checkpoint(src, hidden=64, intermediate=128, layers=1, vocab=32, tokenizer=True)
    >>> r = convert_hf_gguf(src, os.path.join(out, "m.gguf"), "Q8_0", progress=False)
    >>> sorted({t.target for t in r.tensors})
    ['F32', 'Q8_0']
    """
    src, dst = os.fspath(src), os.fspath(dst)
    name = str(scheme).upper()
    if name not in FILE_TYPES and ALIASES.get(name, name) not in SCHEMES:
        raise ConvertError(f"scheme {scheme!r} is not one a .gguf destination takes: BF16, F16, F32 or a GGUF scheme "
                           f"({', '.join(SCHEMES)}); a compressed-tensors scheme writes a folder (DST without .gguf)")
    if name in FILE_TYPES:
        extra = sorted(k for k, v in options.items() if k not in ("overwrite", "progress", "workers", "check")
                       and v not in (None, False, []))
        if extra:
            raise ConvertError(f"{extra[0]} applies to a quantized GGUF scheme, not to {name}")
        model = open_hf(src, name)
        return convert_gguf(src, dst, AS_IS, model=model, overwrite=options.get("overwrite", False),
                            progress=options.get("progress"))
    return convert_gguf(src, dst, scheme, model=open_hf(src, None), **options)
