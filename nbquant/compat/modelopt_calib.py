"""modelopt 0.47's calibrators, with its constructor signatures, over nbquant's native calibrators.

``MaxCalibrator(num_bits=8, axis=None, unsigned=False, track_amax=False)`` and
``HistogramCalibrator(num_bits=8, axis=None, unsigned=False, num_bins=2048,
grow_method=None, skip_zeros=False, torch_hist=True)`` take modelopt's arguments and
return what modelopt returns: the max calibrator's amax keeps the input's rank (size 1
on the reduced dims, modelopt's ``keepdims``) and dtype, and ``axis`` names the **kept**
dims. The numerics are :class:`nbquant.modelopt.MaxCalibrator` and
:class:`nbquant.modelopt.HistogramCalibrator` (whose own names and signatures stay as they are).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .._docstrings import fill_doc
from ..backends import host_array
from ..modelopt import calibration
from ..reductions import reduce_amax
from ..validation import check_bool, check_int, show

__all__ = ["MaxCalibrator", "HistogramCalibrator"]


def _kept_axes(axis, ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) else axis
    if not isinstance(axes, (tuple, list)) or not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool)
                                                        for a in axes):
        raise TypeError(f"axis={show(axis)} must be None, an int or a tuple of ints (the kept dims)")
    kept = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis={axis!r} is out of range for an input of rank {ndim}")
        kept.append(int(a) % ndim)
    return tuple(sorted(set(kept)))


class _Calibrator:
    """What modelopt's ``_Calibrator`` holds: ``num_bits``, ``axis``, ``unsigned``."""

    def __init__(self, num_bits, axis, unsigned) -> None:
        is_float = isinstance(num_bits, tuple) and len(num_bits) == 2  # (E, M): a float format's max calibration
        self._num_bits = tuple(check_int("num_bits", b, low=0) for b in num_bits) if is_float else \
            check_int("num_bits", num_bits, low=1)
        if axis is not None:
            _kept_axes(axis, 64)  # the type; the range is checked against each input
        self._axis = axis
        self._unsigned = check_bool("unsigned", unsigned)

    @property
    def num_bits(self) -> int:
        return self._num_bits

    @property
    def axis(self):
        return self._axis

    @property
    def unsigned(self) -> bool:
        return self._unsigned


class MaxCalibrator(_Calibrator):
    """Calibrate as modelopt's ``MaxCalibrator``: the running ``max |x|``, per tensor or per index of ``axis``.

    Parameters
    ----------
    num_bits : int
        Kept for modelopt's signature (the amax does not depend on it).
    axis : int or tuple of int, optional
        The kept dims (None: one amax for the tensor).
    unsigned : bool
        Kept for modelopt's signature.
    track_amax : bool
        Also keep every batch's amax in :attr:`amaxs`.

    Examples
    --------
    >>> import numpy as np
    >>> cal = MaxCalibrator(8, axis=0)
    >>> cal.collect(np.array([[1.0, -3.0], [0.5, 0.25]], np.float32))
    >>> cal.collect(np.array([[2.0, 0.0], [-0.1, 0.2]], np.float32))
    >>> cal.compute_amax()
    array([[3. ],
           [0.5]], dtype=float32)
    >>> MaxCalibrator(axis=(0, 1)).collect(np.ones((2, 2), np.float32))  # every dim kept: modelopt reduces all
    """

    def __init__(self, num_bits: int = 8, axis=None, unsigned: bool = False, track_amax: bool = False) -> None:
        super().__init__(num_bits, axis, unsigned)
        self._track_amax = check_bool("track_amax", track_amax)
        self._amaxs: list[np.ndarray] = []
        self._calib_amax: np.ndarray | None = None

    @property
    def amaxs(self) -> list[np.ndarray]:
        """Every batch's amax, with ``track_amax=True``."""
        if not self._track_amax:
            raise AttributeError("amaxs is kept only with track_amax=True")
        return self._amaxs

    def collect(self, x: npt.ArrayLike) -> None:
        """Fold one batch into the running maximum; NaN or inf in ``x`` raises ``ValueError``.

        Parameters
        ----------
        x : array_like
            Finite float data; its amax keeps the dims of ``axis`` (and the input's dtype).
        """
        a = np.asarray(x)
        kept = () if self._axis is None else _kept_axes(self._axis, a.ndim)
        if len(kept) in (0, a.ndim):  # modelopt reduces over no dim as torch.amax(dim=[]) does: over all of them
            amax = reduce_amax(a).reshape(())
        else:
            block = tuple(1 if d in kept else n for d, n in enumerate(a.shape))
            amax = reduce_amax(a, block_size=block).reshape(tuple(n if d in kept else 1
                                                                  for d, n in enumerate(a.shape)))
        amax = host_array(amax)
        amax = (amax.reshape(()) if amax.size == 1 else amax).astype(a.dtype)  # modelopt squeezes one value
        if not np.isfinite(amax.astype(np.float32)).all():
            raise ValueError("x holds NaN or inf; modelopt's MaxCalibrator asserts finite amax (detected nan/inf "
                             "values in amax)")
        if self._calib_amax is not None and amax.shape != self._calib_amax.shape:
            raise RuntimeError(f"amax shape changed! (from {self._calib_amax.shape} to {amax.shape})")
        self._calib_amax = amax if self._calib_amax is None else np.asarray(np.maximum(self._calib_amax, amax))
        if self._track_amax:
            self._amaxs.append(amax.copy())

    def compute_amax(self) -> np.ndarray | None:
        """Return the amax of every batch so far.

        Returns
        -------
        numpy.ndarray or None
            The input's dtype and rank (one value: 0-d); None before any batch.
        """
        return None if self._calib_amax is None else self._calib_amax.copy()

    def reset(self) -> None:
        """Forget the collected amax."""
        self._calib_amax = None


