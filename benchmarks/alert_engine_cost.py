"""Training-thread cost of AlertMonitor: per logged step, the incident bookkeeping (the step's written
values kept for an alert's incident) and one ``AlertEngine.observe``.

The default rules plus ``nonfinite`` with ``action: stop``, fed the 10 values TensorBoardMonitor
publishes per step (noisy, healthy: no alert fires, which is the common case).

python -m benchmarks.alert_engine_cost [--steps N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from mindformers_tbplugin.alerts.culprits import GradientCulprits
from mindformers_tbplugin.alerts.engine import DEFAULT_RULES, AlertEngine, parse_rules
from mindformers_tbplugin.alerts.incident import IncidentRecorder
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.run import Run

TAGS = (
    metrics.TRAIN_LOSS,
    metrics.TRAIN_LR,
    metrics.TRAIN_GRAD_NORM,
    metrics.TRAIN_LOSS_SCALE,
    metrics.TRAIN_OVERFLOW,
    metrics.PERF_STEP_TIME_MS,
    metrics.PERF_SAMPLES_PER_S,
    metrics.PERF_TOKENS_PER_S,
    metrics.SYSTEM_HOST_RSS_GB,
    metrics.TRAIN_PARAM_NORM,
)


def _steps(count: int, seed: int) -> list[dict[str, float]]:
    rng = random.Random(seed)
    steps = []
    for _ in range(count):
        values = {tag: 1.0 + 0.05 * rng.gauss(0, 1) for tag in TAGS}
        values[metrics.TRAIN_OVERFLOW] = 0.0
        values[metrics.TRAIN_LOSS_SCALE] = 1024.0
        steps.append(values)
    return steps


def measure(steps: int, rounds: int) -> tuple[float, list[float]]:
    """(median µs per step over rounds, per-round medians)."""
    per_round = []
    for index in range(rounds):
        engine = AlertEngine(parse_rules([{"rule": "nonfinite", "action": "stop"}, *DEFAULT_RULES[1:]]))
        incidents = IncidentRecorder(Run(), GradientCulprits())
        clock = time.perf_counter_ns
        samples = []
        for step, values in enumerate(_steps(steps, index), start=1):
            start = clock()
            incidents.remember(step, values)
            engine.observe(step, values)
            samples.append(clock() - start)
        per_round.append(statistics.median(samples) / 1000.0)
    return statistics.median(per_round), per_round


def markdown_section(quick: bool, target_us: float) -> tuple[str, list[str]]:
    steps, rounds = (5_000, 3) if quick else (50_000, 5)
    median_us, per_round = measure(steps, rounds)
    lines = [
        "## Alert rules: training-thread cost per logged step",
        "",
        f"IncidentRecorder.remember and AlertEngine.observe with the default rules (+ nonfinite, action stop) "
        f"on the 10 published values; "
        f"{steps} steps per round, {rounds} rounds, median of per-round medians.",
        "",
        "| median µs/step | min-max over rounds |",
        "|---|---|",
        f"| {median_us:.2f} | {min(per_round):.2f}-{max(per_round):.2f} |",
        "",
    ]
    missed = [f"alert rules {median_us:.2f} µs/step > target {target_us} µs"] if median_us > target_us else []
    return "\n".join(lines), missed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=50_000)
    args = parser.parse_args(argv)
    median_us, per_round = measure(args.steps, 5)
    rounds = ", ".join(f"{r:.2f}" for r in per_round)
    print(f"incident bookkeeping + AlertEngine.observe: {median_us:.2f} µs/step (rounds: {rounds})")


if __name__ == "__main__":
    main()
