"""A GGUF file as the source of ``nbquant convert``: its tensors decoded into a Hugging Face checkpoint.

:func:`open_gguf` reads the file's header (memory-mapped, untrusted: :mod:`nbquant.gguf.file`; the
first part of a split model reads every part), maps its metadata to a ``config.json`` and its
tensor names to the transformers names, checks every tensor against the config, and returns a
:class:`~nbquant.convert.plan.Checkpoint` whose shards are :class:`GGUFShard` views: each tensor is
a :class:`GGUFWeight`, decoded (one tensor, or rows of it, at a time) only when read.

The definition of right is transformers' own GGUF loader (``from_pretrained(dir, gguf_file=...)``,
its legacy path for these architectures): every tensor decoded to float32 as gguf-py's
``dequantize`` does (:func:`nbquant.gguf.dequantize`, equal bit for bit), the rows of llama's
``attn_q`` / ``attn_k`` put back in Hugging Face's rotary order (Phi-3's fused ``attn_qkv`` keeps its
rows), then cast to the target dtype as torch's CPU cast does (round to nearest even; NaN as torch
writes it). ``output.weight`` absent means
tied embeddings. The architectures mapped are :data:`ARCHITECTURES`; any other is refused.

The tokenizer stored in the metadata is written back as ``tokenizer.json`` and ``tokenizer_config.json``
(:mod:`~nbquant.convert.sources.gguf_tokenizer`); a tokenizer it does not write is a note.

A ``BF16`` / ``F16`` / ``F32`` target writes that checkpoint. Any other scheme re-quantizes the weights
from their ``BF16`` decoding: the output is what converting the ``BF16`` checkpoint would write.

Examples
--------
>>> import os, tempfile
>>> from nbquant.convert.gguf import write_synthetic_gguf
>>> from nbquant.convert.schemes import get_scheme
>>> path = write_synthetic_gguf(os.path.join(tempfile.mkdtemp(), "m.gguf"), hidden=64, intermediate=128,
...                             layers=1, vocab=32)
>>> ckpt = open_gguf(path, get_scheme("BF16"))
>>> ckpt.config["model_type"], ckpt.config["num_key_value_heads"], len(ckpt.weight_map)
('llama', 4, 12)
>>> w = ckpt.shards["model.safetensors"].tensor("model.layers.0.self_attn.k_proj.weight")
>>> w.shape, w[0:2].dtype
((16, 64), dtype(bfloat16))
"""

from __future__ import annotations

import math
import os
import re

import numpy as np

from nbquant import gguf
from nbquant.gguf.file import GGUFError, TensorInfo, type_name
from nbquant.gguf.split import SplitModel, open_model

from ..plan import Checkpoint
from ..safetensors import ConvertError, TensorEntry, dtype_name
from ..schemes import Scheme
from .dense import DENSE_DTYPES
from .gguf_tokenizer import tokenizer_files
from .view import Decoded, DecodedFile

__all__ = ["ARCHITECTURES", "GGUFShard", "GGUFWeight", "hf_tensors", "is_gguf", "open_gguf", "SHARD_BYTES"]

#: GGUF ``general.architecture`` → the transformers ``model_type`` and class it is written as.
ARCHITECTURES = {"llama": ("llama", "LlamaForCausalLM"), "qwen2": ("qwen2", "Qwen2ForCausalLM"),
                 "qwen3": ("qwen3", "Qwen3ForCausalLM"), "phi3": ("phi3", "Phi3ForCausalLM"),
                 "gemma2": ("gemma2", "Gemma2ForCausalLM"), "gemma3": ("gemma3_text", "Gemma3ForCausalLM")}
#: Architectures whose norm weights llama.cpp's converter stores plus one (Gemma's ``1 + w``); transformers subtracts
#: the one again, in float32, before the cast.
_NORM_PLUS_ONE = ("gemma2", "gemma3")
#: ``config.json``'s ``transformers_version``: the version whose GGUF loader the config follows (the parity tier's).
#: A config without one makes transformers 5 warn, wrongly, that the tokenizer has Mistral's broken split pattern.
TRANSFORMERS_VERSION = "5.17.0"
#: An output shard holds at most this many bytes of tensors (more only for one larger tensor).
SHARD_BYTES = 5 * 10**9
#: Values decoded to float32 at a time.
CHUNK_ELEMENTS = 1 << 22
#: ``{arch}.KEY`` → config key, as transformers maps them (and :data:`_ARCH_KEYS`).
_KEYS = {"context_length": "max_position_embeddings", "block_count": "num_hidden_layers",
         "feed_forward_length": "intermediate_size", "embedding_length": "hidden_size",
         "rope.freq_base": "rope_theta", "attention.head_count": "num_attention_heads",
         "attention.head_count_kv": "num_key_value_heads", "attention.layer_norm_rms_epsilon": "rms_norm_eps",
         "vocab_size": "vocab_size"}
