"""Which ggml type each tensor of a GGUF file gets under a llama-quantize scheme, and why.

A reimplementation of the rules of ``llama_tensor_get_type`` (llama.cpp ``src/llama-quant.cpp``
at ggml-org/llama.cpp@0c1e57098, the tree the ``llama-cpp-python`` 0.3.36 sdist vendors) for
the schemes of :data:`SCHEMES`:

* only tensors of 2 or more dimensions whose name ends in ``weight`` are quantized, except
  norms, expert gates, position and token-type embeddings and a list of small tensors;
* ``output.weight`` (and ``token_embd.weight`` when the model ties them) gets Q6_K (Q8_0 for
  Q8_0 and MXFP4_MOE, or when its rows do not fit the scheme's block);
* ``attn_v``/``attn_qkv`` and ``ffn_down`` of some layers get more bits (``use_more_bits``: the
  first and last eighth of the layers and every third between), as do ``attn_output`` for Q2_K
  and Q3_K_M/L, with GQA ≥ 4, 8 experts and 70B-model exceptions;
* ``--tensor-type PATTERN=TYPE`` (:attr:`PolicyOptions.tensor_types`): the first pattern found in
  a tensor's name gives its type instead of the mix (after ``--token-embedding-type`` and
  ``--output-tensor-type``; the counters of ``attn_v`` / ``ffn_down`` skip it); the fallback still applies;
* a type whose block does not divide the row falls back (Q4_K→Q5_0, Q5_K→Q5_1, Q6_K→Q8_0,
  Q2_K/Q3_K→Q4_0, IQ4_XS→IQ4_NL, then F16).

The tensors are visited in llama-quantize's order (:func:`tensor_order`): its counters of
``attn_v`` and ``ffn_down`` tensors depend on it.

**Generic policy.** For an architecture llama.cpp does not know (llama-quantize stops with
"unknown model architecture"), the same rules run with hyperparameters read from the
``{arch}.block_count`` / ``attention.head_count(_kv)`` / ``expert_count`` keys when present
(the layer count otherwise from the ``blk.N.`` names), no architecture-specific exception, and
every tensor whose name contains ``norm`` kept as it is.

Examples
--------
>>> names = [("blk.0.attn_v.weight", (256, 64, 1, 1), 30), ("output.weight", (256, 1000, 1, 1), 30)]
>>> [(c.name, c.type_name) for c in choose_types(names, "Q4_K_M", Hyper("llama", 1, 4, 0))]
[('output.weight', 'Q6_K'), ('blk.0.attn_v.weight', 'Q6_K')]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .file import GGML_TYPES, type_id, type_name

__all__ = ["SCHEMES", "ALIASES", "Hyper", "Choice", "PolicyOptions", "choose_types", "tensor_order", "hyper_from",
           "KNOWN_ARCHITECTURES", "prune_layers"]

#: scheme -> (llama_ftype value written as general.file_type, default ggml type).
SCHEMES = {"Q4_0": (2, "Q4_0"), "Q4_1": (3, "Q4_1"), "Q8_0": (7, "Q8_0"), "Q5_0": (8, "Q5_0"), "Q5_1": (9, "Q5_1"),
           "Q2_K": (10, "Q2_K"), "Q3_K_S": (11, "Q3_K"), "Q3_K_M": (12, "Q3_K"), "Q3_K_L": (13, "Q3_K"),
           "Q4_K_S": (14, "Q4_K"), "Q4_K_M": (15, "Q4_K"), "Q5_K_S": (16, "Q5_K"), "Q5_K_M": (17, "Q5_K"),
           "Q6_K": (18, "Q6_K"), "IQ4_NL": (25, "IQ4_NL"), "IQ4_XS": (30, "IQ4_XS"), "MXFP4_MOE": (38, "MXFP4")}
#: llama-quantize's aliases.
ALIASES = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}

#: The architectures llama.cpp at that tree loads (``LLM_ARCH_NAMES``); others get the generic policy.
KNOWN_ARCHITECTURES = frozenset("""
clip llama llama4 deci falcon grok gpt2 gptj gptneox mpt baichuan starcoder refact bert modern-bert nomic-bert
nomic-bert-moe neo-bert jina-bert-v2 jina-bert-v3 eurobert bloom stablelm qwen qwen2 qwen2moe qwen2vl qwen3
qwen3moe qwen3next qwen3vl qwen3vlmoe qwen35 qwen35moe qwen4exp phi2 phi3 phimoe plamo plamo2 plamo3 codeshell
orion internlm2 minicpm minicpm3 gemma gemma2 gemma3 gemma3n gemma4 gemma4-assistant gemma-embedding starcoder2
mamba mamba2 maple jamba falcon-h1 xverse command-r cohere2 cohere2moe dbrx olmo olmo2 olmoe muse-glimmer openelm
arctic deepseek deepseek2 deepseek2-ocr deepseek32 deepseek4 chatglm glm4 glm4moe glm-dsa bitnet t5 t5encoder
jais jais2 nemotron nemotron_h nemotron_h_moe exaone exaone4 exaone-moe rwkv6 rwkv6qwen2 rwkv7 arwkv7 granite
granitemoe granitehybrid graniteswitch granite_swa chameleon wavtokenizer-dec plm bailingmoe bailingmoe2
bailingmoe3 dots1 dots3note arcee afmoe laguna ernie4_5 ernie4_5-moe hunyuan-moe hunyuan-dense hunyuan_vl hy_v3
hy_v4 smollm3 gpt-oss lfm2 lfm2moe dream smallthinker llada llada-moe seed_oss grovemoe apertus minimax-01
hrm_text minimax-m2 minimax-m3 cogvlm rnd1 pangu-embedded mistral3 eagle3 dflash mistral4 paddleocr mimo2 step35
spark2_5 llama-embed maincoder kimi-linear kimi-k3 glm5-next talkie mellum nanbeige qwen3tts pockettts""".split())
_SEVENTY_B = {"llama", "deci", "olmo", "qwen2"}  # the architectures whose 80-layer models are LLM_TYPE_70B

# Substrings that keep a tensor as it is (tensor_allows_quantization).
_KEEP = ("_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
         "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
         "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
         "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
         "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
         "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd",
         "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
         "mm.a.code_embd")
_KEEP_GLM5 = ("hc_", "indexer.attn_q_b", "indexer.attn_k", "indexer.proj", "indexer_compressor_gate",
              "indexer_compressor_ape", "ssm_f_a.weight", "ssm_f_b.weight", "ssm_g_a.weight", "ssm_g_b.weight",
              "ssm_beta.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight", "attn_v_b.weight")
_CATEGORIES = (("attn_qkv.weight", "attn_v"), ("attn_kv_b.weight", "attn_v"), ("attn_v.weight", "attn_v"),
               ("attn_k.weight", "attn_k"), ("attn_q.weight", "attn_q"), ("attn_output.weight", "attn_output"),
               ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"), ("ffn_down", "ffn_down"))
_LAYER = re.compile(r"blk\.\s*([+-]?\d+)")
_FALLBACK = {"IQ4_XS": "IQ4_NL", "Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
_FLOATS = ("F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64")


@dataclass(frozen=True)
class Hyper:
    """The model facts the rules read: architecture, layer count, n_head / n_head_kv, expert count, generic policy."""

    arch: str
    n_layer: int
    n_gqa: int
    n_expert: int
    generic: bool = False
    seventy_b: bool = False


@dataclass(frozen=True)
class PolicyOptions:
    """llama-quantize's options: ``--pure``, ``--output-tensor-type``, ``--token-embedding-type``,
    ``--leave-output-tensor`` (``quantize_output=False``), whether an importance matrix is given, ``--tensor-type``."""

    pure: bool = False
    output_tensor_type: str | None = None
    token_embedding_type: str | None = None
    quantize_output: bool = True
    has_imatrix: bool = False
    #: ``--tensor-type PATTERN=TYPE``: (compiled pattern, type name) pairs, the first whose pattern is found in a
    #: tensor's name (``re.search``; llama-quantize's ``std::regex_search``) wins.
    tensor_types: tuple[tuple[re.Pattern, str], ...] = ()

    def manual_type(self, name: str) -> tuple[str, str] | None:
        """The ``--tensor-type`` (type, pattern) that names ``name``, or None."""
        return next(((t, p.pattern) for p, t in self.tensor_types if p.search(name)), None)


@dataclass(frozen=True)
class Choice:
    """One tensor's outcome: its name, source and target type ids, and the reason in words."""

    name: str
    source: int
    target: int
    reason: str

    @property
    def type_name(self) -> str:
        """The target type's name."""
        return type_name(self.target)


