"""Training-thread cost of one optimizer-state step: Adam's moment norms and the parameter change per
layer group.

Every ``optimizer_state_every`` steps (default 100) TensorBoardMonitor computes each moment's squared
L2 norm and groups them (``OptimizerState.tags``): on a device with one norm op per moment and one host
copy of the vector, on a CPU (here) with numpy over the moments in place. MindFormers'
TrainingStateMonitor (``optimizer_state_format``) takes
``param.norm().item()`` per moment (``_get_optimizer_state``: one host read each). Both run here on the
same MindSpore Parameters (CPU) for the tiny LLaMA's 21 parameters and a synthetic 80-layer LLaMA's 723,
its matrices scaled down to hidden 256 (the per-parameter overheads, which dominate on a device; a real
70B model's moments do not fit this machine). At the same steps ``update_norm/*`` copies the parameters
at the step's begin and subtracts them from the values at its end (``ParameterUpdates``): timed together.
Variants alternate round by round in one process.

python -m benchmarks.optimizer_state_cost [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace

import mindspore  # noqa: F401  (first: tensorboard's protobufs loaded before it break its import)
import numpy as np

from benchmarks.layer_norms import PARAMETER_LISTS

HIDDEN, VOCAB = 256, 1024
OURS = "mftb OptimizerState.tags (on a CPU: numpy over the moments in place)"
THEIRS = "TrainingStateMonitor _get_optimizer_state (norm().item() per moment)"
UPDATES = "mftb ParameterUpdates: update_norm/update_ratio (host copy at begin, difference at end)"


def _shape(name: str) -> tuple[int, ...]:
    if "norm" in name:
        return (HIDDEN,)
    if "embedding" in name or "lm_head" in name:
        return (VOCAB, HIDDEN)
    return (HIDDEN, HIDDEN)


def _optimizer(names: list[str]) -> SimpleNamespace:
    from mindspore import Parameter, ParameterTuple, Tensor

    rng = np.random.default_rng(0)

    def moments(prefix: str) -> ParameterTuple:
        return ParameterTuple(
            Parameter(Tensor(rng.standard_normal(_shape(name)).astype(np.float32)), name=f"{prefix}.{name}")
            for name in names
        )

    return SimpleNamespace(exp_avg=moments("adam_m"), exp_avg_sq=moments("adam_v"), parameters=moments("model"))


def _parameter_change(updates: object) -> None:
    updates.step_began(1)
    updates.tags(1)


def measure(quick: bool) -> list[Row]:
    from mindformers.core.callback.callback import _get_optimizer_state

    from mindformers_tbplugin.framework.optimizer_state import OptimizerState
    from mindformers_tbplugin.framework.update_norms import ParameterUpdates

    rounds, steps = (3, 5) if quick else (5, 20)
    rows = []
    for label, names in PARAMETER_LISTS.items():
        optimizer = _optimizer(names)
        state = OptimizerState.for_optimizer(optimizer, "layer")
        updates = ParameterUpdates.for_parameters(list(optimizer.parameters), "layer")
        variants = {
            OURS: state.tags,
            THEIRS: lambda o=optimizer: (_get_optimizer_state(o.exp_avg), _get_optimizer_state(o.exp_avg_sq)),
            UPDATES: lambda u=updates: _parameter_change(u),
        }
        per_round: dict[str, list[float]] = {name: [] for name in variants}
        for variant in variants.values():
            variant()  # warm-up: the ops' first launch compiles
        for index in range(rounds):
            for name, run in list(variants.items()) if index % 2 == 0 else list(variants.items())[::-1]:
                samples = []
                for _ in range(steps):
                    start = time.perf_counter()
                    run()
                    samples.append((time.perf_counter() - start) * 1e3)
                per_round[name].append(statistics.median(samples))
        for name, medians in per_round.items():
            rows.append((label, len(names), name, statistics.median(medians), medians))
    return rows


Row = tuple[str, int, str, float, list[float]]  # parameter list, count, variant, median ms, per-round medians


def table_lines(rows: list[Row], digits: int) -> list[str]:
    """One table row per measurement: median and min-max over rounds, in ms."""
    return [
        f"| {label} | {count} | {name} | {median:.{digits}f} | {min(values):.{digits}f}-{max(values):.{digits}f} |"
        for label, count, name, median, values in rows
    ]


def medians_by_list(rows: list[Row]) -> dict[str, dict[str, float]]:
    """``{parameter list: {variant: median ms}}``."""
    by_list: dict[str, dict[str, float]] = {}
    for label, _, name, median, _ in rows:
        by_list.setdefault(label, {})[name] = median
    return by_list


def section_main(
    argv: list[str] | None, prog: str, doc: str | None, section: Callable[[bool], tuple[str, list[str]]]
) -> None:
    """``python -m benchmarks.<module> [--quick]``: print the module's section."""
    parser = argparse.ArgumentParser(prog=prog, description=doc)
    parser.add_argument("--quick", action="store_true", help="fewer rounds or trainings")
    print(section(parser.parse_args(argv).quick)[0])


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    rows = measure(quick)
    lines = [
        "## Adam moment norms and parameter change: training-thread cost of one optimizer-state step",
        "",
        "`optimizer_state_every` (100 by default): `adam_m_norm/<group>` and `adam_v_norm/<group>`. Both moments "
        "of every parameter, MindSpore Parameters on this CPU, matrices scaled to hidden 256 (vocabulary 1,024): "
        "the per-parameter overheads are what is compared. At the same steps `update_norm/<group>` and "
        "`update_ratio/<group>`: a host copy of every parameter at the step's begin, subtracted from the "
        "values at its end. Per round the median over its steps; the median (and min-max) over rounds. "
        "`python -m benchmarks.optimizer_state_cost`.",
        "",
        "| parameter list | params | variant | median ms per optimizer-state step | min-max over rounds |",
        "|---|---:|---|---:|---|",
    ]
    lines += table_lines(rows, 2)
    lines.append("")
    for label, medians in medians_by_list(rows).items():
        both = medians[OURS] + medians[UPDATES]
        lines.append(
            f"- {label}: moment norms {medians[OURS]:.2f} ms (TrainingStateMonitor's route "
            f"{medians[THEIRS] / medians[OURS]:.1f}x) + parameter change {medians[UPDATES]:.2f} ms = **{both:.2f} ms "
            f"per optimizer-state step**, **{both / 100 * 1e3:.1f} µs per step** averaged at the default 100."
        )
    return "\n".join([*lines, ""]), []


def main(argv: list[str] | None = None) -> None:
    section_main(argv, "python -m benchmarks.optimizer_state_cost", __doc__, markdown_section)


if __name__ == "__main__":
    main()
