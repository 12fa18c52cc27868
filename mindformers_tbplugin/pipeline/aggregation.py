"""Cross-rank aggregation arithmetic: what one interval's all-reduce vector carries and means.

Per aggregation interval a multi-rank job communicates exactly once, however many metrics there
are: one all-reduce (sum) of a float32 vector holding every data metric of every logged step of
the interval, followed by one slot per rank for that rank's few system values (each rank fills only
its own slot, so the sum gathers them), and four floats for the job's throughput (one rank per
data-parallel replica adds its replica's rate). The vector's size is the same on every rank (a collective
with mismatched sizes would hang): it changes only with the interval's stretch, which every rank
takes from the previous all-reduce, and the data part carries a fingerprint of the tag layout so that
ranks logging different data tags are detected instead of being averaged wrongly.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mindformers_tbplugin.pipeline import metrics


class CollectiveOps(Protocol):
    """The host collectives aggregation needs over the world group; framework/collectives.py runs
    them on MindSpore, tests sum simulated ranks' vectors."""

    calls: int
    reduced_bytes: int  # sent in all-reduces so far
    reduce_seconds: float  # spent in them (waiting for the other ranks included)

    def all_reduce_sum(self, vector: np.ndarray) -> np.ndarray: ...

    def all_gather(self, vector: np.ndarray) -> np.ndarray: ...


class IntervalRows:
    """An aggregator's rows (logged steps, or router reads) per interval: the configured interval's,
    times the stretch every rank agreed in the last all-reduce (:mod:`.interval_stretch`). Changed only
    between intervals, when nothing is pending, so every rank packs a vector of the same size."""

    def __init__(self, rows_per_interval: int) -> None:
        self.rows_per_interval = max(rows_per_interval, 1)
        self.capacity = self.rows_per_interval

    def stretch(self, factor: int) -> None:
        self.capacity = self.rows_per_interval * factor


MAX_DATA_TAGS = 32  # data metrics averaged per step; beyond that, the writing rank's own values are written
_FINGERPRINT_BITS = 32


# ---------------------------------------------------------------------------------------------
# Data metrics: mean over the ranks that hold them, per logged step
# ---------------------------------------------------------------------------------------------


@dataclass
class DataReduction:
    steps: list[tuple[int, dict[str, float]]]  # (step, {tag: mean over holders})
    mismatch: bool  # ranks logged different data tags: ``steps`` holds this rank's own values
    local_only: list[tuple[int, dict[str, float]]]  # tags beyond MAX_DATA_TAGS, this rank's values


class DataAggregator(IntervalRows):
    """Packs an interval's data metrics into one vector for one all-reduce, the same size on every rank.

    Layout (float32): ``[holders, fingerprint bits x32, sums (K x T), counts (K x T)]`` with K the
    steps of an interval (``aggregate_every``, times its stretch) and T = MAX_DATA_TAGS. A rank that
    does not hold data metrics (an earlier pipeline stage) contributes zeros.
    """

    def __init__(self, steps_per_interval: int) -> None:
        super().__init__(steps_per_interval)
        self.pending: list[tuple[int, dict[str, float]]] = []
        self.overflow_tags: list[str] = []

    @property
    def size(self) -> int:
        return 1 + _FINGERPRINT_BITS + 2 * self.capacity * MAX_DATA_TAGS

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
        block = self.capacity * MAX_DATA_TAGS
        sums = vector[1 + _FINGERPRINT_BITS : 1 + _FINGERPRINT_BITS + block].reshape(self.capacity, -1)
        counts = vector[1 + _FINGERPRINT_BITS + block :].reshape(self.capacity, -1)
        for row, (_, values) in enumerate(self.pending[: self.capacity]):
            for column, tag in enumerate(tags):
                if tag in values:
                    sums[row, column] = values[tag]
                    counts[row, column] = 1.0
        return vector, tags

    def unpack(self, reduced: np.ndarray, tags: list[str]) -> DataReduction:
        """Means per step from the summed vector; clears the interval."""
        pending, self.pending = self.pending[: self.capacity], []
        local_only = [(step, {t: values[t] for t in self.overflow_tags if t in values}) for step, values in pending]
        local_only = [(step, values) for step, values in local_only if values]
        holders = reduced[0]
        bits = reduced[1 : 1 + _FINGERPRINT_BITS]
        if holders < 1:
            return DataReduction([], mismatch=False, local_only=local_only)
        if np.any((bits != 0) & (bits != holders)):
            return DataReduction(pending, mismatch=True, local_only=[])
        block = self.capacity * MAX_DATA_TAGS
        # Python lists: a handful of numbers, where numpy's per-element access costs more than it saves.
        sums = reduced[1 + _FINGERPRINT_BITS : 1 + _FINGERPRINT_BITS + block].reshape(self.capacity, -1).tolist()
        counts = reduced[1 + _FINGERPRINT_BITS + block :].reshape(self.capacity, -1).tolist()
        steps = []
        for (step, _), row_sums, row_counts in zip(pending, sums, counts, strict=False):
            means = {
                tag: row_sums[column] / row_counts[column] for column, tag in enumerate(tags) if row_counts[column] > 0
            }
            steps.append((step, means))
        return DataReduction(steps, mismatch=False, local_only=local_only)