def _layer_of(name: str) -> int:
    """``sscanf(name, "blk.%d.")``: the layer number, or -1."""
    m = _LAYER.match(name)
    return int(m.group(1)) if m else -1


def tensor_order(names) -> list[str]:
    """llama-quantize's tensor order: by layer number (-1 outside ``blk.N.``), then by name (bytewise).

    Examples
    --------
    >>> tensor_order(["blk.10.ffn_up.weight", "blk.2.attn_q.weight", "output.weight"])
    ['output.weight', 'blk.2.attn_q.weight', 'blk.10.ffn_up.weight']
    """
    return sorted(names, key=lambda n: (_layer_of(n), n.encode("utf-8", "surrogateescape")))


_BLOCK = re.compile(r"blk\.([0-9]+)\.")


def prune_layers(names, prune: list[int]) -> tuple[dict[str, str], int | None]:
    """llama-quantize's ``--prune-layers``: the names kept (new name -> source name) and the new layer count.

    The names are visited in :func:`tensor_order`; the first ``blk.N.`` found in a name is its
    layer. Layers in ``prune`` are dropped; layers below the smallest pruned one keep their number;
    the others are numbered on from there, in the order they are met. The layer count is the next
    free number (``{arch}.block_count`` in the output); None when ``prune`` is empty.

    Examples
    --------
    >>> names = [f"blk.{i}.w" for i in range(4)] + ["output.weight"]
    >>> prune_layers(names, [1, 2])
    ({'output.weight': 'output.weight', 'blk.0.w': 'blk.0.w', 'blk.1.w': 'blk.3.w'}, 2)
    """
    if not prune:
        return {n: n for n in tensor_order(names)}, None
    first, mapped, next_id, kept = min(prune), {}, 0, {}
    for name in tensor_order(names):
        m = _BLOCK.search(name)
        if m is None:
            kept[name] = name
            continue
        blk = int(m.group(1))
        if blk not in mapped:
            if blk in prune:
                mapped[blk] = None
            elif blk < first:
                mapped[blk], next_id = blk, blk + 1
            else:
                mapped[blk], next_id = next_id, next_id + 1
        if mapped[blk] is not None:
            kept[name[:m.start(1)] + str(mapped[blk]) + name[m.end(1):]] = name
    return kept, next_id


