"""Which tensors ``nbquant convert`` keeps by default, and the ``ignore`` list it records for the client.

llm-compressor's ``model_free_ptq`` quantizes every ``<module>.weight`` but norms and what its
``ignore`` names (:func:`nbquant.convert.plan.skip_reason`). The inference engines quantize less:
vLLM's compressed-tensors method covers ``LinearBase`` layers only (``VocabParallelEmbedding`` and
``ParallelLMHead`` load plain weights) and builds MoE routers with ``quant_config=None``;
llm-compressor's own recipes target ``Linear`` and ignore ``lm_head``, ``re:.*mlp.gate$``,
``re:.*router``, ``re:.*shared_expert_gate$``, ``re:visual.*``, ``re:.*vision_tower.*``,
``re:.*multi_modal_projector.*``. A tensor those clients expect unquantized but that is quantized
loads as missing (transformers re-initialises it). So, unless ``default_ignore=False``
(``--no-default-ignore``, ``model_free_ptq``'s behaviour), a weight is also kept when it is
(:func:`default_reason`, from ``config.json`` and the tensors' names and shapes):

* in a vision or audio tower or projector (a path component in :data:`TOWERS`);
* an embedding or the output head: 2-D with ``vocab_size`` rows (any ``vocab_size`` of the config,
  sub-configs included) outside the numbered blocks, or whose module's last name part holds
  ``embed`` or ``head``; or a module named like an embedding (``*embed*``, ``wte``, ``wpe``);
* an MoE router or gate, in a model with experts (an expert count in the config, or an
  ``experts`` module), outside the experts: a module ``gate`` or ``router`` or one of their
  children (``router.layer``), or named ``*expert_gate``/``*_router``; or, in a block holding
  ``experts``, a weight whose rows are an expert count of the config, or 1 (a shared expert's gate);
* not 2-D (a convolution kernel, a 3-D parameter that is not a fused MoE projection).

The ``ignore`` written to ``quantization_config`` is the caller's, then ``lm_head`` for a model
whose head is tied to its embedding (``tie_word_embeddings``: no ``lm_head`` tensor, but the
client builds an ``lm_head`` module and must not quantize it), then every module kept by these
rules, by name, as llm-compressor's ``oneshot`` records ignored modules. ``model_free_ptq`` given
that list writes the same bytes.

Examples
--------
>>> config = {"vocab_size": 100, "num_experts": 4, "tie_word_embeddings": True}
>>> shapes = {"model.embed_tokens.weight": (100, 128), "model.layers.0.mlp.gate.weight": (4, 128),
...           "model.layers.0.mlp.experts.0.up_proj.weight": (256, 128)}
>>> s = select(config, shapes, [])
>>> s.ignore
['lm_head', 'model.embed_tokens', 'model.layers.0.mlp.gate']
>>> s.kept["model.layers.0.mlp.gate.weight"]
'MoE router or gate (default ignore)'
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .arguments import ArgumentError
from .plan import match_name, skip_reason

__all__ = ["TOWERS", "HEAD", "ModelFacts", "Selection", "model_facts", "default_reason", "select"]

#: Module path components of the vision and audio towers and projectors that llm-compressor's recipes and vLLM leave
#: in high precision (LLaVA, Gemma 3, Mistral 3: ``vision_tower``, ``multi_modal_projector``; Qwen-VL: ``visual``;
#: Mllama, Llama 4, Idefics 3: ``vision_model``; MiniCPM-V: ``vpm``; Qwen2-Audio, Qwen-Omni: ``audio_tower``;
#: Gemma 3n: ``embed_vision``, ``embed_audio``).
TOWERS = frozenset({"vision_tower", "vision_model", "vision_encoder", "visual", "vpm", "multi_modal_projector",
                    "mm_projector", "audio_tower", "audio_model", "audio_encoder", "embed_vision", "embed_audio"})
#: The output head's module name in transformers' ``*ForCausalLM`` / ``*ForConditionalGeneration`` models.
HEAD = "lm_head"
#: Model classes with an output head (``architectures`` in ``config.json``).
_HEADED = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")
_DEFAULT = " (default ignore)"
_ROUTER = "MoE router or gate" + _DEFAULT
_NOT_2D = "not a 2-D Linear weight" + _DEFAULT


@dataclass(frozen=True)
class ModelFacts:
    """What the defaults need to know of a model, from its ``config.json`` and tensor names.

    Attributes
    ----------
    vocab_sizes : frozenset of int
        Every ``vocab_size`` of the config and its sub-configs.
    expert_counts : frozenset of int
        Every ``*experts`` count of the config (``num_experts``, ``num_local_experts``,
        ``n_routed_experts`` ...; not the shared or per-token ones).
    moe_blocks : frozenset of str
        Module prefixes that hold an ``experts`` module (``model.layers.0.mlp``).
    tied : bool
        The output head shares the embedding's weight: ``tie_word_embeddings`` (top level, else
        ``text_config``), or, where the config does not say, no ``lm_head`` tensor in a model
        whose ``architectures`` has a head.
    embedding : str or None
        The token embedding's tensor (for the tied head's messages).
    """

    vocab_sizes: frozenset[int] = frozenset()
    expert_counts: frozenset[int] = frozenset()
    moe_blocks: frozenset[str] = frozenset()
    tied: bool = False
    embedding: str | None = None

    @property
    def moe(self) -> bool:
        """Whether the model has experts (a count in its config, or an ``experts`` module)."""
        return bool(self.expert_counts or self.moe_blocks)


@dataclass
class Selection:
    """The outcome of :func:`select`.

    Attributes
    ----------
    kept : dict[str, str]
        Every tensor not quantized → why.
    ignore : list of str
        The ``ignore`` of the written ``quantization_config``.
    notes : list of str
        One-line remarks on the arguments (an ``ignore`` naming the tied head).
    """

    kept: dict[str, str] = field(default_factory=dict)
    ignore: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _configs(config: Mapping, depth: int = 0) -> Iterable[Mapping]:
    """``config`` and its nested sub-configs (``text_config``, ``ffn_config`` ...), at most 4 levels deep."""
    yield config
    if depth < 4:
        for value in config.values():
            if isinstance(value, Mapping):
                yield from _configs(value, depth + 1)


def _counts(config: Mapping, keep) -> frozenset[int]:
    return frozenset(v for c in _configs(config) for k, v in c.items()
                     if isinstance(k, str) and keep(k) and isinstance(v, int) and not isinstance(v, bool) and v > 0)


def _last(name: str) -> str:
    """The last part of the module of tensor ``name`` (``embed_tokens`` of ``model.embed_tokens.weight``)."""
    return name.rpartition(".")[0].rpartition(".")[2]


def _in_block(module: str) -> bool:
    """Whether ``module`` lies inside a numbered block (a path component of digits: ``layers.3``, ``experts.7``)."""
    return any(part.isdigit() for part in module.split("."))


def model_facts(config: Mapping, shapes: Mapping[str, tuple[int, ...]]) -> ModelFacts:
    """The :class:`ModelFacts` of a checkpoint: its ``config.json`` and its tensors (name → shape).

    Examples
    --------
    >>> f = model_facts({"text_config": {"vocab_size": 32}, "num_local_experts": 8},
    ...                 {"m.embed_tokens.weight": (32, 8), "m.layers.0.moe.experts.0.w1.weight": (8, 8)})
    >>> sorted(f.vocab_sizes), sorted(f.expert_counts), sorted(f.moe_blocks), f.tied
    ([32], [8], ['m.layers.0.moe'], False)
    """
    vocab = _counts(config, lambda k: k == "vocab_size")
    experts = _counts(config, lambda k: k.endswith("experts") and not any(w in k for w in ("shared", "activ", "top"))
                      ) - {1}
    blocks = frozenset(m.group(1) for n in shapes if (m := re.match(r"(.*?)\.experts\.", n)))
    tie = next((c["tie_word_embeddings"] for c in (config, config.get("text_config") or {})
                if isinstance(c, Mapping) and isinstance(c.get("tie_word_embeddings"), bool)), None)
    if tie is None:
        headed = any(isinstance(a, str) and a.endswith(_HEADED) for a in config.get("architectures") or [])
        tie = headed and not any(_last(n) == HEAD for n in shapes)
    named = {n: _last(n) in ("wte", "word_embeddings") or "embed" in _last(n) for n in shapes}
    embeddings = [n for n, s in shapes.items() if n.endswith(".weight") and len(s) == 2 and not _in_block(n) and
                  _last(n) != HEAD and (named[n] or s[0] in vocab)]
    embedding = min(embeddings, key=lambda n: (shapes[n][0] not in vocab, not named[n]), default=None)
    return ModelFacts(vocab, experts, blocks, tie, embedding)


def default_reason(name: str, shape: tuple[int, ...], facts: ModelFacts) -> str | None:
    """Why the defaults keep weight ``name`` of ``shape``, or None when it is quantized (see the module docstring).

    Examples
    --------
    >>> f = ModelFacts(vocab_sizes=frozenset({64}))
    >>> default_reason("lm_head.weight", (64, 128), f), default_reason("model.layers.0.mlp.up.weight", (64, 128), f)
    ('embedding or output head: 64 rows = vocab_size (default ignore)', None)
    >>> default_reason("visual.blocks.0.attn.qkv.weight", (384, 128), f)
    'visual: vision or audio tower or projector (default ignore)'
    """
    module = name.rpartition(".")[0]
    parts = module.split(".")
    last = parts[-1]
    tower = next((p for p in parts if p in TOWERS), None)
    if tower is not None:
        return f"{tower}: vision or audio tower or projector" + _DEFAULT
    if len(shape) != 2:
        return _NOT_2D
    if facts.tied and name == facts.embedding:
        return f"token embedding, shared with the output head {HEAD}: tie_word_embeddings" + _DEFAULT
    if shape[0] in facts.vocab_sizes and (not _in_block(module) or "embed" in last or "head" in last):
        return f"embedding or output head: {shape[0]} rows = vocab_size" + _DEFAULT
    if "embed" in last or last in ("wte", "wpe", HEAD):
        return "embedding or output head by module name" + _DEFAULT
    if facts.moe and "experts" not in parts:
        if any(p in ("gate", "router") for p in parts[-2:]) or last.endswith(("expert_gate", "_router")):
            return _ROUTER
        if any(module.startswith(b + ".") for b in facts.moe_blocks) and \
                (shape[0] in facts.expert_counts or shape[0] == 1):
            return _ROUTER
    return None


def _unmatched(pattern: str, modules: list[str]) -> str:
    """The error of an ignore ``pattern`` that matches no module: the ``re:`` to use, or the closest module names.

    The pattern (its ``re:`` syntax dropped) is compared by :mod:`difflib` with every module name and
    with their last one to three parts (``mlp.gate``), each standing for the first module that ends so.
    """
    regex = pattern.startswith("re:")
    body = pattern[3:] if regex else pattern
    ends = [m for m in modules if m.endswith("." + body)]
    inside = [m for m in modules if m.startswith(body + ".")]
    if (ends or inside) and not regex:
        what, hits = (f"end with it: re:.*\\.{re.escape(body)}$", ends) if ends else \
            (f"lie inside it: re:{re.escape(body)}\\.", inside)
        hint = f"; to match the modules that {what} ({hits[0]}" + (f" and {len(hits) - 1} more)" if hits[1:] else ")")
    else:
        plain = re.sub(r"\\(.)", r"\1", re.sub(r"^\^|\$$|\.\*", "", body)) if regex else body
        names: dict[str, str] = {}
        for m in modules:
            parts = m.split(".")
            names.setdefault(m, m)
            for k in (1, 2, 3):
                names.setdefault(".".join(parts[-k:]), m)
        close = dict.fromkeys(names[c] for c in difflib.get_close_matches(plain, list(names), n=3, cutoff=0.6))
        hint = f"; the closest module names: {', '.join(close)}" if close else ""
    return (f"ignore {pattern!r}: matches no module of the checkpoint (a module name is compared whole, re:<regex> "
            f"is matched from the start of the name){hint}")


def _tied_note(pattern: str, facts: ModelFacts, default_ignore: bool) -> str:
    embedding = facts.embedding.rpartition(".")[0] if facts.embedding else "the token embedding"
    head = f"ignore {pattern!r}: the output head {HEAD} is tied to {embedding} (tie_word_embeddings; no {HEAD} tensor)"
    if default_ignore:
        return f"{head}: both stay unquantized, and quantization_config.ignore names {HEAD}"
    return (f"{head}: without the default ignore list {embedding} is quantized, as model_free_ptq does, and "
            f"transformers then re-initialises it; ignore {embedding} too to keep both")


def select(config: Mapping, shapes: Mapping[str, tuple[int, ...]], ignore: list[str],
           default_ignore: bool = True) -> Selection:
    """Which output tensors are kept and why, the ``ignore`` list to write, and the notes on ``ignore``.

    Parameters
    ----------
    config : mapping
        The source's ``config.json``.
    shapes : mapping of str to tuple of int
        Every output tensor (fused MoE tensors already cut per expert) → its shape.
    ignore : list of str
        The caller's patterns (module names, or ``re:<regex>``).
    default_ignore : bool
        Apply :func:`default_reason` and record what it keeps; False: ``model_free_ptq``'s choice and
        ``ignore`` written as given.

    Returns
    -------
    Selection

    Raises
    ------
    ArgumentError
        A pattern of ``ignore`` matches no module (one line with the closest module names),
        unless it names the head of a tied model (a note instead).

    Examples
    --------
    >>> select({}, {"lm_head.weight": (8, 128)}, ["lm_haed"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    nbquant.convert.arguments.ArgumentError: ignore 'lm_haed': matches no module ...; the closest module names: lm_head
    """
    facts = model_facts(config, shapes)
    modules = list(dict.fromkeys(n.rpartition(".")[0] for n in shapes))
    notes = []
    for pattern in ignore:
        if not any(match_name(m, pattern) for m in modules):
            if not (facts.tied and match_name(HEAD, pattern)):
                raise ArgumentError("ignore", _unmatched(pattern, modules + [HEAD] * facts.tied))
            notes.append(_tied_note(pattern, facts, default_ignore))
    kept: dict[str, str] = {}
    extra: list[str] = []
    for name, shape in shapes.items():
        why = skip_reason(name, ignore)
        if why is None and default_ignore:
            why = default_reason(name, shape, facts)
            extra += [name.rpartition(".")[0]] if why is not None else []
        if why is not None:
            kept[name] = why
    written = list(ignore)
    if default_ignore and facts.tied and not any(match_name(HEAD, p) for p in ignore):
        written.append(HEAD)
    written += [m for m in dict.fromkeys(extra) if m not in written]
    return Selection(kept, written, notes)
