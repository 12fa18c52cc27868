"""The expert-load record for the ``moe`` TensorBoard plugin: every MoE layer's per-expert load (and
expert bias) in one tensor summary of the main run. numpy only, no I/O.

A record is a float16 array of shape ``(len(channels), layers, experts)``, tag ``moe/load``: channel
``load`` is each expert's load over its layer's mean (1 = balanced, 0 = unused; NaN for a layer
without load), channel ``bias`` (when a router has one) the expert bias (NaN for layers without).
One record covers one or several reads of the routers, their mean, so that records stay within a
byte budget per training step; its step is the last read's. The first record a writer writes carries
the layout, :class:`ExpertLayout`, as JSON in the summary metadata's plugin content; later records
carry the plugin name with empty content. A reader takes the layout of the last record that has one.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import numpy as np

PLUGIN_NAME = "moe"
TAG = "moe/load"
FORMAT_VERSION = 1
LOAD = "load"
BIAS = "bias"
BYTES_PER_VALUE = 2  # float16
RECORD_OVERHEAD_BYTES = 100  # event framing, tag, shape and metadata of a record without layout, about


@dataclass(frozen=True)
class ExpertLayout:
    """What a reader needs besides the array: written as the records' plugin content."""

    groups: tuple[str, ...]  # one per row: the MoE layer, named as the gradient groups are
    experts: int
    top_k: int
    routers: tuple[str, ...]  # per row: "expert_bias" or "aux_loss"
    channels: tuple[str, ...]  # (LOAD,) or (LOAD, BIAS)
    steps_per_read: int  # the routers are read every this many steps (moe_every)
    reads_per_record: int  # >1: each record is the mean of that many reads
    dead_fraction: float  # an expert under this share of the mean load counts as dead
    version: int = FORMAT_VERSION

    def content(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_content(cls, content: bytes) -> ExpertLayout:
        fields = json.loads(content.decode("utf-8"))
        for name in ("groups", "routers", "channels"):
            fields[name] = tuple(fields[name])
        return cls(**fields)


def reads_per_record(
    layers: int, experts: int, channels: int, steps_per_read: int, budget_bytes_per_step: float
) -> int:
    """How many reads one record covers so that records average at most the budget per training step."""
    record = layers * experts * channels * BYTES_PER_VALUE + RECORD_OVERHEAD_BYTES
    if budget_bytes_per_step <= 0:
        return 1
    return max(1, math.ceil(record / (budget_bytes_per_step * max(steps_per_read, 1))))


class LoadRecorder:
    """Collects each read's relative loads (and bias); hands out a record every ``reads`` reads,
    their mean (NaN-aware: a layer missing from one read is the mean of the others)."""

    def __init__(self, reads: int, with_bias: bool) -> None:
        self.reads = max(reads, 1)
        self.with_bias = with_bias
        self._sums: np.ndarray | None = None
        self._counts: np.ndarray | None = None
        self._taken = 0

    def add(self, relative: np.ndarray, bias: np.ndarray | None) -> np.ndarray | None:
        """``relative``: (layers, experts), NaN rows for layers without load; ``bias`` the same shape
        or None. Returns the float16 record when one is due, else None."""
        planes = [relative] + ([np.full_like(relative, np.nan) if bias is None else bias] if self.with_bias else [])
        stacked = np.stack(planes).astype(np.float64)
        known = ~np.isnan(stacked)
        if self._sums is None:
            self._sums = np.zeros_like(stacked)
            self._counts = np.zeros(stacked.shape, dtype=np.int64)
        self._sums += np.where(known, stacked, 0.0)
        self._counts += known
        self._taken += 1
        if self._taken < self.reads:
            return None
        return self.take()

    def take(self) -> np.ndarray | None:
        """The record of what is pending (at the end of training), or None."""
        if self._sums is None:
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(self._counts > 0, self._sums / np.maximum(self._counts, 1), np.nan)
        self._sums, self._counts, self._taken = None, None, 0
        return mean.astype(np.float16)
