"""A run against its baseline: which tags, every tag compared, the step-count rule, the baseline's own
spread when a second baseline is given, and the verdict."""

from __future__ import annotations

from dataclasses import dataclass, field

from mindformers_tbplugin.alignment import noise as noise_rules
from mindformers_tbplugin.alignment import x_axis
from mindformers_tbplugin.alignment.comparison import Check, TagComparison, compare_tag
from mindformers_tbplugin.alignment.criteria import Criteria
from mindformers_tbplugin.alignment.matching import align
from mindformers_tbplugin.alignment.noise import NoiseJudgement
from mindformers_tbplugin.alignment.step_errors import rounding_threshold
from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.imports.imported_run import ImportedRun
from mindformers_tbplugin.pipeline import metrics

# Compared by default: the loss always, these when both runs have them.
DEFAULT_TAGS = (metrics.TRAIN_LOSS, metrics.TRAIN_GRAD_NORM, metrics.TRAIN_LR)


@dataclass
class RunComparison:
    criteria: Criteria
    axis: str
    tags: dict[str, TagComparison]
    step_rule: Check | None = None
    strict: bool = False
    noise: dict[str, NoiseJudgement] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        judged = [c.passed for c in self.tags.values() if c.passed is not None]
        failed = not all(judged) or (self.strict and self.step_rule is not None and not self.step_rule.ok)
        return "fail" if failed else "pass"


def choose_tags(
    run: ImportedRun, base: ImportedRun, tags: list[str] | None, criteria: Criteria, axis: str
) -> list[str]:
    """``tags`` as asked (each in both runs), else the loss and, when both runs have them, the gradient
    norm, the learning rate and any tag the criteria judge."""
    if tags:
        for tag in tags:
            for name, source in (("the run", run), ("the baseline", base)):
                if tag not in source.scalars:
                    have = ", ".join(sorted(source.scalars)[:12]) or "none"
                    raise UsageError(f"{name} has no tag {tag} (its scalar tags: {have})")
        chosen = list(dict.fromkeys(tags))
    else:
        for name, source in (("the run", run), ("the baseline", base)):
            if metrics.TRAIN_LOSS not in source.scalars:
                have = ", ".join(sorted(source.scalars)[:12]) or "none"
                raise UsageError(
                    f"{name} has no {metrics.TRAIN_LOSS} (its scalar tags: {have}); choose tags with --tags"
                )
        wanted = dict.fromkeys([*DEFAULT_TAGS, *criteria.tags])
        chosen = [tag for tag in wanted if tag in run.scalars and tag in base.scalars]
    if axis != "steps":
        for name, source in (("the run", run), ("the baseline", base)):
            if not x_axis.has_axis(source, metrics.TRAIN_LOSS, axis):
                raise x_axis.missing_axis(name, axis)
    return chosen


def _compare_one(run: ImportedRun, base: ImportedRun, tag: str, criteria: Criteria, axis: str) -> TagComparison:
    run_points, run_window = x_axis.series(run, tag, axis)
    base_points, base_window = x_axis.series(base, tag, axis)
    aligned = align(run_points, base_points, run_window, base_window)
    threshold = rounding_threshold(run.resolution.get(tag, 0.0), base.resolution.get(tag, 0.0))
    comparison = compare_tag(tag, aligned, threshold, criteria.tags.get(tag))
    if threshold:
        comparison.notes.append(f"differences up to {threshold:g} are inside the printed rounding and count as 0")
    for name, window in (
        ("the baseline's", base.averaged_over.get(tag, 1)),
        ("the run's", run.averaged_over.get(tag, 1)),
    ):
        if window > 1:
            comparison.notes.append(f"{name} values are means over {window} steps: compared over the same windows")
    return comparison


def _no_common_step(tag: str, run: ImportedRun, base: ImportedRun, axis: str) -> UsageError:
    def extent(source: ImportedRun) -> str:
        points, window = x_axis.series(source, tag, axis)
        steps = sorted(points)
        mean = f", each a mean over {window} {axis}" if window > 1 else ""
        return f"{len(steps)} points at {steps[0]}..{steps[-1]}{mean}" if steps else "no points"

    return UsageError(
        f"{tag}: the run and the baseline have no {axis[:-1]} in common to compare (run: {extent(run)}; baseline: "
        f"{extent(base)}); a baseline of means over n steps needs the run's every step in each window (log_every: 1)"
    )


