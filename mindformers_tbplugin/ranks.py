"""Rank facts and cross-rank aggregation: the only module that calls collectives.

Per aggregation interval a multi-rank job communicates exactly once, however many metrics there
are: one all-reduce (sum) of a float32 vector holding every data metric of every logged step of
the interval, followed by one slot per rank for that rank's few system values (each rank fills only
its own slot, so the sum gathers them). The vector's size is fixed for the whole run (a collective
with mismatched sizes would hang), and the data part carries a fingerprint of the tag layout so that
ranks logging different data tags are detected instead of being averaged wrongly.
"""

from __future__ import annotations

import math
import os
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from mindformers_tbplugin import metrics

MAX_DATA_TAGS = 32  # data metrics averaged per step; beyond that, the writing rank's own values are written
_FINGERPRINT_BITS = 32


@dataclass(frozen=True)
class Topology:
    rank: int
    world_size: int
    pipeline_stages: int
    parallel_mode: str
    full_batch: bool
    communicating: bool  # collectives are initialised (msrun + use_parallel)

    @property
    def writer_rank(self) -> int:
        """The rank that writes the main run: the first rank of the last pipeline stage (rank 0
        without pipeline parallelism), since the loss lives on the last stage."""
        stages = max(self.pipeline_stages, 1)
        return self.world_size - self.world_size // stages if stages > 1 else 0

    @property
    def is_writer(self) -> bool:
        return self.rank == self.writer_rank

    @property
    def holds_data_metrics(self) -> bool:
        """Ranks of the last pipeline stage compute the loss; the others output placeholders."""
        stages = max(self.pipeline_stages, 1)
        return self.rank >= self.world_size - self.world_size // stages

    @property
    def data_parallel_factor(self) -> int:
        """How many ranks each read a different batch (1 when every rank reads the full batch)."""
        if self.world_size <= 1 or self.full_batch or self.parallel_mode == "stand_alone":
            return 1
        return max(self.world_size // max(self.pipeline_stages, 1), 1)

    def describe(self) -> str:
        return (
            f"rank {self.rank} of {self.world_size}, {self.pipeline_stages} pipeline stage(s): "
            f"rank {self.writer_rank} writes the main run (first rank of the last pipeline stage)"
        )


def _env_int(*names: str, default: int) -> int:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return default


def current_topology(pipeline_stages: int | None = None) -> Topology:
    """This process's place in the job. Without initialised communication every process is its
    own single-rank job (it cannot agree with others on anything), whatever msrun's env says.
    ``pipeline_stages``: as the trainer's config says (MindFormers 2.x's PyNative trainer does not
    use MindSpore's auto-parallel context); by default that context's value."""
    rank = _env_int("RANK_ID", "MS_NODE_ID", default=0)
    world_size, parallel_mode, full_batch, communicating = 1, "stand_alone", False, False
    try:
        from mindspore import communication, context

        if communication.GlobalComm.INITED:
            rank, world_size = communication.get_rank(), communication.get_group_size()
            communicating = world_size > 1
        parallel_mode = str(context.get_auto_parallel_context("parallel_mode"))
        full_batch = bool(context.get_auto_parallel_context("full_batch"))
        if pipeline_stages is None:
            pipeline_stages = int(context.get_auto_parallel_context("pipeline_stages") or 1)
    except Exception:  # no MindSpore context: a plain single process
        pass
    return Topology(rank, world_size, pipeline_stages or 1, parallel_mode, full_batch, communicating)


class Collectives:
    """Small host-side collectives over the world group, counted (tests check the count)."""

    def __init__(self) -> None:
        from mindspore import ops

        self._all_reduce = ops.AllReduce()
        self._all_gather = ops.AllGather()
        self.calls = 0

    def all_reduce_sum(self, vector: np.ndarray) -> np.ndarray:
        from mindspore import Tensor

        self.calls += 1
        return self._all_reduce(Tensor(vector)).asnumpy()

    def all_gather(self, vector: np.ndarray) -> np.ndarray:
        """Rows of every rank's ``vector``, in rank order."""
        from mindspore import Tensor

        self.calls += 1
        return self._all_gather(Tensor(vector[None, :])).asnumpy()


# ---------------------------------------------------------------------------------------------
# Data metrics: mean over the ranks that hold them, per logged step
# ---------------------------------------------------------------------------------------------


@dataclass
class DataReduction:
    steps: list[tuple[int, dict[str, float]]]  # (step, {tag: mean over holders})
    mismatch: bool  # ranks logged different data tags: ``steps`` holds this rank's own values
    local_only: list[tuple[int, dict[str, float]]]  # tags beyond MAX_DATA_TAGS, this rank's values


class DataAggregator:
    """Packs an interval's data metrics into one fixed-size vector for one all-reduce.

    Layout (float32): ``[holders, fingerprint bits x32, sums (K x T), counts (K x T)]`` with K the
    steps of an interval (``aggregate_every``) and T = MAX_DATA_TAGS. A rank that does not hold data metrics
    (an earlier pipeline stage) contributes zeros.
    """

    def __init__(self, steps_per_interval: int) -> None:
        self.capacity_steps = max(steps_per_interval, 1)
        self.pending: list[tuple[int, dict[str, float]]] = []
        self.overflow_tags: list[str] = []

    @property
    def size(self) -> int:
        return 1 + _FINGERPRINT_BITS + 2 * self.capacity_steps * MAX_DATA_TAGS

    def add(self, step: int, values: dict[str, float]) -> None:
        if self.pending and self.pending[-1][0] == step:
            self.pending[-1] = (step, {**self.pending[-1][1], **values})
        else:
            self.pending.append((step, values))

    def _tags(self) -> list[str]:
        tags = sorted({tag for _, values in self.pending for tag in values})
        self.overflow_tags = tags[MAX_DATA_TAGS:]
        return tags[:MAX_DATA_TAGS]

    def pack(self, holds_data: bool) -> tuple[np.ndarray, list[str]]:
        vector = np.zeros(self.size, dtype=np.float32)
        tags = self._tags()
        if not holds_data:
            return vector, tags
        vector[0] = 1.0
        fingerprint = zlib.crc32("\n".join(tags).encode("utf-8"))
        vector[1 : 1 + _FINGERPRINT_BITS] = [(fingerprint >> bit) & 1 for bit in range(_FINGERPRINT_BITS)]
        block = self.capacity_steps * MAX_DATA_TAGS
        sums = vector[1 + _FINGERPRINT_BITS : 1 + _FINGERPRINT_BITS + block].reshape(self.capacity_steps, -1)
        counts = vector[1 + _FINGERPRINT_BITS + block :].reshape(self.capacity_steps, -1)
        for row, (_, values) in enumerate(self.pending[: self.capacity_steps]):
            for column, tag in enumerate(tags):
                if tag in values:
                    sums[row, column] = values[tag]
                    counts[row, column] = 1.0
        return vector, tags

    def unpack(self, reduced: np.ndarray, tags: list[str]) -> DataReduction:
        """Means per step from the summed vector; clears the interval."""
        pending, self.pending = self.pending[: self.capacity_steps], []
        local_only = [(step, {t: values[t] for t in self.overflow_tags if t in values}) for step, values in pending]
        local_only = [(step, values) for step, values in local_only if values]
        holders = reduced[0]
        bits = reduced[1 : 1 + _FINGERPRINT_BITS]
        if holders < 1:
            return DataReduction([], mismatch=False, local_only=local_only)
        if np.any((bits != 0) & (bits != holders)):
            return DataReduction(pending, mismatch=True, local_only=[])
        block = self.capacity_steps * MAX_DATA_TAGS
        # Python lists: a handful of numbers, where numpy's per-element access costs more than it saves.
        sums = reduced[1 + _FINGERPRINT_BITS : 1 + _FINGERPRINT_BITS + block].reshape(self.capacity_steps, -1).tolist()
        counts = reduced[1 + _FINGERPRINT_BITS + block :].reshape(self.capacity_steps, -1).tolist()
        steps = []
        for (step, _), row_sums, row_counts in zip(pending, sums, counts, strict=False):
            means = {
                tag: row_sums[column] / row_counts[column] for column, tag in enumerate(tags) if row_counts[column] > 0
            }
            steps.append((step, means))
        return DataReduction(steps, mismatch=False, local_only=local_only)


# ---------------------------------------------------------------------------------------------
# System metrics: cross-rank statistics and stragglers
# ---------------------------------------------------------------------------------------------

SUMMARY_TAGS = (
    metrics.PERF_STEP_TIME_MS,
    metrics.SYSTEM_HOST_RSS_GB,
    metrics.SYSTEM_DEVICE_MEM_ALLOCATED_GB,
    metrics.SYSTEM_DEVICE_MEM_PEAK_GB,
)


class SystemSummary:
    """Interval means of a rank's system values, gathered from all ranks into cross-rank stats."""

    def __init__(self) -> None:
        self._sums = [0.0] * len(SUMMARY_TAGS)  # per step: plain floats, cheaper than numpy elements
        self._counts = [0] * len(SUMMARY_TAGS)

    def add(self, values: dict[str, float]) -> None:
        for index, tag in enumerate(SUMMARY_TAGS):
            value = values.get(tag)
            if value is not None and math.isfinite(value):
                self._sums[index] += value
                self._counts[index] += 1

    def pack_slots(self, rank: int, world_size: int) -> np.ndarray:
        """``world_size`` rows of zeros with this rank's interval means in row ``rank``, flattened:
        summed over ranks (an all-reduce), it is every rank's row."""
        slots = np.zeros((world_size, len(SUMMARY_TAGS)), dtype=np.float32)
        slots[rank] = self.pack()
        return slots.reshape(-1)

    def pack(self) -> list[float]:
        means = [total / count if count else math.nan for total, count in zip(self._sums, self._counts, strict=True)]
        self._sums = [0.0] * len(SUMMARY_TAGS)
        self._counts = [0] * len(SUMMARY_TAGS)
        return means

    @staticmethod
    def summarize(gathered: np.ndarray, topk: int) -> dict[str, float]:
        """``ranks/<metric>_{min,max,mean,argmax}`` plus the ``topk`` slowest ranks by step time."""
        values: dict[str, float] = {}
        # Whole-column numpy reductions (a few calls whatever the world size), NaN = no value.
        known = ~np.isnan(gathered)
        counts = known.sum(axis=0).tolist()
        lows = np.where(known, gathered, np.inf).min(axis=0).tolist()
        for_max = np.where(known, gathered, -np.inf)
        highs, argmaxes = for_max.max(axis=0).tolist(), for_max.argmax(axis=0).tolist()
        totals = np.where(known, gathered, 0.0).sum(axis=0, dtype=np.float64).tolist()
        for index, tag in enumerate(SUMMARY_TAGS):
            if not counts[index]:
                continue
            name = "ranks/" + tag.split("/", 1)[1]
            values[f"{name}_min"] = lows[index]
            values[f"{name}_max"] = highs[index]
            values[f"{name}_mean"] = totals[index] / counts[index]
            values[f"{name}_argmax"] = float(argmaxes[index])
        step_times = gathered[:, 0]
        if topk and counts[0]:
            order = np.argsort(np.where(np.isnan(step_times), -np.inf, step_times))[::-1][:topk].tolist()
            for place, rank in enumerate(order, start=1):
                values[f"ranks/slowest_{place}_rank"] = float(rank)
                values[f"ranks/slowest_{place}_step_time_ms"] = float(step_times[rank])
        return values


def agree_on_ints(collectives: Collectives | None, topology: Topology, values: list[int]) -> list[int]:
    """The writer rank's non-negative ``values`` on every rank (one all-gather; run folder naming).

    Host collectives on CPU carry float32, exact only up to 2**24: each int travels as 16-bit halves.
    """
    if collectives is None or not topology.communicating:
        return values
    halves = [part for value in values for part in divmod(value, 1 << 16)] if topology.is_writer else []
    mine = np.asarray(halves or [0] * (2 * len(values)), dtype=np.float32)
    row = collectives.all_gather(mine)[topology.writer_rank]
    return [int(high) * (1 << 16) + int(low) for high, low in zip(row[0::2], row[1::2], strict=True)]


def loss_scale_for_pipeline(topology: Topology, network: Any) -> float:
    """MFLossMonitor divides the loss by the number of micro-batches under pipeline parallelism
    (the pipeline cell sums them); return that divisor so our loss equals the printed one."""
    if topology.pipeline_stages <= 1:
        return 1.0
    from mindformers_tbplugin.model_facts import find_attribute

    micro = find_attribute(network, "micro_size")
    return float(micro) if isinstance(micro, int) and micro > 1 else 1.0
