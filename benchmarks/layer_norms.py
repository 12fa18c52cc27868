"""Training-thread cost of per-layer gradient norms per logged step, beside MindFormers' TrainingStateMonitor.

With ``runner_wrapper: {local_norm: True}`` the train wrapper returns one squared gradient norm per
parameter. Per logged step TensorBoardMonitor copies that vector to the host (``asnumpy()`` of a
MindSpore Tensor), groups it (``LayerNorms.read`` -> ``MetricRouter.log_step``: one ``bincount``, the
``grad_norm/<group>`` tags) and hands the tags to a real ``RunWriter`` (encoding happens on its thread);
every ``grad_hist_every`` steps it also queues the per-parameter histogram, built on the writer thread.

MindFormers' ``TrainingStateMonitor`` with ``local_norm_format: tensorboard`` gets per-parameter norms
from ``local_norm__<param>_<dtype>_<id>.npy`` files that MindSpore's TensorDump writes when the parallel
context has ``dump_local_norm_path`` (in the bprop of the parallel mirror operators); at each logged step
its ``_dump_data_in_step`` lists the folder, matches every name, ``np.load``s each file, writes one
``add_scalar`` per parameter through MindFormers' tensorboardX writer and deletes the files. TensorDump
has no CPU kernel (the wrapper's ``finish_step`` dump fails to compile on CPU), so here the files are
written between steps, untimed, under the names TensorDump gives them, and two variants are timed:

* ``_dump_data_in_step``: the monitor's whole per-step routine over those files;
* ``_output`` per parameter: only its ``_check_param_name`` + ``_output('local_norm/<param>', ...)`` calls
  (the tensorboardX ``add_scalar`` per parameter), no files: a lower bound of its route.

Both run on a real ``TrainingStateMonitor`` built by MindFormers with the tensorboardX ``SummaryWriter``
that MindFormers' ``tensorboard:`` block creates (``max_queue`` 10). Parameter lists: the tiny LLaMA of
``configs/tiny/llama_tiny_cpu.yaml`` (21 parameters) and a synthetic legacy LLaMA of 80 layers (723).
Variants alternate round by round in one process.

python -m benchmarks.layer_norms [--quick]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mindspore  # noqa: F401  (before any tensorboard proto: its old-style *_pb2 modules fail after them)
import numpy as np

HIST_EVERY = 10  # grad_hist_every in this benchmark (the option's default is 100)
SYNTHETIC_LAYERS = 80
LAYER_PARAMS = (
    "ffn_norm.weight",
    "attention_norm.weight",
    "attention.wq.weight",
    "attention.wk.weight",
    "attention.wv.weight",
    "attention.wo.weight",
    "feed_forward.w1.weight",
    "feed_forward.w2.weight",
    "feed_forward.w3.weight",
)
OURS = "mftb LayerNorms.read + MetricRouter.log_step"
OURS_HIST = "mftb, histogram step"
THEIRS_DUMP = "TrainingStateMonitor._dump_data_in_step"
THEIRS_OUTPUT = "TrainingStateMonitor._output per parameter"


def llama_names(layers: int) -> list[str]:
    """Trainable parameter names of a legacy MindFormers LLaMA, in ``trainable_params()`` order."""
    names = ["model.tok_embeddings.embedding_weight"]
    names += [f"model.layers.{layer}.{param}" for layer in range(layers) for param in LAYER_PARAMS]
    return [*names, "model.norm_out.weight", "lm_head.weight"]


PARAMETER_LISTS = {
    "tiny LLaMA (2 layers)": llama_names(2),  # the tiny model's 21 names, as MindFormers builds them
    f"synthetic LLaMA ({SYNTHETIC_LAYERS} layers)": llama_names(SYNTHETIC_LAYERS),
}


@dataclass
class Measurement:
    parameters: str
    variant: str
    count: int
    per_round_median_us: list[float] = field(default_factory=list)

    @property
    def median_us(self) -> float:
        return statistics.median(self.per_round_median_us)

    @property
    def spread(self) -> str:
        return f"{min(self.per_round_median_us):.1f}-{max(self.per_round_median_us):.1f}"


def _squares(count: int, seed: int) -> list[np.ndarray]:
    """A few distinct per-parameter squared-norm vectors (float32, as the wrapper returns them)."""
    rng = np.random.default_rng(seed)
    return [(rng.lognormal(-4.0, 2.0, count)).astype(np.float32) for _ in range(8)]


def _outputs(squares: np.ndarray) -> tuple:
    """The wrapper's 7 outputs with ``local_norm: True``; the vector is a fresh MindSpore Tensor."""
    from mindspore import Tensor

    return (1.0, False, 1.0, 0.001, 1.0, Tensor(squares), None)


