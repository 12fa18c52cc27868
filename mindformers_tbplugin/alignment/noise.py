"""The baseline's own spread (``--noise BASELINE2``: the baseline run again without determinism) and the run
judged inside it, as MindFormers' precision tuning guide asks: "if the error is within the benchmark
error range and the error fluctuates up and down along the 0-axis, the error can be considered
reasonable".

Read as two tests on the steps where both the run and the second baseline are compared with the
baseline (NoiseRule in criteria.py):
- within the spread: at each step, |run - base| at most the largest |baseline2 - base| of the
  ``window`` compared steps either side, at ``within_fraction`` of the steps or more. A run that is one
  more draw of the same noise is over the largest of 2 x window + 1 noise values at about
  1 / (2 x window + 2) of its steps (4.5% for window 10);
- around 0: |mean(run - base)| at most ``bias_factor`` x mean |baseline2 - base|: no offset larger than
  the baseline's own typical difference."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mindformers_tbplugin.alignment.comparison import TagComparison
from mindformers_tbplugin.alignment.criteria import NoiseRule
from mindformers_tbplugin.alignment.matching import Aligned
from mindformers_tbplugin.alignment.step_errors import step_errors


@dataclass(frozen=True)
class NoiseJudgement:
    steps: int
    spread_mean_abs_err: float
    spread_max_abs_err: float
    within_fraction: float
    bias: float
    bias_limit: float
    within: bool
    around_zero: bool

    @property
    def passed(self) -> bool:
        return self.within and self.around_zero

    def fields(self) -> dict[str, float | int | bool]:
        return {
            "steps": self.steps,
            "spread_mean_abs_err": self.spread_mean_abs_err,
            "spread_max_abs_err": self.spread_max_abs_err,
            "within_fraction": self.within_fraction,
            "bias": self.bias,
            "bias_limit": self.bias_limit,
            "pass": self.passed,
        }


def signed_errors(aligned: Aligned, threshold: float) -> np.ndarray:
    """run - base per step, 0 where the difference is inside the printed rounding."""
    abs_err, _ = step_errors(aligned.run, aligned.base, threshold)
    return np.sign(aligned.run - aligned.base) * abs_err


def local_max(values: np.ndarray, window: int) -> np.ndarray:
    """The largest of ``values`` within ``window`` positions either side of each position."""
    if window == 0 or len(values) < 2:
        return values.copy()
    padded = np.pad(values, window, constant_values=-np.inf)
    return np.lib.stride_tricks.sliding_window_view(padded, 2 * window + 1).max(axis=1)


def judge(run: TagComparison, noise: Aligned, noise_threshold: float, rule: NoiseRule) -> NoiseJudgement | None:
    """``run`` (run vs baseline) inside ``noise`` (baseline2 vs baseline); None without a common step."""
    _, run_at, noise_at = np.intersect1d(run.aligned.steps, noise.steps, assume_unique=True, return_indices=True)
    same = run.aligned.spans[run_at] == noise.spans[noise_at]
    run_at, noise_at = run_at[same], noise_at[same]
    if not len(run_at):
        return None
    run_diff = signed_errors(run.aligned, run.threshold)[run_at]
    noise_diff = np.abs(signed_errors(noise, noise_threshold)[noise_at])
    envelope = local_max(noise_diff, rule.window)
    within_fraction = float(np.mean(np.abs(run_diff) <= envelope))
    bias = float(abs(run_diff.mean()))
    bias_limit = rule.bias_factor * float(noise_diff.mean())
    return NoiseJudgement(
        steps=len(run_at),
        spread_mean_abs_err=float(noise_diff.mean()),
        spread_max_abs_err=float(noise_diff.max()),
        within_fraction=within_fraction,
        bias=bias,
        bias_limit=bias_limit,
        within=within_fraction >= rule.within_fraction,
        around_zero=bias <= bias_limit,
    )
