"""gpt-oss checkpoints (``quant_method: "mxfp4"``): the MoE experts' MXFP4 blocks, decoded as transformers does.

openai/gpt-oss-20b and -120b store the experts of each layer as
``<layer>.mlp.experts.{gate_up_proj,down_proj}_blocks`` (uint8 ``[E, R, K/32, 16]``: e2m1 codes,
two a byte, low nibble first) and ``..._scales`` (uint8 ``[E, R, K/32]``: E8M0 exponents biased by
127), beside a plain ``..._bias``; every other tensor (``modules_to_not_convert``) is plain.
Decoded as transformers' ``convert_moe_packed_tensors``: each element ``e2m1(code) * 2**(scale - 127)``
rounded once to the target dtype, each expert's ``[R, K]`` transposed, the tensor named without
``_blocks``: ``gate_up_proj`` ``[E, H, 2I]`` and ``down_proj`` ``[E, I, H]``, the checkpoint
transformers' ``GptOssForCausalLM`` loads unquantized. The numbers are the MXFP4 codec's
(:class:`~nbquant.convert.codecs.floating.MXFP4PackQuantized`), expert by expert. Scale 255, NaN in
OCP MX, is ``2**128`` as ``torch.ldexp`` takes it: ``±0`` stays ``±0``, ``±0.5`` is ``±2**127``,
larger codes are ``±inf``.

Only BF16, F16 and F32 targets read these checkpoints: the fused ``gate_up_proj`` is transposed
and its gate and up rows interleaved, which compressed-tensors' MoE split does not read.

Examples
--------
>>> import numpy as np, ml_dtypes
>>> blocks = np.array([0x21, 0xA9] + [0] * 14, np.uint8).reshape(1, 1, 1, 16)
>>> decode_experts(blocks, np.array([[[128]]], np.uint8), np.float32)[0, :4, 0].tolist()
[1.0, 2.0, -1.0, -2.0]
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import numpy as np

from ..codecs import Codec, codec_for
from ..safetensors import ConvertError, SafetensorsFile, TensorEntry, dtype_name
from ..schemes import Scheme, get_scheme

__all__ = ["ExpertsFormat", "decode_experts", "gptoss_experts"]

#: The fused expert tensors stored as MXFP4 blocks.
PROJECTIONS = ("gate_up_proj", "down_proj")
_PAIR = ("_blocks", "_scales")


@cache
def _mxfp4() -> Codec:
    return codec_for(get_scheme("MXFP4A16"))


def decode_experts(blocks: np.ndarray, scales: np.ndarray, dtype: np.dtype,
                   experts: slice = slice(None)) -> np.ndarray:
    """The experts ``experts`` of a gpt-oss ``*_blocks`` / ``*_scales`` pair, decoded to ``dtype``: ``[e, K, R]``.

    Expert by expert, by the MXFP4 codec (codes low nibble first, scale ``2**(s - 127)``); an
    expert holding scale 255 is decoded in float32 with ``2**127`` and those groups doubled
    (exact, or inf), then rounded to ``dtype``.

    Examples
    --------
    >>> blocks = np.array([0x7F] + [0] * 15, np.uint8).reshape(1, 1, 1, 16)
    >>> decode_experts(blocks, np.array([[[255]]], np.uint8), np.float32)[0, :2, 0].tolist()
    [-inf, inf]
    """
    e, r, g, b = blocks.shape
    h = np.dtype(dtype)
    picked = range(*experts.indices(e))
    out = np.empty((len(picked), g * b * 2, r), h)
    for j, i in enumerate(picked):
        s = np.asarray(scales[i])
        codes = np.asarray(blocks[i]).reshape(r, g * b)
        top = s == 255
        if top.any():
            w = _mxfp4().dequantize({"weight_packed": codes, "weight_scale": np.where(top, 254, s).astype(np.uint8)},
                                    np.dtype(np.float32))
            with np.errstate(over="ignore"):
                w[np.repeat(top, 32, axis=1)] *= np.float32(2)
                out[j] = w.astype(h).T
        else:
            out[j] = _mxfp4().dequantize({"weight_packed": codes, "weight_scale": s}, h).T
    return out


class ExpertsFormat:
    """How a gpt-oss fused expert tensor is stored (the :class:`~.formats.SourceFormat` a :class:`~.view.Decoded`
    reads): its tensors under ``blocks`` and ``scales``, decoded by :func:`decode_experts`, experts as rows."""

    label = "gpt-oss mxfp4 experts"

    def tensors(self, found: Mapping[str, np.ndarray], shape: tuple[int, ...]) -> dict[str, np.ndarray]:
        """The source tensors, as they are."""
        return dict(found)

    def decode(self, tensors: Mapping[str, np.ndarray], dtype: np.dtype, rows: slice = slice(None)) -> np.ndarray:
        """Experts ``rows`` decoded to ``dtype``."""
        return decode_experts(tensors["blocks"], tensors["scales"], dtype, rows)


FORMAT = ExpertsFormat()


def _shape(module: str, parts: Mapping[str, tuple[SafetensorsFile, str]], proj: str) -> tuple[int, int, int]:
    """The decoded ``[E, K, R]`` of ``proj``'s blocks and scales, checked (one-line :class:`ConvertError`)."""
    for suffix in _PAIR:
        if proj + suffix not in parts:
            raise ConvertError(f"tensor {module}.{proj}{suffix}: missing (gpt-oss mxfp4 experts store "
                               f"{proj}_blocks and {proj}_scales)")
    (bf, bn), (sf, sn) = parts[proj + "_blocks"], parts[proj + "_scales"]
    b, s = bf.entries[bn], sf.entries[sn]
    if b.dtype != "U8" or len(b.shape) != 4 or b.shape[3] != 16 or 0 in b.shape:
        raise ConvertError(f"{bf.path}: tensor {bn} has dtype {b.dtype} shape {list(b.shape)}; gpt-oss mxfp4 blocks "
                           "are U8 [experts, rows, K/32, 16]")
    if s.dtype != "U8" or tuple(s.shape) != tuple(b.shape[:3]):
        raise ConvertError(f"{sf.path}: tensor {sn} has dtype {s.dtype} shape {list(s.shape)}; the scales of "
                           f"{bn} are U8 {list(b.shape[:3])}")
    return b.shape[0], b.shape[2] * 32, b.shape[1]


