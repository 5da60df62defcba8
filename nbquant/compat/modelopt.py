"""NVIDIA modelopt ``tensor_quant``: the ``QuantDescriptor`` of the documented (<= 0.37) API.

``QuantDescriptor`` (an alias of ``ScaledQuantDescriptor``) describes how a tensor is
quantized: ``num_bits`` (an int, or ``(4, 3)`` for E4M3), ``axis`` (the dims that keep
their own amax — the **kept** dims, like TensorRT's axis and unlike pypto's),
``block_sizes`` (``{-1: 32}``, plus the string keys ``"type"``, ``"scale_bits"``,
``"scale_block_sizes"``), ``amax``, ``unsigned`` and ``narrow_range``. Its
:meth:`~ScaledQuantDescriptor.dict` returns the non-default fields, and
``QuantDescriptor(**d.dict()) == d``.

The functions mirror the documented ``tensor_quant`` module with its positional
signatures (``TensorQuantFunction.forward(inputs, amax, num_bits=8, unsigned=False,
narrow_range=True)`` etc.) and run on :mod:`nbquant.modelopt.ops`:

* :func:`tensor_quant`: ``(clamp(rne(x * S), lo, hi), S)`` with ``S = maxbound / amax``;
* :func:`fake_tensor_quant`: ``clamp(rne(x * S), lo, hi) / S``;
* :func:`fake_affine_tensor_quant`: the removed gemmlowp-style affine fake quant;
* :func:`scaled_e4m3`: ``e4m3(clamp(x * S, ±448)) * fl(1 / S)``, ``S = 448 / amax``.

``amax`` broadcasts against the input (each dimension 1 or the input's size), as in
modelopt.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .. import api
from .._docstrings import fill_doc
from ..layout import as_int
from ..modelopt import ops as modelopt_ops
from ..validation import as_real_array, check_int, show

__all__ = ["ScaledQuantDescriptor", "QuantDescriptor", "tensor_quant", "fake_tensor_quant",
           "fake_affine_tensor_quant", "scaled_e4m3"]

_BLOCK_KEYS = ("type", "scale_bits", "scale_block_sizes")
_CALIB_METHODS = ("max", "histogram")
_DEFAULTS = {"fake_quant": True, "axis": None, "block_sizes": None, "amax": None, "learn_amax": False,
             "scale_amax": None, "calib_method": "max", "unsigned": False, "narrow_range": False,
             "dynamic": False}


def _check_num_bits(num_bits):
    if isinstance(num_bits, bool):
        raise TypeError(f"num_bits={num_bits!r} must be a positive integer or the tuple (4, 3)")
    if isinstance(num_bits, (int, np.integer)):
        if num_bits <= 0:
            raise ValueError(f"num_bits must be > 0, not {num_bits}.")
        return int(num_bits)
    if isinstance(num_bits, (tuple, list)) and tuple(num_bits) == (4, 3):
        return (4, 3)
    raise TypeError(f"num_bits={num_bits!r} must be a positive integer or the tuple (4, 3) (E4M3; the only FPx "
                    "format supported)")


def check_axis(axis):
    """modelopt's ``axis``: None, an int or a tuple of ints (a TypeError otherwise)."""
    if axis is None:
        return None
    allowed = "None, an int or a tuple of ints"
    if isinstance(axis, (tuple, list)):
        return tuple(as_int("axis", a, allowed) for a in axis)
    return as_int("axis", axis, allowed)


def check_block_sizes(block_sizes, axis):
    """modelopt's ``block_sizes``: None or a dict, not together with ``axis``."""
    if block_sizes is None:
        return None
    if axis is not None:
        raise ValueError(f"axis={axis!r} must be None when block_sizes is not None.")
    if not isinstance(block_sizes, dict):
        raise TypeError(f"block_sizes={block_sizes!r} must be a dictionary.")
    for key, value in block_sizes.items():
        if isinstance(key, str):
            if key not in _BLOCK_KEYS:
                raise ValueError(f"block_sizes key {key!r} is not allowed; string keys are {list(_BLOCK_KEYS)}")
            if key == "type" and value not in ("static", "dynamic"):
                raise ValueError(f"block_sizes['type']={value!r} must be 'static' or 'dynamic'")
            continue
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
            raise TypeError(f"block_sizes key {key!r}: keys of block_sizes must be integers (axes) or one of "
                            f"{list(_BLOCK_KEYS)}")
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                  or value <= 0):
            raise ValueError(f"block_sizes[{key}]={value!r}: values of block_sizes must be positive integers "
                             "(or None for the whole axis)")
    return dict(block_sizes)


