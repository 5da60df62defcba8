"""The options of ``nbquant convert`` on GGUF files checked and parsed as llama-quantize parses them.

Each function takes the value as :func:`nbquant.convert.gguf.convert_gguf` gets it and returns it
parsed, or raises :class:`~nbquant.convert.ConvertError` with one line naming the option, the
value and what is allowed.

Examples
--------
>>> kv_overrides(["general.name=str:mine", "x.n=int:-3"])[1].value
3
>>> prune_list("5,2,5")
[2, 5]
"""

from __future__ import annotations

import re

import numpy as np

from nbquant import gguf
from nbquant.gguf.file import BOOL, FLOAT32, Field
from nbquant.gguf.policy import ALIASES, SCHEMES

from ..safetensors import ConvertError

__all__ = ["FLOAT_TYPES", "check_options", "check_type", "kv_overrides", "prune_list", "set_field", "tensor_types"]

#: The float types a tensor may be written in besides the quantized ones.
FLOAT_TYPES = ("F32", "F16", "BF16")


def check_type(flag: str, value, qtype) -> str:
    """``qtype``'s upper-case name, or one line naming ``flag``, its ``value`` and the types nbquant writes."""
    name = str(qtype).upper()
    if name not in gguf.implemented_formats() + FLOAT_TYPES:
        raise ConvertError(f"{flag} {value!r}: the type {qtype!r} is not one nbquant writes "
                           f"({', '.join(gguf.implemented_formats())}, {', '.join(FLOAT_TYPES)})")
    return name


def tensor_types(values) -> tuple[tuple[re.Pattern, str], ...]:
    """``--tensor-type PATTERN=TYPE`` values as llama-quantize parses them: split at the first ``=``, the pattern
    lowercased, the type's name in any case."""
    if values is None:
        return ()
    if isinstance(values, str):
        raise ConvertError(f"--tensor-type {values!r}: give a list of PATTERN=TYPE strings")
    out = []
    for value in values:
        pattern, sep, qtype = str(value).partition("=")
        if not sep or not pattern or not qtype:
            raise ConvertError(f"--tensor-type {value!r}: expected PATTERN=TYPE (a regular expression searched in "
                               "tensor names, e.g. attn_q=Q8_0), with a pattern and a type")
        try:
            compiled = re.compile(pattern.lower())
        except re.error as e:
            raise ConvertError(f"--tensor-type {value!r}: the pattern is not a regular expression: {e}") from None
        out.append((compiled, check_type("--tensor-type", value, qtype)))
    return tuple(out)


_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)", re.IGNORECASE)


def kv_overrides(values) -> list[Field]:
    """``--override-kv KEY=TYPE:VALUE`` values as the fields llama-quantize writes: ``int`` as u32 of the absolute
    value, ``float`` as f32, ``bool`` (``true``/``false``), ``str`` (at most 127 bytes); keys under 128 bytes."""
    if values is None:
        return []
    if isinstance(values, str):
        raise ConvertError(f"--override-kv {values!r}: give a list of KEY=TYPE:VALUE strings")
    out = []
    for value in values:
        key, sep, typed = str(value).partition("=")
        kind, colon, text = typed.partition(":")
        bad = None
        if not sep or not key or len(key.encode()) >= 128:
            bad = "expected KEY=TYPE:VALUE with a key of 1 to 127 bytes"
        elif key == "general.alignment":
            bad = "general.alignment cannot be overridden (it sets the file's padding)"
        elif not colon or kind not in ("int", "float", "bool", "str"):
            bad = "TYPE must be int, float, bool or str (KEY=TYPE:VALUE)"
        elif kind == "int" and not (_INT.fullmatch(text) and abs(int(text)) <= 0xFFFFFFFF):
            bad = "an int VALUE is a decimal integer of absolute value below 2**32 (written as u32 of |VALUE|)"
        elif kind == "float" and not _FLOAT.fullmatch(text):
            bad = "a float VALUE is a decimal number, inf or nan (written as f32)"
        elif kind == "bool" and text not in ("true", "false"):
            bad = "a bool VALUE is true or false"
        elif kind == "str" and len(text.encode()) > 127:
            bad = "a str VALUE has at most 127 bytes"
        if bad is not None:
            raise ConvertError(f"--override-kv {value!r}: {bad}")
        if kind == "int":
            out.append(Field.u32(key, abs(int(text))))
        elif kind == "float":
            with np.errstate(over="ignore"):
                out.append(Field(key, FLOAT32, np.float64(float(text)).astype("<f4").tobytes()))
        elif kind == "bool":
            out.append(Field(key, BOOL, bytes([text == "true"])))
        else:
            out.append(Field.string(key, text))
    return out


def prune_list(value) -> list[int]:
    """``--prune-layers L0,L1,...`` (a string, or a sequence of ints) as a sorted list without repeats."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        text = str(item).strip()
        if isinstance(item, bool) or not text.isascii() or not text.isdigit():
            raise ConvertError(f"--prune-layers {value!r}: expected layer numbers (integers >= 0) separated by "
                               f"commas, e.g. 3,4; {item!r} is not one")
        out.append(int(text))
    if not out:
        raise ConvertError(f"--prune-layers {value!r}: expected at least one layer number")
    return sorted(set(out))


def set_field(fields: list[Field], field: Field) -> None:
    """``gguf_set_val_*``: the key removed where it is, then appended."""
    fields[:] = [f for f in fields if f.key != field.key] + [field]


def check_options(scheme: str, output_tensor_type, token_embedding_type) -> str:
    """The scheme's canonical name (llama-quantize's aliases resolved), the two type options checked."""
    scheme = ALIASES.get(str(scheme).upper(), str(scheme).upper())
    if scheme not in SCHEMES:
        raise ConvertError(f"scheme {scheme!r} is not a GGUF scheme; choose one of {', '.join(SCHEMES)}")
    for flag, value in (("--output-tensor-type", output_tensor_type),
                        ("--token-embedding-type", token_embedding_type)):
        if value is not None:
            check_type(flag, value, value)
    return scheme