def hyper_from(fields_value, names: list[str]) -> Hyper:
    """The :class:`Hyper` of a file from ``fields_value(key, default)`` (:meth:`GGUFFile.value`) and tensor names.

    Examples
    --------
    >>> meta = {"general.architecture": "llama", "llama.block_count": 80, "llama.attention.head_count": 64,
    ...         "llama.attention.head_count_kv": 8}
    >>> hyper_from(lambda k, d=None: meta.get(k, d), [])
    Hyper(arch='llama', n_layer=80, n_gqa=8, n_expert=0, generic=False, seventy_b=True)
    """
    arch = str(fields_value("general.architecture", ""))
    generic = arch not in KNOWN_ARCHITECTURES

    def first(key: str, default: int) -> int:
        value = fields_value(f"{arch}.{key}", default)
        value = value[0] if isinstance(value, list) and value else value
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default

    layers = [_layer_of(n) for n in names]
    n_layer = first("block_count", max(layers, default=-1) + 1)
    n_head = first("attention.head_count", 0)
    n_head_kv = first("attention.head_count_kv", n_head)
    n_gqa = n_head // n_head_kv if n_head_kv else 0
    seventy_b = not generic and arch in _SEVENTY_B and n_layer == 80 and (arch != "llama" or n_head != n_head_kv)
    return Hyper(arch, n_layer, n_gqa, first("expert_count", 0), generic, seventy_b)


def _category(name: str) -> str:
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    return next((cat for pattern, cat in _CATEGORIES if pattern in name), "other")


def _keeps(name: str, n_dims: int, hyper: Hyper, opts: PolicyOptions) -> str | None:
    """Why the tensor is kept as it is, or None when it may be quantized."""
    if n_dims < 2:
        return "1-D"
    if not name.endswith("weight"):
        return "not a weight"
    if name == "output.weight" and not opts.quantize_output:
        return "--leave-output-tensor"
    if name in ("position_embd.weight", "token_types.weight"):
        return "position/token-type embedding"
    keep = _KEEP + (_KEEP_GLM5 if hyper.arch == "glm5-next" else ())
    hit = next((k for k in keep if k in name), None)
    if hit is not None:
        return f"matches {hit!r}"
    if hyper.generic and "norm" in name:
        return "a norm (generic policy)"
    return None


def _more_bits(i: int, n: int) -> bool:
    """``use_more_bits``: the first and last eighth of the layers, and every third layer between (C integer math)."""
    d = i - n // 8
    return i < n // 8 or i >= 7 * n // 8 or (d - 3 * int(d / 3)) == 2