# ---------------------------------------------------------------------------------------------
# Every rank's loss: the highest at each logged step, and each rank's mean over the interval
# ---------------------------------------------------------------------------------------------


@dataclass
class LossesByRank:
    highest: list[tuple[int, dict[str, float]]]  # (step, {train/loss_max, train/loss_max_rank})
    interval_means: np.ndarray  # (world_size,) each rank's mean loss over the interval, NaN: none
    by_step: list[tuple[int, np.ndarray]]  # (step, each rank's loss at it: (world_size,), -inf: none)


class LossAggregator(IntervalRows):
    """Packs each rank's ``train/loss`` at every logged step of an interval for the same all-reduce:
    the writing rank learns the highest loss of each step and whose it was (a bad batch on one rank
    shows in the mean only divided by the data-parallel size), and each rank's interval mean for the
    per-rank records. Layout (float32): ``[losses (K x world_size), holders (world_size)]``; each rank
    fills its own column (the sum over ranks is every rank's), a rank without the loss (an earlier
    pipeline stage) sends zeros, a step without a loss is -inf. A non-finite loss stays in its own slot
    (the others add zeros there) and counts as the highest. Size per interval: (K + 1) x world_size
    floats; at 8,192 ranks and ``aggregate_every: 10``, 90,112 floats (352 KiB).
    """

    def __init__(self, steps_per_interval: int, rank: int, world_size: int, holds_loss: bool) -> None:
        super().__init__(steps_per_interval)
        self.rank = rank
        self.world_size = world_size
        self.holds_loss = holds_loss
        self.pending: list[tuple[int, float | None]] = []

    @property
    def size(self) -> int:
        return (self.capacity + 1) * self.world_size

    def add(self, step: int, loss: float | None) -> None:
        self.pending.append((step, loss))

    def pack(self) -> np.ndarray:
        vector = np.zeros(self.size, dtype=np.float32)
        if not self.holds_loss:
            return vector
        column = vector[self.rank : self.capacity * self.world_size : self.world_size]
        for row, (_, loss) in enumerate(self.pending[: self.capacity]):
            column[row] = -math.inf if loss is None else loss
        vector[self.capacity * self.world_size + self.rank] = 1.0
        return vector

    def unpack(self, reduced: np.ndarray) -> LossesByRank:
        """The highest loss of each logged step and its rank, and each rank's interval mean (a NaN loss
        counts as infinite: its rank is named, its cell saturates); clears the interval."""
        pending, self.pending = self.pending[: self.capacity], []
        block = self.capacity * self.world_size
        losses = reduced[:block].astype(np.float64).reshape(self.capacity, self.world_size)[: len(pending)]
        sent = (reduced[block:] > 0)[None, :] & (losses != -np.inf)
        worst = np.where(sent, np.where(np.isnan(losses), np.inf, losses), -np.inf)
        ranks = worst.argmax(axis=1).tolist() if len(pending) else []
        highest = [
            (step, {metrics.TRAIN_LOSS_MAX: float(losses[row, rank]), metrics.TRAIN_LOSS_MAX_RANK: float(rank)})
            for row, ((step, _), rank) in enumerate(zip(pending, ranks, strict=True))
            if sent[row, rank]
        ]
        counts = sent.sum(axis=0)
        totals = np.where(sent, worst, 0.0).sum(axis=0)
        means = np.where(counts > 0, totals / np.maximum(counts, 1), np.nan)
        rows = np.where(sent, losses, -np.inf)
        by_step = [(step, rows[row]) for row, (step, _) in enumerate(pending)]
        return LossesByRank(highest, means.astype(np.float32), by_step)


