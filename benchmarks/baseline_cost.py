"""Cost of TensorBoardMonitor's ``baseline`` per logged step, where the main run's values are routed.

A single-rank MetricRouter with a real RunWriter routes the logged steps of a training (10 scalars:
loss, lr, grad norm, loss scale, overflow, step time, throughput, memory), with and without a
Baseline (session/baseline.py) read from a real run folder holding every step's ``train/loss`` and
``train/grad_norm``: the difference is the comparison's cost per logged step (``compare/*``: 8 values
at every step). Without an AlertMonitor that routing runs on the writer thread and the training thread
pays nothing for it; with one, or at a cross-rank aggregation, it runs on the training thread, and
this is its cost there. Variants alternated round by round; a tight loop (warm caches).

python -m benchmarks.baseline_cost [--steps N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.metrics import StepMetrics
from mindformers_tbplugin.pipeline.routing import MetricRouter, RouterOptions
from mindformers_tbplugin.pipeline.topology import Topology
from mindformers_tbplugin.session.baseline import Baseline
from mindformers_tbplugin.tfevents.event_file import EventFile
from mindformers_tbplugin.tfevents.events import encode_scalars_event
from mindformers_tbplugin.tfevents.writer import RunWriter

TARGET_US = 3.0
OPTIONS = RouterOptions(
    aggregate_every=0, rank_policy="writer", topk_ranks=0, vs_samples=False, vs_tokens=False,
    samples_per_step=8.0, tokens_per_sample=4096,
)  # fmt: skip


def _write_baseline(folder: Path, steps: int) -> None:
    rng = random.Random(0)
    events = EventFile(folder)
    for step in range(1, steps + 1):
        values = {metrics.TRAIN_LOSS: 8.0 - step * 1e-4 + rng.gauss(0, 0.01), metrics.TRAIN_GRAD_NORM: 1.0}
        events.write(encode_scalars_event(step, 1.0 + step, values))
    events.close()


def _step(step: int, rng: random.Random) -> StepMetrics:
    loss = 8.0 - step * 1e-4 + rng.gauss(0, 0.01)
    model = {
        metrics.TRAIN_LR: 1e-4,
        metrics.TRAIN_GRAD_NORM: 1.0 + rng.gauss(0, 0.05),
        metrics.TRAIN_LOSS_SCALE: 1.0,
        metrics.TRAIN_OVERFLOW: 0.0,
    }
    system = {
        metrics.PERF_STEP_TIME_MS: 20.0,
        metrics.PERF_SAMPLES_PER_S: 400.0,
        metrics.PERF_TOKENS_PER_S: 1.6e6,
        metrics.SYSTEM_HOST_RSS_GB: 3.0,
        metrics.TRAIN_PARAM_NORM: 100.0,
    }
    return StepMetrics(step, {metrics.TRAIN_LOSS: loss}, model, system)


def _round(folder: Path, steps: int, baseline: Baseline | None, seed: int) -> float:
    """Median µs per logged step of MetricRouter.log_step."""
    writer = RunWriter(folder / f"run_{seed}_{baseline is not None}")
    router = MetricRouter(Topology(0, 1, 1, "stand_alone", False, False), OPTIONS, writer, None, None, derived=baseline)
    rng = random.Random(seed)
    prepared = [_step(step, rng) for step in range(1, steps + 1)]
    clock = time.perf_counter_ns
    samples = []
    for step_metrics in prepared:
        start = clock()
        router.log_step(step_metrics)
        samples.append(clock() - start)
    writer.close()
    return statistics.median(samples) / 1000.0


def measure(steps: int, rounds: int) -> dict[str, list[float]]:
    """Per variant, the per-round median µs per logged step."""
    found: dict[str, list[float]] = {"without baseline": [], "with baseline": []}
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        _write_baseline(folder / "baseline_source", steps)
        for index in range(rounds):
            baseline = Baseline(folder / "baseline_source", folder / f"compared_{index}")
            baseline.drain(600.0)  # read before the clock starts
            found["without baseline"].append(_round(folder, steps, None, index))
            found["with baseline"].append(_round(folder, steps, baseline, index))
    return found


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    steps, rounds = (5_000, 3) if quick else (50_000, 5)
    found = measure(steps, rounds)
    without, with_baseline = (statistics.median(found[name]) for name in ("without baseline", "with baseline"))
    cost = with_baseline - without
    lines = [
        "## Baseline comparison: cost per logged step where the values are routed",
        "",
        "MetricRouter.log_step of one rank (10 scalars, a real RunWriter) with and without `baseline` (read from a "
        f"run folder holding every step's train/loss and train/grad_norm: 8 `compare/*` values per step); {steps} "
        f"steps per round, {rounds} rounds, variants alternated, median of per-round medians (`{COMMAND}`). "
        "Without an AlertMonitor the routing runs on the writer thread and the training thread pays none of it; "
        "with one, or at a cross-rank aggregation, this is the training thread's cost.",
        "",
        "| variant | median µs/logged step | min-max over rounds |",
        "|---|---|---|",
        *(f"| {name} | {statistics.median(per):.2f} | {min(per):.2f}-{max(per):.2f} |" for name, per in found.items()),
        "",
        f"The comparison: **{cost:.2f} µs** per logged step (target <= {TARGET_US:g} µs).",
        "",
    ]
    missed = [f"baseline comparison {cost:.2f} µs/logged step > target {TARGET_US:g} µs"] if cost > TARGET_US else []
    return "\n".join(lines), missed


COMMAND = "python -m benchmarks.baseline_cost"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=50_000)
    args = parser.parse_args(argv)
    found = measure(args.steps, 5)
    for name, per in found.items():
        print(f"{name}: {statistics.median(per):.2f} µs/logged step (rounds: {', '.join(f'{r:.2f}' for r in per)})")
    cost = statistics.median(found["with baseline"]) - statistics.median(found["without baseline"])
    print(f"the comparison: {cost:.2f} µs per logged step (target <= {TARGET_US:g})")


if __name__ == "__main__":
    main()