class _Rules:
    """The per-file state of llama-quantize's rules: the counters of attn_v and ffn_down tensors seen."""

    def __init__(self, scheme: str, hyper: Hyper, opts: PolicyOptions, n_attention_wv: int, tied: bool) -> None:
        self.scheme, self.hyper, self.opts, self.tied = scheme, hyper, opts, tied
        self.n_wv, self.i_wv, self.i_down = n_attention_wv, 0, 0
        self.falcon = hyper.arch == "falcon" and not hyper.generic

    def _layer(self, counter: int, name: str) -> tuple[int, int]:
        n = self.hyper.n_layer
        if self.hyper.n_expert <= 1:
            return counter, n
        layer = _layer_of(name)
        if _LAYER.match(name) is None:
            raise ValueError(f"{name}: failed to determine the layer of an expert tensor")
        if not 0 <= layer < n:
            raise ValueError(f"{name}: layer {layer} is not in [0, {n})")
        return layer, n

    def mix(self, name: str, ne, t: str, cat: str) -> tuple[str, str]:
        """The scheme's mix for one tensor: (type, reason), before the fallback."""
        s, h = self.scheme, self.hyper
        if cat == "output" or (self.tied and cat == "token_embd"):
            what = "output" if cat == "output" else "tied token embedding"
            if self.opts.output_tensor_type is not None:
                return self.opts.output_tensor_type, f"{what}: --output-tensor-type"
            if s == "MXFP4_MOE":
                return "Q8_0", f"{what} of MXFP4_MOE"
            if self.falcon or ne[0] % GGML_TYPES[type_id(t)][1]:
                return "Q8_0", f"{what}: rows of {ne[0]} do not fit {t}" if not self.falcon else f"{what} (falcon)"
            return (t, f"{what} of Q8_0") if t == "Q8_0" else ("Q6_K", f"{what} gets Q6_K")
        if s == "MXFP4_MOE":
            expert = ne[2] > 1 and (h.arch != "bailingmoe3" or cat in ("ffn_up", "ffn_gate", "ffn_down"))
            return ("MXFP4", "expert tensor") if expert else ("Q8_0", "not an expert tensor (MXFP4_MOE)")
        if cat == "attn_v":
            return self._attn_v(t)
        if cat == "attn_k" and h.n_expert == 8:
            return "Q8_0", "attn_k with 8 experts"
        if cat == "ffn_down":
            return self._ffn_down(name, t)
        if cat == "attn_output":
            if self.falcon:
                return ("Q4_K", "attn_output (falcon, Q3_K_L)") if s == "Q3_K_L" else (t, "scheme default")
            if h.n_expert == 8:
                if s in ("Q2_K", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ4_XS"):
                    return "Q5_K", "attn_output with 8 experts"
                return t, "scheme default"
            bump = {"Q2_K": "Q3_K", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K"}.get(s)
            return (bump, f"attn_output of {s}") if bump else (t, "scheme default")
        if cat in ("ffn_gate", "ffn_up"):
            self._layer(0, name)  # llama-quantize's check of the layer number of expert tensors
        return t, "scheme default"

    def _attn_v(self, t: str) -> tuple[str, str]:
        s, h, i, why = self.scheme, self.hyper, self.i_wv, f"attn_v #{self.i_wv} of {self.n_wv}"
        new = t
        if s == "Q2_K":
            new = "Q4_K" if h.n_gqa >= 4 else "Q3_K"
        elif s == "Q3_K_M":
            new = "Q5_K" if i < 2 else "Q4_K"
        elif s == "Q3_K_L":
            new = "Q5_K"
        elif s in ("IQ4_NL", "IQ4_XS") and h.n_gqa >= 4:
            new = "Q5_K"
        elif s in ("Q4_K_M", "Q5_K_M") and _more_bits(i, self.n_wv):
            new, why = "Q6_K", why + ", a more-bits layer"
        elif s == "Q4_K_S" and i < 4:
            new = "Q5_K"
        if h.seventy_b and new in ("Q3_K", "Q4_K"):
            new, why = "Q5_K", why + ", 70B model"
        if h.n_expert == 8:
            new, why = "Q8_0", why + ", 8 experts"
        self.i_wv += 1
        return new, why if new != t else "scheme default"

    def _ffn_down(self, name: str, t: str) -> tuple[str, str]:
        s, falcon = self.scheme, self.falcon
        i, n = self._layer(self.i_down, name)
        new = t
        if s == "Q2_K":
            new = "Q3_K"
        elif s == "Q3_K_M":
            new = "Q5_K" if i < n // 16 else "Q4_K" if not falcon or _more_bits(i, n) else "Q3_K"
        elif s == "Q3_K_L":
            new = "Q4_K" if falcon else "Q5_K"
        elif s == "Q4_K_M":
            if falcon:
                new = "Q6_K" if i < n // 16 else "Q5_K" if _more_bits(i, n) else "Q4_K"
            elif _more_bits(i, n):
                new = "Q6_K"
        elif i < n // 8 and s in ("IQ4_NL", "IQ4_XS") and not self.opts.has_imatrix:
            new = "Q5_K"
        elif s == "Q5_K_M" and _more_bits(i, n):
            new = "Q6_K"
        elif s == "Q4_K_S" and not falcon and i < n // 8:
            new = "Q5_K"
        elif s in ("Q4_0", "Q5_0") and self.opts.has_imatrix and i < n // 8:
            new = "Q4_1" if s == "Q4_0" else "Q5_1"
        self.i_down += 1
        return new, f"ffn_down of layer {i} of {n}" if new != t else "scheme default"


def _fallback(ne0: int, t: str) -> tuple[str, str | None]:
    block = GGML_TYPES[type_id(t)][1]
    if ne0 % block == 0:
        return t, None
    new = _FALLBACK.get(t)
    if new is None:
        if block > 32:
            raise ValueError(f"no fallback is defined for type {t}")
        new = t
    if ne0 % GGML_TYPES[type_id(new)][1]:
        new = "F16"
    return new, f"rows of {ne0} do not fit {t}'s block of {block}: {new}"


def choose_types(tensors, scheme: str, hyper: Hyper, opts: PolicyOptions | None = None,
                 keep_order: bool = False) -> list[Choice]:
    """The type of every tensor under ``scheme``, in llama-quantize's order.

    Parameters
    ----------
    tensors : iterable of (name, ne, type id)
        ``ne``: ggml's 4 dimensions, innermost first.
    scheme : str
        A key of :data:`SCHEMES` or :data:`ALIASES`.
    hyper : Hyper
        The model's facts (:func:`hyper_from`).
    opts : PolicyOptions, optional
        llama-quantize's options.
    keep_order : bool
        Visit (and return) the tensors in the order given (llama-quantize's ``--keep-split``: by part,
        then offset) rather than in :func:`tensor_order`.

    Returns
    -------
    list of Choice
        In :func:`tensor_order`, or as given with ``keep_order``.

    Examples
    --------
    >>> rows = [(f"blk.{i}.ffn_down.weight", (352, 256, 1, 1), 30) for i in range(8)]
    >>> [c.type_name for c in choose_types(rows, "Q4_K_M", Hyper("llama", 8, 1, 0))]
    ['Q8_0', 'Q5_0', 'Q5_0', 'Q8_0', 'Q5_0', 'Q5_0', 'Q8_0', 'Q8_0']
    """
    opts = opts or PolicyOptions()
    scheme = ALIASES.get(scheme, scheme)
    if scheme not in SCHEMES:
        raise ValueError(f"scheme {scheme!r} is not a GGUF scheme nbquant knows; known: {', '.join(SCHEMES)}")
    default = SCHEMES[scheme][1]
    rows = {name: (tuple(ne), tid) for name, ne, tid in tensors}
    order = list(rows) if keep_order else tensor_order(rows)
    cats = {name: _category(name) for name in order}
    rules = _Rules(scheme, hyper, opts, sum(c == "attn_v" for c in cats.values()), "output.weight" not in rows)
    out = []
    for name in order:
        ne, tid = rows[name]
        n_dims = max([1] + [i + 1 for i, n in enumerate(ne) if n > 1])
        kept = _keeps(name, n_dims, hyper, opts)
        if kept is not None:
            out.append(Choice(name, tid, tid, f"kept: {kept}"))
            continue
        cat = cats[name]
        manual = opts.manual_type(name)
        # --token-embedding-type, unless --tensor-type names per_layer_token_embd (a large table of its own)
        if opts.token_embedding_type is not None and cat == "token_embd" and (
                manual is None or name != "per_layer_token_embd.weight"):
            out.append(Choice(name, tid, type_id(opts.token_embedding_type), "--token-embedding-type"))
            continue
        if opts.output_tensor_type is not None and cat == "output":
            out.append(Choice(name, tid, type_id(opts.output_tensor_type), "--output-tensor-type"))
            continue
        if manual is not None:  # the scheme's mix is skipped: its attn_v / ffn_down counters do not count it
            t, why = manual[0], f"--tensor-type {manual[1]}={manual[0]}"
        else:
            t, why = (default, "--pure") if opts.pure else rules.mix(name, ne, default, cat)
        t, fell = _fallback(ne[0], t)
        out.append(Choice(name, tid, type_id(t), fell or why))
    return out