# ---------------------------------------------------------------------------------------------
# Per-group gradient norms: mean of the squares over the ranks that sent them, per logged step
# ---------------------------------------------------------------------------------------------


class GradientAggregator(IntervalRows):
    """Packs an interval's per-group squared gradient norms (``runner_wrapper.local_norm``) for the
    same all-reduce. Each rank's are its local gradients' (before the data-parallel reduction); the
    combination is their mean over the ranks that hold the group (a non-zero value: with pipeline
    stages, a layer's gradient exists on its stage's ranks only), so the written norm is the root
    mean square of those ranks' group norms. Layout (float32): ``[sums (K x G), holders (K x G)]``;
    a rank without values at a step (it could not read them) sends zeros, so steps stay aligned.
    """

    def __init__(self, steps_per_interval: int, group_count: int) -> None:
        super().__init__(steps_per_interval)
        self.group_count = group_count
        self.pending: list[tuple[int, np.ndarray | None]] = []

    @property
    def size(self) -> int:
        return 2 * self.capacity * self.group_count

    def add(self, step: int, group_squares: np.ndarray | None) -> None:
        self.pending.append((step, group_squares))

    def pack(self) -> np.ndarray:
        vector = np.zeros(self.size, dtype=np.float32)
        sums, holders = vector.reshape(2, self.capacity, self.group_count)
        for row, (_, squares) in enumerate(self.pending[: self.capacity]):
            if squares is not None and squares.size == self.group_count:
                sums[row] = squares
                holders[row] = squares > 0
        return vector

    def unpack(self, reduced: np.ndarray) -> dict[int, np.ndarray]:
        """``{step: mean over the holding ranks of the group squares}`` (0 for a group nobody
        holds) for the steps any rank sent; clears the interval."""
        pending, self.pending = self.pending[: self.capacity], []
        sums, holders = reduced.astype(np.float64).reshape(2, self.capacity, self.group_count)
        means = np.divide(sums, holders, out=np.zeros_like(sums), where=holders > 0)
        return {step: means[row] for row, (step, _) in enumerate(pending) if holders[row].any()}


# ---------------------------------------------------------------------------------------------
# Expert loads: mean over the ranks that hold each MoE layer, per read
# ---------------------------------------------------------------------------------------------