def _ours(names: list[str], steps: int, folder: Path) -> tuple[float, float]:
    """Median µs per logged step: (steps without a histogram, histogram steps)."""
    from mindformers_tbplugin.framework.layer_norms import LayerNorms
    from mindformers_tbplugin.pipeline.gradient_groups import GroupLayout
    from mindformers_tbplugin.pipeline.histograms import gradient_norms_histogram_event
    from mindformers_tbplugin.pipeline.metrics import StepMetrics
    from mindformers_tbplugin.pipeline.routing import MetricRouter, RouterOptions
    from mindformers_tbplugin.pipeline.topology import Topology
    from mindformers_tbplugin.tfevents.writer import RunWriter

    writer = RunWriter(folder / "mftb", flush_secs=5.0)
    layout = GroupLayout.of(names, "layer")
    layer_norms = LayerNorms(layout, layout, HIST_EVERY)
    options = RouterOptions(10, "writer", 0, False, False, None, None, gradient_groups=layout)
    router = MetricRouter(Topology(0, 1, 1, "stand_alone", False, False), options, writer, None, None)
    vectors = _squares(len(names), steps)
    plain, histogram = [], []
    clock = time.perf_counter_ns
    try:
        for step in range(1, steps + 1):
            outputs = _outputs(vectors[step % len(vectors)])
            start = clock()
            step_metrics = StepMetrics(step)
            squares = step_metrics.grad_squares = layer_norms.read(outputs)
            if layer_norms.histogram_due(step, step - 1):  # as the monitor's session does
                writer.add_built(step, functools.partial(gradient_norms_histogram_event, np.array(squares, np.float64)))
            router.log_step(step_metrics)
            elapsed = clock() - start
            (histogram if step % HIST_EVERY == 0 else plain).append(elapsed)
    finally:
        writer.close()
    return statistics.median(plain) / 1000.0, statistics.median(histogram) / 1000.0


def _monitor(folder: Path, dump: bool) -> Any:
    """A TrainingStateMonitor as MindFormers builds it, with its global tensorboardX writer set."""
    import mindspore as ms
    from mindformers.core.callback.callback import TrainingStateMonitor
    from mindformers.utils import tensorboard as mf_tensorboard

    mf_tensorboard._set_tensorboard_writer(SimpleNamespace(tensorboard_dir=str(folder / "tbx")))
    if dump:
        ms.set_auto_parallel_context(dump_local_norm_path=str(folder / "dump"))
    try:
        monitor = TrainingStateMonitor(1, config={"local_norm_format": "tensorboard"}, step_interval=1, dataset_size=1)
    finally:
        ms.set_auto_parallel_context(dump_local_norm_path="")
    if dump:
        os.makedirs(monitor.dump_path, exist_ok=True)
    return monitor


def _theirs(names: list[str], steps: int, folder: Path, dump: bool) -> float:
    """Median µs per logged step of TrainingStateMonitor's local-norm route."""
    from mindformers.utils import tensorboard as mf_tensorboard

    monitor = _monitor(folder, dump)
    vectors = _squares(len(names), steps)
    samples = []
    clock = time.perf_counter_ns
    dump_id = 0
    try:
        for step in range(1, steps + 1):
            norms = [np.array(value, dtype=np.float32) for value in np.sqrt(vectors[step % len(vectors)])]
            if dump:  # what TensorDump leaves in the folder during the step: one file per parameter, then finish_step
                for name, norm in zip(names, norms, strict=True):
                    dump_id += 1
                    np.save(os.path.join(monitor.dump_path, f"local_norm__{name}_float32_{dump_id}.npy"), norm)
                dump_id += 1
                np.save(os.path.join(monitor.dump_path, f"finish_step_float32_{dump_id}.npy"), np.float32(0.0))
                start = clock()
                monitor._dump_data_in_step(step)
                samples.append(clock() - start)
            else:
                formats = monitor.local_norm_format
                start = clock()
                for name, norm in zip(names, norms, strict=True):
                    if monitor._check_param_name(name):
                        monitor._output(f"local_norm/{name}", norm, step, formats)
                samples.append(clock() - start)
    finally:
        mf_tensorboard._unset_tensorboard_writer()
    return statistics.median(samples) / 1000.0