#: The keys transformers maps for one architecture only.
_ARCH_KEYS = {"llama": {"rope.dimension_count": "head_dim"}, "qwen3": {"attention.key_length": "head_dim"},
              "gemma2": {"attention.key_length": "head_dim", "attention.sliding_window": "sliding_window"},
              "gemma3": {"attention.key_length": "head_dim", "attention.sliding_window": "sliding_window"}}
_TOKEN_KEYS = {"bos_token_id": "bos_token_id", "eos_token_id": "eos_token_id", "unknown_token_id": "unk_token_id",
               "padding_token_id": "pad_token_id"}
#: GGUF tensor name → transformers name (``{i}``: the layer), and whether it is a 1-D tensor.
_GLOBAL = {"token_embd.weight": ("model.embed_tokens.weight", False), "output_norm.weight": ("model.norm.weight", True),
           "output.weight": ("lm_head.weight", False)}
_LAYER = {"attn_norm.weight": ("input_layernorm.weight", True), "attn_q.weight": ("self_attn.q_proj.weight", False),
          "attn_k.weight": ("self_attn.k_proj.weight", False), "attn_v.weight": ("self_attn.v_proj.weight", False),
          "attn_output.weight": ("self_attn.o_proj.weight", False),
          "ffn_norm.weight": ("post_attention_layernorm.weight", True),
          "ffn_gate.weight": ("mlp.gate_proj.weight", False), "ffn_up.weight": ("mlp.up_proj.weight", False),
          "ffn_down.weight": ("mlp.down_proj.weight", False)}
_BIASES = {"attn_q.bias": ("self_attn.q_proj.bias", True), "attn_k.bias": ("self_attn.k_proj.bias", True),
           "attn_v.bias": ("self_attn.v_proj.bias", True)}
_QK_NORMS = {"attn_q_norm.weight": ("self_attn.q_norm.weight", True),
             "attn_k_norm.weight": ("self_attn.k_norm.weight", True)}
#: Phi-3's layers: fused query/key/value and gate/up projections, stored fused in both formats.
_PHI3_LAYER = {"attn_norm.weight": ("input_layernorm.weight", True),
               "attn_qkv.weight": ("self_attn.qkv_proj.weight", False),
               "attn_output.weight": ("self_attn.o_proj.weight", False),
               "ffn_norm.weight": ("post_attention_layernorm.weight", True),
               "ffn_up.weight": ("mlp.gate_up_proj.weight", False), "ffn_down.weight": ("mlp.down_proj.weight", False)}
#: Gemma 2 and 3: a norm before and after both the attention and the feed-forward block.
_GEMMA_LAYER = dict(_LAYER, **{"ffn_norm.weight": ("pre_feedforward_layernorm.weight", True),
                               "post_attention_norm.weight": ("post_attention_layernorm.weight", True),
                               "post_ffw_norm.weight": ("post_feedforward_layernorm.weight", True)})
#: The head size of a file without ``{arch}.attention.key_length``: transformers' config default.
_DEFAULT_HEAD_DIM = {"qwen3": 128, "gemma2": 256, "gemma3": 256}
#: Tensors transformers' model has no place for, left out with a note.
_DROPPED = {"rope_freqs.weight": "llama 3's rope frequency factors, which transformers' model has no place for "
                                  "(it reads no rope scaling from a GGUF file)",
            "rope_factors_long.weight": "Phi-3's long-context rope factors, which transformers' model has no place "
                                        "for (it reads no rope scaling from a GGUF file)",
            "rope_factors_short.weight": "Phi-3's short-context rope factors, which transformers' model has no "
                                         "place for (it reads no rope scaling from a GGUF file)"}
