"""Training-thread cost of handing one step's 10 scalars to a TensorBoard writer.

Variants, alternated round by round in one process so machine noise hits all of them alike:
* ``mftb RunWriter.add_scalars``: our writer (a deque append; encoding happens on its thread);
* ``tensorboardX add_scalar x10``: what MindFormers' own TensorBoard support calls per scalar.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TAGS = [f"bench/metric_{i}" for i in range(10)]


@dataclass
class Measurement:
    variant: str
    per_round_median_us: list[float]

    @property
    def median_us(self) -> float:
        return statistics.median(self.per_round_median_us)


def _time_steps(log_step: Callable[[int], None], steps: int) -> float:
    """Median training-thread microseconds per logged step."""
    samples = []
    clock = time.perf_counter_ns
    for step in range(steps):
        start = clock()
        log_step(step)
        samples.append(clock() - start)
    return statistics.median(samples) / 1000.0


def _ours(folder: Path, steps: int) -> float:
    from mindformers_tbplugin.tfevents.writer import RunWriter

    writer = RunWriter(folder / "mftb", flush_secs=5.0)

    def log_step(step: int) -> None:
        writer.add_scalars(step, {tag: step * 0.001 + i for i, tag in enumerate(TAGS)})

    try:
        return _time_steps(log_step, steps)
    finally:
        writer.close()


def _tensorboardx(folder: Path, steps: int) -> float:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(folder / "tbx"), flush_secs=5)

    def log_step(step: int) -> None:
        for i, tag in enumerate(TAGS):
            writer.add_scalar(tag, step * 0.001 + i, global_step=step)

    try:
        return _time_steps(log_step, steps)
    finally:
        writer.close()


VARIANTS: dict[str, Callable[[Path, int], float]] = {
    "mftb RunWriter.add_scalars (10 scalars)": _ours,
    "tensorboardX add_scalar x10": _tensorboardx,
}


def measure(steps: int, rounds: int) -> list[Measurement]:
    results = {name: Measurement(name, []) for name in VARIANTS}
    for round_index in range(rounds):
        order = list(VARIANTS.items())
        if round_index % 2:
            order.reverse()
        for name, run in order:
            with tempfile.TemporaryDirectory() as folder:
                results[name].per_round_median_us.append(run(Path(folder), steps))
    return list(results.values())
