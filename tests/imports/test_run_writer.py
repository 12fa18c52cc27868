"""An ImportedRun written as a run folder: read back by TensorBoard's own EventAccumulator (every
scalar, histogram, image and text), and by ``read_source`` with what the comparison needs restored."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import read_scalars
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import (
    HISTOGRAMS,
    IMAGES,
    SCALARS,
    TENSORS,
    EventAccumulator,
)

from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.imports.detect import read_source
from mindformers_tbplugin.imports.imported_run import METADATA_FILE, Histogram, ImportedRun
from mindformers_tbplugin.imports.run_writer import write_run


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 60)).save(out, format="PNG")
    return out.getvalue()


def sample_run(tmp_path: Path) -> ImportedRun:
    run = ImportedRun(source=[tmp_path / "worker_0.log"], format="megatron-log")
    for step in (10, 20, 30):
        run.add("train/loss", step, 10.0 / step)
        run.add("train/grad_norm", step, 1.25)
        run.add("import/tokens per gpu", step, 4096.0)
        run.wall_times[step] = 1_700_000_000.0 + step
    run.histograms["import/weights"] = {
        20: Histogram({"min": -1.0, "max": 2.0, "num": 6, "sum": 3.0, "sum_squares": 9.0}, [0.0, 1.0, 2.0], [1, 3, 2])
    }
    run.images["import/sample"] = {30: png(7, 5)}
    run.texts["import/args"] = {0: "lr: 1e-4"}
    run.averaged_over = {"train/loss": 10, "train/grad_norm": 10}
    run.resolution = {"train/grad_norm": 0.001}
    run.skipped = ["line 7: `iteration 3/ 10 | lm loss: nan?` does not parse"]
    run.notes = ["grad norm printed with 3 decimals"]
    sub = ImportedRun(source=[tmp_path / "worker_1.log"], format="megatron-log")
    sub.add("perf/step_time_ms", 10, 250.0)
    run.sub_runs["rank_1"] = sub
    return run


def test_written_run_as_tensorboard_reads_it(tmp_path: Path) -> None:
    run = sample_run(tmp_path)
    folders = write_run(run, tmp_path / "logs" / "baseline")
    assert folders == [tmp_path / "logs" / "baseline", tmp_path / "logs" / "baseline" / "rank_1"]
    scalars = read_scalars(folders[0])
    assert {tag: dict(points) for tag, points in scalars.items()} == {
        tag: pytest.approx(series, rel=1e-7) for tag, series in run.scalars.items()
    }
    assert dict(read_scalars(folders[1])["perf/step_time_ms"]) == {10: 250.0}
    accumulator = EventAccumulator(str(folders[0]), size_guidance={SCALARS: 0, HISTOGRAMS: 0, IMAGES: 0, TENSORS: 0})
    accumulator.Reload()
    (histogram,) = accumulator.Histograms("import/weights")
    assert histogram.step == 20
    assert list(histogram.histogram_value.bucket_limit) == [0.0, 1.0, 2.0]
    assert list(histogram.histogram_value.bucket) == [1, 3, 2]
    (image,) = accumulator.Images("import/sample")
    assert (image.step, image.width, image.height) == (30, 7, 5)
    assert image.encoded_image_string == run.images["import/sample"][30]
    texts = {tag: accumulator.Tensors(tag) for tag in accumulator.Tags()["tensors"]}
    assert texts["import/args"][0].tensor_proto.string_val == [b"lr: 1e-4"]
    source = texts["import/source"][0].tensor_proto.string_val[0].decode()
    assert "**megatron-log**" in source and "worker_0.log" in source
    assert "`train/loss` over 10 steps" in source and "`train/grad_norm` 0.001" in source
    assert "line 7: `iteration 3/ 10 | lm loss: nan?` does not parse" in source
    metadata = json.loads((folders[0] / METADATA_FILE).read_text())
    assert metadata["averaged_over"] == run.averaged_over and metadata["resolution"] == run.resolution


def test_read_back_restores_what_a_comparison_needs(tmp_path: Path) -> None:
    run = sample_run(tmp_path)
    write_run(run, tmp_path / "baseline")
    back = read_source([tmp_path / "baseline"])
    assert back.format == "megatron-log"
    assert back.averaged_over == run.averaged_over and back.resolution == run.resolution
    assert back.scalars["import/tokens per gpu"] == run.scalars["import/tokens per gpu"]
    assert back.scalars["train/loss"] == pytest.approx(run.scalars["train/loss"], rel=1e-7)
    assert back.sub_runs["rank_1"].scalars == {"perf/step_time_ms": {10: 250.0}}
    assert back.wall_times[20] == run.wall_times[20]
    # Imported again: one import/source text, this import's.
    write_run(back, tmp_path / "again")
    again = EventAccumulator(str(tmp_path / "again"), size_guidance={TENSORS: 0})
    again.Reload()
    assert len(again.Tensors("import/source")) == 1


def test_a_folder_holding_a_run_is_not_written_over(tmp_path: Path) -> None:
    write_run(sample_run(tmp_path), tmp_path / "run")
    with pytest.raises(UsageError, match="already holds a run; choose another --name or --logdir"):
        write_run(sample_run(tmp_path), tmp_path / "run")