def _step_rule(loss: TagComparison, run: ImportedRun, criteria: Criteria, axis: str) -> Check | None:
    if criteria.min_steps is None or not loss.summary["steps"]:
        return None
    aligned = loss.aligned
    covered = int(aligned.steps[-1] - aligned.steps[0] + aligned.spans[0])
    per_step = 1 if axis == "steps" else x_axis.units_per_step(run, axis)
    if per_step is None:
        return Check(
            "step count", f">= {criteria.min_steps} steps", False, f"unknown: the run's {axis} per step are not known"
        )
    covered //= per_step
    walls = [run.wall_times[s] for s in (int(aligned.steps[0]), int(aligned.steps[-1])) if s in run.wall_times]
    hours = (walls[-1] - walls[0]) / 3600 if len(walls) == 2 else None
    rule = f">= {criteria.min_steps} steps"
    if criteria.recommended_steps:
        hours_rule = f" or {criteria.recommended_hours:g} h" if criteria.recommended_hours else ""
        rule += f" ({criteria.recommended_steps} steps{hours_rule} recommended)"
    duration = "" if hours is None else f" over {hours:.1f} h" if hours >= 1 else f" over {hours * 3600:.0f} s"
    detail = f"{covered} steps compared{duration}"
    return Check("step count", rule, covered >= criteria.min_steps, detail)


def compare_runs(
    run: ImportedRun,
    base: ImportedRun,
    criteria: Criteria,
    tags: list[str] | None = None,
    noise: ImportedRun | None = None,
    strict: bool = False,
    axis: str = "steps",
) -> RunComparison:
    """The comparison of ``run`` with ``base``; UsageError where the runs cannot be compared."""
    if axis == "steps" and (mismatch := x_axis.batch_mismatch(run, base)):
        raise UsageError(mismatch)
    chosen = choose_tags(run, base, tags, criteria, axis)
    if axis != "steps":
        skipped = [t for t in chosen if not (x_axis.has_axis(run, t, axis) and x_axis.has_axis(base, t, axis))]
        chosen = [t for t in chosen if t not in skipped]
    else:
        skipped = []
    if not any(tag in criteria.tags for tag in chosen):
        raise UsageError(
            f"the criteria {criteria.name} judge none of the compared tags ({', '.join(chosen) or 'none'}); "
            f"they judge {', '.join(criteria.tags)}"
        )
    result = RunComparison(criteria, axis, {}, strict=strict)
    if skipped:
        result.notes.append(f"not compared by {axis}: {', '.join(skipped)} (no {axis} twin in both runs)")
    for tag in chosen:
        comparison = _compare_one(run, base, tag, criteria, axis)
        if not comparison.summary["steps"]:
            raise _no_common_step(tag, run, base, axis)
        result.tags[tag] = comparison
    first = result.tags.get(metrics.TRAIN_LOSS) or next(iter(result.tags.values()))
    result.step_rule = _step_rule(first, run, criteria, axis)
    if noise is not None:
        _judge_noise(result, base, noise, criteria, axis)
    return result


def _judge_noise(result: RunComparison, base: ImportedRun, noise: ImportedRun, criteria: Criteria, axis: str) -> None:
    """Each judged tag passes on the criteria or inside the baseline's own spread (the guide: a standard
    the baseline itself does not meet is relaxed to the baseline's fluctuation)."""
    for tag, comparison in result.tags.items():
        if tag not in noise.scalars or not x_axis.has_axis(noise, tag, axis):
            result.notes.append(f"the second baseline has no {tag}: no spread for it")
            continue
        spread = _compare_one(noise, base, tag, criteria, axis)
        judgement = noise_rules.judge(comparison, spread.aligned, spread.threshold, criteria.noise)
        if judgement is None:
            result.notes.append(f"{tag}: the second baseline has no step in common with the comparison")
            continue
        result.noise[tag] = judgement
        if comparison.passed is not None:
            comparison.passed = comparison.passed or judgement.passed
            comparison.summary["pass"] = comparison.passed
