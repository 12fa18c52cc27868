"""TensorBoardMonitor's ``baseline``: a run the training is compared with while it runs.

On the writing rank, at train begin, a thread of its own reads the baseline once (a run folder or any
source ``mftb import`` reads), writes its points as the sub-run ``<run>/baseline`` (TensorBoard draws
both curves in the same charts) and builds the comparison (alignment/live.py). The comparison itself
runs where the main run's values are routed (the run's writer thread, or the training thread at a
step that needs its values at once), from the values the main run gets: no collective, nothing new
on the training thread. Steps routed while the baseline is still being read wait for it, and are
compared once it is.

A baseline missing at start is a configuration error (``mftb validate``, the options' check); one
that cannot be read is said once, and the training runs without a comparison.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from mindformers_tbplugin.alignment.live import LiveComparison
from mindformers_tbplugin.imports.detect import read_source
from mindformers_tbplugin.imports.imported_run import ImportedRun
from mindformers_tbplugin.imports.run_writer import write_run
from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.tfevents import run_folders

NAME = "TensorBoardMonitor"
MAX_WAITING = 100_000  # logged steps held while the baseline is read; later ones are not compared
Derived = list[tuple[int, dict[str, float]]]
_COMPARED_TAGS = tuple(tags[0] for tags in metrics.COMPARED.values())


class Baseline:
    """The baseline of one training: read on a thread of its own, compared on the routing thread."""

    def __init__(self, source: Path, run_dir: Path) -> None:
        self.source, self.run_dir = source, run_dir
        self.comparison: LiveComparison | None = None
        self._done = threading.Event()
        self._waiting: Derived = []  # (step, compared values) routed before the baseline was read
        self._said_full = False
        self._thread = threading.Thread(target=self._load, name="mftb-baseline", daemon=True)
        self._thread.start()

    # -- the reading thread ------------------------------------------------------------------------
    def _load(self) -> None:
        started = time.perf_counter()
        try:
            imported = read_source([self.source])
            self.comparison = self._written(imported, LiveComparison(imported), started)
        except Exception as exc:  # monitoring never stops training: no comparison
            logger.warning(
                "%s: baseline %s could not be read (%s); training continues without it", NAME, self.source, exc
            )
        finally:
            self._done.set()

    def _written(self, imported: ImportedRun, comparison: LiveComparison, started: float) -> LiveComparison:
        """The sub-run written (a failure to write it is said, the comparison goes on), and said."""
        try:
            written = write_sub_run(imported, self.run_dir / run_folders.BASELINE_RUN)
        except OSError as exc:
            written = f"its points not written ({exc})"
        compared = ", ".join(sorted(comparison.tags)) or "nothing (it holds neither train/loss nor train/grad_norm)"
        elapsed = time.perf_counter() - started
        logger.info(
            "%s: baseline %s (%s) read in %.1f s: %s; comparing %s",
            *(NAME, self.source, imported.format, elapsed, written, compared),
        )
        return comparison

    # -- the routing thread ------------------------------------------------------------------------
    def derive(self, step: int, values: Mapping[str, float]) -> Derived:
        """The ``compare/*`` values of ``step`` (and of the steps that waited for the baseline)."""
        done = self._done.is_set()  # before the comparison: the reading thread sets it first
        comparison = self.comparison
        if not done:
            self._wait_with(step, values)
            return []
        if comparison is None:  # the baseline could not be read
            return []
        derived = self._replay(comparison) if self._waiting else []
        found = comparison.observe(step, values)
        if found:
            derived.append((step, found))
        return derived

    def _wait_with(self, step: int, values: Mapping[str, float]) -> None:
        compared = {tag: values[tag] for tag in _COMPARED_TAGS if tag in values}
        if not compared:
            return
        if len(self._waiting) < MAX_WAITING:
            self._waiting.append((step, compared))
        elif not self._said_full:
            self._said_full = True
            logger.warning("%s: the baseline is still being read; steps after %d are not compared", NAME, step)

    def _replay(self, comparison: LiveComparison) -> Derived:
        waiting, self._waiting = self._waiting, []
        return [(step, found) for step, values in waiting if (found := comparison.observe(step, values))]

    def drain(self, timeout: float) -> Derived:
        """At the end: wait up to ``timeout`` seconds for the baseline, then the steps that waited for it."""
        if not self._done.wait(timeout):
            logger.warning("%s: the baseline %s was still being read at the end: not compared", NAME, self.source)
            return []
        comparison = self.comparison
        return self._replay(comparison) if comparison is not None else []


def write_sub_run(imported: ImportedRun, folder: Path) -> str:
    """The baseline's main run (as ``mftb import`` writes a run: its points at their wall times, the text
    ``import/source``, what a later comparison must know) into ``folder``; a folder that holds event
    files already (a resumed run) is left as it is. Returns what was done, in words."""
    if folder.is_dir() and run_folders.event_files(folder):
        return f"{folder} already written"
    write_run(dataclasses.replace(imported, sub_runs={}), folder)
    points = sum(map(len, imported.scalars.values()))
    return f"{points} points of {len(imported.scalars)} tags written to {folder}"
