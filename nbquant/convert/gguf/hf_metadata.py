"""The GGUF metadata llama.cpp's converter writes for a Hugging Face checkpoint, in its order.

``convert_hf_to_gguf.py`` writes: ``general.architecture``, the model-card keys (``general.type``,
``general.name``: the folder's name, ``general.size_label``: the parameter count), the hyperparameters
(``TextModel.set_gguf_parameters`` and the architecture's additions), ``general.file_type``,
``general.quantization_version``, then the tokenizer (:mod:`.hf_tokenizer`). The hyperparameters
covered are those of dense llama, qwen2 and qwen3 models; a config that asks for more (another
rope scaling, sliding-window attention, experts) is refused rather than written half right.

Examples
--------
>>> size_label(1_235_814_400), size_label(16_424_960), size_label(4_160)
('1.2B', '16M', '4.2K')
"""

from __future__ import annotations

import math
import os
import struct

import numpy as np

from nbquant.gguf.file import BOOL, FLOAT32, INT32, Field

from ..safetensors import ConvertError
from ..untrusted_json import UntrustedJSONError, loads
from .hf_sentencepiece import MAX_MODEL_BYTES, sentencepiece_fields
from .hf_tokenizer import tokenizer_fields

__all__ = ["hf_fields", "rope_freqs", "rope_parameters", "size_label", "with_defaults", "FILE_TYPES"]

#: ``--outtype`` → ``general.file_type`` (``LlamaFileType``).
FILE_TYPES = {"F32": 0, "F16": 1, "BF16": 32}
_MAX_JSON = 64 << 20


def size_label(params: int) -> str:
    """gguf-py's ``size_label`` for a dense model of ``params`` weights (two significant digits at least)."""
    for limit, scale, suffix in ((1e12, 1e-12, "T"), (1e9, 1e-9, "B"), (1e6, 1e-6, "M"), (0, 1e-3, "K")):
        if params > limit or suffix == "K":
            x = params * scale
            digits = max(2 - len(str(round(x)).lstrip("0")), 0)
            return f"{x:.{digits}f}{suffix}"
    raise AssertionError("unreachable")


def rope_freqs(rope: dict, head_dim: int) -> np.ndarray:
    """Llama 3's rope frequency factors (``rope_freqs.weight``, float32) as the converter computes them in torch.

    Every step is a float32 operation, and ``scalar / tensor`` is torch's ``reciprocal(tensor) * scalar``.
    """
    f32 = np.float32
    base = f32(rope.get("rope_theta", 10000.0))
    freqs = f32(1.0) / (base ** (np.arange(0, head_dim, 2, dtype=f32) / f32(head_dim)))
    factor, low, high = (f32(rope.get(k, d)) for k, d in (("factor", 8.0), ("low_freq_factor", 1.0),
                                                          ("high_freq_factor", 4.0)))
    old = rope.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = f32(old / float(low)), f32(old / float(high))
    out = np.empty(len(freqs), f32)
    for i, freq in enumerate(freqs):
        wavelen = (f32(1) / freq) * f32(2 * math.pi)
        if wavelen < high_wavelen:
            out[i] = 1
        elif wavelen > low_wavelen:
            out[i] = factor
        else:
            smooth = ((f32(1) / wavelen) * f32(old) - low) / (high - low)
            out[i] = f32(1) / ((f32(1) - smooth) / factor + smooth)
    return out


#: ``generation_config.json`` key(s) → ``general.sampling.*`` key and type, in the converter's order.
_SAMPLING = ((("sequence",), "sequence", "str"), (("top_k",), "top_k", "i32"), (("top_p",), "top_p", "f32"),
             (("min_p",), "min_p", "f32"), (("xtc_probability",), "xtc_probability", "f32"),
             (("xtc_threshold",), "xtc_threshold", "f32"), (("temperature",), "temp", "f32"),
             (("penalty_last_n",), "penalty_last_n", "i32"),
             (("penalty_repeat", "repetition_penalty"), "penalty_repeat", "f32"), (("mirostat",), "mirostat", "i32"),
             (("mirostat_tau",), "mirostat_tau", "f32"), (("mirostat_eta",), "mirostat_eta", "f32"))


def _sampling(src: str) -> list[Field]:
    """The ``general.sampling.*`` keys of ``generation_config.json`` (llama.cpp's default sampling settings)."""
    path = os.path.join(src, "generation_config.json")
    gen = _read_json(path)
    if not isinstance(gen, dict):
        return []
    fields = []
    for keys, name, kind in _SAMPLING:
        value = next((gen[k] for k in keys if gen.get(k) is not None), None)
        if value is None:
            continue
        key = f"general.sampling.{name}"
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind == "str" and isinstance(value, str):
            fields.append(Field.string(key, value))
        elif kind == "i32" and number and float(value).is_integer() and -2**31 <= value < 2**31:
            fields.append(Field(key, INT32, struct.pack("<i", int(value))))
        elif kind == "f32" and number:
            fields.append(_f32(key, value))
        else:
            raise ConvertError(f"{path}: {keys[0]} is {value!r}; expected a {'string' if kind == 'str' else 'number'}")
    return fields


