"""modelopt 0.47's ``TensorQuantizer`` on NumPy arrays: fake or real quantization, calibration, amax.

A :class:`TensorQuantizer` is built from a ``QuantDescriptor`` (:mod:`nbquant.compat.modelopt`)
or from a dict of modelopt's ``QuantizerAttributeConfig`` fields (``num_bits``, ``axis``,
``block_sizes``, ``unsigned``, ``narrow_range``, ``fake_quant``, ``enable``, ``type``,
``calibrator``, ``learn_amax``). Calling it runs modelopt's ``forward`` on the CPU:

* disabled: the input is returned as it is;
* calibrating (``enable_calib()``, static type only): the input is collected by the
  calibrator (``"max"`` or ``"histogram"``, :mod:`nbquant.compat.modelopt_calib`);
* quantizing, fake: ``fake_tensor_quant`` (integers) or ``scaled_e4m3`` (``num_bits=(4, 3)``)
  with the stored ``amax``, or without one a dynamic ``amax`` over the dims not in ``axis``
  (in the input's dtype); static ``block_sizes`` quantize blocks (``{-1: B}``) or tiles along
  several dims (``{-2: B0, -1: B1}``) of the input zero-padded to whole blocks, as
  :func:`nbquant.modelopt.fake_tensor_quant` with ``block_size=(B0, B1)``; block sizes
  that are all None mean per-channel (``axis``: the other dims); ``"type": "dynamic"`` as
  modelopt's ``dynamic_block_quant``;
* quantizing, real (``fake_quant=False``): the matching real-quantization tensor of
  :mod:`nbquant.compat.modelopt_qtensor` (INT8, FP8, INT4, NF4, NVFP4, MXFP4), whose scales
  the quantizer keeps; calling the quantizer on that tensor dequantizes it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ..modelopt import ops as modelopt_ops
from ..validation import show
from . import modelopt as _descriptors
from . import modelopt_calib, modelopt_qtensor
from ._qtensor_base import F32, axis_amax, input_array, pad

__all__ = ["TensorQuantizer"]

_FIELDS = {"enable": True, "num_bits": 8, "axis": None, "fake_quant": True, "unsigned": False, "narrow_range": False,
           "learn_amax": False, "type": "static", "block_sizes": None, "calibrator": "max"}


def _fields(cfg) -> dict:
    """The attribute fields of a ``QuantDescriptor`` or a ``QuantizerAttributeConfig`` dict, validated."""
    if cfg is None:
        return dict(_FIELDS)
    if isinstance(cfg, _descriptors.ScaledQuantDescriptor):
        return {**_FIELDS, "num_bits": cfg.num_bits, "axis": cfg.axis, "fake_quant": cfg.fake_quant,
                "unsigned": cfg.unsigned, "narrow_range": cfg.narrow_range, "learn_amax": cfg.learn_amax,
                "type": "dynamic" if cfg.dynamic else "static", "block_sizes": cfg.block_sizes,
                "calibrator": cfg.calib_method}
    if not isinstance(cfg, dict):
        raise TypeError(f"quant_attribute_cfg={show(cfg)} must be a QuantDescriptor, a dict of "
                        "QuantizerAttributeConfig fields, or None")
    unknown = sorted(set(cfg) - set(_FIELDS))
    if unknown:
        raise ValueError(f"quant_attribute_cfg fields {unknown} are not supported here; the supported fields are "
                         f"{sorted(_FIELDS)} (pre_quant_scale, rotate, bias and backends are modelopt-only)")
    fields = {**_FIELDS, **cfg}
    if fields["type"] not in ("static", "dynamic"):
        raise ValueError(f"type={fields['type']!r} must be 'static' or 'dynamic'")
    if fields["calibrator"] not in ("max", "histogram"):
        raise ValueError(f"calibrator={fields['calibrator']!r} must be 'max' or 'histogram'")
    nb = fields["num_bits"]
    if isinstance(nb, (tuple, list)) and tuple(nb) in ((4, 3), (2, 1)):
        nb = tuple(nb)  # E4M3, and E2M1 for the NVFP4 and MXFP4 real quantization
    else:
        nb = _descriptors.QuantDescriptor(num_bits=nb).num_bits
    axis = _descriptors.check_axis(fields["axis"])
    return {**fields, "num_bits": nb, "axis": axis,
            "block_sizes": _descriptors.check_block_sizes(fields["block_sizes"], axis)}


class _Tiles(NamedTuple):
    """modelopt's static block setup for one input shape (``_setup_for_blockquant``) and nbquant's tiles.

    modelopt zero-pads each blocked dim to a multiple of its block, reshapes the padded
    input to ``view`` (one blocked dim of the last axis alone: rows ``(-1, B)``; else
    ``(n / b, b)`` per blocked dim and ``n`` per other dim), takes the amax over the dims
    of ``view`` not in ``kept`` (its new ``axis``), and crops the output back. The same
    numbers are nbquant's ``block_size=tiles`` over the padded input, one amax per tile.
    """

    shape: tuple[int, ...]  # the input's shape: modelopt fixes it at the first call
    blocks: dict[int, int]  # {dim: block} of the blocked dims, dims non-negative
    padded: tuple[int, ...]
    view: tuple[int, ...]
    kept: tuple[int, ...]

    @property
    def tiles(self) -> tuple[int, ...]:
        return tuple(self.blocks.get(d, 1) for d in range(len(self.shape)))

    def amax_grid(self, amax: np.ndarray) -> np.ndarray:
        """A stored amax (broadcasting against modelopt's amax shape over ``view``) as one value per tile."""
        shape = tuple(n if d in self.kept else 1 for d, n in enumerate(self.view))
        try:
            a = np.broadcast_to(amax, shape)
        except ValueError:
            raise ValueError(f"amax of shape {amax.shape} does not fit the blocks of this quantizer: modelopt "
                             f"reshapes the padded input to {self.view} and needs an amax of shape {shape} "
                             "(or one that broadcasts to it)") from None
        return a.reshape(tuple(p // t for p, t in zip(self.padded, self.tiles, strict=True)))


def _tiles(shape: tuple[int, ...], block_sizes: dict) -> _Tiles:
    """modelopt's ``_setup_for_blockquant`` for an input of ``shape`` (None block sizes: kept dims)."""
    ndim = len(shape)
    sizes = {k: v for k, v in block_sizes.items() if not isinstance(k, str)}
    for k in sizes:
        if not -ndim <= k < ndim:
            raise ValueError(f"block_sizes key {k} is out of range for an input of {ndim} dimension(s)")
    blocks = {}
    for d in range(ndim):  # modelopt looks a dim up as d, else as d - ndim
        b = sizes.get(d if d in sizes else d - ndim)
        if b is not None:
            blocks[d] = int(b)
    padded = tuple(n + -n % blocks.get(d, 1) for d, n in enumerate(shape))
    if len(sizes) == 1 and ndim - 1 in blocks:  # modelopt's fast path: rows of the last dim's block
        b = blocks[ndim - 1]
        return _Tiles(tuple(shape), blocks, padded, (math.prod(padded) // b, b), (0,))
    view, kept = [], []
    for d, n in enumerate(padded):
        kept.append(len(view))
        view += [n // blocks[d], blocks[d]] if d in blocks else [n]
    return _Tiles(tuple(shape), blocks, padded, tuple(view), tuple(kept))


class TensorQuantizer:
    """The ``TensorQuantizer`` of modelopt (``modelopt.torch.quantization.nn``) for NumPy arrays.

    Parameters
    ----------
    quant_attribute_cfg : QuantDescriptor or dict, optional
        The quantizer's attributes (default: 8-bit, per tensor, fake, max calibrator).
    if_quant : bool
        Quantize on call (default True).
    if_calib : bool
        Collect calibration data on call (default False).
    amax : float or numpy.ndarray, optional
        A fixed amax (a descriptor's ``amax`` is used when this is None).

    Examples
    --------
    >>> import numpy as np
    >>> tq = TensorQuantizer({"num_bits": 4, "axis": 0})
    >>> tq(np.array([[0.3, -1.0], [2.5, 1.0]], np.float32))
    array([[ 0.2857143, -1.       ],
           [ 2.5      ,  1.0714285]], dtype=float32)
    >>> tq.disable(); tq(np.float32([0.3])), tq.is_enabled
    (array([0.3], dtype=float32), False)
    """

    def __init__(self, quant_attribute_cfg=None, if_quant: bool = True, if_calib: bool = False,
                 amax: npt.ArrayLike | None = None) -> None:
        f = _fields(quant_attribute_cfg)
        self._disabled, self._num_bits, self._axis = not f["enable"], f["num_bits"], f["axis"]
        self._fake_quant, self._unsigned, self._narrow_range = f["fake_quant"], f["unsigned"], f["narrow_range"]
        self._block_sizes, self._dynamic = f["block_sizes"], f["type"] == "dynamic"
        self._calib_method = f["calibrator"]
        self._if_quant, self._if_calib = bool(if_quant), bool(if_calib)
        self._amax = None
        self._buffers: dict = {}
        self._tiles: _Tiles | None = None
        self._calibrator = self._new_calibrator(self._axis)
        if amax is None and isinstance(quant_attribute_cfg, _descriptors.ScaledQuantDescriptor):
            amax = quant_attribute_cfg.amax
        if amax is not None:
            self.amax = amax

    def _new_calibrator(self, axis):
        if self._calib_method == "max":
            return modelopt_calib.MaxCalibrator(self._num_bits, axis, self._unsigned)
        return modelopt_calib.HistogramCalibrator(self._num_bits, axis, self._unsigned)

    # -- modelopt's attributes ---------------------------------------------------------------------------------
    @property
    def num_bits(self):
        """Bits of the format (an int, or ``(E, M)``)."""
        return self._num_bits

    @property
    def axis(self):
        """The kept dims of the amax (None: per tensor); after a static block call, modelopt's dims of its view."""
        return self._axis

    @property
    def block_sizes(self) -> dict | None:
        """``{dim: block}`` plus ``"type"``, ``"scale_bits"``, ``"scale_block_sizes"``; or None."""
        return self._block_sizes

    @property
    def unsigned(self) -> bool:
        """Unsigned integer range."""
        return self._unsigned

    @property
    def narrow_range(self) -> bool:
        """``[-maxbound, maxbound]`` instead of ``[-maxbound - 1, maxbound]``."""
        return self._narrow_range

    @property
    def fake_quant(self) -> bool:
        """Fake (True) or real (False) quantization."""
        return self._fake_quant

    @property
    def maxbound(self):
        """The largest code: ``2**(num_bits - 1 + unsigned) - 1``, or the float format's largest value."""
        if isinstance(self._num_bits, tuple):
            return 448.0 if self._num_bits == (4, 3) else 6.0
        return (1 << (self._num_bits - 1 + int(self._unsigned))) - 1

    @property
    def is_enabled(self) -> bool:
        """Whether calls quantize (or calibrate) at all."""
        return not self._disabled

    @property
    def amax(self) -> np.ndarray | None:
        """The stored float32 amax, or None (dynamic)."""
        return self._amax

    @amax.setter
    def amax(self, value) -> None:
        if value is None:
            raise ValueError("amax cannot be set to None (call reset_amax())")
        a = np.asarray(value, F32)
        if self._amax is not None and a.shape != self._amax.shape:
            raise ValueError(f"amax of shape {a.shape}: changing the shape of amax ({self._amax.shape}) is not "
                             "allowed, as in modelopt; call reset_amax() first")
        self._amax = a.copy()

    def reset_amax(self) -> None:
        """Forget the stored amax and the calibrator's data."""
        self._amax = None
        self._calibrator.reset()

    def disable(self) -> None:
        """Return inputs unchanged."""
        self._disabled = True

    def enable(self) -> None:
        """Quantize (or calibrate) again."""
        self._disabled = False

    def enable_quant(self) -> None:
        """Quantize on call."""
        self._if_quant = True

    def disable_quant(self) -> None:
        """Do not quantize on call (calibration may still collect)."""
        self._if_quant = False

    def enable_calib(self) -> None:
        """Collect calibration data on call (static quantizers; a dynamic one ignores this, as modelopt does)."""
        if not self._dynamic:
            self._if_calib = True

    def disable_calib(self) -> None:
        """Stop collecting."""
        self._if_calib = False

    def load_calib_amax(self, *args, strict: bool = True, **kwargs) -> None:
        """Set ``amax = calibrator.compute_amax(*args, **kwargs)``; NaN with ``strict=False`` if nothing was seen.

        Parameters
        ----------
        *args
            Passed to the calibrator's ``compute_amax`` (the histogram method name, for example).
        strict : bool
            Raise ``RuntimeError`` when the calibrator has seen no tensor (default); else set NaN.
        **kwargs
            Passed to ``compute_amax``.
        """
        if self._dynamic:
            raise ValueError("a dynamic quantizer does not need calibration (type='dynamic')")
        amax = self._calibrator.compute_amax(*args, **kwargs)
        if amax is None:
            if strict:
                raise RuntimeError("the calibrator has seen no tensor; collect data first, or pass strict=False "
                                   "to set amax to NaN")
            amax = np.float32(np.nan)
        self.amax = amax

    # -- forward ---------------------------------------------------------------------------------------------
    def __call__(self, inputs):
        """Quantize ``inputs`` (or calibrate, or pass through); dequantize a real-quantized tensor.

        Parameters
        ----------
        inputs : numpy.ndarray or modelopt_qtensor.BaseQuantizedTensor

        Returns
        -------
        numpy.ndarray or modelopt_qtensor.BaseQuantizedTensor
        """
        if isinstance(inputs, modelopt_qtensor.BaseQuantizedTensor):
            return self.dequantize(inputs)
        x = input_array(inputs)
        if x.size == 0 or self._disabled:
            return x
        if self._block_sizes is not None and self._fake_quant:
            self._block_sizes_to_axis(x.ndim)
        tiles = self._setup_tiles(x.shape)
        if self._if_calib and not self._dynamic:
            self._calibrator.collect(pad(x, tiles.blocks).reshape(tiles.view) if tiles else x)
        if not self._if_quant:
            return x
        if not self._fake_quant:
            return self._real_quantize(x)
        return self._fake_tiles(x, tiles) if tiles else self._fake(x)

    def dequantize(self, qtensor: modelopt_qtensor.BaseQuantizedTensor) -> np.ndarray:
        """Dequantize a tensor this quantizer real-quantized, with the scales it kept.

        Parameters
        ----------
        qtensor : modelopt_qtensor.BaseQuantizedTensor
            What this quantizer's real quantization returned.

        Returns
        -------
        numpy.ndarray
            The dequantized tensor.
        """
        if not self._buffers:
            raise ValueError("this quantizer holds no scales: real-quantize a tensor with it first")
        return qtensor.dequantize(block_sizes=self._block_sizes, **self._buffers)

    def _set_axis(self, axis) -> None:
        """modelopt's ``axis`` setter: the quantizer's and its calibrator's."""
        self._axis = axis
        self._calibrator._axis = axis

    def _block_sizes_to_axis(self, ndim: int) -> None:
        """modelopt: block sizes that are all None (per channel) become ``axis``, the dims not named."""
        named = [k for k, v in self._block_sizes.items() if not isinstance(k, str)]
        if all(self._block_sizes[k] is None for k in named):
            whole = {k if k >= 0 else k + ndim for k in named}
            self._set_axis(tuple(d for d in range(ndim) if d not in whole) or None)
            self._block_sizes = None

    def _setup_tiles(self, shape: tuple[int, ...]) -> _Tiles | None:
        """The static block setup, made at the first call (modelopt's shape is fixed then); None without one."""
        bs = self._block_sizes
        if not bs or bs.get("type", "static") == "dynamic" or not self._fake_quant:
            return None
        if self._tiles is None:
            self._tiles = _tiles(shape, bs)
            self._set_axis(self._tiles.kept)
        elif self._tiles.shape != tuple(shape):
            raise ValueError(f"Input shape has changed from {self._tiles.shape} to {tuple(shape)}. "
                             "Block-quantization requires a fixed input shape.")
        return self._tiles

    def _fake_tiles(self, x: np.ndarray, t: _Tiles) -> np.ndarray:
        """Static blocks: the zero-padded input fake-quantized per tile (``block_size=t.tiles``), cropped."""
        xp = pad(x, t.blocks)
        amax = None if self._amax is None else t.amax_grid(self._amax)
        if isinstance(self._num_bits, tuple):
            y = modelopt_ops.scaled_e4m3(xp, amax, *self._num_bits, block_size=t.tiles)
        else:
            y = modelopt_ops.fake_tensor_quant(xp, amax, self._num_bits, self._unsigned, self._narrow_range,
                                               block_size=t.tiles)
        return y[tuple(slice(0, n) for n in x.shape)]

    def _fake(self, x: np.ndarray) -> np.ndarray:
        bs = self._block_sizes
        if bs and bs.get("type") == "dynamic":
            return modelopt_ops.dynamic_block_quant(x, bs, self._num_bits, self._unsigned,
                                                    self._narrow_range)
        amax = self._amax if self._amax is not None else axis_amax(x, self._axis)
        if isinstance(self._num_bits, tuple):
            return _descriptors.scaled_e4m3(x, amax, *self._num_bits)
        return _descriptors.fake_tensor_quant(x, amax, self._num_bits, self._unsigned, self._narrow_range)

    def _real_quantize(self, x: np.ndarray):
        bs, nb = self._block_sizes or {}, self._num_bits
        qt = modelopt_qtensor
        if bs.get("scale_bits") == (8, 0) and bs.get("type") == "dynamic" and nb == (2, 1):
            out, scale = qt.MXFP4QTensor.quantize(x, bs[-1])
            self._buffers = {"scale": scale}
        elif nb == (4, 3) and not bs.get("scale_bits"):
            use_amax = self._amax is not None and not (bs and self._amax.size == 1)
            scales = (self._amax / np.float32(448)) if use_amax else None
            out, scale = qt.FP8QTensor.quantize(x, scales=scales, axis=self._axis, block_sizes=_int_keys(bs))
            self._buffers = {"scale": scale}
        elif nb == 8:
            out, scale = qt.INT8QTensor.quantize(x, axis=self._axis, block_sizes=_int_keys(bs))
            self._buffers = {"scale": scale}
        elif nb == 4 and bs.get("scale_bits") == 8 and bs.get("scale_block_sizes"):
            group = bs["scale_block_sizes"][-1]
            out, scales = qt.NF4QTensor.quantize(x, bs[-1], group)
            scale, double, mean = qt.NF4QTensor.double_quantization(scales, group, 8)
            self._buffers = {"scale": scale, "double_scale": double, "scale_zeros": mean}
        elif nb == (2, 1) and bs.get("scale_bits") == (4, 3):
            wsf2 = None if self._amax is None else np.float32(self._amax.astype(F32) / np.float32(2688))
            out, scale, double = qt.NVFP4QTensor.quantize(x, bs[-1], weights_scaling_factor_2=wsf2)
            self._buffers = {"scale": scale, "double_scale": double}
        elif nb == 4 and bs.get(-1):
            out, scale = qt.INT4QTensor.quantize(x, bs[-1])
            self._buffers = {"scale": scale}
        else:
            raise NotImplementedError(f"num_bits={nb!r}, block_sizes={self._block_sizes!r}: real quantization "
                                      "covers INT8, FP8 (4, 3), INT4 and NF4 blocks, NVFP4 and MXFP4, as in modelopt")
        return out


def _int_keys(block_sizes: dict) -> dict | None:
    """The ``{dim: block}`` entries of ``block_sizes`` (the string keys dropped), or None."""
    blocks = {k: v for k, v in block_sizes.items() if isinstance(k, int) and v is not None}
    return blocks or None