def gptoss_experts(by_module: Mapping[str, Mapping[str, tuple[SafetensorsFile, str]]], qc: Mapping[str, Any],
                   target: Scheme, where: str, dtype: np.dtype) -> tuple[dict, dict, set]:
    """The decoded expert tensors of a gpt-oss checkpoint (``by_module``: module → suffix → (file, tensor)).

    Returns ``decoded`` (name → (format, parts, shape)), ``virtual`` (the blocks tensor's name →
    (decoded name, its entry in ``dtype``)) and the names of the tensors they consume. Raises
    :class:`ConvertError` (one line) for a target other than BF16/F16/F32, a checkpoint without
    MXFP4 experts, and blocks or scales of the wrong dtype or shape.
    """
    if target.kind != "dense":
        raise ConvertError(f"{where}: scheme {target.name}: a gpt-oss mxfp4 checkpoint converts to BF16, F16 or F32 "
                           "only (its fused gate_up_proj experts are stored transposed, gate and up rows "
                           "interleaved, which compressed-tensors' MoE split does not read)")
    skip = qc.get("modules_to_not_convert", [])
    if skip is not None and not (isinstance(skip, list) and all(isinstance(m, str) for m in skip)):
        raise ConvertError(f"{where}: quantization_config.modules_to_not_convert {skip!r}: expected a list of names")
    decoded: dict[str, tuple] = {}
    virtual: dict[str, tuple[str, TensorEntry]] = {}
    gone: set[str] = set()
    for module, parts in by_module.items():
        for proj in PROJECTIONS:
            if not any(proj + suffix in parts for suffix in _PAIR):
                continue
            shape = _shape(module, parts, proj)
            found = {"blocks": parts[proj + "_blocks"], "scales": parts[proj + "_scales"]}
            size = sum(f.entries[n].nbytes for f, n in found.values())
            name = f"{module}.{proj}"
            virtual[found["blocks"][1]] = (name, TensorEntry(dtype_name(dtype), shape, 0, size))
            decoded[name] = (FORMAT, found, shape)
            gone |= {n for _, n in found.values()}
    if not decoded:
        raise ConvertError(f"{where}: quant_method 'mxfp4' but no tensor *_blocks / *_scales of "
                           f"{' or '.join(PROJECTIONS)} (the MoE experts of gpt-oss)")
    return decoded, virtual, gone