def _f32(key: str, value: float) -> Field:
    return Field(key, FLOAT32, struct.pack("<f", value))


def _positive(config: dict, key: str, where: str) -> int:
    v = config.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ConvertError(f"{where}: {key} is {v!r}; expected a positive integer")
    return v


def _read_text(path: str) -> str:
    """A text file of the checkpoint (at most :data:`_MAX_JSON` bytes of UTF-8); anything else is one line."""
    if os.path.getsize(path) > _MAX_JSON:
        raise ConvertError(f"{path}: larger than {_MAX_JSON >> 20} MiB; not read")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ConvertError(f"{path}: not readable UTF-8 text: {e}") from None


def _read_json(path: str) -> object | None:
    """A JSON file of the checkpoint, None when absent; a broken one is one line."""
    if not os.path.isfile(path):
        return None
    try:
        return loads(_read_text(path))
    except (UntrustedJSONError, ValueError) as e:
        raise ConvertError(f"{path}: not readable JSON: {e}") from None


#: transformers' config defaults (``AutoConfig(...).to_dict()``, which the converter reads) for the keys mapped:
#: ``(max_position_embeddings, rms_norm_eps, num_key_value_heads, vocab_size, intermediate_size, head_dim)``;
#: ``num_key_value_heads`` None: the head count; ``head_dim`` 0: ``hidden_size // num_attention_heads``.
_DEFAULTS = {"LlamaForCausalLM": (2048, 1e-6, None, 32000, 11008, 0),
             "MistralForCausalLM": (131072, 1e-6, 8, 32000, 14336, 0),
             "Qwen2ForCausalLM": (32768, 1e-6, 32, 151936, 22016, None),
             "Qwen3ForCausalLM": (32768, 1e-6, 32, 151936, 22016, 128)}


def with_defaults(config: dict, cls: str, where: str) -> dict:
    """``config`` as transformers' config class ``cls`` fills it in (the keys this module reads)."""
    ctx, eps, kv, vocab, inter, head_dim = _DEFAULTS[cls]
    out = dict(config)
    for key, value in (("max_position_embeddings", ctx), ("rms_norm_eps", eps), ("vocab_size", vocab),
                       ("intermediate_size", inter)):
        if out.get(key) is None:
            out[key] = value
    heads = _positive(out, "num_attention_heads", where)
    if out.get("num_key_value_heads") is None:
        out["num_key_value_heads"] = heads if kv is None else kv
    if out.get("head_dim") is None and head_dim is not None:
        out["head_dim"] = head_dim or _positive(out, "hidden_size", where) // heads
    return out


def rope_parameters(config: dict) -> dict:
    """The converter's view of the rope settings: ``rope_parameters`` or ``rope_scaling``, with ``rope_theta``."""
    rope = config.get("rope_parameters", config.get("rope_scaling")) or {}
    rope = dict(rope) if isinstance(rope, dict) else {}
    if "rope_theta" not in rope:
        rope["rope_theta"] = config["rope_theta"] if config.get("rope_theta") is not None else 10000.0
    if "rope_type" not in rope and rope.get("type") is not None:
        rope["rope_type"] = rope["type"]
    return rope


