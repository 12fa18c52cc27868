"""The instability signals at their default schedules: training-thread time per step, with and without.

``optimizer_state_every: 100`` (the default) adds Adam's moment norms and the parameter change
(``update_norm/*``, a host copy of every parameter at the due step's begin and end) once per 100 steps;
``attention_logit_every`` and ``stable_rank_every`` cost nothing in a model without tracking / by default.
Two kinds of probe training of the tiny LLaMA (``benchmarks/probe/overhead_probe.py``, 1 rank), alternated:
TensorBoardMonitor with its defaults, and with ``optimizer_state_every: 0`` (the monitor before these
signals). The probe times the monitor's ``step_begin`` + ``step_end`` of the steps it forwards (half of
them, in blocks). The difference of the medians is the cost on an ordinary logged step (the target);
a due step falls on one forwarded step in 50, so the difference of the means, halved, is the cost per
training step with the optimizer-state steps averaged in.

python -m benchmarks.signals_cost [--quick]
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from benchmarks.monitor_cost import LLAMA, run_probe
from benchmarks.optimizer_state_cost import section_main
from benchmarks.training_overhead import make_data

TARGET_US = 10.0  # training-thread µs per step more than without the signals, at the default schedules
VARIANTS = {
    "defaults (optimizer_state_every: 100)": {},
    "without (optimizer_state_every: 0)": {"optimizer_state_every": 0},
}


def measure(trainings: int, steps: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per variant, the probe's median and mean µs of each training."""
    medians: dict[str, list[float]] = {name: [] for name in VARIANTS}
    means: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="mftb-bench-data-") as name:
        data = make_data(Path(name), steps * 2)
        for _ in range(trainings):
            for variant, options in VARIANTS.items():
                result = run_probe(1, steps, data, LLAMA, options)
                medians[variant].append(result.inside_median_us)
                means[variant].append(result.inside_mean_us)
    return medians, means


def render(
    steps: int, medians: dict[str, list[float]], means: dict[str, list[float]], quick: bool
) -> tuple[str, list[str]]:
    trainings = len(next(iter(medians.values())))
    lines = [
        "## Instability signals at their defaults: training-thread µs per step",
        "",
        f"Tiny LLaMA, 1 rank, {steps} steps per training, {trainings} training(s) per variant, alternated; the "
        "probe's time inside the monitor's `step_begin` + `step_end` on the steps it forwards (half of them): "
        "median and mean per training, and the median of those over trainings. The difference of the medians "
        "is the extra on an ordinary logged step; due steps (every 100) fall on one forwarded step in 50, so "
        "the extra per training step with them averaged in is half the difference of the means. "
        "`python -m benchmarks.signals_cost`.",
        "",
        "| variant | median µs (per training) | mean µs (per training) | median µs, over trainings "
        "| mean µs, over trainings |",
        "|---|---|---|---:|---:|",
    ]
    for variant in VARIANTS:
        per_median = ", ".join(f"{value:.1f}" for value in medians[variant])
        per_mean = ", ".join(f"{value:.1f}" for value in means[variant])
        lines.append(
            f"| {variant} | {per_median} | {per_mean} | {statistics.median(medians[variant]):.1f} "
            f"| {statistics.median(means[variant]):.1f} |"
        )
    with_signals, without = (statistics.median(medians[variant]) for variant in VARIANTS)
    extra = with_signals - without
    with_mean, without_mean = (statistics.median(means[variant]) for variant in VARIANTS)
    averaged = (with_mean - without_mean) / 2
    verdict = (
        f"the signals at their defaults cost **{extra:+.1f} µs per ordinary logged step** (target <= "
        f"+{TARGET_US:.0f} µs), **{averaged:+.1f} µs per training step** with the optimizer-state steps averaged in"
    )
    lines += ["", f"- Tiny LLaMA: {verdict}.", ""]
    if quick:
        lines += ["One short training per variant (`--quick`): indicative, not a verdict.", ""]
    missed = [f"instability signals at defaults, tiny LLaMA: {extra:+.1f} µs > +{TARGET_US:.0f} µs"]
    return "\n".join(lines), missed if extra > TARGET_US and not quick else []


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    trainings, steps = (1, 400) if quick else (3, 2000)
    return render(steps, *measure(trainings, steps), quick)


def main(argv: list[str] | None = None) -> None:
    section_main(argv, "python -m benchmarks.signals_cost", __doc__, markdown_section)


if __name__ == "__main__":
    main()
