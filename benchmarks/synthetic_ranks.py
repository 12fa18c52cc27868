"""A synthetic run of ``ranks/matrix`` records: W ranks x N records, written by the package's own writer.

Each record is what TensorBoardMonitor writes per aggregation interval (``pipeline/rank_records.py``):
a float16 ``(world_size, 5)`` matrix of step_time_ms, host_rss_gb, device_mem_allocated_gb,
device_mem_peak_gb and loss, a tensor summary of plugin ``ranks`` at the interval's step, queued on a real
``RunWriter`` with ``add_built`` + ``tensor_event``; the first record carries the ``RankLayout`` (nodes
of 8 ranks). The values, generated in blocks of records with vectorised numpy:

* step time ~1000 ms: a fixed per-rank offset (sd 1%) plus noise (sd 2%) per record;
* one straggler rank, 30% slower from a third of the run on;
* one slow node (its 8 ranks 15% slower) for the records between 50% and 60% of the run;
* rare spikes (one value in 20,000 is 2-5x its step time);
* host memory from ~30 GB per rank, growing by 0.4 GB over the run; device memory ~48 GB allocated,
  ~56 GB peak;
* each rank's mean loss falling from ~3 to ~2 over the run (sd 1%).

python -m benchmarks.synthetic_ranks --output DIR [--ranks 8192] [--records 10000]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import synthetic_records
from mindformers_tbplugin.pipeline.rank_records import CHANNELS, PLUGIN_NAME, TAG, RankLayout

RANKS_PER_NODE = 8
BLOCK_VALUES = 4_000_000  # float32 values generated at once (16 MB); also what the writer may hold queued
STEP_TIME_MS = 1000.0
SECONDS_PER_STEP = STEP_TIME_MS / 1000.0


@dataclass(frozen=True)
class SyntheticRanks:
    """What was written, and the anomalies planted in it (for checks of a reader's answers)."""

    run_dir: Path
    world_size: int
    records: int
    steps_per_interval: int
    intervals_per_record: int
    straggler_rank: int
    straggler_from_record: int
    slow_node: int
    slow_node_records: tuple[int, int]  # [first, last) record of the slow node
    seconds: float  # generation + writing, until the file is closed
    file_bytes: int

    @property
    def steps_per_record(self) -> int:
        return self.steps_per_interval * self.intervals_per_record

    def step_of(self, record: int) -> int:
        """The training step record ``record`` (0-based) is written at."""
        return (record + 1) * self.steps_per_record


def layout(world_size: int, steps_per_interval: int, intervals_per_record: int) -> RankLayout:
    nodes = np.arange(world_size) // RANKS_PER_NODE
    return RankLayout(
        world_size=world_size,
        channels=CHANNELS,
        steps_per_interval=steps_per_interval,
        intervals_per_record=intervals_per_record,
        nodes=tuple(nodes.tolist()),
        node_names=tuple(f"node-{node:04d}" for node in range(int(nodes[-1]) + 1)),
        worker_log="/job/msrun_log/{node}/worker_{rank}.log",
    )


class _Values:
    """The records' values, block by block; deterministic for a seed."""

    def __init__(self, world_size: int, records: int, seed: int) -> None:
        self.world_size = world_size
        self.records = records
        self.rng = np.random.default_rng(seed)
        nodes = max(world_size // RANKS_PER_NODE, 1)
        self.straggler_rank = int(self.rng.integers(world_size))
        self.straggler_from = records // 3
        self.slow_node = int(self.rng.integers(nodes))
        self.slow_node_records = (records // 2, max(records // 2 + 1, records * 6 // 10))
        self.rank_offset = 1.0 + 0.01 * self.rng.standard_normal(world_size, dtype=np.float32)
        self.host_base = 30.0 + 2.0 * self.rng.random(world_size, dtype=np.float32)
        self.device_base = 48.0 + self.rng.random(world_size, dtype=np.float32)

    def block(self, first: int, count: int) -> np.ndarray:
        """Records ``first .. first+count-1`` as float16 ``(count, world_size, 4)``."""
        rng, world = self.rng, self.world_size
        shape = (count, world)
        step = self.rank_offset * (STEP_TIME_MS * (1.0 + 0.02 * rng.standard_normal(shape, dtype=np.float32)))
        index = np.arange(first, first + count)
        step[index >= self.straggler_from, self.straggler_rank] *= 1.3
        start, stop = self.slow_node_records
        node = slice(self.slow_node * RANKS_PER_NODE, (self.slow_node + 1) * RANKS_PER_NODE)
        step[(index >= start) & (index < stop), node] *= 1.15
        spikes = np.flatnonzero(rng.random(step.size, dtype=np.float32) < 5e-5)
        step.reshape(-1)[spikes] *= rng.uniform(2.0, 5.0, spikes.size).astype(np.float32)
        growth = (0.4 * index / max(self.records - 1, 1)).astype(np.float32)[:, None]
        host = self.host_base + growth + 0.01 * rng.standard_normal(shape, dtype=np.float32)
        allocated = self.device_base + 0.05 * rng.standard_normal(shape, dtype=np.float32)
        peak = allocated + 8.0 + 0.1 * rng.random(shape, dtype=np.float32)
        falling = (2.0 + np.exp(-3.0 * index / max(self.records - 1, 1))).astype(np.float32)[:, None]
        loss = falling * (1.0 + 0.01 * rng.standard_normal(shape, dtype=np.float32))
        return np.stack([step, host, allocated, peak, loss], axis=-1).astype(np.float16)


def generate(
    logdir: str | Path,
    ranks: int = 8192,
    records: int = 10_000,
    *,
    run: str | None = None,
    steps_per_interval: int = 10,
    intervals_per_record: int = 1,
    seed: int = 0,
) -> SyntheticRanks:
    """Write ``records`` records of ``ranks`` ranks to ``logdir/run`` (default ``ranks_<W>x<N>``), in step
    order, through one RunWriter; returns once the event file is closed."""
    run_dir = Path(logdir) / (run or f"ranks_{ranks}x{records}")
    started = time.perf_counter()
    values = _Values(ranks, records, seed)
    content = layout(ranks, steps_per_interval, intervals_per_record).content()
    block = max(1, BLOCK_VALUES // (ranks * len(CHANNELS)))
    file_bytes = synthetic_records.write(
        run_dir,
        (values.block(first, min(block, records - first)) for first in range(0, records, block)),
        tag=TAG,
        plugin_name=PLUGIN_NAME,
        layout=content,
        steps_per_record=steps_per_interval * intervals_per_record,
        seconds_per_step=SECONDS_PER_STEP,
        block_records=block,
    )
    seconds = time.perf_counter() - started
    return SyntheticRanks(
        run_dir=run_dir,
        world_size=ranks,
        records=records,
        steps_per_interval=steps_per_interval,
        intervals_per_record=intervals_per_record,
        straggler_rank=values.straggler_rank,
        straggler_from_record=values.straggler_from,
        slow_node=values.slow_node,
        slow_node_records=values.slow_node_records,
        seconds=seconds,
        file_bytes=file_bytes,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.synthetic_ranks", description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True, help="TensorBoard log directory; the run is a folder in it")
    parser.add_argument("--ranks", type=int, default=8192, help="world size (default: %(default)s)")
    parser.add_argument("--records", type=int, default=10_000, help="records, one per interval (default: %(default)s)")
    parser.add_argument("--steps_per_interval", type=int, default=10, help="aggregate_every (default: %(default)s)")
    parser.add_argument("--run", default=None, help="run folder name (default: ranks_<ranks>x<records>)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    made = generate(
        args.output, args.ranks, args.records, run=args.run, steps_per_interval=args.steps_per_interval, seed=args.seed
    )
    print(f"{made.run_dir}: {made.world_size} ranks x {made.records} records, {made.file_bytes:,} bytes")
    print(f"written in {made.seconds:.1f} s")
    print(
        f"planted: rank {made.straggler_rank} slow from record {made.straggler_from_record} "
        f"(step {made.step_of(made.straggler_from_record)}); node {made.slow_node} slow in records "
        f"{made.slow_node_records[0]}..{made.slow_node_records[1] - 1}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
