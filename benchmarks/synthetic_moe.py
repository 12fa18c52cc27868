"""A synthetic run of ``moe/load`` records: L MoE layers x E routed experts x N records, written by the
package's own writer.

Each record is what TensorBoardMonitor writes per ``reads_per_record`` router reads
(``pipeline/expert_records.py``): a float16 ``(2, L, E)`` array, channel ``load`` (each expert's load
over its layer's mean) and channel ``bias`` (the router's expert bias), a tensor summary of plugin
``moe``, queued on a real ``RunWriter`` with ``add_built`` + ``tensor_event``; the first record carries
the ``ExpertLayout``. The defaults are DeepSeek-V3's MoE layers: ``layers.3`` .. ``layers.60`` and
``mtp.layers.0``, 256 routed experts, top-8. The values, generated in blocks of records:

* each expert's load is a Gamma draw (shape 50: about 14% spread) around its layer's slowly drifting
  preference for it (an AR(1) walk in log space, its spread different per layer), over the layer's mean;
* one planted layer, two thirds down: from a third of the run on, two of its experts die (under 3% of
  the mean) and one expert takes a growing share (up to 8x the mean at the end);
* the bias follows each expert's recent load the opposite way (-0.01 x its moving average of log load),
  as a balancing router's bias does: the overloaded expert's falls, the dead experts' rises.

python -m benchmarks.synthetic_moe OUT [--layers 59] [--experts 256] [--records 2000]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import synthetic_records
from mindformers_tbplugin.pipeline.expert_load import DEFAULT_DEAD_FRACTION, EXPERT_BIAS
from mindformers_tbplugin.pipeline.expert_records import (
    BIAS,
    LOAD,
    PLUGIN_NAME,
    TAG,
    ExpertLayout,
    reads_per_record,
)

FIRST_MOE_LAYER = 3  # DeepSeek-V3: layers 0-2 are dense
TOP_K = 8
STEPS_PER_READ = 10  # TensorBoardMonitor's moe_every default
RECORD_BUDGET = 1024  # TensorBoardMonitor's moe_record_budget default, bytes per training step
GAMMA_SHAPE = 50.0
DRIFT_KEEP = 0.995  # per record: how much of the preference walk's deviation stays
BIAS_SCALE = 0.01
BIAS_MEMORY = 0.98
HOT_GROWTH = 8.0
BLOCK_VALUES = 4_000_000  # values generated at once; also what the writer may hold queued
SECONDS_PER_STEP = 2.0


@dataclass(frozen=True)
class SyntheticMoe:
    """What was written, and the anomalies planted in it (for checks of a reader's answers)."""

    run_dir: Path
    layout: ExpertLayout
    records: int
    planted_row: int
    dead_experts: tuple[int, int]
    hot_expert: int
    dead_from_record: int
    seconds: float  # generation + writing, until the file is closed
    file_bytes: int

    @property
    def planted_layer(self) -> str:
        return self.layout.groups[self.planted_row]

    @property
    def steps_per_record(self) -> int:
        return self.layout.steps_per_read * self.layout.reads_per_record

    def step_of(self, record: int) -> int:
        """The training step record ``record`` (0-based) is written at: its last read's."""
        return (record + 1) * self.steps_per_record


def groups(layers: int) -> tuple[str, ...]:
    """DeepSeek-V3's naming: the decoder's MoE layers, then one multi-token-prediction layer."""
    decoder = tuple(f"layers.{FIRST_MOE_LAYER + row}" for row in range(layers - 1))
    return (*decoder, "mtp.layers.0") if layers > 1 else ("layers.3",)


def layout(layers: int, experts: int) -> ExpertLayout:
    channels = (LOAD, BIAS)
    return ExpertLayout(
        groups=groups(layers),
        experts=experts,
        top_k=min(TOP_K, experts),
        routers=(EXPERT_BIAS,) * layers,
        channels=channels,
        steps_per_read=STEPS_PER_READ,
        reads_per_record=reads_per_record(layers, experts, len(channels), STEPS_PER_READ, RECORD_BUDGET),
        dead_fraction=DEFAULT_DEAD_FRACTION,
    )


class _Values:
    """The records' values, block by block; deterministic for a seed."""

    def __init__(self, layers: int, experts: int, records: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.shape = (layers, experts)
        self.records = records
        self.planted_row = round(2 * (layers - 1) / 3)
        chosen = self.rng.choice(experts, size=3, replace=False).tolist()
        self.dead, self.hot = (chosen[0], chosen[1]), chosen[2]
        self.dead_from = records // 3
        self.spread = self.rng.uniform(0.03, 0.2, (layers, 1))  # per layer: how uneven its preferences get
        self.preference = self.spread * self.rng.standard_normal(self.shape)
        self.average_log = np.zeros(self.shape)

    def block(self, first: int, count: int) -> np.ndarray:
        """Records ``first .. first+count-1`` as float16 ``(count, 2, layers, experts)``."""
        rng, shape = self.rng, self.shape
        out = np.empty((count, 2, *shape), np.float16)
        draws = rng.gamma(GAMMA_SHAPE, size=(count, *shape))
        step_sd = self.spread * np.sqrt(1 - DRIFT_KEEP**2)
        for offset in range(count):
            record = first + offset
            self.preference = DRIFT_KEEP * self.preference + step_sd * rng.standard_normal(shape)
            load = draws[offset] * np.exp(self.preference)
            if record >= self.dead_from:
                row = load[self.planted_row]
                share = (record - self.dead_from) / max(self.records - 1 - self.dead_from, 1)
                row[self.hot] = row.mean() * (1 + (HOT_GROWTH - 1) * share)
                row[list(self.dead)] = row.mean() * rng.uniform(0, 0.03, 2)
            load /= load.mean(axis=1, keepdims=True)
            self.average_log = BIAS_MEMORY * self.average_log + (1 - BIAS_MEMORY) * np.log(np.maximum(load, 1e-3))
            bias = -BIAS_SCALE * self.average_log
            out[offset, 0] = load
            out[offset, 1] = bias - bias.mean(axis=1, keepdims=True)
        return out


def generate(
    logdir: str | Path,
    layers: int = 59,
    experts: int = 256,
    records: int = 2000,
    *,
    run: str | None = None,
    seed: int = 0,
) -> SyntheticMoe:
    """Write ``records`` records of ``layers`` x ``experts`` to ``logdir/run`` (default ``moe_<L>x<E>x<N>``),
    in step order, through one RunWriter; returns once the event file is closed."""
    run_dir = Path(logdir) / (run or f"moe_{layers}x{experts}x{records}")
    started = time.perf_counter()
    expert_layout = layout(layers, experts)
    values = _Values(layers, experts, records, seed)
    block = max(1, BLOCK_VALUES // (2 * layers * experts))
    file_bytes = synthetic_records.write(
        run_dir,
        (values.block(first, min(block, records - first)) for first in range(0, records, block)),
        tag=TAG,
        plugin_name=PLUGIN_NAME,
        layout=expert_layout.content(),
        steps_per_record=expert_layout.steps_per_read * expert_layout.reads_per_record,
        seconds_per_step=SECONDS_PER_STEP,
        block_records=block,
    )
    return SyntheticMoe(
        run_dir=run_dir,
        layout=expert_layout,
        records=records,
        planted_row=values.planted_row,
        dead_experts=values.dead,
        hot_expert=values.hot,
        dead_from_record=values.dead_from,
        seconds=time.perf_counter() - started,
        file_bytes=file_bytes,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.synthetic_moe", description=__doc__.split("\n")[0])
    parser.add_argument("output", type=Path, help="TensorBoard log directory; the run is a folder in it")
    parser.add_argument("--layers", type=int, default=59, help="MoE layers, the last one MTP (default: %(default)s)")
    parser.add_argument("--experts", type=int, default=256, help="routed experts per layer (default: %(default)s)")
    parser.add_argument("--records", type=int, default=2000, help="records (default: %(default)s)")
    parser.add_argument("--run", default=None, help="run folder name (default: moe_<layers>x<experts>x<records>)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    made = generate(args.output, args.layers, args.experts, args.records, run=args.run, seed=args.seed)
    print(f"{made.run_dir}: {args.layers} layers x {args.experts} experts x {made.records} records, ", end="")
    print(f"{made.file_bytes:,} bytes, one record per {made.steps_per_record} steps; written in {made.seconds:.1f} s")
    dead = ", ".join(map(str, made.dead_experts))
    print(
        f"planted: {made.planted_layer}: experts {dead} dead and expert {made.hot_expert} taking a growing share "
        f"from record {made.dead_from_record} (step {made.step_of(made.dead_from_record)})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
