"""What a run records about itself: its description at train begin (graph, parameter table, config
text, HParams) and the HParams session's end. Built on the writer thread (``RunWriter.add_built``)."""

from __future__ import annotations

import time

from mindformers_tbplugin.framework.run_description import HPARAM_COLUMNS, HPARAM_METRICS, RunDescription
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.tfevents import events
from mindformers_tbplugin.tfevents.writer import RunWriter


def write_description(writer: RunWriter, description: RunDescription) -> None:
    """Queue what describes the run. On the writing rank, at train begin."""
    step, cells, hparams = description.step, description.cells, description.hparams
    if cells:
        writer.add_built(step, lambda s, wall: events.graph_event(s, wall, cells))
    if description.parameters is not None:
        writer.add_text(step, metrics.RUN_PARAMETERS, description.parameters)
    if description.config is not None:
        writer.add_text(step, metrics.RUN_CONFIG, description.config)
    if hparams is not None:
        start = time.time()
        columns, tags = HPARAM_COLUMNS, HPARAM_METRICS
        writer.add_built(step, lambda s, wall: events.hparams_experiment_event(s, wall, columns, tags, start))
        writer.add_built(step, lambda s, wall: events.hparams_session_start_event(s, wall, hparams, start))


def write_end(writer: RunWriter, step: int, succeeded: bool) -> None:
    """Close the HParams session with its status (TensorBoard shows it in the session table)."""
    writer.add_built(step, lambda s, wall: events.hparams_session_end_event(s, wall, succeeded))
