"""The block-format descriptor: :class:`BlockFormat`, its registry, and the registry of its kernels.

A block format cuts the input along one axis into blocks of ``block_size`` values and
turns each block into a fixed number of items of one or more output tensors (codes,
scales, or one packed byte record per block, as GGUF stores them). A subclass declares
that; it registers itself under its ``name`` when it is defined (as gguf-py's quant
types do), so nothing central is edited for a new format. Kernels register per target
with :func:`block_kernel`. This module imports neither numba nor the backends.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..validation import check_int

__all__ = ["BlockFormat", "BlockSpec", "Tensor", "NoParams", "get_block_format", "block_format_names", "block_kernel",
           "find_kernel", "BlockKernelOps", "import_kernel_modules"]

_FORMATS: dict[str, BlockFormat] = {}
_KERNELS: dict[tuple[str, str, str], Callable] = {}


@dataclass(frozen=True)
class Tensor:
    """One array a block format stores per block.

    Along the blocked axis it holds ``per_block`` items of ``dtype`` per block (the other
    axes as the input's); ``view`` is the public dtype of the same itemsize the front door
    shows it as (an ml_dtypes scale type), if any. ``dtype`` is what the kernels write.

    Examples
    --------
    >>> Tensor("scales", np.dtype(np.uint8), 1).shape((4, 64), 1, 32)
    (4, 2)
    """

    name: str
    dtype: np.dtype
    per_block: int
    view: Any = None

    def shape(self, shape: tuple[int, ...], axis: int, block_size: int) -> tuple[int, ...]:
        """The tensor's shape for an input of ``shape`` blocked by ``block_size`` along ``axis``."""
        return shape[:axis] + (shape[axis] // block_size * self.per_block,) + shape[axis + 1:]

    @property
    def public_dtype(self) -> np.dtype:
        """The dtype the front door shows (``view``, else ``dtype``)."""
        return np.dtype(self.dtype if self.view is None else self.view)


@dataclass(frozen=True)
class NoParams:
    """The parameters of a format that has none."""


class BlockFormat:
    """A block format: geometry, output tensors and parameters, registered by name when subclassed.

    Subclass it with ``name=`` (and, for several formats sharing kernels, ``family=``) and
    declare:

    * ``block_size``: the default block length; ``block_sizes``: the only ones allowed
      (None: any positive multiple of :meth:`block_multiple`, e.g. 2 for nibble-packed codes);
    * ``Params``: a frozen dataclass of the format's per-call parameters (default: none),
      with defaults for everything a caller may omit;
    * :meth:`tensors`: the arrays one block becomes, for a :class:`BlockSpec`.

    It may override :meth:`prepare` (parameters computed from the input, e.g. NVFP4's global
    scale) and :meth:`block_multiple`. The instance in the registry (:func:`get_block_format`)
    is the one every spec carries; kernels register apart (:func:`block_kernel`).

    Examples
    --------
    >>> fmt = get_block_format("mxfp4")
    >>> fmt.block_size, fmt.bytes_per_block(), fmt.bits_per_weight()
    (32, 17, 4.25)
    """

    name: ClassVar[str]
    family: ClassVar[str]
    block_size: ClassVar[int]
    block_sizes: ClassVar[tuple[int, ...] | None] = None
    Params: ClassVar[type] = NoParams

    def __init_subclass__(cls, name: str | None = None, family: str | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if family is not None:
            cls.family = family
        if name is None:
            return
        if name in _FORMATS:
            raise ValueError(f"block format {name!r} is registered twice ({type(_FORMATS[name]).__qualname__} and "
                             f"{cls.__qualname__})")
        cls.name = name
        if not hasattr(cls, "family"):
            cls.family = name
        _FORMATS[name] = cls()

    def __repr__(self) -> str:
        return f"<block format {self.name!r}>"

    def tensors(self, spec) -> tuple[Tensor, ...]:
        """The arrays one call stores, in order (the kernels' outputs and the dequantize inputs)."""
        raise NotImplementedError(f"{type(self).__qualname__} declares no tensors")

    def prepare(self, x, params, impl):
        """The parameters of a quantize call once the input is known (default: ``params`` unchanged).

        ``x`` is the whole input and ``impl`` the backend. For a dask ``x``, ``impl`` offers
        the whole-array reductions (``amax``) as dask arrays, and a parameter may be a dask
        value (computed before the chunks run); each chunk then sees it prepared.
        """
        return params

    def block_multiple(self, params) -> int:
        """What every block length must be a multiple of with ``params`` (2 for codes packed two per byte)."""
        return 1

    def check_block_size(self, block_size, params=None) -> int:
        """``block_size`` as an int, or a ValueError naming what this format allows."""
        b = check_int("block_size", block_size)
        m = self.block_multiple(self.default_params() if params is None else params)
        if self.block_sizes is not None:
            if b not in self.block_sizes:
                raise ValueError(f"block_size={b} is not one of {self.name}'s {self.block_sizes}")
        elif b < 1 or b % m:
            kind = {1: " integer", 2: " even integer"}.get(m, f" integer multiple of {m}")
            raise ValueError(f"block_size={b} must be a positive{kind}")
        return b

    def default_params(self):
        """The parameters a call with none given uses."""
        return self.Params()

    def spec(self, block_size: int | None = None, params=None, out_dtype=np.float32):
        """A :class:`BlockSpec` of this format (``block_size`` and ``params`` unchecked)."""
        b = self.block_size if block_size is None else block_size
        return BlockSpec(self, b, self.default_params() if params is None else params, np.dtype(out_dtype))

    def bytes_per_block(self, block_size: int | None = None, params=None) -> int:
        """Bytes one block takes in all its tensors (with the default parameters unless given)."""
        spec = self.spec(block_size, params)
        return sum(t.per_block * np.dtype(t.dtype).itemsize for t in self.tensors(spec))

    def bits_per_weight(self, block_size: int | None = None, params=None) -> float:
        """Stored bits per input value (per-tensor parameters such as a global scale not counted)."""
        spec = self.spec(block_size, params)
        return 8 * self.bytes_per_block(spec.block_size, params) / spec.block_size


@dataclass(frozen=True)
class BlockSpec:
    """A block-format kernel call on (rows, n) arrays with blocks of ``block_size`` along the last axis.

    ``format`` is the registered :class:`BlockFormat` (its geometry, its tensors);
    ``params`` is that format's own frozen ``Params`` (MX: packing and scale rounding,
    NVFP4: the global scale, ...); ``out_dtype`` is a dequantize's output dtype.
    """

    format: BlockFormat
    block_size: int
    params: Any
    out_dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float32))

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """The format's tensors for this call."""
        return self.format.tensors(self)


def get_block_format(name: str) -> BlockFormat:
    """The registered block format called ``name``.

    Examples
    --------
    >>> get_block_format("nvfp4").block_size
    16
    """
    try:
        return _FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown block format {name!r}; registered: {', '.join(sorted(_FORMATS))}") from None


def block_format_names() -> tuple[str, ...]:
    """The names of every registered block format, in registration order."""
    return tuple(_FORMATS)


def block_kernel(target: str, family: str, op: str):
    """Register the ``op`` (``"quantize"`` or ``"dequantize"``) kernel of a format family on one backend.

    The decorated function takes ``(x, spec, tensors)`` (quantize: fill ``tensors``) or
    ``(tensors, spec, out)`` (dequantize: fill ``out``), all (rows, items) arrays with the
    blocks along the last axis, as :meth:`~nbquant.backends.interface.Backend.block_quantize`
    passes them. It lives in the target's ``blocks.py`` or in a ``blocks_<family>.py``
    module beside it (found by :func:`import_kernel_modules`).
    """
    def register(fn: Callable) -> Callable:
        key = (target, family, op)
        if key in _KERNELS:
            raise ValueError(f"a {op} kernel of block family {family!r} is registered twice on {target}")
        _KERNELS[key] = fn
        return fn

    return register


def find_kernel(target: str, fmt: BlockFormat, op: str) -> Callable:
    """The ``op`` kernel of ``fmt``'s family on ``target``, or a NotImplementedError naming what is missing."""
    try:
        return _KERNELS[(target, fmt.family, op)]
    except KeyError:
        raise NotImplementedError(
            f"the {target} backend has no {op} kernel for block format {fmt.name!r}: register one with "
            f"@block_kernel({target!r}, {fmt.family!r}, {op!r}) in nbquant/backends/{target}/blocks_{fmt.family}.py"
        ) from None


class BlockKernelOps:
    """A backend's generic block entry points: each runs the kernel of ``spec.format`` registered for ``target``.

    A backend's ``BlockOps`` subclasses it and sets ``target`` (``"reference"``, ``"cpu"``,
    ``"cuda"``); the kernels are registered with :func:`block_kernel`.
    """

    target: str = ""

    def block_quantize(self, x, spec, outputs) -> None:
        """Quantize ``x`` into ``outputs`` with the ``target`` quantize kernel of ``spec.format``."""
        find_kernel(self.target, spec.format, "quantize")(x, spec, outputs)

    def block_dequantize(self, inputs, spec, out) -> None:
        """Dequantize ``inputs`` into ``out`` with the ``target`` dequantize kernel of ``spec.format``."""
        find_kernel(self.target, spec.format, "dequantize")(inputs, spec, out)


def import_kernel_modules(package: str) -> None:
    """Import every ``blocks_*`` module of the backend ``package`` (each registers its formats' kernels)."""
    for module in pkgutil.iter_modules(sys.modules[package].__path__):
        if module.name.startswith("blocks_"):
            importlib.import_module(f"{package}.{module.name}")
