"""One tag's tensor records read straight from the event files (viewer/tensor_records.py): in batches, each
file from where the previous pass stopped, each record read again from where its bytes are, and every run
under a logdir named as TensorBoard names it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tb_helpers import write_tensor_records

from mindformers_tbplugin.pipeline.expert_records import PLUGIN_NAME, TAG
from mindformers_tbplugin.viewer.moe_store import MoeRun
from mindformers_tbplugin.viewer.tensor_records import RunCatalog, TensorRecordFiles, Where


def arrays(count: int, start: float = 0.0) -> np.ndarray:
    return (start + np.arange(count * 6, dtype=np.float32)).reshape(count, 1, 2, 3)


def test_new_records_come_in_batches_and_only_once(tmp_path: Path) -> None:
    write_tensor_records(tmp_path, arrays(5), TAG, PLUGIN_NAME, b"layout", 10, 10)
    files = TensorRecordFiles(tmp_path, TAG, PLUGIN_NAME)
    batches = list(files.batches(2))
    assert [[record.step for record in batch] for batch in batches] == [[10, 20], [30, 40], [50]]
    first = batches[0][0]
    assert first.content == b"layout" and batches[0][1].content == b""  # the layout rides in the first only
    assert first.array.dtype == np.float16 and first.array.tolist() == arrays(1).tolist()[0]
    assert list(files.batches(2)) == []  # nothing new: nothing read again
    write_tensor_records(tmp_path, arrays(1, 100.0), TAG, PLUGIN_NAME, b"", 60, 10)  # a second writer's file
    assert [[record.step for record in batch] for batch in files.batches(2)] == [[60]]
    assert list(TensorRecordFiles(tmp_path, "ranks/matrix", "ranks").batches(2)) == []  # another tag


def test_a_record_is_read_again_from_where_its_bytes_are(tmp_path: Path) -> None:
    write_tensor_records(tmp_path, arrays(3), TAG, PLUGIN_NAME, b"", 10, 10)
    files = TensorRecordFiles(tmp_path, TAG, PLUGIN_NAME)
    (batch,) = files.batches(10)
    again = files.read_again(batch[2].where)
    assert again is not None and again.step == 30 and again.array.tolist() == batch[2].array.tolist()
    where = batch[2].where
    assert files.read_again(Where(where.path, where.offset + 1, where.size)) is None  # not a record there
    assert files.read_again(Where(tmp_path / "gone", where.offset, where.size)) is None


def test_runs_are_named_as_tensorboard_names_them(tmp_path: Path) -> None:
    for folder in (tmp_path, tmp_path / "exp" / "job", tmp_path / "empty"):
        records = arrays(2) if folder.name != "empty" else arrays(0)
        write_tensor_records(folder, records, TAG, PLUGIN_NAME, b"", 10, 10)
    catalog = RunCatalog(tmp_path, MoeRun, discover_secs=0.0)
    assert catalog.has_records() is False  # nothing read yet: asking costs nothing
    assert list(catalog.runs()) == [".", "exp/job"]  # the logdir itself is "."; a run without records is not
    assert catalog.has_records() is True
    assert catalog.run("empty") is None and catalog.run("nope") is None
    assert catalog.run("exp/job").count == 2
    assert list(RunCatalog(tmp_path / "missing", MoeRun, 0.0).runs()) == []
