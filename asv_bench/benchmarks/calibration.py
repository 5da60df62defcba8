"""Calibrators: ``collect`` of one batch (max per tensor and per channel on both axes, histogram) and ``compute_amax``.

``compute_amax`` (entropy, mse, percentile) reads the histogram's bins with NumPy on
the host, whatever the backend and the batch size: it is timed on the histogram of
one batch of :data:`HISTOGRAM_N` standard-normal elements with the default 2048 bins.
"""

from __future__ import annotations

import functools

import numpy as np

import nbquant

from .common import BACKENDS, SIZES, Device, schemes, shape

#: name -> (calibrator class, constructor keywords); quick mode runs the first two.
CALIBRATORS = {
    "max_per_tensor": (nbquant.modelopt.MaxCalibrator, {}),
    "histogram": (nbquant.modelopt.HistogramCalibrator, {}),
    "max_per_channel_axis0": (nbquant.modelopt.MaxCalibrator, {"axis": 0}),
    "max_per_channel_axis1": (nbquant.modelopt.MaxCalibrator, {"axis": 1}),
}
#: Elements of the batch whose histogram ``compute_amax`` reads.
HISTOGRAM_N = 1 << 16


class Collect:
    """``collect`` of one batch into a fresh calibrator: time and peak memory.

    A fresh calibrator per call makes every histogram call a first batch (amax,
    ``linspace`` edges, counts); a later batch of the same range makes the same two
    passes over the input.
    """

    params = (BACKENDS, SIZES, schemes(list(CALIBRATORS)))
    param_names = ["backend", "n", "calibrator"]
    timeout = 300

    def setup(self, backend, n, calibrator):
        self.dev = Device(backend, n)
        cls, kwargs = CALIBRATORS[calibrator]
        self.make = functools.partial(cls, backend=backend, **kwargs)
        self.x = self.dev.put(np.random.default_rng(0).standard_normal(shape(n), dtype=np.float32))
        self.time_collect(backend, n, calibrator)

    def time_collect(self, backend, n, calibrator):
        """One batch into a fresh calibrator."""
        self.make().collect(self.x)
        self.dev.sync()

    def peakmem_collect(self, backend, n, calibrator):
        """Peak RSS of the process around one ``collect`` (includes the input)."""
        self.make().collect(self.x)


class ComputeAmax:
    """``HistogramCalibrator.compute_amax`` of a prepared histogram: time and the amax it picks."""

    params = (schemes(["entropy", "percentile", "mse"]),)
    param_names = ["method"]
    timeout = 300

    def setup(self, method):
        self.cal = nbquant.modelopt.HistogramCalibrator()
        self.cal.collect(np.random.default_rng(0).standard_normal(shape(HISTOGRAM_N), dtype=np.float32))

    def time_compute_amax(self, method):
        """``compute_amax(method)`` with its default options (entropy and mse scan bins 128 to 2048)."""
        self.cal.compute_amax(method)

    def track_amax(self, method):
        """The calibrated amax of the standard-normal batch: a numerical regression shows as a step."""
        return float(self.cal.compute_amax(method))

    track_amax.unit = "amax"
