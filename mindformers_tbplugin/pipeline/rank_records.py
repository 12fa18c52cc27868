"""The per-rank record for the ``ranks`` TensorBoard plugin: every rank's system values of an
aggregation interval, in one tensor summary of the main run. numpy only, no I/O.

The writing rank already receives every rank's interval means (step time, host memory, device
memory, and its loss) in the one all-reduce per interval (``SystemSummary.pack_slots``,
``LossAggregator``). A record holds them as a
float16 matrix of shape ``(world_size, len(CHANNELS))`` (NaN where a rank has no value), at the step
of the interval's aggregation, tag ``ranks/matrix``. When the world is large, one record covers
several intervals (the elementwise maximum over them, so a straggler is never averaged away) so that
the records stay within a byte budget per training step. The first record a writer writes (a
training's start, or a resume) carries the layout, :class:`RankLayout`, as JSON in the summary
metadata's plugin content (its per-rank node list makes it ~5 bytes per rank); the later records
carry the plugin name with empty content. A reader takes the layout of the last record that has one.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import numpy as np

PLUGIN_NAME = "ranks"
TAG = "ranks/matrix"
FORMAT_VERSION = 1
# The columns of a record: the all-reduce's system slots in the order of aggregation.SUMMARY_TAGS, then
# each rank's mean train/loss over the interval (aggregation.LossAggregator). Records written before
# the loss column have the first four (their layout says so); readers show no loss for them.
CHANNELS = ("step_time_ms", "host_rss_gb", "device_mem_allocated_gb", "device_mem_peak_gb", "loss")
BYTES_PER_VALUE = 2  # float16
FLOAT16_MAX = float(np.finfo(np.float16).max)
RECORD_OVERHEAD_BYTES = 100  # event framing, tag, shape and metadata of a record without layout, about


@dataclass(frozen=True)
class RankLayout:
    """What a reader needs besides the matrix: written as the records' plugin content."""

    world_size: int
    channels: tuple[str, ...]
    steps_per_interval: int  # aggregate_every: the shortest interval (aggregate_seconds may stretch one)
    intervals_per_record: int  # >1: each record is the maximum over that many intervals
    nodes: tuple[int, ...]  # node index of each rank (hosts numbered in the order of their first rank)
    node_names: tuple[str, ...]  # one per node: its host name
    worker_log: str | None  # e.g. "/out/msrun_log/{node}/worker_{rank}.log" when the launcher was used
    version: int = FORMAT_VERSION

    def content(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_content(cls, content: bytes) -> RankLayout:
        fields = json.loads(content.decode("utf-8"))
        for name in ("channels", "nodes", "node_names"):
            fields[name] = tuple(fields[name])
        return cls(**fields)


def intervals_per_record(world_size: int, steps_per_interval: int, budget_bytes_per_step: float) -> int:
    """How many intervals one record covers so that records average at most the budget per step."""
    record = world_size * len(CHANNELS) * BYTES_PER_VALUE + RECORD_OVERHEAD_BYTES
    if budget_bytes_per_step <= 0:
        return 1
    return max(1, math.ceil(record / (budget_bytes_per_step * max(steps_per_interval, 1))))


class RankRecorder:
    """Collects the gathered per-rank values of each interval; hands out a record every
    ``intervals_per_record`` intervals (their elementwise maximum, NaN-aware)."""

    def __init__(self, intervals: int) -> None:
        self.intervals = max(intervals, 1)
        self._pending: np.ndarray | None = None
        self._count = 0

    def add(self, gathered: np.ndarray) -> np.ndarray | None:
        """``gathered``: (world_size, len(CHANNELS)) float32 with NaN for no value. Returns the float16
        record when one is due, else None."""
        self._pending = gathered.copy() if self._pending is None else np.fmax(self._pending, gathered)
        self._count += 1
        if self._count < self.intervals:
            return None
        return self.take()

    def take(self) -> np.ndarray | None:
        """The record of what is pending (at the end of training), or None."""
        pending, self._pending, self._count = self._pending, None, 0
        # float16 ends at 65,504: a longer interval mean (a first interval with graph compilation,
        # in ms) is kept as that largest value rather than as infinity
        return None if pending is None else np.minimum(pending, FLOAT16_MAX).astype(np.float16)
