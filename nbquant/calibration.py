"""The former home of :mod:`nbquant.modelopt.calibration`, kept so that existing imports keep working."""

from __future__ import annotations

from .modelopt.calibration import MAX_NUM_BINS, HistogramCalibrator, MaxCalibrator

__all__ = ["MaxCalibrator", "HistogramCalibrator", "MAX_NUM_BINS"]
