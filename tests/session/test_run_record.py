"""session/run_record.py: what a run records about itself, written by a real RunWriter and read back as
TensorBoard's loader reads the file. The description at train begin (the cell graph, the parameter table,
the config text, the HParams experiment and session start), only the parts the description holds, all
at its step; and the HParams session's end with its status."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

from mindformers_tbplugin.framework.run_description import HPARAM_COLUMNS, HPARAM_METRICS, RunDescription
from mindformers_tbplugin.session import run_record
from mindformers_tbplugin.tfevents.events import CellInfo, ParamInfo
from mindformers_tbplugin.tfevents.writer import RunWriter

CELLS = [
    CellInfo("", "TinyNet", [], total=6, trainable=6),
    CellInfo("dense", "Dense", [ParamInfo("weight", (2, 3), "Float32", True)], total=6, trainable=6),
]


def _written(run_dir: Path, write: Callable[[RunWriter], None]) -> list | None:
    """The events after the file version, once ``write(writer)`` queued them and the writer closed
    (None when the writer had nothing to write, and so opened no file)."""
    writer = RunWriter(run_dir)
    write(writer)
    writer.close()
    found = list(run_dir.glob("events.out.tfevents.*")) if run_dir.exists() else []
    if not found:
        return None
    (path,) = found
    version, *events = LegacyEventFileLoader(str(path)).Load()
    assert version.file_version == "brain.Event:2"
    return events


def _plugin_data(event: object) -> tuple[str, plugin_data_pb2.HParamsPluginData]:
    (value,) = event.summary.value  # type: ignore[attr-defined]
    assert value.metadata.plugin_data.plugin_name == metadata.PLUGIN_NAME
    return value.tag, plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)


def test_the_whole_description_is_written_at_its_step(tmp_path: Path) -> None:
    hparams = {"experiment": "tiny", "learning_rate": 0.001, "use_parallel": False}
    description = RunDescription(step=40, cells=CELLS, parameters="| dense | 6 |", config="seed: 1\n", hparams=hparams)
    graph, parameters, config, experiment, start = _written(
        tmp_path, lambda writer: run_record.write_description(writer, description)
    )
    assert {event.step for event in (graph, parameters, config, experiment, start)} == {40}
    assert graph.graph_def  # the Graphs dashboard's serialised GraphDef (its content: tests/tfevents/test_events.py)
    texts = [(e.summary.value[0].tag, e.summary.value[0].tensor.string_val) for e in (parameters, config)]
    assert texts == [("run/parameters", [b"| dense | 6 |"]), ("run/config", [b"seed: 1\n"])]
    tag, data = _plugin_data(experiment)
    assert tag == metadata.EXPERIMENT_TAG
    assert [info.name for info in data.experiment.hparam_infos] == list(HPARAM_COLUMNS)
    assert [info.name.tag for info in data.experiment.metric_infos] == list(HPARAM_METRICS)
    tag, data = _plugin_data(start)
    assert tag == metadata.SESSION_START_INFO_TAG
    info = data.session_start_info
    assert (info.hparams["experiment"].string_value, info.hparams["learning_rate"].number_value) == ("tiny", 0.001)
    assert info.hparams["use_parallel"].bool_value is False
    # The experiment and the session it holds share one start time.
    assert data.session_start_info.start_time_secs == _plugin_data(experiment)[1].experiment.time_created_secs


def test_only_what_the_description_holds_is_written(tmp_path: Path) -> None:
    empty = RunDescription(step=0, cells=[], parameters=None, config=None, hparams=None)
    assert _written(tmp_path / "empty", lambda writer: run_record.write_description(writer, empty)) is None
    config_only = RunDescription(step=3, cells=[], parameters=None, config="a: 1\n", hparams=None)
    (config,) = _written(tmp_path / "config", lambda writer: run_record.write_description(writer, config_only))
    assert (config.step, config.summary.value[0].tag) == (3, "run/config")


@pytest.mark.parametrize(("succeeded", "status"), [(True, api_pb2.STATUS_SUCCESS), (False, api_pb2.STATUS_FAILURE)])
def test_the_session_end_carries_its_status(tmp_path: Path, succeeded: bool, status: int) -> None:
    (end,) = _written(tmp_path, lambda writer: run_record.write_end(writer, 64, succeeded))
    tag, data = _plugin_data(end)
    assert (end.step, tag, data.session_end_info.status) == (64, metadata.SESSION_END_INFO_TAG, status)
    assert data.session_end_info.end_time_secs == end.wall_time