class ExpertLoadAggregator(IntervalRows):
    """Packs an interval's reads of the MoE routers (each expert's load over its layer's mean, and the
    expert bias) for the same all-reduce. A layer's values are averaged over the ranks that hold it:
    every data-parallel rank routes its own tokens, and with pipeline stages a layer lives on its
    stage's ranks only (the others send NaN rows, sent as zeros that do not count). The bias is read
    at some reads only (every ranks' the same). Layout (float32): ``[loads (K x L x E), bias (K x L x E)
    when a router has one, holders (K x L), ranks that sent a bias (K)]``.
    """

    def __init__(self, reads_per_interval: int, layers: int, experts: int, with_bias: bool) -> None:
        super().__init__(reads_per_interval)
        self.shape = (layers, experts)
        self.planes = 2 if with_bias else 1
        self.pending: list[tuple[int, np.ndarray, np.ndarray | None]] = []
        self.dropped = 0  # reads beyond the capacity (none when the schedules are as configured)

    @property
    def size(self) -> int:
        layers, experts = self.shape
        return self.capacity * (layers * (self.planes * experts + 1) + 1)

    def add(self, step: int, relative: np.ndarray, bias: np.ndarray | None) -> None:
        if len(self.pending) < self.capacity:
            self.pending.append((step, relative, bias))
        else:
            self.dropped += 1

    def pack(self) -> np.ndarray:
        vector = np.zeros(self.size, dtype=np.float32)
        planes, holders, with_bias = self._views(vector)
        for row, (_, relative, bias) in enumerate(self.pending):
            held = ~np.isnan(relative[:, 0])
            holders[row] = held
            planes[0, row][held] = relative[held]
            if self.planes == 2 and bias is not None:
                planes[1, row][held] = np.nan_to_num(bias[held])
                with_bias[row] = 1.0
        return vector

    def _views(self, vector: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        layers, experts = self.shape
        k = self.capacity
        end = k * layers * experts * self.planes
        planes = vector[:end].reshape(self.planes, k, layers, experts)
        return planes, vector[end : end + k * layers].reshape(k, layers), vector[end + k * layers :]

    def unpack(self, reduced: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray | None]]:
        """``(step, mean relative loads, mean bias or None)`` per read any rank sent (NaN rows for layers
        nobody holds); clears the interval."""
        pending, self.pending = self.pending, []
        planes, holders, with_bias = self._views(reduced.astype(np.float64))
        holders = holders[:, :, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            means = np.where(holders > 0, planes / np.maximum(holders, 1), np.nan)
        return [
            (step, means[0, row], means[1, row] if self.planes == 2 and with_bias[row] > 0 else None)
            for row, (step, _, _) in enumerate(pending)
            if (holders[row] > 0).any()
        ]


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


# ---------------------------------------------------------------------------------------------
# The job's throughput: the sum over data-parallel replicas
# ---------------------------------------------------------------------------------------------

JOB_THROUGHPUT_TAGS = (
    (metrics.PERF_SAMPLES_PER_S, metrics.PERF_JOB_SAMPLES_PER_S),
    (metrics.PERF_TOKENS_PER_S, metrics.PERF_JOB_TOKENS_PER_S),
)


class JobThroughput:
    """The job's samples/s and tokens/s over an interval, from the same all-reduce.

    A rank's ``perf/samples_per_s`` is the job's samples per step over its own step time. One rank
    per data-parallel replica (``Topology.speaks_for_a_replica``) sends its replica's rate: that value
    over the interval (samples over time: the harmonic mean of the logged rates), divided by the
    number of replicas. The sum over ranks is the job's rate. Layout (float32), per tag:
    ``[sum of the replicas' rates, replicas that sent one]``; the other ranks send zeros.
    """

    size = 2 * len(JOB_THROUGHPUT_TAGS)

    def __init__(self, replicas: int, speaks_for_a_replica: bool) -> None:
        self.replicas = max(replicas, 1)
        self.speaks = speaks_for_a_replica
        self._inverse_sums = [0.0] * len(JOB_THROUGHPUT_TAGS)
        self._counts = [0] * len(JOB_THROUGHPUT_TAGS)

    def add(self, values: dict[str, float]) -> None:
        if not self.speaks:
            return
        for index, (tag, _) in enumerate(JOB_THROUGHPUT_TAGS):
            value = values.get(tag)
            if value is not None and value > 0 and math.isfinite(value):
                self._inverse_sums[index] += 1.0 / value
                self._counts[index] += 1

    def pack(self) -> np.ndarray:
        vector = np.zeros(self.size, dtype=np.float32)
        for index, (total, count) in enumerate(zip(self._inverse_sums, self._counts, strict=True)):
            if count:
                vector[2 * index] = count / total / self.replicas
                vector[2 * index + 1] = 1.0
        self._inverse_sums = [0.0] * len(JOB_THROUGHPUT_TAGS)
        self._counts = [0] * len(JOB_THROUGHPUT_TAGS)
        return vector

    def unpack(self, reduced: np.ndarray) -> dict[str, float]:
        """The job's rates, for the tags every replica sent."""
        values = {}
        for index, (_, job_tag) in enumerate(JOB_THROUGHPUT_TAGS):
            if round(float(reduced[2 * index + 1])) == self.replicas:
                values[job_tag] = float(reduced[2 * index])
        return values
