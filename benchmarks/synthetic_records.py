"""A synthetic run's tensor records written through the package's own RunWriter (the ranks and moe generators).

Each array is queued with ``add_built`` + ``tensor_event`` at its record's step, as TensorBoardMonitor
queues its records; the first record carries the layout. A fixed clock: the same arrays write the same
records.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from mindformers_tbplugin.tfevents.events import tensor_event
from mindformers_tbplugin.tfevents.writer import RunWriter

START_WALL_TIME = 1_790_000_000.0


def _builder(array: np.ndarray, wall_time: float, tag: str, plugin_name: str, content: bytes):
    return lambda step, _queued_at: tensor_event(step, wall_time, tag, array, plugin_name, content)


def write(
    run_dir: Path,
    blocks: Iterable[np.ndarray],
    *,
    tag: str,
    plugin_name: str,
    layout: bytes,
    steps_per_record: int,
    seconds_per_step: float,
    block_records: int,
) -> int:
    """Write the records of ``blocks`` (arrays of at most ``block_records`` records each, in order), record
    ``r`` at step ``(r + 1) * steps_per_record``; returns the run folder's bytes once the file is closed."""
    writer = RunWriter(run_dir, flush_secs=60.0, max_queue=10 * block_records + 10)
    record = 0
    try:
        for arrays in blocks:
            for array in arrays:
                step = (record + 1) * steps_per_record
                wall_time = START_WALL_TIME + step * seconds_per_step
                writer.add_built(step, _builder(array, wall_time, tag, plugin_name, layout if record == 0 else b""))
                record += 1
            writer.flush(timeout=600.0)  # bounds what is queued to one block
    finally:
        writer.close(timeout=600.0)
    return sum(path.stat().st_size for path in run_dir.iterdir() if path.is_file())
