"""One tag of a run against its baseline: the compared points, their errors, the summary fields and the
tag's verdict against its criteria."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mindformers_tbplugin.alignment.criteria import TagCriteria
from mindformers_tbplugin.alignment.matching import Aligned
from mindformers_tbplugin.alignment.step_errors import step_errors

# The summary fields of one tag, in the order the table and the JSON show them.
FIELDS = (
    "steps",
    "first_step",
    "first_abs_err",
    "first_rel_err",
    "mean_abs_err",
    "mean_rel_err",
    "max_abs_err",
    "max_rel_err",
    "max_step",
    "first_divergent_step",
    "pass",
)


@dataclass(frozen=True)
class Check:
    """One rule of the criteria applied to one tag: what it asks, and whether the run meets it."""

    name: str
    rule: str
    ok: bool
    detail: str


@dataclass
class TagComparison:
    """``passed``: None when the criteria have no tolerance for the tag (reported, not judged)."""

    tag: str
    aligned: Aligned
    abs_err: np.ndarray
    rel_err: np.ndarray
    threshold: float
    summary: dict[str, Any]
    checks: list[Check] = field(default_factory=list)
    passed: bool | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def divergent_index(self) -> int | None:
        step = self.summary["first_divergent_step"]
        return None if step is None else int(np.searchsorted(self.aligned.steps, step))


def _float(value: Any) -> float | None:
    """A JSON-safe float: NaN (no defined relative error, a non-finite value) and infinity become None."""
    value = float(value)
    return value if np.isfinite(value) else None


def compare_tag(tag: str, aligned: Aligned, threshold: float, criteria: TagCriteria | None) -> TagComparison:
    """The errors of ``aligned`` (``threshold``: the printed rounding, step_errors.py) and, with
    ``criteria``, the tag's checks."""
    abs_err, rel_err = step_errors(aligned.run, aligned.base, threshold)
    steps = aligned.steps
    comparison = TagComparison(tag, aligned, abs_err, rel_err, threshold, {})
    if not len(steps):
        comparison.summary = dict.fromkeys(FIELDS) | {"steps": 0, "pass": False if criteria else None}
        comparison.passed = False if criteria else None
        return comparison
    # a non-finite value makes its errors NaN, which stay in every summary; a baseline value of 0 only
    # leaves the relative error undefined, and that step out of the relative summaries
    nonfinite = ~(np.isfinite(aligned.run) & np.isfinite(aligned.base))
    if nonfinite.any():
        comparison.notes.append(
            f"{int(nonfinite.sum())} compared steps have a non-finite value (the first at step "
            f"{int(steps[np.argmax(nonfinite)])}): their errors are undefined, and so are the means and maxima"
        )
    defined = ~np.isnan(rel_err) | nonfinite
    undefined = int(len(rel_err) - defined.sum())
    if undefined:
        comparison.notes.append(
            f"{undefined} compared steps have a baseline value of 0: no relative error there "
            "(left out of its mean and max)"
        )
    max_at = int(np.argmax(abs_err))
    divergent = criteria.divergent(aligned.run, aligned.base, abs_err, rel_err) if criteria else np.zeros(0, bool)
    first_divergent = int(steps[np.argmax(divergent)]) if divergent.any() else None
    comparison.summary = {
        "steps": len(steps),
        "first_step": int(steps[0]),
        "first_abs_err": _float(abs_err[0]),
        "first_rel_err": _float(rel_err[0]),
        "mean_abs_err": _float(abs_err.mean()),
        "mean_rel_err": _float(rel_err[defined].mean()) if defined.any() else None,
        "max_abs_err": _float(abs_err[max_at]),
        "max_rel_err": _float(rel_err[defined].max()) if defined.any() else None,
        "max_step": int(steps[max_at]),
        "first_divergent_step": first_divergent,
        "pass": None,
    }
    if criteria is not None:
        comparison.checks = _checks(comparison, criteria)
        comparison.passed = all(check.ok for check in comparison.checks)
    comparison.summary["pass"] = comparison.passed
    return comparison


def _checks(comparison: TagComparison, criteria: TagCriteria) -> list[Check]:
    summary = comparison.summary
    checks = []
    if criteria.first_step is not None:
        abs_err, rel_err = summary["first_abs_err"], summary["first_rel_err"]
        ok = bool(criteria.first_step.holds(_or_nan(abs_err), _or_nan(rel_err)))
        checks.append(
            Check(
                "first step",
                criteria.first_step.describe(),
                ok,
                f"step {summary['first_step']}: abs {_general(abs_err)}, rel {_percent(rel_err)}",
            )
        )
    if criteria.mean is not None:
        abs_err, rel_err = summary["mean_abs_err"], summary["mean_rel_err"]
        ok = bool(criteria.mean.holds(_or_nan(abs_err), _or_nan(rel_err)))
        detail = f"abs {_general(abs_err)}, rel {_percent(rel_err)}"
        checks.append(Check("mean", criteria.mean.describe(), ok, detail))
    if criteria.per_step is not None:
        aligned = comparison.aligned
        close = criteria.per_step.close(aligned.run, aligned.base, comparison.threshold)
        failing = int(len(close) - close.sum())
        allowed = criteria.per_step.failures_allowed(len(close))
        checks.append(
            Check(
                "per step",
                criteria.per_step.describe(),
                failing <= allowed,
                f"{failing} of {len(close)} steps outside (allowed {allowed})",
            )
        )
    return checks


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def _general(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.6g}"


def _percent(value: float | None) -> str:
    return "undefined" if value is None else f"{value * 100:.4g}%"