class ScaledQuantDescriptor:
    """Supportive descriptor of quantization (modelopt's ``ScaledQuantDescriptor``).

    Parameters
    ----------
    num_bits : int or tuple of int
        Bits of integer quantization, or ``(4, 3)`` for E4M3. Default 8.
    name : str, optional
        A name for the quantizer (kept, not used).
    fake_quant : bool
        Fake quantization mode. Default True.
    axis : None, int or tuple of int
        The dims that keep their own amax (None: per-tensor).
    block_sizes : dict, optional
        ``{axis: block}`` plus optional ``"type"`` (``"static"``/``"dynamic"``),
        ``"scale_bits"``, ``"scale_block_sizes"``. ``axis`` must be None with it.
    amax : float, list or numpy.ndarray, optional
        Stored as a float32 array.
    learn_amax : bool
        ``axis`` must be None when True.
    scale_amax : float, optional
        A factor modelopt applies to the amax (kept, not used by nbquant's functions).
    calib_method : {"max", "histogram"}
        The calibrator modelopt would use.
    unsigned : bool
        Unsigned integer range ``[0, 2**num_bits - 1]``.
    narrow_range : bool
        ``[-127, 127]`` instead of ``[-128, 127]`` for 8 bits. Default False (the
        ``fake_tensor_quant`` function's own default is True).
    dynamic : bool
        Dynamic (uncalibrated) quantization.

    Examples
    --------
    >>> d = QuantDescriptor(num_bits=4, axis=0, narrow_range=True, amax=[1.0, 2.0])
    >>> d.dict()
    {'num_bits': 4, 'name': None, 'axis': 0, 'amax': [1.0, 2.0], 'narrow_range': True}
    >>> QuantDescriptor(**d.dict()) == d
    True
    """

    def __init__(self, num_bits=8, name=None, fake_quant=True, axis=None, block_sizes=None, amax=None,
                 learn_amax=False, scale_amax=None, calib_method="max", unsigned=False, narrow_range=False,
                 dynamic=False):
        self._num_bits = _check_num_bits(num_bits)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a string or None, not {type(name)}.")
        self._name = name
        self._fake_quant = bool(fake_quant)
        self._axis = check_axis(axis)
        self._block_sizes = check_block_sizes(block_sizes, self._axis)
        self._learn_amax = bool(learn_amax)
        if self._learn_amax and self._axis is not None:
            raise TypeError(f"axis is ignored and must be None when learn_amax is true, got {type(self._axis)}.")
        if amax is not None:
            if not isinstance(amax, (float, int, list, np.ndarray)) or isinstance(amax, bool):
                raise TypeError(f"amax={show(amax)} must be a float, list or ndarray, not {type(amax).__name__}")
            with np.errstate(over="ignore"):
                amax = as_real_array("amax", amax).astype(np.float32)
        self._amax = amax
        if scale_amax is not None and (isinstance(scale_amax, bool) or not isinstance(scale_amax, (int, float))):
            raise TypeError(f"scale_amax={scale_amax!r} must be a float or None")
        self._scale_amax = scale_amax
        if calib_method not in _CALIB_METHODS:
            raise ValueError(f"calib_method={calib_method!r} must be one of {list(_CALIB_METHODS)}")
        self._calib_method = calib_method
        self._unsigned = bool(unsigned)
        self._narrow_range = bool(narrow_range)
        self._dynamic = bool(dynamic)

    num_bits = property(lambda self: self._num_bits, doc="Return num_bits.")
    name = property(lambda self: self._name, doc="Return name.")
    fake_quant = property(lambda self: self._fake_quant, doc="Return True if fake quantization is used.")
    axis = property(lambda self: self._axis, doc="Return axis for quantization.")
    block_sizes = property(lambda self: self._block_sizes, doc="Return block_sizes for quantization.")
    amax = property(lambda self: self._amax, doc="Return amax.")
    learn_amax = property(lambda self: self._learn_amax, doc="Return True if amax is learnable.")
    scale_amax = property(lambda self: self._scale_amax, doc="Return scale_amax.")
    calib_method = property(lambda self: self._calib_method, doc="Return calibration method.")
    unsigned = property(lambda self: self._unsigned, doc="Return True if unsigned integer range is used.")
    narrow_range = property(lambda self: self._narrow_range,
                            doc="Return True if symmetric integer range for signed quantization is used.")

    @property
    def dynamic(self) -> bool:
        """Return True if the quantization is dynamic (the flag, or ``block_sizes["type"] == "dynamic"``)."""
        return self._dynamic or bool(self._block_sizes and self._block_sizes.get("type") == "dynamic")

    @staticmethod
    def get_block_quant_axes_and_sizes(block_sizes):
        """Return the ``{axis: block}`` entries of ``block_sizes`` (its integer keys).

        Parameters
        ----------
        block_sizes : dict or None
            A ``block_sizes`` argument of the descriptor.

        Returns
        -------
        dict or None
            The integer-keyed entries; None for None.

        Examples
        --------
        >>> ScaledQuantDescriptor.get_block_quant_axes_and_sizes({-1: 32, "type": "dynamic"})
        {-1: 32}
        """
        if block_sizes is None:
            return None
        return {k: v for k, v in block_sizes.items() if k not in _BLOCK_KEYS}

    def dict(self) -> dict:
        """Serialize to dict: ``num_bits`` and ``name`` always, every other field only when not its default.

        Unlike modelopt's own ``dict()`` (which omits ``block_sizes``, ``calib_method``,
        ``narrow_range`` and ``dynamic``), every non-default field is included, so the
        documented round trip ``QuantDescriptor(**d.dict()) == d`` holds.

        Returns
        -------
        dict
            Keyword arguments of the constructor that rebuild this descriptor.
        """
        out = {"num_bits": self._num_bits, "name": self._name}
        for key, default in _DEFAULTS.items():
            value = getattr(self, "_" + key)
            if key == "amax":
                if value is not None:
                    out[key] = value.tolist()
            elif value != default:
                out[key] = value
        return out

    def __eq__(self, other) -> bool:
        if not isinstance(other, ScaledQuantDescriptor):
            return NotImplemented
        for key, value in self.__dict__.items():
            theirs = other.__dict__[key]
            if isinstance(value, np.ndarray) or isinstance(theirs, np.ndarray):
                if value is None or theirs is None or not np.array_equal(value, theirs):
                    return False
            elif value != theirs:
                return False
        return True

    __hash__ = None

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.dict().items())
        return f"QuantDescriptor({fields})"