def measure(quick: bool) -> list[Measurement]:
    rounds = 3 if quick else 5
    our_steps = 2_000 if quick else 20_000
    budget, least = (1_000, 5) if quick else (10_000, 12)  # TrainingStateMonitor: parameter-steps per round
    results: list[Measurement] = []
    for label, names in PARAMETER_LISTS.items():
        their_steps = max(least, budget // len(names))
        rows = {
            variant: Measurement(label, variant, count)
            for variant, count in (
                (OURS, our_steps),
                (OURS_HIST, our_steps // HIST_EVERY),
                (THEIRS_DUMP, their_steps),
                (THEIRS_OUTPUT, their_steps),
            )
        }
        variants = [OURS, THEIRS_DUMP, THEIRS_OUTPUT]
        for round_index in range(rounds):
            for variant in variants if round_index % 2 == 0 else variants[::-1]:
                with tempfile.TemporaryDirectory() as folder:
                    _run(variant, rows, names, our_steps if variant == OURS else their_steps, Path(folder))
        results += rows.values()
    return results


def _run(variant: str, rows: dict[str, Measurement], names: list[str], steps: int, folder: Path) -> None:
    """One round of ``variant``, its per-round median(s) added to ``rows``."""
    if variant == OURS:
        plain, histogram = _ours(names, steps, folder)
        rows[OURS].per_round_median_us.append(plain)
        rows[OURS_HIST].per_round_median_us.append(histogram)
    else:
        rows[variant].per_round_median_us.append(_theirs(names, steps, folder, dump=variant == THEIRS_DUMP))


def markdown_section(quick: bool, command: str | None = None) -> tuple[str, list[str]]:
    results = measure(quick)
    rounds = len(results[0].per_round_median_us)
    lines = [
        "## Per-layer gradient norms: training-thread cost per logged step, beside TrainingStateMonitor",
        "",
        "`runner_wrapper.local_norm: True`, 1 rank, `norm_groups: layer`. mftb: `asnumpy()` of a MindSpore Tensor "
        "holding the squared norms, `LayerNorms.read`, `MetricRouter.log_step` (one `bincount`, `grad_norm/<group>` "
        f"+ `grad_norm/total`) into a real RunWriter; `grad_hist_every` {HIST_EVERY}, the histogram steps "
        "timed apart (the histogram itself is built on the writer thread). MindFormers: a real "
        "`TrainingStateMonitor` (`local_norm_format: tensorboard`) with the tensorboardX writer of MindFormers' "
        "`tensorboard:` block. Its norms come from `local_norm__<param>` files written by TensorDump, which has no "
        "CPU kernel (a CPU training with `dump_local_norm_path` fails to compile), so the files are written "
        "untimed between steps under TensorDump's names and `_dump_data_in_step` is timed over them (list, match, "
        "`np.load`, one `add_scalar` per parameter, delete); the `_output` row times only its per-parameter "
        "`add_scalar` calls. Device-side dumping is in neither. Variants alternated round by round in one "
        f"process; per round the median over its steps, then the median (and min-max) over {rounds} rounds.",
        "",
    ]
    if command:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        lines += [f"Command: `{command}`; {stamp}; machine: {_machine()}.", ""]
    lines += [
        "| parameter list | params | variant | steps per round | median µs/step | min-max over rounds | vs mftb |",
        "|---|---:|---|---:|---:|---|---:|",
    ]
    summary = []
    for label, names in PARAMETER_LISTS.items():
        rows = {row.variant: row for row in results if row.parameters == label}
        ours = rows[OURS].median_us
        for row in rows.values():
            ratio = "" if row.variant == OURS else f"{row.median_us / ours:.1f}x"
            lines.append(
                f"| {label} | {len(names)} | {row.variant} | {row.count:,} | {row.median_us:.1f} "
                f"| {row.spread} | {ratio} |"
            )
        extra = rows[OURS_HIST].median_us - ours
        summary.append(
            f"- {len(names)} parameters: TrainingStateMonitor / mftb **{rows[THEIRS_DUMP].median_us / ours:.0f}x** "
            f"(`_dump_data_in_step`), **{rows[THEIRS_OUTPUT].median_us / ours:.0f}x** (`add_scalar` calls only); "
            f"a histogram step adds **{extra:.1f} µs** (one float64 copy of the vector and a queue append)."
        )
    return "\n".join([*lines, "", *summary, ""]), []


def _machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.layer_norms", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.layer_norms" + (" --quick" if args.quick else "")
    text, _ = markdown_section(args.quick, command)
    print(text)


if __name__ == "__main__":
    main()
