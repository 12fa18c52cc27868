"""The ``moe/load`` records (layer x expert load, and expert bias) of every run under a logdir.

At DeepSeek-V3's size a record is 59 x 256 x 2 float16 values (60 KB) and a run holds thousands, so a
run keeps, per record, only where its bytes are (the heatmap of one step reads that record again, one
small read) and what the strip and the lists need, computed once on arrival: per layer MaxVio, the
least load, and the dead experts as bits (59 x 32 bytes). The files are read incrementally by
:mod:`~mindformers_tbplugin.viewer.tensor_records`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mindformers_tbplugin.pipeline.expert_load import DEFAULT_DEAD_FRACTION, layer_statistics
from mindformers_tbplugin.pipeline.expert_records import BIAS, LOAD, PLUGIN_NAME, TAG, ExpertLayout
from mindformers_tbplugin.viewer.tensor_records import RecordsRun, RunCatalog, TensorRecord, Where

RELOAD_SECS = 2.0  # a run's files are read again at most this often (requests come in bursts)
DISCOVER_SECS = 5.0  # how often the logdir is walked for new runs


def _placeholder_layout(shape: tuple[int, ...]) -> ExpertLayout:
    """What to assume before any record carried a layout: rows numbered, no router facts (version 0)."""
    channels, layers, experts = shape
    return ExpertLayout(
        groups=tuple(f"row {row}" for row in range(layers)),
        experts=experts,
        top_k=0,
        routers=("?",) * layers,
        channels=(LOAD, BIAS)[:channels],
        steps_per_read=1,
        reads_per_record=1,
        dead_fraction=DEFAULT_DEAD_FRACTION,
        version=0,
    )


def _shape(layout: ExpertLayout | None) -> tuple[int, int, int]:
    """(channels, layers, experts) of a record under ``layout``."""
    return (len(layout.channels), len(layout.groups), layout.experts) if layout else (0, 0, 0)


def _same_rows(old: ExpertLayout, new: ExpertLayout) -> bool:
    """Whether the records under ``old`` compare with those under ``new`` (a placeholder's, by shape)."""
    if not old.version:
        return _shape(old) == _shape(new)
    return (old.groups, old.experts, old.channels) == (new.groups, new.experts, new.channels)


@dataclass
class MoeRun(RecordsRun):
    """One run's records: steps, where each record is, and per record x layer its statistics."""

    TAG = TAG
    PLUGIN_NAME = PLUGIN_NAME
    LAYOUT = ExpertLayout

    layout: ExpertLayout | None = None
    where: list[Where] = field(default_factory=list)
    violation: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))  # (records, layers)
    low: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    dead_count: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int16))
    dead_bits: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0), np.uint8))  # (records, layers, E/8)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(channels, layers, experts) of a record under the layout in force."""
        return _shape(self.layout)

    def dead(self, layer: int, stop: int) -> np.ndarray:
        """(records 0..stop-1, experts) bool: which experts of ``layer`` were dead in each record."""
        return np.unpackbits(self.dead_bits[:stop, layer], axis=-1, count=self.shape[2]).astype(bool)

    def record(self, index: int) -> np.ndarray:
        """Record ``index`` as (channels, layers, experts) float16, read again from its event file."""
        found = self.files.read_again(self.where[index])
        if found is None or found.array.shape != self.shape:
            raise ValueError(f"the record of step {int(self.steps[index])} can no longer be read from its event file")
        return found.array

    # -- reading (RecordsRun calls these) ------------------------------------------------------------
    def reload_secs(self) -> float:
        return RELOAD_SECS

    def _use_layout(self, layout: ExpertLayout) -> None:
        old, self.layout = self.layout, layout
        if old is None or not self.count:
            return
        if not _same_rows(old, layout):
            self._truncate(0)  # a resume with other layers or experts: only the new records compare
        elif old.dead_fraction != layout.dead_fraction:
            self._recount()  # the same rows, another threshold: the dead experts of every record again

    def _accepts(self, record: TensorRecord) -> bool:
        if self.layout is None and record.array.ndim == 3:
            self.layout = _placeholder_layout(record.array.shape)
        return record.array.shape == self.shape  # else written under another layout than the one in force

    def _store(self, batch: list[TensorRecord]) -> None:
        if not batch:
            return
        n, (_, layers, experts) = len(batch), self.shape
        load = np.stack([record.array[0] for record in batch]).astype(np.float32)
        violation, low, dead = layer_statistics(load, self.layout.dead_fraction)
        self._reserve(self.count + n, layers, experts)
        rows = slice(self.count, self.count + n)
        self.steps[rows] = [record.step for record in batch]
        self.violation[rows], self.low[rows] = violation, low
        self.dead_count[rows] = dead.sum(axis=-1)
        self.dead_bits[rows] = np.packbits(dead, axis=-1)
        self.where[self.count :] = [record.where for record in batch]
        self.count += n
        self.cache.clear()

    def _reserve(self, needed: int, layers: int, experts: int) -> None:
        """Room for ``needed`` records (capacity doubles: appends stay amortised O(1))."""
        if len(self.steps) >= needed:  # a new shape starts from _truncate(0), which empties the arrays
            return
        size = max(needed, 2 * len(self.steps), self.BATCH)
        keep = self.count

        def grown(old: np.ndarray, shape: tuple[int, ...], dtype: type) -> np.ndarray:
            new = np.zeros((size, *shape), dtype)
            if keep:
                new[:keep] = old[:keep]
            return new

        self.steps = grown(self.steps, (), np.int64)
        self.violation = grown(self.violation, (layers,), np.float32)
        self.low = grown(self.low, (layers,), np.float32)
        self.dead_count = grown(self.dead_count, (layers,), np.int16)
        self.dead_bits = grown(self.dead_bits, (layers, -(-experts // 8)), np.uint8)

    def _truncate(self, keep: int) -> None:
        """Keep the first ``keep`` records."""
        self.count = keep
        del self.where[keep:]
        if not keep:  # the layout may have changed: arrays of the new shape on the next store
            self.steps = np.zeros(0, np.int64)
        self.cache.clear()

    def _recount(self) -> None:
        """The statistics of the records stored so far, again from their files (a new dead fraction)."""
        wheres = list(self.where[: self.count])
        self._truncate(0)
        for first in range(0, len(wheres), self.BATCH):
            found = [self.files.read_again(where) for where in wheres[first : first + self.BATCH]]
            self._store([record for record in found if record is not None and record.array.shape == self.shape])


class MoeStore(RunCatalog[MoeRun]):
    """Every run under ``logdir`` with its moe records."""

    def __init__(self, logdir: Path) -> None:
        super().__init__(logdir, MoeRun, DISCOVER_SECS)
