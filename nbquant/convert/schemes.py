"""The compressed-tensors preset schemes ``nbquant convert`` writes, and the ``quantization_config`` of each.

Each :class:`Scheme` records what the weight quantization of a compressed-tensors 0.19 preset
is (``QuantizationScheme`` of ``preset_name_to_scheme``), the format its compressor writes
(``infer_module_format``: ``pack-quantized``, ``int-quantized``, ``float-quantized``,
``nvfp4-pack-quantized``, ``mxfp4-pack-quantized``, ``mxfp8-quantized``) and the
``QuantizationArgs`` dumps that go into ``config.json``. Activation arguments are written
to the config only: ``model_free_ptq`` quantizes weights, and accepts a preset only when its
activations are quantized dynamically (``W8A8`` yes, ``FP8`` and ``NVFP4`` no).

Examples
--------
>>> from nbquant.convert.schemes import get_scheme
>>> s = get_scheme("w4a16")
>>> s.name, s.kind, s.bits, s.group_size, s.format
('W4A16', 'int', 4, 128, 'pack-quantized')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .safetensors import ConvertError

__all__ = ["Scheme", "SCHEMES", "DENSE", "UNSUPPORTED", "get_scheme", "quantization_config", "FORMAT_VERSION"]

#: The compressed-tensors release whose format (tensor names, dtypes, packing, config) is written, and which goes
#: into ``quantization_config["version"]``.
FORMAT_VERSION = "0.19.0"


def _args(num_bits: int, type_: str, strategy: str, *, symmetric: bool = True, group_size: int | None = None,
          block_structure: list[int] | None = None, dynamic: bool = False, scale_dtype: str | None = None,
          zp_dtype: str | None = None) -> dict[str, Any]:
    """A ``QuantizationArgs.model_dump()`` (``zp_dtype`` is written only for asymmetric args)."""
    return {"actorder": None, "block_structure": block_structure, "dynamic": dynamic, "group_size": group_size,
            "num_bits": num_bits, "observer": None, "observer_kwargs": {}, "scale_dtype": scale_dtype,
            "strategy": strategy, "symmetric": symmetric, "type": type_,
            "zp_dtype": None if symmetric else zp_dtype}


@dataclass(frozen=True)
class Scheme:
    """How one preset quantizes a ``Linear`` weight of shape ``(N, K)``, and what it writes.

    Attributes
    ----------
    name : str
        The preset name, upper case (``"W4A16"``).
    kind : {"int", "fp8", "nvfp4", "mx"}
        Integer codes with a scale per group or channel (and a zero point if asymmetric);
        E4M3 codes with a scale per channel or 128 x 128 block; NVFP4 (e2m1, E4M3 group
        scales, a float32 global scale); MX (e2m1 or E4M3 elements, E8M0 scales per 32).
    bits : int
        Bits per weight code.
    strategy : str
        ``"group"``, ``"channel"``, ``"block"`` or ``"tensor_group"``.
    group_size : int or None
        Weights per scale along K (group strategies).
    symmetric : bool
        False: a zero point per group (``W4A16_ASYM``).
    packed : bool
        Codes packed densely into int32 words (``pack-quantized``), else one per byte.
    format : str
        The compressed-tensors format name.
    weights, input_activations : dict
        The ``QuantizationArgs`` dumps for the config (``input_activations`` may be None).
    """

    name: str
    kind: str
    bits: int
    strategy: str
    format: str
    weights: dict[str, Any]
    group_size: int | None = None
    symmetric: bool = True
    packed: bool = False
    input_activations: dict[str, Any] | None = field(default=None)

    @property
    def block(self) -> tuple[int, int] | None:
        """The ``(rows, columns)`` of a block strategy's blocks."""
        b = self.weights["block_structure"]
        return (b[0], b[1]) if b else None

    def config_group(self) -> dict[str, Any]:
        """The ``config_groups`` entry (``QuantizationScheme.model_dump()``, format filled in as compression does)."""
        return {"format": self.format, "input_activations": self.input_activations, "output_activations": None,
                "targets": ["Linear"], "weights": self.weights}


def _int(name: str, bits: int, act_bits: int | None, *, act_type: str = "int") -> Scheme:
    """``_int_wnam``: symmetric ``bits``-bit groups of 128; A16 presets pack, others store one int8 per weight."""
    act = None if act_bits is None else _args(act_bits, act_type, "token", dynamic=True)
    packed = act is None
    if packed and bits not in (2, 4, 8):
        raise AssertionError(bits)
    return Scheme(name, "int", bits, "group", "pack-quantized" if packed else "int-quantized",
                  _args(bits, "int", "group", group_size=128), 128, True, packed, act)


def _mx(name: str, bits: int, dynamic_input: bool) -> Scheme:
    act = _args(bits, "float", "group", group_size=32, dynamic=True, scale_dtype="torch.uint8") \
        if dynamic_input else None
    fmt = "mxfp4-pack-quantized" if bits == 4 else "mxfp8-quantized"
    return Scheme(name, "mx", bits, "group", fmt,
                  _args(bits, "float", "group", group_size=32, scale_dtype="torch.uint8"), 32, True, bits == 4, act)


