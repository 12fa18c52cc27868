"""One compared step's errors: |run - base| and |run - base| / |base|, with the printed resolution taken off.

A value printed with 3 decimals is known to +-0.0005 only: two values that differ by less than their
rounding can carry are not different. The threshold is half the resolution of each side, summed
(0.0005 against a full-precision run, 0.001 when both are printed with 3 decimals); an absolute error
at or under it counts as 0. A relative error against a baseline value of 0 is undefined (NaN) unless
the absolute error is 0."""

from __future__ import annotations

import math

import numpy as np


def rounding_threshold(run_resolution: float, base_resolution: float) -> float:
    """The largest difference the two sides' printed rounding alone can make."""
    return (run_resolution + base_resolution) / 2


def step_error(run: float, base: float, threshold: float = 0.0) -> tuple[float, float]:
    """(absolute, relative) error of one step; the scalar twin of ``step_errors`` for a live caller."""
    abs_err = abs(run - base)
    if abs_err <= threshold:
        return 0.0, 0.0
    return abs_err, (abs_err / abs(base) if base != 0 else math.nan)


def step_errors(run: np.ndarray, base: np.ndarray, threshold: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(absolute, relative) errors of aligned float64 arrays, as ``step_error`` computes each."""
    abs_err = np.abs(run - base)
    abs_err[abs_err <= threshold] = 0.0
    magnitude = np.abs(base)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_err = np.where(magnitude > 0, abs_err / np.where(magnitude > 0, magnitude, 1.0), np.nan)
    rel_err[abs_err == 0] = 0.0
    return abs_err, rel_err