def _hparams(config: dict, arch: str, where: str) -> list[Field]:
    """The ``{arch}.*`` keys the converter writes before ``general.file_type`` (its base class's)."""
    if config.get("num_local_experts") or config.get("num_experts"):
        raise ConvertError(f"{where}: a mixture-of-experts config is not mapped to GGUF by nbquant")
    if config.get("use_sliding_window"):
        raise ConvertError(f"{where}: sliding-window attention is not mapped to GGUF by nbquant")
    p = f"{arch}."
    fields = [Field.u32(p + "block_count", _positive(config, "num_hidden_layers", where))]
    for key, name in (("max_position_embeddings", "context_length"), ("hidden_size", "embedding_length"),
                      ("intermediate_size", "feed_forward_length"), ("num_attention_heads", "attention.head_count"),
                      ("num_key_value_heads", "attention.head_count_kv")):
        if config.get(key) is not None:
            fields.append(Field.u32(p + name, _positive(config, key, where)))
    rope = rope_parameters(config)
    kind = rope.get("rope_type")
    if kind not in (None, "default", "llama3", "linear", "yarn"):
        raise ConvertError(f"{where}: rope type {kind!r} is not mapped to GGUF by nbquant")
    if kind == "linear" and rope.get("factor") is not None:
        fields += [Field.string(p + "rope.scaling.type", "linear"), _f32(p + "rope.scaling.factor", rope["factor"])]
    elif kind == "yarn" and rope.get("factor") is not None:
        fields += [Field.string(p + "rope.scaling.type", "yarn"), _f32(p + "rope.scaling.factor", rope["factor"]),
                   Field.u32(p + "rope.scaling.original_context_length", rope["original_max_position_embeddings"])]
        for key, name in (("extrapolation_factor", "yarn_ext_factor"), ("attention_factor", "yarn_attn_factor"),
                          ("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow")):
            if rope.get(key) is not None:
                fields.append(_f32(p + f"rope.scaling.{name}", rope[key]))
    if rope.get("rope_theta") is not None:
        fields.append(_f32(p + "rope.freq_base", rope["rope_theta"]))
    if config.get("rms_norm_eps") is not None:
        fields.append(_f32(p + "attention.layer_norm_rms_epsilon", config["rms_norm_eps"]))
    if config.get("head_dim") is not None:
        head_dim = _positive(config, "head_dim", where)
        fields += [Field.u32(p + "attention.key_length", head_dim), Field.u32(p + "attention.value_length", head_dim)]
    return fields


def _arch_after(config: dict, arch: str, where: str) -> list[Field]:
    """The keys the architecture's class adds after ``general.file_type``."""
    if arch != "llama":
        return []
    head_dim = config.get("head_dim")
    if head_dim is None:
        head_dim = _positive(config, "hidden_size", where) // _positive(config, "num_attention_heads", where)
    return [Field.u32("llama.vocab_size", _positive(config, "vocab_size", where)),
            Field.u32("llama.rope.dimension_count", head_dim)]


def hf_fields(src: str, config: dict, arch: str, params: int, file_type: int) -> list[Field]:
    """Every metadata field of the converter's file for the checkpoint ``src`` (see the module docstring).

    Parameters
    ----------
    src : str
        The checkpoint folder (its name is ``general.name``; its tokenizer files are read).
    config : dict
        ``config.json``.
    arch : str
        The GGUF architecture.
    params : int
        The number of weights written (``general.size_label``).
    file_type : int
        ``general.file_type``.
    """
    where = os.path.join(src, "config.json")
    fields = [Field.string("general.architecture", arch), Field.string("general.type", "model"), *_sampling(src),
              Field.string("general.name", os.path.basename(os.path.normpath(os.path.abspath(src)))),
              Field.string("general.size_label", size_label(params))]
    fields += _hparams(config, arch, where)
    fields.append(Field.u32("general.file_type", file_type))
    fields += _arch_after(config, arch, where)
    fields.append(Field.u32("general.quantization_version", 2))
    tok = _read_json(os.path.join(src, "tokenizer.json"))
    tc = _read_json(os.path.join(src, "tokenizer_config.json"))
    tc = tc if isinstance(tc, dict) else None
    template = None
    jinja = os.path.join(src, "chat_template.jinja")
    if os.path.isfile(jinja):
        template = _read_text(jinja)
    else:
        chat = _read_json(os.path.join(src, "chat_template.json"))
        template = chat.get("chat_template") if isinstance(chat, dict) else None
    if arch == "llama" and config["vocab_size"] in (32016, 49152):
        raise ConvertError(f"{where}: vocab_size {config['vocab_size']} (CodeLlama's or Granite's special tokens) is "
                           "not mapped to GGUF by nbquant")
    if arch == "llama" and tc is not None and isinstance(tc.get("add_prefix_space"), bool):
        fields.append(Field("tokenizer.ggml.add_space_prefix", BOOL, bytes([tc["add_prefix_space"]])))
    model = os.path.join(src, "tokenizer.model")
    try:
        if os.path.isfile(model):  # the converter tries SentencePiece first
            if os.path.getsize(model) > MAX_MODEL_BYTES:
                raise ConvertError(f"{model}: larger than {MAX_MODEL_BYTES >> 20} MiB; not read")
            with open(model, "rb") as f:
                data = f.read()
            added = _read_json(os.path.join(src, "added_tokens.json"))
            fields += sentencepiece_fields(data, tok if isinstance(tok, dict) else None, tc,
                                           added if isinstance(added, dict) else None, config, template)
        elif isinstance(tok, dict):
            fields += tokenizer_fields(tok, tc, config, template)
        else:
            raise ConvertError(f"{src}: no tokenizer.json or tokenizer.model (a GGUF file carries its tokenizer)")
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as e:
        raise ConvertError(f"{src}: a tokenizer file nbquant does not read ({type(e).__name__}: {e})") from None
    return fields
