"""A small synthetic Llama-shaped GGUF file (BF16 weights, F32 norms) for the demo, the docs and the tests.

Examples
--------
>>> import os, tempfile
>>> from nbquant.gguf.file import read_gguf
>>> path = write_synthetic_gguf(os.path.join(tempfile.mkdtemp(), "m.gguf"), hidden=64, intermediate=128, layers=1,
...                             vocab=32)
>>> with read_gguf(path) as g:
...     g.value("general.architecture"), len(g.tensors), g.tensors["blk.0.attn_k.weight"].shape
('llama', 12, (16, 64))
"""

from __future__ import annotations

import os
import struct

import numpy as np

from nbquant.gguf.file import FLOAT32, Field, TensorInfo, encode_metadata, type_id

__all__ = ["write_synthetic_gguf"]


def _bf16(x: np.ndarray) -> bytes:
    u = x.astype(np.float32).view(np.uint32)
    return ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype("<u2").tobytes()


def write_synthetic_gguf(path: str | os.PathLike, hidden: int = 2048, intermediate: int = 5632, layers: int = 4,
                         vocab: int = 32000, heads: int = 16, kv_heads: int = 4, arch: str = "llama",
                         seed: int = 0) -> str:
    """Write a Llama-shaped GGUF file of random BF16 weights (heavy-tailed, like trained ones) to ``path``.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write.
    hidden, intermediate, layers, vocab, heads, kv_heads : int
        The model's sizes (``hidden`` a multiple of ``heads``, ``heads`` of ``kv_heads``).
    arch : str
        ``general.architecture`` (the keys are ``{arch}.*``).
    seed : int
        The random generator's seed.

    Returns
    -------
    str
        ``path``.
    """
    path = os.fspath(path)
    rng = np.random.default_rng(seed)
    kv = hidden // heads * kv_heads
    shapes = [("token_embd.weight", (vocab, hidden))]
    for i in range(layers):
        shapes += [(f"blk.{i}.attn_norm.weight", (hidden,)), (f"blk.{i}.attn_q.weight", (hidden, hidden)),
                   (f"blk.{i}.attn_k.weight", (kv, hidden)), (f"blk.{i}.attn_v.weight", (kv, hidden)),
                   (f"blk.{i}.attn_output.weight", (hidden, hidden)), (f"blk.{i}.ffn_norm.weight", (hidden,)),
                   (f"blk.{i}.ffn_gate.weight", (intermediate, hidden)),
                   (f"blk.{i}.ffn_up.weight", (intermediate, hidden)),
                   (f"blk.{i}.ffn_down.weight", (hidden, intermediate))]
    shapes += [("output_norm.weight", (hidden,)), ("output.weight", (vocab, hidden))]
    fields = [Field.string("general.architecture", arch), Field.string("general.name", "nbquant synthetic"),
              Field.u32(f"{arch}.context_length", 2048), Field.u32(f"{arch}.embedding_length", hidden),
              Field.u32(f"{arch}.block_count", layers), Field.u32(f"{arch}.feed_forward_length", intermediate),
              Field.u32(f"{arch}.attention.head_count", heads), Field.u32(f"{arch}.attention.head_count_kv", kv_heads),
              Field(f"{arch}.attention.layer_norm_rms_epsilon", FLOAT32, struct.pack("<f", 1e-5))]
    infos, offset = [], 0
    for name, shape in shapes:
        info = TensorInfo(name, tuple(reversed(shape)) + (1,) * (4 - len(shape)),
                          type_id("F32" if len(shape) == 1 else "BF16"), offset)
        infos.append(info)
        offset += info.nbytes + (-info.nbytes % 32)
    with open(path, "wb") as f:
        f.write(encode_metadata(fields, infos, 32))
        for _, shape in shapes:
            if len(shape) == 1:
                data = (1 + 0.1 * rng.standard_normal(shape)).astype("<f4").tobytes()
            else:
                data = _bf16(rng.standard_t(5, size=shape).astype(np.float32) * (0.5 / np.sqrt(shape[1])))
            f.write(data + bytes(-len(data) % 32))
    return path
