"""What every format reader yields: one run's points under our tag names, with what the comparison
must know of how they were recorded, and what the reader could not bring in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

Series = dict[int, float]  # global step -> value
METADATA_FILE = "mftb_import.json"  # beside the event files of a run ``mftb import`` wrote


@dataclass
class Histogram:
    """One histogram: ``counts[i]`` values in (limits[i-1], limits[i]]; ``stats`` holds min, max, num,
    sum and sum_squares (what TensorBoard's HistogramProto carries)."""

    stats: dict[str, float]
    limits: list[float]
    counts: list[float]


@dataclass
class ImportedRun:
    """One run read from a source.

    ``scalars`` maps a tag (ours where one exists, ``import/<name>`` otherwise) to its points.
    ``averaged_over`` says, per tag, how many steps each value is a mean of (Megatron-LM prints means
    over ``--log-interval`` steps; a value at step s then covers steps s-n+1..s). ``resolution`` is
    the smallest difference the source can show per tag (0.001 for a value printed with 3 decimals).
    ``skipped`` lists, in words, what was not imported (graphs, lineage, lines that did not parse
    with their first line numbers); ``stopped_at`` says where a truncated file ended.
    ``sub_runs`` holds one run per rank (``rank_<id>``) when the source has several ranks.
    ``notes`` says, in words, how the source was read (which rank the main run shows, units converted).
    """

    source: list[Path]
    format: str
    scalars: dict[str, Series] = field(default_factory=dict)
    wall_times: dict[int, float] = field(default_factory=dict)
    histograms: dict[str, dict[int, Histogram]] = field(default_factory=dict)
    images: dict[str, dict[int, bytes]] = field(default_factory=dict)  # encoded PNG (or other) bytes
    texts: dict[str, dict[int, str]] = field(default_factory=dict)
    averaged_over: dict[str, int] = field(default_factory=dict)
    resolution: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    stopped_at: str | None = None
    sub_runs: dict[str, ImportedRun] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, tag: str, step: int, value: float) -> None:
        self.scalars.setdefault(tag, {})[step] = value


@dataclass(frozen=True)
class SourceFormat:
    """One format a reader module brings in (its module-level ``FORMAT``): ``sniff`` says from a file's
    first bytes whether the file is in this format; ``read`` reads one source's files (a log and its
    rotated parts, a folder's event files) into one run."""

    name: str
    description: str
    sniff: Callable[[Path, bytes], bool]
    read: Callable[[list[Path]], ImportedRun]
    # True: a source is one file and its rotated parts (``info.log``, ``info.log.1``, ...), read oldest
    # first; False: a source is every file of this format in one folder, read in name order.
    rotated: bool = False
