"""Run views of a plain MindSpore training (no YAML, no MindFormers Trainer): HParams hold only what
the callback can know, the session status says whether training finished, graph and parameter table
are written, no config text. Read back with TensorBoard's own reader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HELPERS, run_dirs, subprocess_env

pytestmark = pytest.mark.process

SCRIPT = HELPERS / "plain_mindspore_train.py"


def _views(tmp_path: Path, mode: str) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator
    from tensorboard.plugins.hparams import api_pb2, metadata

    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "tb", str(work), mode],
        cwd=work,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (result.returncode == 0) == (mode == "ok"), result.stderr[-4000:]
    (run_dir,) = run_dirs(work / "tb")
    accumulator = EventAccumulator(str(run_dir), size_guidance={TENSORS: 0})
    accumulator.Reload()

    def plugin_content(tag: str) -> bytes:
        return accumulator.SummaryMetadata(tag).plugin_data.content

    start = metadata.parse_session_start_info_plugin_data(plugin_content(metadata.SESSION_START_INFO_TAG))
    end = metadata.parse_session_end_info_plugin_data(plugin_content(metadata.SESSION_END_INFO_TAG))
    hparams = {
        name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
        for name, value in start.hparams.items()
    }
    texts = {
        tag: accumulator.Tensors(tag)[0].tensor_proto.string_val[0].decode()
        for tag in accumulator.Tags()["tensors"]
        if tag.startswith("run/")
    }
    return {
        "hparams": hparams,
        "status": api_pb2.Status.Name(end.status),
        "texts": texts,
        "graph": {node.name: node.op for node in accumulator.Graph().node},
    }


@pytest.mark.parametrize(("mode", "status"), [("ok", "STATUS_SUCCESS"), ("raise", "STATUS_FAILURE")])
def test_plain_mindspore_run_views(tmp_path: Path, mode: str, status: str) -> None:
    views = _views(tmp_path, mode)
    assert views["status"] == status
    # nn.Dense(4, 1): 4 weights + 1 bias; Momentum(lr=0.01); batches of 8; model.train(2, ...)
    assert views["hparams"] == {
        "experiment": "plain",
        "learning_rate": pytest.approx(0.01),
        "batch_size": 8,
        "global_batch_size": 8,
        "parameters": 5,
        "epochs": 2,
        "world_size": 1,
        "data_parallel_replicas": 1,  # one process: one replica of the model
    }
    assert set(views["texts"]) == {"run/parameters"}  # no YAML config to show
    assert "| `(model)` | Dense | 5 | 5 |" in views["texts"]["run/parameters"]
    assert views["graph"] == {"Dense/weight": "Parameter", "Dense/bias": "Parameter", "Dense/Dense": "Dense"}
