"""GGUF convert parity: ``nbquant convert IN.gguf OUT.gguf --scheme S`` writes llama-quantize's file, byte for byte.

The peer is ``llama-quantize`` built from the llama.cpp the ``llama-cpp-python`` 0.3.36
sdist vendors (``tools/ggml_oracle.py``, :func:`build_quantize`: cmake's Release flags for the C
of ggml, where the quantizers are, and ``-O0`` for the C++ of llama, common and the tool, which
builds faster and writes the same bytes; only that target; cache folder ``$NBQUANT_GGML_ORACLE_DIR`` or a
temporary one). The models are written by gguf-py's ``GGUFWriter`` (the parity environment):

* ``llama8``: 8 layers, GQA 4 (8 heads, 2 KV heads), hidden 256, ffn 360 (``ffn_down``'s rows
  of 360 are not a multiple of 32: the fallback to F16, converted from BF16), BF16 weights, F32 norms;
* ``llama_f16``: 8 layers, no GQA, hidden 512, ffn 352 (``ffn_down``'s rows of 352 do not fit a
  256-block: the K-quant fallbacks), F16 weights, no ``output`` (the token embedding is tied);
* ``moe8``: 8 layers, 8 experts (3-D ``ffn_*_exps`` of rows of 256 and 128, F32 router ``ffn_gate_inp``):
  MXFP4_MOE's expert tensors, the 8-expert rules, per-expert importance (some experts with a count of 0).

Each scheme runs with and without an importance matrix (GGUF format, as ``llama-imatrix``
writes it); schemes whose mix holds a type nbquant does not implement yet are skipped, naming it.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from nbquant import gguf
from nbquant.convert.gguf import convert_gguf
from nbquant.gguf.file import read_gguf, type_name
from nbquant.gguf.policy import SCHEMES, choose_types, hyper_from

pytestmark = pytest.mark.parity

_ORACLE = Path(__file__).resolve().parents[1] / "tools" / "ggml_oracle.py"


@pytest.fixture(scope="session")
def llama_quantize():
    spec = importlib.util.spec_from_file_location("ggml_oracle", _ORACLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build_quantize(optimized=False)  # the C++ at -O0: same bytes, a faster build (its docstring)


def _weights(rng, rows: int, cols: int) -> np.ndarray:
    return (rng.standard_t(5, (rows, cols)) * (0.5 / np.sqrt(cols))).astype(np.float32)


def _write_model(path: Path, hidden: int, ffn: int, heads: int, kv_heads: int, dtype: str, tied: bool,
                 layers: int = 8, vocab: int = 96, experts: int = 0) -> list[tuple[str, int, int]]:
    """A Llama-shaped GGUF by gguf-py (MoE when ``experts``); returns the weights as (name, row length, matrices)."""
    import gguf as peer

    rng = np.random.default_rng(hidden + ffn)
    w = peer.GGUFWriter(str(path), "llama")
    w.add_name("parity")
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(2)
    kv = hidden // heads * kv_heads
    weights = [("token_embd.weight", vocab, hidden, 1)]
    for i in range(layers):
        weights += [(f"blk.{i}.attn_q.weight", hidden, hidden, 1), (f"blk.{i}.attn_k.weight", kv, hidden, 1),
                    (f"blk.{i}.attn_v.weight", kv, hidden, 1), (f"blk.{i}.attn_output.weight", hidden, hidden, 1)]
        n, tag = (experts, "_exps") if experts else (1, "")
        weights += [(f"blk.{i}.ffn_gate{tag}.weight", ffn, hidden, n), (f"blk.{i}.ffn_up{tag}.weight", ffn, hidden, n),
                    (f"blk.{i}.ffn_down{tag}.weight", hidden, ffn, n)]
    if not tied:
        weights.append(("output.weight", vocab, hidden, 1))
    for name, rows, cols, n in weights:
        shape = (n, rows, cols) if n > 1 else (rows, cols)
        x = _weights(rng, n * rows, cols).reshape(shape)
        if dtype == "BF16":
            u = x.view(np.uint32)
            b = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
            w.add_tensor(name, b, raw_shape=shape, raw_dtype=peer.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, x.astype(np.float16))
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        if experts:
            w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", _weights(rng, experts, hidden))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return [(name, cols, n) for name, _, cols, n in weights]


def _write_imatrix(path: Path, weights: list[tuple[str, int, int]]) -> None:
    """An importance matrix as ``llama-imatrix`` writes it, for every weight but the embedding and the head."""
    import gguf as peer

    rng = np.random.default_rng(7)
    w = peer.GGUFWriter(str(path), "")
    w.add_type("imatrix")
    w.add_array("imatrix.datasets", ["parity.txt"])
    w.add_uint32("imatrix.chunk_count", 10)
    w.add_uint32("imatrix.chunk_size", 512)
    for name, cols, n in weights:
        if name in ("token_embd.weight", "output.weight"):
            continue
        counts = rng.integers(0, 3, (n, 1)).astype(np.float32) * 2560  # some experts never routed: count 0
        w.add_tensor(f"{name}.in_sum2", (rng.gamma(2.0, 1.0, (n, cols)) * 5120).astype(np.float32))
        w.add_tensor(f"{name}.counts", counts if n > 1 else np.full((1, 1), 5120.0, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


MODELS = {"llama8": dict(hidden=256, ffn=360, heads=8, kv_heads=2, dtype="BF16", tied=False),
          "llama_f16": dict(hidden=512, ffn=352, heads=4, kv_heads=4, dtype="F16", tied=True),
          "moe8": dict(hidden=256, ffn=128, heads=8, kv_heads=8, dtype="BF16", tied=False, experts=8)}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf-models")
    out = {}
    for name, spec in MODELS.items():
        weights = _write_model(root / f"{name}.gguf", **spec)
        _write_imatrix(root / f"{name}.imatrix.gguf", weights)
        out[name] = root / f"{name}.gguf"
    return out


def _missing(path: Path, scheme: str, imatrix: bool) -> set[str]:
    with read_gguf(path) as g:
        from nbquant.gguf.policy import PolicyOptions

        choices = choose_types(((t.name, t.ne, t.type_id) for t in g.tensors.values()), scheme,
                               hyper_from(g.value, list(g.tensors)), PolicyOptions(has_imatrix=imatrix))
    return {type_name(c.target) for c in choices if c.source != c.target} - set(gguf.implemented_formats()) - {
        "F16", "F32", "BF16"}


@pytest.mark.parametrize("imatrix", [False, True], ids=["plain", "imatrix"])
@pytest.mark.parametrize("scheme", list(SCHEMES))
@pytest.mark.parametrize("model", list(MODELS))
def test_convert_equals_llama_quantize(llama_quantize, models, tmp_path, model, scheme, imatrix):
    src = models[model]
    missing = _missing(src, scheme, imatrix)
    if missing:
        pytest.skip(f"{scheme} on {model} needs {', '.join(sorted(missing))}, which nbquant does not implement yet")
    matrix = str(src.with_name(f"{model}.imatrix.gguf")) if imatrix else None
    theirs, ours = tmp_path / "theirs.gguf", tmp_path / "ours.gguf"
    cmd = [str(llama_quantize)] + (["--imatrix", matrix] if matrix else []) + [str(src), str(theirs), scheme, "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LLAMA_LOG_COLORS": "0"})
    assert done.returncode == 0, done.stderr[-2000:]
    convert_gguf(src, ours, scheme, imatrix=matrix, progress=False)
    a, b = theirs.read_bytes(), ours.read_bytes()
    if a != b:
        first = next(i for i in range(min(len(a), len(b))) if a[i] != b[i]) if a[:len(b)] != b[:len(a)] else min(
            len(a), len(b))
        with read_gguf(theirs) as g:
            where = [n for n, t in g.tensors.items() if g.data_offset + t.offset <= first < g.data_offset + t.offset
                     + t.nbytes]
            types = {n: type_name(t.type_id) for n, t in g.tensors.items()}
        with read_gguf(ours) as g:
            diff = {n: (types.get(n), type_name(t.type_id)) for n, t in g.tensors.items()
                    if types.get(n) != type_name(t.type_id)}
        pytest.fail(f"{len(a)} vs {len(b)} bytes; first difference at byte {first} (tensor {where}); "
                    f"type differences (theirs, ours): {diff}")


@pytest.mark.parametrize("option", [["--pure"], ["--leave-output-tensor"], ["--output-tensor-type", "Q8_0"],
                                    ["--token-embedding-type", "Q4_0"]], ids=lambda o: o[0].strip("-"))
def test_options_equal_llama_quantize(llama_quantize, models, tmp_path, option):
    src = models["llama8"]
    theirs, ours = tmp_path / "theirs.gguf", tmp_path / "ours.gguf"
    done = subprocess.run([str(llama_quantize), *option, str(src), str(theirs), "Q4_K_M", "2"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    key = option[0].strip("-").replace("-", "_")
    kwargs = {key: option[1] if len(option) > 1 else True}
    convert_gguf(src, ours, "Q4_K_M", progress=False, **kwargs)
    assert theirs.read_bytes() == ours.read_bytes()


#: ``--tensor-type`` cases: (scheme, patterns, other llama-quantize options as convert_gguf's keywords).
TENSOR_TYPES = {
    "attn_v-counter": ("Q4_K_M", [r"blk\.[0-2]\.attn_v=Q8_0"], {}),  # the mix's attn_v counter skips blk.0-2
    "first-match": ("Q4_K_M", ["ATTN_(Q|K)=q5_0", "ffn_down=Q8_0", "ffn=Q4_0", "output=Q4_1", "token_embd=f16"], {}),
    "with-output-type": ("Q5_K_M", ["output=Q4_0", r"token_embd\.=Q4_1", "blk\\.7=Q8_0"],
                         {"output_tensor_type": "Q6_K", "token_embedding_type": "Q8_0"}),
    "pure": ("Q4_K_S", ["ffn_up=Q5_1"], {"pure": True}),
}


@pytest.mark.parametrize("case", list(TENSOR_TYPES))
def test_tensor_type_equals_llama_quantize(llama_quantize, models, tmp_path, case):
    scheme, patterns, kwargs = TENSOR_TYPES[case]
    src = models["llama8"]
    theirs, ours = tmp_path / "theirs.gguf", tmp_path / "ours.gguf"
    options = [a for p in patterns for a in ("--tensor-type", p)]
    for key, value in kwargs.items():
        options += ["--" + key.replace("_", "-")] + ([] if value is True else [value])
    done = subprocess.run([str(llama_quantize), *options, str(src), str(theirs), scheme, "2"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    report = convert_gguf(src, ours, scheme, tensor_types=patterns, progress=False, **kwargs)
    assert any(t.reason.startswith("--tensor-type ") for t in report.tensors)
    assert theirs.read_bytes() == ours.read_bytes()


#: ``--override-kv`` cases: (scheme, overrides, with the model's importance matrix).
OVERRIDE_KV = {
    "types": ("Q4_K_M", ["general.name=str:renamed", "llama.context_length=int:-4096", "x.f=float:1e-3",
                         "x.inf=float:-1e99", "x.b=bool:true", "general.name=str:again", "x.b=bool:false"], False),
    "hyperparameter": ("IQ4_NL", ["llama.attention.head_count_kv=int:8"], False),  # GQA 1: attn_v stays IQ4_NL
    "imatrix-keys": ("Q4_K_M", ["quantize.imatrix.file=str:mine", "general.file_type=int:3", "a.b=str:c"], True),
}


@pytest.mark.parametrize("case", list(OVERRIDE_KV))
def test_override_kv_equals_llama_quantize(llama_quantize, models, tmp_path, case):
    scheme, overrides, imatrix = OVERRIDE_KV[case]
    src = models["llama8"]
    matrix = str(src.with_name("llama8.imatrix.gguf")) if imatrix else None
    theirs, ours = tmp_path / "theirs.gguf", tmp_path / "ours.gguf"
    options = [a for o in overrides for a in ("--override-kv", o)] + (["--imatrix", matrix] if matrix else [])
    done = subprocess.run([str(llama_quantize), *options, str(src), str(theirs), scheme, "2"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    convert_gguf(src, ours, scheme, override_kv=overrides, imatrix=matrix, progress=False)
    assert theirs.read_bytes() == ours.read_bytes()


#: ``--prune-layers`` cases: (scheme, layers, with the model's importance matrix).
PRUNE = {"middle": ("Q4_K_M", "2,5,3", False), "first-imatrix": ("Q4_K_M", "0", True),
         "beyond": ("Q5_K_M", "7,30", False)}


@pytest.mark.parametrize("case", list(PRUNE))
def test_prune_layers_equals_llama_quantize(llama_quantize, models, tmp_path, case):
    scheme, layers, imatrix = PRUNE[case]
    src = models["llama8"]
    matrix = str(src.with_name("llama8.imatrix.gguf")) if imatrix else None
    theirs, ours = tmp_path / "theirs.gguf", tmp_path / "ours.gguf"
    options = ["--prune-layers", layers] + (["--imatrix", matrix] if matrix else [])
    done = subprocess.run([str(llama_quantize), *options, str(src), str(theirs), scheme, "2"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    convert_gguf(src, ours, scheme, prune_layers=layers, imatrix=matrix, progress=False)
    assert theirs.read_bytes() == ours.read_bytes()


def _split_model(src: Path, parts: int, folder: Path) -> Path:
    """``src`` as ``parts`` files with llama.cpp's split keys, tensors dealt round (blk.0's attn_v in the first part,
    blk.1's in the second...: --keep-split's order differs from the layer order); the first part's path."""
    from nbquant.gguf.file import Field, TensorInfo, encode_metadata

    with read_gguf(src) as g:
        names = list(g.tensors)
        for i in range(parts):
            fields = (list(g.fields.values()) if i == 0 else []) + [
                Field("split.no", 2, struct.pack("<H", i)), Field("split.count", 2, struct.pack("<H", parts)),
                Field("split.tensors.count", 5, struct.pack("<i", len(names)))]
            infos, offset, data = [], 0, []
            for name in names[i::parts]:
                t = g.tensors[name]
                infos.append(TensorInfo(name, t.ne, t.type_id, offset))
                raw = bytes(g.tensor_bytes(name))
                data.append(raw + bytes(-len(raw) % 32))
                offset += len(data[-1])
            (folder / f"m-{i + 1:05d}-of-{parts:05d}.gguf").write_bytes(encode_metadata(fields, infos, 32)
                                                                          + b"".join(data))
    return folder / f"m-00001-of-{parts:05d}.gguf"