QuantDescriptor = ScaledQuantDescriptor


#: The docstring pieces the modelopt functions below share (:func:`nbquant._docstrings.fill_doc`).
_DOCS = {
    "int_params": """
        inputs : numpy.ndarray
            float32, float16 or bfloat16.
        amax : float or numpy.ndarray
            ``>= 0``, broadcastable against ``inputs``.
        num_bits : int
            Bits of the integer codes.
        """,
    "fake_returns": """
        Returns
        -------
        numpy.ndarray
            The fake-quantized values, in the input's dtype.
        """,
}


def _amax(amax):
    if amax is None:
        raise TypeError("amax=None: modelopt's tensor_quant/fake_tensor_quant need an amax tensor "
                        "(nbquant.modelopt.ops computes it from the input when amax is None)")
    return amax


@fill_doc(**_DOCS)
def tensor_quant(inputs: npt.ArrayLike, amax: npt.ArrayLike, num_bits: int = 8, unsigned: bool = False,
                 narrow_range: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``TensorQuantFunction``: float32 codes ``clamp(rne(inputs * S))`` and ``S = maxbound / amax``.

    ``outputs / scale`` dequantizes. ``maxbound = 2**(num_bits - 1 + unsigned) - 1``;
    the range is ``[-maxbound, maxbound]`` when ``narrow_range`` (the default here),
    ``[-maxbound - 1, maxbound]`` otherwise, ``[0, maxbound]`` when ``unsigned``.

    Parameters
    ----------
    {int_params}
    unsigned, narrow_range : bool
        The integer range, as above.

    Returns
    -------
    outputs : numpy.ndarray
        float32 codes.
    scale : numpy.ndarray
        float32 ``S`` (1.0 where ``amax <= 2**-24``).

    Examples
    --------
    >>> import numpy as np
    >>> tensor_quant(np.array([0.3, -1.0, 2.5], np.float32), np.float32(2.0), 4)
    (array([ 1., -4.,  7.], dtype=float32), array(3.5, dtype=float32))
    """
    return modelopt_ops.tensor_quant(inputs, _amax(amax), num_bits, unsigned, narrow_range)


@fill_doc(**_DOCS)
def fake_tensor_quant(inputs: npt.ArrayLike, amax: npt.ArrayLike, num_bits: int = 8, unsigned: bool = False,
                      narrow_range: bool = True) -> np.ndarray:
    """``FakeTensorQuantFunction``: ``clamp(rne(inputs * S), lo, hi) / S``, ``S = maxbound / amax``.

    Parameters
    ----------
    {int_params}
    unsigned, narrow_range : bool
        The integer range, as in :func:`tensor_quant`.

    {fake_returns}

    Examples
    --------
    >>> import numpy as np
    >>> fake_tensor_quant(np.array([0.3, -1.0, 2.5], np.float32), np.float32(2.0), 4)
    array([ 0.2857143, -1.1428572,  2.       ], dtype=float32)
    """
    if isinstance(num_bits, (tuple, list)):
        raise TypeError(f"num_bits={num_bits!r}: fake_tensor_quant takes integer bits; use scaled_e4m3 for E4M3")
    return modelopt_ops.fake_tensor_quant(inputs, _amax(amax), num_bits, unsigned, narrow_range)


@fill_doc(**_DOCS)
def fake_affine_tensor_quant(inputs: npt.ArrayLike, min_range: float, max_range: float,
                             num_bits: int = 8) -> np.ndarray:
    """``FakeAffineTensorQuantFunction`` (removed in modelopt 0.39): per-tensor gemmlowp-style fake quant.

    ``step = (max - min) / (2**n - 1)``, ``qz = rne(min / step) + 2**(n-1)``,
    ``out = (clamp(rne(x / step) - qz, -2**(n-1), 2**(n-1) - 1) + qz) * step``.

    Parameters
    ----------
    inputs : numpy.ndarray
        float32, float16 or bfloat16.
    min_range, max_range : float
        The range (``min``, ``max`` above).
    num_bits : int
        Bits, 2 to 16.

    {fake_returns}

    Examples
    --------
    >>> import numpy as np
    >>> fake_affine_tensor_quant(np.array([-1.0, 0.1, 0.5, 3.0], np.float32), -1.0, 2.0, 2)
    array([-1.,  0.,  0.,  2.], dtype=float32)
    """
    return modelopt_ops.fake_affine_tensor_quant(inputs, min_range, max_range, num_bits)


def scaled_e4m3(inputs: npt.ArrayLike, amax: npt.ArrayLike | None = None, E: int = 4, M: int = 3) -> np.ndarray:
    """``ScaledE4M3Function``: ``e4m3(clamp(x * S, ±448)) * fl(1 / S)``, ``S = fl(fl(1 / amax) * 448)``.

    ``amax <= 2**-24`` is read as 1.0. ``amax=None`` is modelopt's plain cast
    ``x.to(float8_e4m3fn)`` (torch 2.13 saturates overflow and ±inf to ±448).

    Parameters
    ----------
    inputs : numpy.ndarray
        float32, float16 or bfloat16.
    amax : float or numpy.ndarray, optional
        ``>= 0``, broadcastable against ``inputs``; None: the plain cast.
    E, M : int
        4 and 3, the only format supported (as in modelopt).

    Returns
    -------
    numpy.ndarray
        The fake-quantized values, in the input's dtype (float32 for float64).

    Examples
    --------
    >>> import numpy as np
    >>> scaled_e4m3(np.array([1.0, 0.3, -2.0], np.float32), np.float32(2.0))
    array([ 1.       ,  0.2857143, -2.       ], dtype=float32)
    >>> scaled_e4m3(np.array([1000.0, 0.3], np.float32)).tolist()
    [448.0, 0.3125]
    """
    if (check_int("E", E, integral_float=True), check_int("M", M, integral_float=True)) != (4, 3):
        raise NotImplementedError(f"E={E}, M={M}: only E4M3 (E=4, M=3) is supported, as in modelopt")
    if amax is None:
        x = np.asarray(inputs)
        q = api.quantize(x, 1.0, "float8_e4m3fn", saturate=True)
        out = x.dtype if x.dtype != np.float64 else np.dtype(np.float32)
        return api.dequantize(q, 1.0, out_dtype=out)
    return modelopt_ops.scaled_e4m3(inputs, amax)


# modelopt's calibrators, with its constructor signatures (a module of their own)
from .modelopt_calib import HistogramCalibrator, MaxCalibrator  # noqa: E402

__all__ += ["MaxCalibrator", "HistogramCalibrator"]