_BLOCK = re.compile(r"blk\.(\d+)\.(.+)")
#: The config keys a GGUF model must state (positive).
_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")


def hf_tensors(arch: str) -> dict[str, str]:
    """transformers tensor name → GGUF name for the model of GGUF architecture ``arch`` (``{i}``: the layer).

    Examples
    --------
    >>> hf_tensors("qwen2")["model.layers.{i}.self_attn.q_proj.bias"]
    'blk.{i}.attn_q.bias'
    """
    out = {hf: name for name, (hf, _) in _GLOBAL.items()}
    for name, (hf, _) in _layer_tensors(arch).items():
        out[f"model.layers.{{i}}.{hf}"] = f"blk.{{i}}.{name}"
    return out


def _layer_tensors(arch: str) -> dict[str, tuple[str, bool]]:
    """GGUF layer tensor name → (transformers name in the layer, 1-D) for ``arch``."""
    base = {"phi3": _PHI3_LAYER, "gemma2": _GEMMA_LAYER, "gemma3": _GEMMA_LAYER}.get(arch, _LAYER)
    return dict(base, **{"qwen2": _BIASES, "qwen3": _QK_NORMS, "gemma3": _QK_NORMS}.get(arch, {}))


def is_gguf(src: str) -> bool:
    """Whether ``src`` names a GGUF file (a regular file whose name ends in ``.gguf``).

    Examples
    --------
    >>> is_gguf("model.gguf"), is_gguf(".")
    (False, False)
    """
    return src.lower().endswith(".gguf") and os.path.isfile(src)


def _float32(raw: np.ndarray, qtype: str) -> np.ndarray:
    """Rows of ``qtype`` records (uint8, 2-D) as float32, as gguf-py's ``dequantize`` gives them."""
    if qtype == "F32":
        return raw.view("<f4")
    if qtype == "F16":
        return raw.view("<f2").astype(np.float32)
    if qtype == "BF16":
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    return gguf.dequantize(raw, qtype)


def _cast(x: np.ndarray, dtype: np.dtype, out: np.ndarray) -> None:
    """``x`` (float32) into ``out`` as torch's CPU ``Tensor.to(dtype)`` writes it: round to nearest even; a NaN is
    ``0xFFFF`` in bfloat16, and quiet (its top payload bits kept) in float16."""
    if dtype == np.float32:
        out[...] = x
        return
    nan = np.isnan(x)
    if dtype == np.float16:
        with np.errstate(over="ignore"):  # past the float16 range: inf, as torch writes it
            h = x.astype(np.float16).view(np.uint16)
        h[nan] |= 0x0200
        out.view(np.uint16)[...] = h
        return
    u = x.view(np.uint32)
    b = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
    b[nan] = 0xFFFF
    out.view(np.uint16)[...] = b


class _File:
    """The GGUF model, opened on first use in each process (a shard plan is pickled to a cluster's workers)."""

    def __init__(self, path: str) -> None:
        self.path, self._model = path, None

    @property
    def model(self) -> SplitModel:
        if self._model is None:
            try:
                self._model = open_model(self.path)
            except GGUFError as e:
                raise ConvertError(str(e)) from None
        return self._model

    def __getstate__(self) -> dict:
        return {"path": self.path, "_model": None}