#: ``--keep-split`` cases: (parts of the source, scheme, other options as convert_gguf's keywords).
KEEP_SPLIT = {"3-parts": (3, "Q4_K_M", {}), "1-part": (1, "Q5_K_M", {}),
              "3-parts-pruned-imatrix": (3, "Q4_K_M", {"prune_layers": "1,6", "imatrix": True}),
              "2-parts": (2, "Q8_0", {"override_kv": ["general.name=str:k"]})}


@pytest.mark.parametrize("case", list(KEEP_SPLIT))
def test_keep_split_equals_llama_quantize(llama_quantize, models, tmp_path, case):
    parts, scheme, kwargs = KEEP_SPLIT[case]
    kwargs = dict(kwargs)
    if kwargs.get("imatrix"):
        kwargs["imatrix"] = str(models["llama8"].with_name("llama8.imatrix.gguf"))
    (tmp_path / "in").mkdir()
    src = _split_model(models["llama8"], parts, tmp_path / "in") if parts > 1 else models["llama8"]
    options = ["--keep-split"]
    for key, value in kwargs.items():
        for v in value if isinstance(value, list) else [value]:
            options += ["--" + key.replace("_", "-"), v]
    done = subprocess.run([str(llama_quantize), *options, str(src), str(tmp_path / "theirs.gguf"), scheme, "2"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    convert_gguf(src, tmp_path / "ours.gguf", scheme, keep_split=True, progress=False, **kwargs)
    theirs = sorted(p.name for p in tmp_path.glob("theirs-*.gguf"))
    assert theirs == [f"theirs-{i:05d}-of-{parts:05d}.gguf" for i in range(1, parts + 1)]
    for name in theirs:
        assert (tmp_path / name).read_bytes() == (tmp_path / name.replace("theirs", "ours")).read_bytes(), name
    if case == "3-parts":  # the type choice followed the parts' order: attn_v's more-bits layers moved
        with read_gguf(models["llama8"]) as g:
            layer_order = {c.name: c.type_name for c in choose_types(
                ((t.name, t.ne, t.type_id) for t in g.tensors.values()), scheme, hyper_from(g.value, list(g.tensors)))}
        written = {}
        for name in theirs:
            with read_gguf(tmp_path / name) as g:
                written.update({n: type_name(t.type_id) for n, t in g.tensors.items()})
        attn_v = [f"blk.{i}.attn_v.weight" for i in range(8)]
        assert [written[n] for n in attn_v] != [layer_order[n] for n in attn_v]


def _write_legacy_imatrix(path: Path, weights: list[tuple[str, int, int]]) -> None:
    """The legacy ``.dat`` format: entries of (name, ncall, values), then the chunk count and the dataset name."""
    rng = np.random.default_rng(11)
    entries = [(name, cols * n) for name, cols, n in weights if name not in ("token_embd.weight", "output.weight")]
    raw = [np.int32(len(entries)).tobytes()]
    for name, size in entries:
        raw += [np.int32(len(name)).tobytes(), name.encode(), np.array([7, size], "<i4").tobytes(),
                (rng.gamma(2.0, 1.0, size) * 7).astype("<f4").tobytes()]
    raw += [np.array([12, 9], "<i4").tobytes(), b"legacy.txt"[:9]]
    path.write_bytes(b"".join(raw))


@pytest.mark.parametrize("scheme", ["Q4_K_M", "IQ4_XS", "Q4_0"])
def test_legacy_imatrix_equals_llama_quantize(llama_quantize, tmp_path, scheme):
    src = tmp_path / "m.gguf"
    weights = _write_model(src, **MODELS["llama8"])
    matrix = tmp_path / "imatrix.dat"
    _write_legacy_imatrix(matrix, weights)
    theirs, ours = tmp_path / "theirs.gguf", tmp_path / "ours.gguf"
    done = subprocess.run([str(llama_quantize), "--imatrix", str(matrix), str(src), str(theirs), scheme, "2"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    convert_gguf(src, ours, scheme, imatrix=str(matrix), progress=False)
    assert theirs.read_bytes() == ours.read_bytes()


@pytest.mark.parametrize("model", list(MODELS))
def test_reader_equals_gguf_py(models, model):
    """nbquant's reader and gguf-py's GGUFReader see the same keys, values, tensor names, shapes, types and bytes."""
    import gguf as peer

    theirs = peer.GGUFReader(str(models[model]))
    with read_gguf(models[model]) as g:
        assert list(g.fields) == [f.name for f in theirs.fields.values() if not f.name.startswith("GGUF.")]
        for field in theirs.fields.values():
            if not field.name.startswith("GGUF."):
                assert g.value(field.name) == field.contents(), field.name
        assert list(g.tensors) == [t.name for t in theirs.tensors]
        for t in theirs.tensors:
            ours = g.tensors[t.name]
            assert (ours.ne[:len(t.shape)], ours.type_id) == (tuple(int(n) for n in t.shape), int(t.tensor_type))
            assert bytes(g.tensor_bytes(t.name)) == t.data.tobytes()
