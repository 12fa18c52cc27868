"""The ``ranks`` records of every run under a logdir, read straight from the event files.

The files are read incrementally by :mod:`~mindformers_tbplugin.viewer.tensor_records`. A run keeps its
matrices as float16 in fixed-size chunks (no copy when it grows), channel-major so a channel of a chunk
is contiguous, plus a few per-record and per-rank numbers computed once on arrival: each channel's
median over ranks, and the straggler tallies (see :class:`Tallies`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mindformers_tbplugin.pipeline.rank_records import CHANNELS, PLUGIN_NAME, TAG, RankLayout
from mindformers_tbplugin.pipeline.slow_nodes import SLOW_FACTOR, NodeGroups
from mindformers_tbplugin.viewer.tensor_records import RecordsRun, RunCatalog, TensorRecord

CHUNK_RECORDS = 256  # records per storage chunk: 16 MB at 8,192 ranks
RELOAD_SECS = 2.0  # a run's files are read again at most this often (requests come in bursts)
DISCOVER_SECS = 5.0  # how often the logdir is walked for new runs
STEP_TIME = CHANNELS.index("step_time_ms")


def _all_channels(matrix: np.ndarray) -> np.ndarray:
    """A record's (ranks, channels) matrix with every channel: NaN for those added after it was written."""
    missing = len(CHANNELS) - matrix.shape[1]
    return np.pad(matrix, ((0, 0), (0, missing)), constant_values=np.nan) if missing else matrix


def _layout_for(world_size: int) -> RankLayout:
    """What to assume before any record carried a layout: one node, no worker log."""
    return RankLayout(world_size, CHANNELS, 1, 1, (0,) * world_size, ("?",), None)