class GGUFWeight(Decoded):
    """One tensor of the GGUF file under its transformers name, decoded to :attr:`dtype` when read.

    ``x[rows]`` decodes those rows (of a 1-D tensor: those values), ``np.asarray(x)`` all of it.
    ``fmt`` is None: there are no source codes to re-encode exactly, a quantized target re-quantizes.
    ``shift`` is subtracted from the float32 decoding before the cast (Gemma's norms, stored as ``1 + w``).
    """

    def __init__(self, name: str, file: _File, info: TensorInfo, shape: tuple[int, ...], dtype: np.dtype,
                 heads: int | None, shift: float = 0.0) -> None:
        super().__init__(name, None, {}, shape, dtype)
        self.file, self.info, self.heads, self.shift = file, info, heads, np.float32(shift)

    def _order(self, rows: range) -> np.ndarray:
        """The file rows that hold ``rows`` of the transformers tensor (llama's Q/K: the rotary halves interleaved
        back, ``heads`` groups of ``2 x dim`` rows)."""
        r = np.arange(rows.start, rows.stop, rows.step, dtype=np.int64)
        if self.heads is None:
            return r
        dim = self.shape[0] // self.heads // 2
        head, rest = np.divmod(r, 2 * dim)
        half, i = np.divmod(rest, dim)
        return head * 2 * dim + i * 2 + half

    def __getitem__(self, rows: slice) -> np.ndarray:
        if not isinstance(rows, slice):
            raise TypeError(f"a decoded weight is read by rows (a slice), not {rows!r}")
        g, info = self.file.model, self.info
        n = self.shape[0] if len(self.shape) == 2 else 1
        wanted = range(n)[rows] if len(self.shape) == 2 else range(1)
        records = np.frombuffer(g.tensor_bytes(info.name), np.uint8).reshape(n, -1)
        out = np.empty((len(wanted), *self.shape[1:]) if len(self.shape) == 2 else self.shape, self.dtype)
        flat = out.reshape(len(wanted), -1)
        step = max(1, CHUNK_ELEMENTS // max(1, flat.shape[1]))
        qtype = type_name(info.type_id)
        order = self._order(wanted)
        in_order = self.heads is None and wanted.step == 1  # a slice of the map, not a gathered copy
        for start in range(0, len(wanted), step):
            pick = order[start:start + step]
            raw = records[pick[0]:pick[-1] + 1] if in_order else records[pick]
            x = _float32(np.ascontiguousarray(raw), qtype).reshape(len(pick), -1)
            if self.shift:
                x = x - self.shift
            _cast(x, self.dtype, flat[start:start + len(pick)])
        del records
        if len(wanted) == n:
            g.release(info.name)
        return out if len(self.shape) == 2 else out[rows]


class GGUFShard(DecodedFile):
    """One output shard's tensors, all decoded from the GGUF file: :class:`DecodedFile`'s interface."""

    def __init__(self, path: str, weights: dict[str, GGUFWeight], entries: dict[str, TensorEntry]) -> None:
        self.file, self.path, self.entries, self.weights = None, path, entries, weights
        self.decoded = dict.fromkeys(weights)

    def tensor(self, name: str) -> GGUFWeight:
        """The weight ``name`` (decoded when read)."""
        return self.weights[name]


def _value(g: SplitModel, key: str, kind: type, required: bool = False):
    """The metadata value of ``key``, checked to be a ``kind`` (None when absent and not ``required``)."""
    v = g.value(key)
    if v is None:
        if required:
            raise ConvertError(f"{g.path}: no {key} in the metadata; a GGUF model states it")
        return None
    if isinstance(v, list) or isinstance(v, bool) or not isinstance(v, (int, float) if kind is float else kind):
        raise ConvertError(f"{g.path}: {key} is {v!r}; expected one {kind.__name__}")
    return v


def gguf_config(g: SplitModel) -> tuple[dict, list[str]]:
    """The ``config.json`` of the GGUF model ``g`` as transformers builds it, and notes on what it leaves out."""
    arch = g.value("general.architecture")
    if arch not in ARCHITECTURES:
        raise ConvertError(f"{g.path}: GGUF architecture {arch!r} is not one nbquant writes as a Hugging Face "
                           f"checkpoint (it maps {', '.join(ARCHITECTURES)}); convert it to GGUF instead "
                           "(--scheme Q8_0, Q4_K_M ... with DST ending in .gguf)")
    model_type, cls = ARCHITECTURES[arch]
    if arch == "llama" and g.value("general.name") == "mistral":  # transformers' rule for llama.cpp's Mistral files
        model_type, cls = "mistral", "MistralForCausalLM"
    config: dict = {"architectures": [cls], "model_type": model_type,
                    "tie_word_embeddings": "output.weight" not in g.tensors}
    keys = dict(_KEYS, **_ARCH_KEYS.get(arch, {}))
    for key, name in keys.items():
        v = _value(g, f"{arch}.{key}", float if name in ("rope_theta", "rms_norm_eps") else int,
                   required=name in _REQUIRED)
        if v is not None:
            config[name] = v
    for key, name in _TOKEN_KEYS.items():
        v = _value(g, f"tokenizer.ggml.{key}", int)
        if v is not None:
            config[name] = v
    if "vocab_size" not in config:  # transformers: the tokenizer's length
        tokens = g.fields.get("tokenizer.ggml.tokens")
        config["vocab_size"] = len(tokens.values) if tokens is not None and tokens.is_array else \
            _shape(g, "token_embd.weight", 2)[0]
    config.setdefault("num_key_value_heads", config["num_attention_heads"])  # llama.cpp's default
    if arch in _DEFAULT_HEAD_DIM:  # a file that states no head size: transformers' config default
        config.setdefault("head_dim", _DEFAULT_HEAD_DIM[arch])
    for name in (*_REQUIRED, "num_key_value_heads", "vocab_size"):
        if config[name] <= 0:
            raise ConvertError(f"{g.path}: the metadata give {name} = {config[name]}; expected a positive number")
    if config["num_hidden_layers"] > len(g.tensors):
        raise ConvertError(f"{g.path}: {arch}.block_count is {config['num_hidden_layers']} but the file holds "
                           f"{len(g.tensors)} tensors")
    notes = [f"{k} is not mapped by transformers and left out of config.json" for k in g.fields
             if k.startswith(f"{arch}.rope.scaling.")]
    return config, notes


def _shape(g: SplitModel, name: str, ndim: int) -> tuple[int, ...]:
    info = g.tensors.get(name)
    if info is None:
        raise ConvertError(f"{g.path}: tensor {name} is missing")
    if any(n != 1 for n in info.ne[ndim:]):
        raise ConvertError(f"{g.path}: tensor {name} has shape {list(info.shape)}; expected {ndim} dimension(s)")
    return tuple(reversed(info.ne[:ndim]))


def _expected(config: dict, arch: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """GGUF tensor name → (transformers name, expected shape), for every tensor the model holds."""
    h, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim", h // max(1, heads))
    inter, vocab = config.get("intermediate_size"), config["vocab_size"]
    q, k = heads * head_dim, kv * head_dim
    shapes = {"attn_norm.weight": (h,), "attn_q.weight": (q, h), "attn_k.weight": (k, h), "attn_v.weight": (k, h),
              "attn_output.weight": (h, q), "ffn_norm.weight": (h,), "ffn_gate.weight": (inter, h),
              "ffn_up.weight": (inter, h), "ffn_down.weight": (h, inter), "attn_q.bias": (q,), "attn_k.bias": (k,),
              "attn_v.bias": (k,), "attn_q_norm.weight": (head_dim,), "attn_k_norm.weight": (head_dim,),
              "attn_qkv.weight": (q + 2 * k, h), "post_attention_norm.weight": (h,), "post_ffw_norm.weight": (h,)}
    if arch == "phi3" and inter is not None:
        shapes["ffn_up.weight"] = (2 * inter, h)
    out = {g: (n, (vocab, h) if g != "output_norm.weight" else (h,)) for g, (n, _) in _GLOBAL.items()}
    layer = _layer_tensors(arch)
    for i in range(config["num_hidden_layers"]):
        out.update({f"blk.{i}.{g}": (f"model.layers.{i}.{n}", shapes[g]) for g, (n, _) in layer.items()})
    if config["tie_word_embeddings"]:
        del out["output.weight"]
    return out


def _unknown(name: str, arch: str, config: dict) -> str:
    m = _BLOCK.fullmatch(name)
    if m and int(m.group(1)) >= config["num_hidden_layers"]:
        return f"is in layer {m.group(1)}, past {arch}.block_count {config['num_hidden_layers']}"
    return f"has no place in transformers' {ARCHITECTURES[arch][1]} (refused rather than dropped)"


def _plan_shards(names: list[str], nbytes: dict[str, int]) -> list[list[str]]:
    shards: list[list[str]] = [[]]
    size = 0
    for n in names:
        if shards[-1] and size + nbytes[n] > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(n)
        size += nbytes[n]
    return shards


def open_gguf(src: str, target: Scheme) -> Checkpoint:
    """The GGUF file ``src`` as a checkpoint whose every tensor is decoded when read (see the module docstring).

    Parameters
    ----------
    src : str
        The GGUF file (or the first part ``NAME-00001-of-0000N.gguf`` of a split model).
    target : Scheme
        The output scheme: ``BF16``, ``F16`` or ``F32`` decode to that dtype; any other to bfloat16.

    Returns
    -------
    Checkpoint
        Its ``root`` is ``src``; shards ``model.safetensors`` (or ``model-0000i-of-0000N.safetensors``) of
        :class:`GGUFShard`; ``config`` the transformers config; ``notes`` what was left out; ``generated``
        the tokenizer files.

    Raises
    ------
    ConvertError
        One line naming the file (and tensor): not a readable GGUF file, an architecture not mapped, a
        tensor type nbquant does not decode, a missing, unknown or mis-shaped tensor, a bad metadata value.

    Examples
    --------
    >>> import os, tempfile
    >>> from nbquant.convert.schemes import get_scheme
    >>> path = os.path.join(tempfile.mkdtemp(), "x.gguf")
    >>> _ = open(path, "wb").write(b"GGUF")
    >>> open_gguf(path, get_scheme("BF16"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    nbquant.convert.safetensors.ConvertError: .../x.gguf: not a readable GGUF file: the version runs past ...
    """
    file = _File(src)
    g = file.model
    config, notes = gguf_config(g)
    arch = g.value("general.architecture")
    expected = _expected(config, arch)
    dtype = DENSE_DTYPES[target.name] if target.kind == "dense" else DENSE_DTYPES["BF16"]
    decodable = {"F32", "F16", "BF16", *gguf.implemented_formats()}
    weights, nbytes = {}, {}
    for name, info in g.tensors.items():
        if name in _DROPPED:
            notes.append(f"tensor {name} left out: {_DROPPED[name]}")
            continue
        if name not in expected:
            raise ConvertError(f"{g.path}: tensor {name} {_unknown(name, arch, config)}")
        hf, shape = expected[name]
        qtype = type_name(info.type_id)
        if qtype not in decodable:
            raise ConvertError(f"{g.path}: tensor {name} is {qtype}, a type nbquant does not decode (it decodes "
                               f"{', '.join(sorted(decodable))})")
        got = _shape(g, name, len(shape))
        if got != shape:
            raise ConvertError(f"{g.path}: tensor {name} has shape {list(got)}; the metadata ({arch}.*) give "
                               f"{hf} the shape {list(shape)}")
        heads = None
        if arch == "llama" and name.endswith((".attn_q.weight", ".attn_k.weight")):
            heads = config["num_attention_heads"] if ".attn_q." in name else config["num_key_value_heads"]
            if shape[0] % (2 * heads):
                raise ConvertError(f"{g.path}: tensor {name} has {shape[0]} rows, not a multiple of 2 x {heads} "
                                   "heads (its rotary halves cannot be put back)")
        shift = 1.0 if arch in _NORM_PLUS_ONE and name.endswith("norm.weight") else 0.0
        weights[hf] = GGUFWeight(hf, file, info, shape, dtype, heads, shift)
        nbytes[hf] = math.prod(shape) * dtype.itemsize
    missing = [n for n in expected if n not in g.tensors]
    if missing:
        raise ConvertError(f"{g.path}: tensor {missing[0]} is missing ({len(missing)} expected tensor(s) missing)")
    groups = _plan_shards(sorted(weights), nbytes)  # the order of the index written: converting it again, the same
    names = ["model.safetensors"] if len(groups) == 1 else \
        [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    shards, weight_map = {}, {}
    for shard, group in zip(names, groups, strict=True):
        entries = {n: TensorEntry(dtype_name(dtype), weights[n].shape, 0, weights[n].info.nbytes) for n in group}
        shards[shard] = GGUFShard(g.path, {n: weights[n] for n in group}, entries)
        weight_map.update(dict.fromkeys(group, shard))
    config["torch_dtype"] = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[dtype_name(dtype)]
    config["transformers_version"] = TRANSFORMERS_VERSION
    if arch in _NORM_PLUS_ONE:  # Gemma's SentencePiece tokenizer: no vocabulary test to check a writer against
        generated, tokenizer_notes = {}, [f"tokenizer not written: {arch}'s tokenizer is not one nbquant writes; "
                                          "copy tokenizer.json and tokenizer_config.json from the original model"]
    else:
        generated, tokenizer_notes = tokenizer_files(g.value, config.get("max_position_embeddings"))
    return Checkpoint(src, shards, weight_map, "model.safetensors.index.json", [], config,
                      notes + tokenizer_notes, generated)
