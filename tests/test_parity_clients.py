"""A real client loads ``nbquant convert``'s output (the parity tier: torch CPU, transformers, llmcompressor).

Tiny random-init models (a Llama, a Qwen3 with tied embeddings, a Qwen3-MoE and a Mixtral with its
``block_sparse_moe`` layout; bfloat16, seeded, saved by ``save_pretrained``) are converted by the
command ``nbquant convert SRC DST --scheme S``, then loaded by transformers'
``AutoModelForCausalLM.from_pretrained(DST)`` on the CPU (compressed-tensors decompresses the
weights; no flag needed). The load reports no missing, unexpected or mismatched key and logs no
warning; the logits of one forward pass on a fixed token batch are close to the source model's
(cosine similarity and top-1 agreement, thresholds below); and they are identical (``torch.equal``)
to those of the model converted by llm-compressor's ``model_free_ptq`` with the ignore list nbquant
wrote into its ``quantization_config``.
"""

from __future__ import annotations

import warnings

import pytest

pytestmark = pytest.mark.parity
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("llmcompressor")
    import _clients as clients

SCHEMES = ["W4A16", "W8A16", "FP8_DYNAMIC", "NVFP4A16"]
MOE = ("qwen3-moe", "mixtral")

#: scheme -> (least cosine similarity of the logits, least top-1 agreement), asserted for every model.
#: Measured on the four models with seeds 0-4 (20 runs per scheme; 4 x 32 tokens; the test runs seed 0),
#: cosine min..max, top-1 min..max:
#:
#: * W4A16: 0.9762..0.9853, 0.633..0.984
#: * W8A16: 0.99962..0.99992, 0.953..1.000
#: * FP8_DYNAMIC: 0.99742..0.99853, 0.867..1.000
#: * NVFP4A16 (the dense models): 0.9827..0.9875, 0.688..0.984
#:
#: The cosine bound allows at least twice the largest ``1 - cosine`` measured (W4A16 2.4e-2 -> 0.95,
#: W8A16 3.8e-4 -> 0.999, FP8_DYNAMIC 2.6e-3 -> 0.994, NVFP4A16 1.7e-2 -> 0.965): another CPU, torch
#: build or thread count changes the bfloat16 matmuls' rounding, never the error's order of magnitude.
#: The top-1 bound is the least measured less 0.1 (2.5 standard errors of a fraction of 128 positions
#: near 0.7), rounded down to 0.05: random-init logits are nearly flat (top-1 over top-2 by 0.07 on average
#: for the Llama), so the argmax of the untied models moves under 4-bit noise; the tied Qwen3's is its input
#: token at 91% of the positions, 0.53 above the next, and stays (0.95-1.0). A broken load
#: is far below both: the MoE NVFP4A16 load below gives cosine 0.02-0.10 and top-1 0.00-0.02.
THRESHOLDS = {"W4A16": (0.95, 0.50), "W8A16": (0.999, 0.85), "FP8_DYNAMIC": (0.994, 0.75),
              "NVFP4A16": (0.965, 0.55)}

#: transformers 5.17 fuses the per-expert weights of an MoE checkpoint when it loads them, and its
#: ``DecompressExperts`` collects ``weight_packed``, ``weight_scale`` and ``weight_shape`` but not NVFP4's
#: ``weight_global_scale`` (reported unexpected; the experts come back scaled wrongly):
#: huggingface/transformers#48371 (fix: #48372, open). model_free_ptq's output loads the same way.
MOE_NVFP4 = pytest.mark.xfail(strict=True, raises=AssertionError,
                              reason="transformers 5.17 drops weight_global_scale of fused MoE experts "
                                     "(huggingface/transformers#48371)")

CASES = [pytest.param(model, scheme, id=f"{model}-{scheme}",
                      marks=[MOE_NVFP4] if model in MOE and scheme == "NVFP4A16" else [])
         for model in clients.MODELS for scheme in SCHEMES]


class Sources:
    """The source checkpoints, each saved once, with its reference logits (loaded like every other model)."""

    def __init__(self, root):
        self.root = root
        self.ids = clients.tokens()
        self._made: dict[str, tuple] = {}

    def get(self, name: str):
        if name not in self._made:
            src = clients.build_source(name, self.root / name)
            loaded = clients.load(src)
            _assert_clean(loaded, src)
            self._made[name] = (src, clients.logits(loaded.model, self.ids))
        return self._made[name]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return Sources(tmp_path_factory.mktemp("sources"))


def _assert_clean(loaded, folder) -> None:
    problems = {k: v for k, v in loaded.info.items() if v}
    assert not problems, f"{folder}: transformers loading info {problems}"
    assert not loaded.log, f"{folder}: transformers logged {loaded.log}"
    assert not loaded.warned, f"{folder}: warnings while loading {loaded.warned}"


@pytest.mark.parametrize(("model", "scheme"), CASES)
def test_transformers_loads_nbquant_output(sources, tmp_path, model, scheme):
    src, reference = sources.get(model)
    mine = tmp_path / "nbquant"
    clients.nbquant_convert(src, mine, scheme)
    loaded = clients.load(mine)
    _assert_clean(loaded, mine)
    out = clients.logits(loaded.model, sources.ids)
    cos, top1 = clients.agreement(reference, out)
    least_cos, least_top1 = THRESHOLDS[scheme]
    assert cos >= least_cos and top1 >= least_top1, (
        f"{model} {scheme}: cosine {cos:.6f} (least {least_cos}), top-1 {top1:.4f} (least {least_top1})")

    peer = tmp_path / "model_free_ptq"
    clients.peer_convert(src, peer, scheme, clients.quantization_config(mine)["ignore"])
    theirs = clients.load(peer)
    _assert_clean(theirs, peer)
    assert torch.equal(out, clients.logits(theirs.model, sources.ids)), f"{model} {scheme}: logits differ"


@pytest.mark.parametrize("model", ["llama", "qwen3-tied"])
def test_ignore_lm_head_command(sources, tmp_path, model):
    """``--ignore lm_head`` (the command the docs gave before the default ignore list) loads as the default does.

    It adds to the default list; on the tied Qwen3 no tensor is named ``lm_head`` and the command says so in a
    note (exit status 0), the head staying unquantized with its embedding.
    """
    src, _ = sources.get(model)
    clients.nbquant_convert(src, tmp_path / "lm_head", "W4A16", "--ignore", "lm_head")
    clients.nbquant_convert(src, tmp_path / "default", "W4A16")
    loaded = [clients.load(tmp_path / d) for d in ("lm_head", "default")]
    for one, d in zip(loaded, ("lm_head", "default"), strict=True):
        _assert_clean(one, tmp_path / d)
    assert torch.equal(*(clients.logits(one.model, sources.ids) for one in loaded))