def _medians(values16: np.ndarray) -> np.ndarray:
    """Medians over the last axis of float16 values, NaN ignored, as float32.

    Non-negative float16 values order as their bits do, so the partition runs on int16 (numpy's float16
    arithmetic is emulated, and the bits are half of a float32 copy). Rows holding NaN or negative
    values take numpy's float path.
    """
    bits = values16.view(np.int16)
    odd = ((bits & 0x7FFF) > 0x7C00) | (bits < 0)  # NaN, or a sign bit
    plain = ~odd.any(axis=-1)
    size = values16.shape[-1]
    middle = np.partition(bits, [(size - 1) // 2, size // 2], axis=-1)[..., [(size - 1) // 2, size // 2]]
    medians = middle.view(np.float16).astype(np.float32).mean(axis=-1)
    if not plain.all():
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a row with no value at all: NaN median
            medians[~plain] = np.nanmedian(values16[~plain].astype(np.float32), axis=-1)
    return medians


@dataclass
class Tallies:
    """Per rank, over all records: how often it was the slowest, how often slow (> SLOW_FACTOR x the
    median), the sums of its relative step time in those records, and the first and last record it was
    slow in (-1: never). Per node: how many records had every one of its ranks slow (a slow host, not
    a slow rank), the sum of its ranks' median relative step time in them, and the first and last."""

    slowest: np.ndarray
    slow: np.ndarray
    excess: np.ndarray  # relative step time summed over the records the rank was the slowest of
    slow_excess: np.ndarray  # ... over the records it was slow in
    first: np.ndarray
    last: np.ndarray
    nodes: NodeGroups
    node_whole: np.ndarray  # per node: records with all of its ranks slow
    node_excess: np.ndarray  # per node: its ranks' median relative step time summed over those records
    node_first: np.ndarray
    node_last: np.ndarray

    @classmethod
    def empty(cls, world_size: int, nodes: Sequence[int]) -> Tallies:
        zeros = np.zeros(world_size, np.int64)
        groups = NodeGroups.of(nodes, world_size)
        node_zeros = np.zeros(len(groups.sizes), np.int64)
        return cls(
            zeros.copy(), zeros.copy(), np.zeros(world_size), np.zeros(world_size), zeros - 1, zeros - 1,
            groups, node_zeros.copy(), np.zeros(len(groups.sizes)), node_zeros - 1, node_zeros - 1,
        )  # fmt: skip

    def add(self, step_times: np.ndarray, medians: np.ndarray, offset: int) -> None:
        """``step_times``: (records, ranks) float32 of records ``offset``..; ``medians``: per record."""
        with np.errstate(invalid="ignore", divide="ignore"):
            relative = step_times / medians[:, None]
        relative = np.where(np.isfinite(relative), relative, -np.inf)
        has_value = relative.max(axis=1) > -np.inf
        worst = relative.argmax(axis=1)[has_value]
        np.add.at(self.slowest, worst, 1)
        np.add.at(self.excess, worst, relative[has_value, worst])
        slow = relative > SLOW_FACTOR
        self.slow += slow.sum(axis=0)
        self.slow_excess += relative.sum(axis=0, where=slow)
        self.first, self.last = _first_last(slow, offset, self.first, self.last)
        if len(self.nodes.sizes):
            whole = self.nodes.whole(slow)
            self.node_whole += whole.sum(axis=0)
            for node in np.flatnonzero(whole.any(axis=0)).tolist():  # few: a slow host is rare
                in_node = relative[whole[:, node]][:, self.nodes.ranks_of(node)]
                self.node_excess[node] += float(np.median(in_node, axis=1).sum())
            self.node_first, self.node_last = _first_last(whole, offset, self.node_first, self.node_last)


def _first_last(hit: np.ndarray, offset: int, first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first and last record (counted from ``offset``) of each column of ``hit`` (records, columns),
    kept from earlier records where already known."""
    seen = hit.any(axis=0)
    now_first = offset + hit.argmax(axis=0)
    now_last = offset + len(hit) - 1 - hit[::-1].argmax(axis=0)
    return np.where(seen & (first < 0), now_first, first), np.where(seen, now_last, last)


@dataclass
class RunRecords(RecordsRun):
    """One run's records: steps, float16 matrices in chunks, per-record medians and the tallies."""

    TAG = TAG
    PLUGIN_NAME = PLUGIN_NAME
    LAYOUT = RankLayout
    BATCH = CHUNK_RECORDS

    layout: RankLayout | None = None
    medians: np.ndarray = field(default_factory=lambda: np.zeros((0, len(CHANNELS)), np.float32))
    chunks: list[np.ndarray] = field(default_factory=list)  # each (channels, CHUNK_RECORDS, world) float16
    tallies: Tallies | None = None

    @property
    def world_size(self) -> int:
        return self.layout.world_size if self.layout else 0

    def channel(self, index: int, start: int = 0) -> list[np.ndarray]:
        """The (records, world) float16 views of one channel from record ``start`` to ``count``, by chunk."""
        views = []
        for number, chunk in enumerate(self.chunks):
            first = max(start - number * CHUNK_RECORDS, 0)
            used = min(CHUNK_RECORDS, self.count - number * CHUNK_RECORDS)
            if used > first:
                views.append(chunk[index, first:used])
        return views

    def series(self, rank: int) -> np.ndarray:
        """(channels, records) float32: one rank's values."""
        parts = [view for view in (self._rank_part(n, rank) for n in range(len(self.chunks))) if view.size]
        return np.concatenate(parts, axis=1) if parts else np.zeros((len(CHANNELS), 0), np.float32)

    def _rank_part(self, number: int, rank: int) -> np.ndarray:
        used = max(0, min(CHUNK_RECORDS, self.count - number * CHUNK_RECORDS))
        return self.chunks[number][:, :used, rank].astype(np.float32)

    # -- reading (RecordsRun calls these) ------------------------------------------------------------
    def reload_secs(self) -> float:
        return RELOAD_SECS

    def _use_layout(self, layout: RankLayout) -> None:
        if self.layout is not None and layout.world_size != self.layout.world_size:
            self._truncate(0)  # a resume with another world size: only the new records compare
        self.layout = layout

    def _accepts(self, record: TensorRecord) -> bool:
        matrix = record.array
        if matrix.ndim != 2 or not 0 < matrix.shape[1] <= len(CHANNELS):  # fewer: written before a channel was added
            return False
        if self.layout is None:
            self.layout = _layout_for(len(matrix))
        return len(matrix) == self.world_size  # else written for another world size than the layout in force

    def _store(self, batch: list[TensorRecord]) -> None:
        if not batch:
            return
        n, channels = len(batch), len(CHANNELS)
        # (channels, records, ranks): each channel's records contiguous, as the chunks hold them.
        values16 = np.ascontiguousarray(np.stack([_all_channels(record.array) for record in batch]).transpose(2, 0, 1))
        medians = _medians(values16)
        needed = -(-(self.count + n) // CHUNK_RECORDS)
        while len(self.chunks) < needed:
            self.chunks.append(np.empty((channels, CHUNK_RECORDS, self.world_size), np.float16))
        if len(self.steps) < needed * CHUNK_RECORDS:
            self.steps = np.resize(self.steps, needed * CHUNK_RECORDS)
            self.medians = np.resize(self.medians, (needed * CHUNK_RECORDS, channels))
        done = 0
        while done < n:
            number, row = divmod(self.count + done, CHUNK_RECORDS)
            take = min(CHUNK_RECORDS - row, n - done)
            self.chunks[number][:, row : row + take] = values16[:, done : done + take]
            done += take
        rows = slice(self.count, self.count + n)
        self.steps[rows] = [record.step for record in batch]
        self.medians[rows] = medians.T
        if self.tallies is None:
            self.tallies = Tallies.empty(self.world_size, self.layout.nodes)
        self.tallies.add(values16[STEP_TIME].astype(np.float32), medians[STEP_TIME], self.count)
        self.count += n

    def _truncate(self, keep: int) -> None:
        """Keep the first ``keep`` records; the tallies are recounted from them."""
        self.count = keep
        self.cache.clear()
        self.chunks = self.chunks[: -(-keep // CHUNK_RECORDS)] if keep else []
        self.tallies = None
        if keep and self.layout is not None:
            self.tallies = Tallies.empty(self.world_size, self.layout.nodes)
            offset = 0
            for view in self.channel(STEP_TIME):
                rows = slice(offset, offset + len(view))
                self.tallies.add(view.astype(np.float32), self.medians[rows, STEP_TIME], offset)
                offset += len(view)


class RanksStore(RunCatalog[RunRecords]):
    """Every run under ``logdir`` with its ranks records."""

    def __init__(self, logdir: Path) -> None:
        super().__init__(logdir, RunRecords, DISCOVER_SECS)
