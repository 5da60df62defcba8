"""Small llama-shaped GGUF files with chosen tensor types, for the GGUF-source tests of ``nbquant convert``.

The quantized tensors are written by nbquant's ``reference`` backend (NumPy: no compile), from the
BF16 weights of :func:`nbquant.convert.gguf.write_synthetic_gguf`'s recipe.
"""

from __future__ import annotations

import struct

import numpy as np

from nbquant import gguf
from nbquant.gguf.file import FLOAT32, Field, TensorInfo, encode_metadata, type_id

#: Tensor name suffix → the type written (the first match wins; the rest BF16, 1-D tensors F32).
MIXED = {"attn_q.weight": "Q8_0", "attn_k.weight": "Q4_K", "attn_v.weight": "Q6_K", "attn_output.weight": "F16",
         "ffn_gate.weight": "Q5_K", "ffn_up.weight": "Q4_0", "ffn_down.weight": "IQ4_NL", "token_embd.weight": "F32",
         "output.weight": "Q8_0"}


def llama_tensors(hidden: int, intermediate: int, layers: int, vocab: int, heads: int, kv_heads: int,
                  tied: bool = False, biases: bool = False,
                  qk_norms: bool = False) -> list[tuple[str, tuple[int, ...]]]:
    """The tensor names and NumPy-order shapes of a llama-shaped model, in llama.cpp's order."""
    kv = hidden // heads * kv_heads
    out = [("token_embd.weight", (vocab, hidden))]
    for i in range(layers):
        out += [(f"blk.{i}.attn_norm.weight", (hidden,)), (f"blk.{i}.attn_q.weight", (hidden, hidden)),
                (f"blk.{i}.attn_k.weight", (kv, hidden)), (f"blk.{i}.attn_v.weight", (kv, hidden))]
        if biases:
            out += [(f"blk.{i}.attn_q.bias", (hidden,)), (f"blk.{i}.attn_k.bias", (kv,)),
                    (f"blk.{i}.attn_v.bias", (kv,))]
        if qk_norms:
            out += [(f"blk.{i}.attn_q_norm.weight", (hidden // heads,)), (f"blk.{i}.attn_k_norm.weight",
                                                                         (hidden // heads,))]
        out += [(f"blk.{i}.attn_output.weight", (hidden, hidden)), (f"blk.{i}.ffn_norm.weight", (hidden,)),
                (f"blk.{i}.ffn_gate.weight", (intermediate, hidden)),
                (f"blk.{i}.ffn_up.weight", (intermediate, hidden)),
                (f"blk.{i}.ffn_down.weight", (hidden, intermediate))]
    out += [("output_norm.weight", (hidden,))] + ([] if tied else [("output.weight", (vocab, hidden))])
    return out


def phi3_tensors(hidden: int, intermediate: int, layers: int, vocab: int, heads: int, kv_heads: int,
                 tied: bool = False) -> list[tuple[str, tuple[int, ...]]]:
    """The tensor names and NumPy-order shapes of a Phi-3 model (fused ``attn_qkv`` and gate/up ``ffn_up``)."""
    kv = hidden // heads * kv_heads
    out = [("token_embd.weight", (vocab, hidden))]
    for i in range(layers):
        out += [(f"blk.{i}.attn_norm.weight", (hidden,)), (f"blk.{i}.attn_qkv.weight", (hidden + 2 * kv, hidden)),
                (f"blk.{i}.attn_output.weight", (hidden, hidden)), (f"blk.{i}.ffn_norm.weight", (hidden,)),
                (f"blk.{i}.ffn_up.weight", (2 * intermediate, hidden)),
                (f"blk.{i}.ffn_down.weight", (hidden, intermediate))]
    out += [("output_norm.weight", (hidden,))] + ([] if tied else [("output.weight", (vocab, hidden))])
    return out


def gemma_tensors(hidden: int, intermediate: int, layers: int, vocab: int, heads: int, kv_heads: int,
                  head_dim: int, qk_norms: bool = False) -> list[tuple[str, tuple[int, ...]]]:
    """The tensor names and NumPy-order shapes of a Gemma 2 (``qk_norms``: Gemma 3) text model: four norms a layer,
    the head size apart from ``hidden / heads``, tied embeddings."""
    q, kv = heads * head_dim, kv_heads * head_dim
    out = [("token_embd.weight", (vocab, hidden))]
    for i in range(layers):
        out += [(f"blk.{i}.attn_norm.weight", (hidden,)), (f"blk.{i}.attn_q.weight", (q, hidden)),
                (f"blk.{i}.attn_k.weight", (kv, hidden)), (f"blk.{i}.attn_v.weight", (kv, hidden))]
        if qk_norms:
            out += [(f"blk.{i}.attn_q_norm.weight", (head_dim,)), (f"blk.{i}.attn_k_norm.weight", (head_dim,))]
        out += [(f"blk.{i}.attn_output.weight", (hidden, q)), (f"blk.{i}.post_attention_norm.weight", (hidden,)),
                (f"blk.{i}.ffn_norm.weight", (hidden,)), (f"blk.{i}.ffn_gate.weight", (intermediate, hidden)),
                (f"blk.{i}.ffn_up.weight", (intermediate, hidden)),
                (f"blk.{i}.ffn_down.weight", (hidden, intermediate)), (f"blk.{i}.post_ffw_norm.weight", (hidden,))]
    return out + [("output_norm.weight", (hidden,))]


def _encode(x: np.ndarray, qtype: str) -> bytes:
    if qtype == "F32":
        return x.astype("<f4").tobytes()
    if qtype == "F16":
        return x.astype("<f2").tobytes()
    if qtype == "BF16":
        u = x.astype(np.float32).view(np.uint32)
        return ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype("<u2").tobytes()
    return gguf.quantize(x, qtype, backend="reference").tobytes()


def write_llama_gguf(path: str, hidden: int = 256, intermediate: int = 512, layers: int = 2, vocab: int = 64,
                     heads: int = 8, kv_heads: int = 2, types: dict[str, str] | None = None, arch: str = "llama",
                     tied: bool = False, biases: bool = False, qk_norms: bool = False,
                     extra: list[Field] | None = None,
                     tensors: list[tuple[str, tuple[int, ...]]] | None = None, seed: int = 0) -> str:
    """Write a llama-shaped GGUF file to ``path`` whose tensors have the types ``types`` picks (see :data:`MIXED`)."""
    rng = np.random.default_rng(seed)
    shapes = tensors if tensors is not None else llama_tensors(hidden, intermediate, layers, vocab, heads, kv_heads,
                                                                tied, biases, qk_norms)
    fields = [Field.string("general.architecture", arch), Field.string("general.name", "nbquant test"),
              Field.u32(f"{arch}.context_length", 512), Field.u32(f"{arch}.embedding_length", hidden),
              Field.u32(f"{arch}.block_count", layers), Field.u32(f"{arch}.feed_forward_length", intermediate),
              Field.u32(f"{arch}.attention.head_count", heads), Field.u32(f"{arch}.attention.head_count_kv", kv_heads),
              Field(f"{arch}.attention.layer_norm_rms_epsilon", FLOAT32, struct.pack("<f", 1e-5)),
              Field(f"{arch}.rope.freq_base", FLOAT32, struct.pack("<f", 10000.0)),
              Field.u32(f"{arch}.vocab_size", vocab), Field.u32("tokenizer.ggml.bos_token_id", 1),
              Field.u32("tokenizer.ggml.eos_token_id", 2)] + (extra or [])
    picked = []
    for name, shape in shapes:
        qtype = next((t for s, t in (types or {}).items() if name.endswith(s)), "F32" if len(shape) == 1 else "BF16")
        picked.append((name, shape, qtype))
    infos, offset, blobs = [], 0, []
    for name, shape, qtype in picked:
        x = (1 + 0.1 * rng.standard_normal(shape)) if len(shape) == 1 else \
            rng.standard_t(5, size=shape) * (0.5 / np.sqrt(shape[-1]))
        data = _encode(x.astype(np.float32), qtype)
        info = TensorInfo(name, tuple(reversed(shape)) + (1,) * (4 - len(shape)), type_id(qtype), offset)
        assert info.nbytes == len(data)
        infos.append(info)
        blobs.append(data + bytes(-len(data) % 32))
        offset += len(blobs[-1])
    with open(path, "wb") as f:
        f.write(encode_metadata(fields, infos, 32))
        for b in blobs:
            f.write(b)
    return path


def split_gguf(src: str, parts: int, stem: str) -> str:
    """``src`` rewritten as ``parts`` files ``STEM-0000i-of-0000N.gguf`` (llama.cpp's split keys, the tensors cut in
    runs); returns the first part's path."""
    from nbquant.gguf.file import INT32, UINT16, read_gguf

    with read_gguf(src) as g:
        names = list(g.tensors)
        step = -(-len(names) // parts)
        for i in range(parts):
            fields = (list(g.fields.values()) if i == 0 else []) + [
                Field("split.no", UINT16, struct.pack("<H", i)), Field("split.count", UINT16, struct.pack("<H", parts)),
                Field("split.tensors.count", INT32, struct.pack("<i", len(names)))]
            infos, offset, data = [], 0, []
            for name in names[i * step:(i + 1) * step]:
                t = g.tensors[name]
                infos.append(TensorInfo(name, t.ne, t.type_id, offset))
                raw = bytes(g.tensor_bytes(name))
                data.append(raw + bytes(-len(raw) % 32))
                offset += len(data[-1])
            with open(f"{stem}-{i + 1:05d}-of-{parts:05d}.gguf", "wb") as f:
                f.write(encode_metadata(fields, infos, 32) + b"".join(data))
    return f"{stem}-00001-of-{parts:05d}.gguf"