class HistogramCalibrator(_Calibrator):
    """Calibrate as modelopt's ``HistogramCalibrator``: a histogram of ``|x|``, then an amax from it.

    The amax comes by entropy, MSE or percentile (:meth:`compute_amax`). The first batch's
    bin edges are modelopt's float32 ``torch.linspace(0, max, num_bins + 1)`` bit for bit
    (the upper half computed from the far end), and the percentile is read off them as
    modelopt does: ``cumsum(hist / total)`` in float64, then ``searchsorted``.

    Parameters
    ----------
    num_bits : int
        Bits of the format the entropy and MSE methods calibrate for.
    axis : None
        modelopt supports per-tensor histograms only; anything else raises
        ``NotImplementedError``, as there.
    unsigned : bool
        Whether that format is unsigned.
    num_bins : int
        Bins of the first batch (2048).
    grow_method : None
        Accepted for modelopt's signature (unused there too).
    skip_zeros : bool
        Leave exact zeros out.
    torch_hist : bool
        Accepted for modelopt's signature: nbquant's histogram is ``torch.histc``'s rule
        either way.

    Examples
    --------
    >>> import numpy as np
    >>> cal = HistogramCalibrator(8, num_bins=8)
    >>> cal.collect(np.array([0.0, 1.0, 2.0, 4.0, -8.0], np.float32))
    >>> cal.compute_amax("percentile", percentile=50)
    array(2., dtype=float32)
    """

    def __init__(self, num_bits: int = 8, axis=None, unsigned: bool = False, num_bins: int = 2048,
                 grow_method=None, skip_zeros: bool = False, torch_hist: bool = True) -> None:
        super().__init__(num_bits, axis, unsigned)
        if axis is not None:
            raise NotImplementedError(f"axis={axis!r}: Calibrator histogram collection only supports per tensor "
                                      "scaling (as in modelopt); use MaxCalibrator for per-channel amax")
        if grow_method is not None and not isinstance(grow_method, str):
            raise TypeError(f"grow_method={show(grow_method)} must be None or a str (modelopt ignores it)")
        check_bool("torch_hist", torch_hist)
        self._native = calibration.HistogramCalibrator(num_bins, skip_zeros=skip_zeros)

    def collect(self, x: npt.ArrayLike) -> None:
        """Add one batch to the histogram.

        Parameters
        ----------
        x : array_like
            Finite float data, of any shape.
        """
        self._native.collect(x)

    @fill_doc(candidates=calibration.COMPUTE_AMAX_OPTIONS)
    def compute_amax(self, method: str, *, stride: int = 1, start_bin: int = 128,
                     percentile: float = 99.99) -> np.ndarray | None:
        """Return the calibrated amax by ``"entropy"``, ``"mse"`` or ``"percentile"``.

        Parameters
        ----------
        method : {"entropy", "mse", "percentile"}
            As in :meth:`nbquant.modelopt.HistogramCalibrator.compute_amax`.
        {candidates}

        Returns
        -------
        numpy.ndarray or None
            0-d float32; None before any batch.
        """
        amax = self._native.compute_amax(method, num_bits=self._num_bits, unsigned=self._unsigned, stride=stride,
                                         start_bin=start_bin, percentile=percentile)
        return None if amax is None else np.array(amax, np.float32)

    def reset(self) -> None:
        """Forget the histogram."""
        self._native.reset()
