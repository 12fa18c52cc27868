"""The format registry: sources told apart by content, folders expanded, ranks as sub-runs, rotated
parts read oldest first, and every unusable source refused with the formats tried."""

from __future__ import annotations

from pathlib import Path

import pytest

from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.imports import detect
from mindformers_tbplugin.imports.imported_run import ImportedRun, SourceFormat
from mindformers_tbplugin.tfevents.writer import RunWriter


def write_run(folder: Path, losses: dict[int, float], **extra: float) -> None:
    writer = RunWriter(folder)
    for step, loss in losses.items():
        writer.add_scalars(step, {"train/loss": loss, **extra})
    writer.close()


def test_a_file_of_no_known_format_names_the_formats_tried(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.123.host"  # the name of an event file, the content of none
    path.write_text("not an event file\n")
    with pytest.raises(UsageError) as caught:
        detect.read_source([path])
    message = str(caught.value)
    assert str(path) in message and "tried:" in message
    assert all(fmt.name in message for fmt in detect.FORMATS)


def test_missing_path_and_folder_without_any_known_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file or folder"):
        detect.read_source([tmp_path / "absent"])
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "sub" / "readme.md").write_text("# nothing\n")
    with pytest.raises(UsageError, match="holds no file in a format mftb import reads; tried: tensorboard"):
        detect.read_source([tmp_path / "empty"])
    with pytest.raises(UsageError, match="no source given"):
        detect.read_source([])


def test_rank_folders_become_sub_runs_and_the_main_run_averages_the_loss(tmp_path: Path) -> None:
    for rank in (0, 1, 3):
        write_run(tmp_path / "job" / f"rank_{rank}", {1: 5.0 + rank, 2: 4.0 + rank}, **{"train/lr": 0.25 * (rank + 1)})
    (tmp_path / "job" / "train.yaml").write_text("seed: 0\n")  # files of no format in a folder are passed over
    run = detect.read_source([tmp_path / "job"])
    assert sorted(run.sub_runs) == ["rank_0", "rank_1", "rank_3"]
    assert run.sub_runs["rank_3"].scalars["train/loss"] == {1: 8.0, 2: 7.0}
    # The data-parallel mean loss, as a monitored run's main run; the other tags the highest rank's.
    assert run.scalars["train/loss"] == {1: (5.0 + 6.0 + 8.0) / 3, 2: (4.0 + 5.0 + 7.0) / 3}
    assert run.scalars["train/lr"] == {1: 1.0, 2: 1.0}
    assert "train/loss: the mean over the ranks that print them at each step" in run.notes


def test_one_rank_folder_named_is_the_run(tmp_path: Path) -> None:
    write_run(tmp_path / "rank_2", {1: 2.0})
    run = detect.read_source([tmp_path / "rank_2"])
    assert run.scalars["train/loss"] == {1: 2.0} and not run.sub_runs


def test_our_run_folder_with_its_rank_and_baseline_sub_runs(tmp_path: Path) -> None:
    write_run(tmp_path / "run", {1: 3.0, 2: 2.5})
    write_run(tmp_path / "run" / "rank_1", {1: 3.125}, **{"perf/step_time_ms": 120.0})
    write_run(tmp_path / "run" / "baseline", {1: 3.25, 2: 2.5})
    run = detect.read_source([tmp_path / "run"])
    assert run.scalars["train/loss"] == {1: 3.0, 2: 2.5}
    assert sorted(run.sub_runs) == ["baseline", "rank_1"]
    assert run.sub_runs["baseline"].scalars["train/loss"] == {1: 3.25, 2: 2.5}
    assert run.sub_runs["rank_1"].scalars["perf/step_time_ms"] == {1: 120.0}


def test_several_runs_side_by_side_are_refused(tmp_path: Path) -> None:
    write_run(tmp_path / "logs" / "a", {1: 1.0})
    write_run(tmp_path / "logs" / "b", {1: 2.0})
    with pytest.raises(UsageError, match=r"holds several runs: .*logs/a/ \(tensorboard\); .*logs/b/ \(tensorboard\)"):
        detect.read_source([tmp_path / "logs"])


def test_rotated_parts_are_read_oldest_first_and_ranks_named_once(tmp_path: Path, monkeypatch) -> None:
    """The grouping itself, with a format whose reader records the files it is given."""
    given: list[list[str]] = []

    def read(files: list[Path]) -> ImportedRun:
        given.append([f.name for f in files])
        run = ImportedRun(source=files, format="lines")
        run.add("train/loss", len(given), 1.0)
        return run

    lines = SourceFormat("lines", "test lines", lambda path, head: head.startswith(b"LINES"), read, rotated=True)
    monkeypatch.setattr(detect, "FORMATS", [*detect.FORMATS, lines])
    for rank in (0, 1):
        folder = tmp_path / "output" / "log" / f"rank_{rank}"
        folder.mkdir(parents=True)
        for name in ("info.log", "info.log.1", "info.log.2", "info.log.10"):
            (folder / name).write_text("LINES\n")
    (tmp_path / "output" / "msrun_log").mkdir()
    (tmp_path / "output" / "msrun_log" / "worker_1.log").write_text("LINES\n")
    run = detect.read_source([tmp_path / "output"])
    assert given[0] == ["info.log.10", "info.log.2", "info.log.1", "info.log"]
    assert sorted(run.sub_runs) == ["rank_0", "rank_1"]
    assert any("worker_1.log: rank 1 again" in note for note in run.notes)
