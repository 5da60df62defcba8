"""The :class:`Codec` base: one class per compressed-tensors format, registered under the format's name.

A codec turns one ``Linear`` weight into the tensors of its format and back, as compressed-tensors'
``BaseCompressor`` subclasses do (``@BaseCompressor.register(name=...)``). Each subclass holds,
together, what a format is: which weights it accepts (:meth:`Codec.check`), the tensors a
weight becomes (:meth:`Codec.entries`, which the planner writes into the shard headers before any
tensor is computed), how they are made (:meth:`Codec.quantize`) and how they decode
(:meth:`Codec.dequantize`, the decoder of the report's accuracy check, and of a compressed-tensors
checkpoint read back). A format whose weights share a step across a fused set (NVFP4's global
scale) says so with :attr:`Codec.fused` and does the step in :meth:`Codec.prepare`.

The codec of a scheme is ``codec_for(scheme)``: the class registered under ``scheme.format``,
built with the scheme (its ``QuantizationArgs``: bits, strategy, group size, symmetry).

Examples
--------
>>> from nbquant.convert.codecs import Codec, codec_for
>>> from nbquant.convert.schemes import get_scheme
>>> c = codec_for(get_scheme("W4A16"))
>>> type(c).__name__, c.format, Codec.registered()[:3]
('PackQuantized', 'pack-quantized', ['float-quantized', 'int-quantized', 'mxfp4-pack-quantized'])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import ml_dtypes
import numpy as np

import nbquant

from ..safetensors import ConvertError
from ..schemes import Scheme

__all__ = ["Codec", "Context", "WeightError", "WEIGHT_DTYPES", "codec_for", "weight_amax"]

#: The weight dtypes a codec quantizes, with nbquant's ``compute_dtype`` name.
WEIGHT_DTYPES = {np.dtype(ml_dtypes.bfloat16): "bfloat16", np.dtype(np.float16): "float16",
                 np.dtype(np.float32): "float32"}

#: One output tensor: ``(suffix, safetensors dtype, shape)``.
Entry = tuple[str, str, tuple[int, ...]]


class WeightError(ConvertError):
    """A :class:`ConvertError` about one weight, which it names (``tensor``): the caller adds the file it came from."""

    def __init__(self, tensor: str, message: str) -> None:
        super().__init__(message)
        self.tensor = tensor


@dataclass
class Context:
    """What one weight's :meth:`Codec.quantize` needs besides the weight.

    Attributes
    ----------
    name : str
        The tensor's name, for error messages.
    buffer : numpy.ndarray or None
        Contiguous uint8, at least the weight's element count: the codes are written there (a view
        of it is returned), so that a run converting many weights reuses one allocation.
    prepared : object
        What :meth:`Codec.prepare` gave this weight (None: the codec works it out from the weight alone).
    """

    name: str = "weight"
    buffer: np.ndarray | None = None
    prepared: Any = None

    def view(self, dtype, shape: tuple[int, ...]) -> np.ndarray | None:
        """The start of the buffer as an array of ``dtype`` and ``shape`` (None without a buffer)."""
        if self.buffer is None:
            return None
        return self.buffer[:math.prod(shape) * np.dtype(dtype).itemsize].view(dtype).reshape(shape)


class Codec:
    """One compressed-tensors format: the checks, tensors, encoder and decoder of a ``Linear`` weight.

    Subclasses register under their format's name with ``@Codec.register("pack-quantized")`` and
    are built with the :class:`~nbquant.convert.schemes.Scheme` whose weights they write. A family
    of codecs for another container (GGUF's ggml types) is a subclass declaring its own
    ``_registry = {}``: its ``register`` and ``get`` then keep to that family's names.

    Parameters
    ----------
    scheme : Scheme
        The preset (its ``format`` is this codec's).

    Examples
    --------
    >>> import numpy as np
    >>> from nbquant.convert.schemes import get_scheme
    >>> c = codec_for(get_scheme("FP8_DYNAMIC"))
    >>> c.entries((4, 64), np.dtype(np.float16))
    [('weight', 'F8_E4M3', (4, 64)), ('weight_scale', 'F16', (4, 1))]
    """

    #: The compressed-tensors format name (set by :meth:`register`).
    format: ClassVar[str] = ""
    #: True when the weights of a fused set (q/k/v, gate/up) share a step: :meth:`prepare` gets each set whole.
    fused: ClassVar[bool] = False
    _registry: ClassVar[dict[str, type[Codec]]] = {}

    def __init__(self, scheme: Scheme) -> None:
        self.scheme = scheme

    @classmethod
    def register(cls, name: str) -> Callable[[type[Codec]], type[Codec]]:
        """A class decorator filing a subclass under the compressed-tensors format ``name``."""
        def add(sub: type[Codec]) -> type[Codec]:
            if name in cls._registry:
                raise ValueError(f"format {name!r} has a codec already: {cls._registry[name].__name__}")
            sub.format = name
            cls._registry[name] = sub
            return sub
        return add

    @classmethod
    def get(cls, name: str) -> type[Codec]:
        """The codec class of the format ``name``; :class:`ConvertError` naming the registered ones otherwise."""
        try:
            return cls._registry[name]
        except KeyError:
            raise ConvertError(f"format {name!r} has no codec; known formats: "
                               f"{', '.join(cls.registered())}") from None

    @classmethod
    def registered(cls) -> list[str]:
        """The format names that have a codec, sorted."""
        return sorted(cls._registry)

    def check(self, name: str, dtype: np.dtype | str, shape: tuple[int, ...]) -> None:
        """Raise :class:`ConvertError` (naming ``name`` and the rule) if this codec cannot quantize the weight.

        ``dtype`` is a str where the source's dtype has no NumPy type (it is then refused).
        """
        if not isinstance(dtype, np.dtype) or dtype not in WEIGHT_DTYPES:
            raise ConvertError(f"tensor {name}: dtype {dtype} is not supported for {self.scheme.name} (weights must "
                               "be bfloat16, float16 or float32); exclude it with --ignore")
        if len(shape) != 2:
            raise ConvertError(f"tensor {name}: expected a 2-D Linear weight, got shape {tuple(shape)}; exclude it "
                               "with --ignore")
        if 0 in shape:
            raise ConvertError(f"tensor {name}: shape {tuple(shape)} is empty")
        g = self.scheme.group_size
        if g and shape[1] % g:
            raise ConvertError(f"tensor {name}: shape {tuple(shape)}: K={shape[1]} is not a multiple of the group "
                               f"size {g} of {self.scheme.name}; exclude it with --ignore")

    def entries(self, shape: tuple[int, int], dtype: np.dtype) -> list[Entry]:
        """``(suffix, safetensors dtype, shape)`` of each tensor a weight of ``shape`` and ``dtype`` becomes.

        The order is the order :meth:`quantize` returns them in.
        """
        raise NotImplementedError(f"{type(self).__name__}.entries")

    def prepare(self, group: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """The step the weights of one fused set share (only called when :attr:`fused`): name → ``Context.prepared``.

        ``group`` maps each quantized member of a complete set to its weight; an error names the
        member with :class:`WeightError`. The base class shares nothing.
        """
        return {}

    def quantize(self, x: np.ndarray, ctx: Context) -> dict[str, np.ndarray]:
        """The tensors (by suffix, in :meth:`entries` order) weight ``x`` becomes; ``x`` passed :meth:`check`."""
        raise NotImplementedError(f"{type(self).__name__}.quantize")

    def dequantize(self, tensors: Mapping[str, np.ndarray], dtype: np.dtype,
                   rows: slice = slice(None)) -> np.ndarray:
        """Rows ``rows`` of the weight, decoded from its tensors (by suffix) to ``dtype`` as compressed-tensors does."""
        raise NotImplementedError(f"{type(self).__name__}.dequantize")


def codec_for(scheme: Scheme) -> Codec:
    """The codec of ``scheme``: the class registered under ``scheme.format``, built with ``scheme``.

    Examples
    --------
    >>> from nbquant.convert.schemes import get_scheme
    >>> type(codec_for(get_scheme("NVFP4A16"))).__name__
    'NVFP4PackQuantized'
    """
    return Codec.get(scheme.format)(scheme)


# --- helpers the codecs share --------------------------------------------------------------------------------


def in_dtype(h: np.dtype, a) -> np.ndarray:
    """``a`` rounded to ``h`` (through float32): a constant or a float32 grid as the weight's dtype sees it."""
    return np.asarray(a, dtype=np.float32).astype(h)


def eps_of(h: np.dtype) -> np.ndarray:
    """``eps(h)`` as an ``h`` value: the scale compressed-tensors puts where a scale would be 0."""
    return in_dtype(h, ml_dtypes.finfo(h).eps)


def weight_amax(name: str, x: np.ndarray, block_size) -> np.ndarray:
    """``max |x|`` per block (float32); :class:`WeightError` naming ``name`` if the weight holds NaN or inf."""
    a = nbquant.reduce_amax(x, block_size=block_size)
    if not np.isfinite(a).all():
        raise non_finite(name, "exclude it with --ignore")
    return a


def non_finite(name: str, hint: str | None = None) -> WeightError:
    """The error of a weight holding NaN or inf."""
    tail = f" ({hint})" if hint else ""
    return WeightError(name, f"tensor {name} holds NaN or inf; a checkpoint to quantize must be finite{tail}")
