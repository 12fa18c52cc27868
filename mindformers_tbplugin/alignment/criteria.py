"""STAND-IN until the criteria module lands."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Criteria:
    loss_first_abs: float
    loss_first_rel: float
    loss_mean_abs: float
    loss_mean_rel: float
    grad_norm_mean_rel: float


MIGRATION = Criteria(0.005, 0.005, 0.01, 0.01, 0.10)
