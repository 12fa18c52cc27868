"""Stable rank of every weight matrix: what the training thread pays on a due step, and the worker's time.

``stable_rank_every`` (off by default): TensorBoardMonitor copies the chosen weights to the host on the
training thread (``StableRanks.measure``) and a worker thread computes (Lanczos iteration, restarted from
the previous due step's vector). MindFormers' TrainingStateMonitor (``stable_rank_config``) computes on
the training thread: ``_get_stable_rank`` per weight, 5 power iterations of MindSpore ops from a random
vector. Both on the same MindSpore Parameters (CPU): the tiny LLaMA's and a synthetic 80-layer LLaMA's
matrices, scaled to hidden 256 (vocabulary 1,024). Between due steps every weight moves by a relative
1e-3, as training moves it. Variants alternate round by round in one process.

python -m benchmarks.stable_rank_cost [--quick]
"""

from __future__ import annotations

import statistics
import threading
import time

import mindspore  # noqa: F401  (first: tensorboard's protobufs loaded before it break its import)
import numpy as np

from benchmarks.layer_norms import PARAMETER_LISTS
from benchmarks.optimizer_state_cost import Row, _shape, medians_by_list, section_main, table_lines

COPY = "mftb StableRanks.measure on the training thread (host copy of the weights)"
FIRST = "mftb worker thread, first due step (no previous vector)"
WARM = "mftb worker thread, a later due step (the previous due step's vectors)"
THEIRS = "TrainingStateMonitor _get_stable_rank per weight on the training thread (5 power iterations)"


def _weights(names: list[str]) -> list:
    from mindspore import Parameter, Tensor

    rng = np.random.default_rng(0)
    matrices = [name for name in names if len(_shape(name)) == 2]
    return [Parameter(Tensor(rng.standard_normal(_shape(n)).astype(np.float32)), name=n) for n in matrices]


def _nudge(weights: list, rng: np.random.Generator) -> None:
    """A training step's worth of change: every weight by a relative 1e-3."""
    for weight in weights:
        value = weight.asnumpy()
        value += (1e-3 * np.std(value)) * rng.standard_normal(value.shape).astype(np.float32)


def _due_step(ranks: object) -> tuple[float, float]:
    """(ms on the calling thread, ms until the worker delivered)."""
    done = threading.Event()
    start = time.perf_counter()
    ranks.measure(1, lambda step, values: done.set())
    copied = time.perf_counter()
    done.wait(600)
    return (copied - start) * 1e3, (time.perf_counter() - copied) * 1e3


def measure(quick: bool) -> list[Row]:
    from mindformers.core.callback.callback import _get_stable_rank

    from mindformers_tbplugin.framework.stable_rank import StableRanks

    rounds = 1 if quick else 3
    rows = []
    rng = np.random.default_rng(1)
    for label, names in PARAMETER_LISTS.items():
        weights = _weights(names)
        per_round: dict[str, list[float]] = {COPY: [], FIRST: [], WARM: [], THEIRS: []}
        _get_stable_rank(weights[0], 5)  # warm-up: the ops' first launch compiles
        for _ in range(rounds):
            ranks = StableRanks.for_parameters(weights, [".*"], "statistics")
            copy_ms, first_ms = _due_step(ranks)
            _nudge(weights, rng)
            _, warm_ms = _due_step(ranks)
            ranks.close(60)
            start = time.perf_counter()
            for weight in weights:
                _get_stable_rank(weight, 5)
            per_round[THEIRS].append((time.perf_counter() - start) * 1e3)
            per_round[COPY].append(copy_ms)
            per_round[FIRST].append(first_ms)
            per_round[WARM].append(warm_ms)
        for name, values in per_round.items():
            rows.append((label, len(weights), name, statistics.median(values), values))
    return rows


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    rows = measure(quick)
    lines = [
        "## Stable rank: training-thread and worker time of one due step",
        "",
        "`stable_rank_every` (off by default), every 2-D weight chosen (`stable_rank_params: null`): "
        "`weight_stable_rank/<name>` and `weight_eigenvalue/<name>`. MindSpore Parameters on this CPU, matrices "
        "scaled to hidden 256 (vocabulary 1,024); between two due steps every weight moves by a relative 1e-3. "
        "TrainingStateMonitor's `_get_stable_rank` on the same weights with its default 5 power iterations (which "
        "do not converge: its values are estimates). Median (and min-max) over rounds. "
        "`python -m benchmarks.stable_rank_cost`.",
        "",
        "| weights | matrices | variant | median ms per due step | min-max over rounds |",
        "|---|---:|---|---:|---|",
    ]
    lines += table_lines(rows, 1)
    lines.append("")
    for label, medians in medians_by_list(rows).items():
        lines.append(
            f"- {label}: **{medians[COPY]:.1f} ms on the training thread** per due step (TrainingStateMonitor's "
            f"route {medians[THEIRS] / medians[COPY]:.0f}x that, all of it on the training thread); the worker "
            f"takes {medians[FIRST]:.0f} ms on the first due step, {medians[WARM]:.0f} ms on a later one."
        )
    return "\n".join([*lines, ""]), []


def main(argv: list[str] | None = None) -> None:
    section_main(argv, "python -m benchmarks.stable_rank_cost", __doc__, markdown_section)


if __name__ == "__main__":
    main()