def _table() -> dict[str, Scheme]:
    s = [
        _int("W2A16", 2, None), _int("W4A16", 4, None), _int("W8A16", 8, None),
        Scheme("W4A16_ASYM", "int", 4, "group", "pack-quantized",
               _args(4, "int", "group", symmetric=False, group_size=128, zp_dtype="torch.int8"), 128, False, True),
        _int("W2A4", 2, 4), _int("W2A8", 2, 8), _int("W3A4", 3, 4), _int("W3A8", 3, 8), _int("W4A4", 4, 4),
        _int("W4A8", 4, 8), _int("W5A8", 5, 8), _int("W6A8", 6, 8), _int("W7A8", 7, 8),
        _int("W4AFP8", 4, 8, act_type="float"),
        Scheme("W8A8", "int", 8, "channel", "int-quantized", _args(8, "int", "channel"),
               input_activations=_args(8, "int", "token", dynamic=True)),
        Scheme("FP8_DYNAMIC", "fp8", 8, "channel", "float-quantized", _args(8, "float", "channel"),
               input_activations=_args(8, "float", "token", dynamic=True)),
        Scheme("FP8_BLOCK", "fp8", 8, "block", "float-quantized",
               _args(8, "float", "block", block_structure=[128, 128]),
               input_activations=_args(8, "float", "group", group_size=128, dynamic=True)),
        Scheme("NVFP4A16", "nvfp4", 4, "tensor_group", "nvfp4-pack-quantized",
               _args(4, "float", "tensor_group", group_size=16, scale_dtype="torch.float8_e4m3fn"), 16, True, True),
        _mx("MXFP4A16", 4, False), _mx("MXFP4", 4, True), _mx("MXFP8A16", 8, False), _mx("MXFP8", 8, True),
    ]
    table = {scheme.name: scheme for scheme in s}
    table["INT8"] = Scheme("INT8", *[getattr(table["W8A8"], f) for f in
                                     ("kind", "bits", "strategy", "format", "weights", "group_size", "symmetric",
                                      "packed", "input_activations")])
    return table


#: The presets ``nbquant convert`` writes, by name.
SCHEMES: dict[str, Scheme] = _table()

#: The plain targets of a quantized source (``nbquant convert`` dequantizes: :mod:`nbquant.convert.sources`).
DENSE: dict[str, Scheme] = {n: Scheme(n, "dense", b, "none", "dense", {}) for n, b in
                            (("BF16", 16), ("F16", 16), ("F32", 32))}

#: Presets of compressed-tensors that are not written, and why.
UNSUPPORTED: dict[str, str] = {
    **{f"W{b}A16": f"{b}-bit codes packed across int32 words are not implemented (use W2A16, W4A16 or W8A16)"
       for b in (3, 5, 6, 7)},
    "FP8": "its input activations are static: model_free_ptq cannot calibrate them either (use FP8_DYNAMIC)",
    "NVFP4": "its input activations need a calibrated global scale: model_free_ptq cannot calibrate them "
             "either (use NVFP4A16)",
    "UNQUANTIZED": "it quantizes nothing",
}


def get_scheme(name: str) -> Scheme:
    """The :class:`Scheme` of a preset name (any case); :class:`ConvertError` naming the choices otherwise.

    Examples
    --------
    >>> get_scheme("fp8_block").block
    (128, 128)
    >>> get_scheme("W3A16")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    nbquant.convert.safetensors.ConvertError: scheme W3A16 is not supported: 3-bit codes packed across ...
    """
    key = str(name).upper()
    if key in SCHEMES:
        return SCHEMES[key]
    if key in DENSE:
        return DENSE[key]
    if key in UNSUPPORTED:
        raise ConvertError(f"scheme {key} is not supported: {UNSUPPORTED[key]}")
    raise ConvertError(f"unknown scheme {name!r}; choose one of {', '.join(SCHEMES)} (or, for a quantized "
                       "source, BF16, F16, F32)")


def quantization_config(group_name: str, scheme: Scheme, ignore: list[str], quantized: bool) -> dict[str, Any]:
    """The ``quantization_config`` of ``config.json``, as ``model_free_ptq`` writes it.

    ``group_name`` is the scheme name as the caller spelled it (the config group's key);
    ``quantized`` is False when no tensor was quantized (the format stays unset: ``"dense"``).

    Examples
    --------
    >>> c = quantization_config("W4A16", get_scheme("W4A16"), ["lm_head"], True)
    >>> c["format"], c["ignore"], c["config_groups"]["W4A16"]["weights"]["group_size"]
    ('pack-quantized', ['lm_head'], 128)
    """
    group = scheme.config_group()
    if not quantized:
        group = {**group, "format": None}
    return {
        "version": FORMAT_VERSION,
        "quant_method": "compressed-tensors",
        "transform_config": {},
        "config_groups": {group_name: group},
        "format": scheme.format if quantized else "dense",
        "global_compression_ratio": None,
        "ignore": list(ignore),
        "kv_cache_scheme": None,
        "quantization_status": "compressed",
    }
