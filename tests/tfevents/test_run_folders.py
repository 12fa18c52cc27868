"""tfevents/run_folders.py: where runs live. A run's event files in TensorBoard's order; the runs under a
folder (pruned of hidden folders and virtualenvs, bounded in depth and folders); log roots made absolute
with the config, launcher and default precedence; run folder names, their placeholders and collisions;
the folders of one experiment, oldest activity first; retention that never removes the current run; and
why a folder cannot be written."""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path

import pytest

from mindformers_tbplugin.tfevents import run_folders

PATTERN = "{experiment}_{timestamp}"


def _make_run(root: Path, name: str, age_s: float) -> Path:
    run = root / name
    run.mkdir(parents=True)
    event = run / "events.out.tfevents.1.host.1.0"
    event.write_bytes(b"")
    stamp = time.time() - age_s
    os.utime(event, (stamp, stamp))
    return run


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


# -- event files and runs ----------------------------------------------------------------------------
def test_a_runs_event_files_are_its_tfevents_files_by_name(tmp_path: Path) -> None:
    later = _touch(tmp_path / "events.out.tfevents.1700000002.host.1.0")
    earlier = _touch(tmp_path / "events.out.tfevents.1700000001.host.9.3")
    _touch(tmp_path / "notes.txt")
    (tmp_path / "old.tfevents.d").mkdir()  # a folder is no event file, whatever its name
    assert run_folders.event_files(tmp_path) == [earlier, later]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Runs at the root, one and two levels down, and in folders that hold no real runs."""
    for folder in ("", "a", "b/c", ".hidden", "venv", "node_modules/pkg", "b/.cache"):
        _touch(tmp_path / folder / "events.out.tfevents.1.h.1.0")
    (tmp_path / "empty").mkdir()
    return tmp_path


def _relative(root: Path, found: list[tuple[Path, list[Path]]]) -> list[str]:
    return [run.relative_to(root).as_posix() for run, _ in found]


def test_runs_are_found_in_path_order_without_hidden_folders_and_virtualenvs(tree: Path) -> None:
    found = list(run_folders.walk_runs(tree))
    assert _relative(tree, found) == [".", "a", "b/c"]
    assert found[1][1] == [tree / "a" / "events.out.tfevents.1.h.1.0"]


def test_without_pruning_every_folder_is_a_run_as_for_tensorboard(tree: Path) -> None:
    found = _relative(tree, list(run_folders.walk_runs(tree, prune=False)))
    assert found == [".", ".hidden", "a", "b/.cache", "b/c", "node_modules/pkg", "venv"]


def test_the_search_stops_at_max_depth_and_after_max_dirs(tree: Path) -> None:
    assert _relative(tree, list(run_folders.walk_runs(tree, max_depth=1))) == [".", "a"]
    # Folders visited count whether they hold runs or not: the root, then a.
    assert _relative(tree, list(run_folders.walk_runs(tree, max_dirs=2))) == [".", "a"]
    assert _relative(tree, list(run_folders.walk_runs(tree, max_dirs=4))) == [".", "a", "b/c"]  # root, a, b, b/c


# -- log roots ---------------------------------------------------------------------------------------
def test_paths_are_made_absolute_now_with_the_home_folder_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert run_folders.absolute_path("~/tb") == tmp_path / "home" / "tb"
    assert run_folders.absolute_path("runs/../tb") == tmp_path / "tb"


def test_the_log_root_is_the_configs_then_the_launchers_then_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(run_folders.LOG_DIR_ENV, str(tmp_path / "launcher"))
    assert run_folders.log_root("mine") == tmp_path / "mine"
    assert run_folders.log_root(None) == tmp_path / "launcher"
    assert run_folders.log_root("") == tmp_path / "launcher"
    monkeypatch.setenv(run_folders.LOG_DIR_ENV, "  ")  # a blank variable names no folder
    assert run_folders.log_root(None) == tmp_path / "output" / "tensorboard"


# -- run folder names --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pattern", "unknown"),
    [
        ("{experiment}_{timestamp}_{rank}", []),
        ("{{literal}}_{experiment}", []),  # doubled braces are text
        ("{experiment}_{host}_{user}", ["host", "user"]),
        ("{experiment", ["<expected '}' before end of string>"]),
    ],
)
def test_unknown_placeholders_are_named(pattern: str, unknown: list[str]) -> None:
    assert run_folders.unknown_run_name_fields(pattern) == unknown


def test_a_run_name_fills_experiment_timestamp_and_rank() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5)
    assert run_folders.run_name("{experiment}_{timestamp}_r{rank:03d}", "llama", 7, now) == "llama_20260102-030405_r007"


def test_a_taken_name_gets_the_next_suffix_and_the_suffix_is_read_back(tmp_path: Path) -> None:
    made = [run_folders.create_run_dir(tmp_path / "logs", "exp_20260101-000000") for _ in range(3)]
    assert [run.name for run in made] == ["exp_20260101-000000", "exp_20260101-000000-1", "exp_20260101-000000-2"]
    assert all(run.is_dir() for run in made)
    assert [run_folders.collision_suffix(run, "exp_20260101-000000") for run in made] == [0, 1, 2]
    assert run_folders.collision_suffix(tmp_path / "exp-final", "exp") == 0  # not a number: part of the name


def test_the_name_regex_matches_any_time_rank_and_suffix_of_this_experiment_only() -> None:
    regex = run_folders.run_name_regex("{experiment}_{timestamp}_r{rank}", "a.b")
    assert regex.fullmatch("a.b_20260101-000000_r3")
    assert regex.fullmatch("a.b_20260101-000000_r12-2")
    assert not regex.fullmatch("axb_20260101-000000_r3")  # the experiment is literal text
    assert not regex.fullmatch("a.b_2026-000000_r3")
    assert not regex.fullmatch("a.b_20260101-000000_r3_extra")


# -- one experiment's runs and retention -------------------------------------------------------------
def test_an_experiment_has_no_runs_in_a_missing_folder_and_files_are_no_runs(tmp_path: Path) -> None:
    assert run_folders.experiment_runs(tmp_path / "missing", PATTERN, "exp") == []
    _touch(tmp_path / "exp_20260101-000000")
    assert run_folders.experiment_runs(tmp_path, PATTERN, "exp") == []


def test_a_run_without_event_files_counts_by_its_folders_time(tmp_path: Path) -> None:
    newer = _make_run(tmp_path, "exp_20260101-000001", age_s=50)
    empty = tmp_path / "exp_20260101-000002"
    empty.mkdir()
    stamp = time.time() - 100
    os.utime(empty, (stamp, stamp))
    assert run_folders.experiment_runs(tmp_path, PATTERN, "exp") == [empty, newer]


def test_retention_keeps_the_newest_runs_and_never_the_current_one(tmp_path: Path) -> None:
    old = [_make_run(tmp_path, f"exp_20260101-00000{i}", age_s=100 - i) for i in range(4)]
    current = _make_run(tmp_path, "exp_20260101-000009", age_s=500)  # e.g. resumed: oldest activity
    other = _make_run(tmp_path, "other_20260101-000000", age_s=1000)
    runs = run_folders.experiment_runs(tmp_path, PATTERN, "exp")
    assert runs == [current, *old]
    removed = run_folders.apply_retention(runs, keep=3, archive_dir=None, protect=current)
    assert removed == old[:2]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([current.name, old[2].name, old[3].name, other.name])


def test_retention_can_archive_instead_of_deleting(tmp_path: Path) -> None:
    runs = [_make_run(tmp_path / "logs", f"exp_20260101-00000{i}", age_s=10 - i) for i in range(3)]
    moved = run_folders.apply_retention(runs, keep=1, archive_dir=tmp_path / "archive", protect=runs[-1])
    assert moved == runs[:2]
    assert sorted(p.name for p in (tmp_path / "archive").iterdir()) == [r.name for r in runs[:2]]
    assert [p.name for p in (tmp_path / "logs").iterdir()] == [runs[-1].name]


def test_an_archived_name_already_taken_gets_a_numbered_one(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    _make_run(archive, "exp_20260101-000000", age_s=0)
    _make_run(archive, "exp_20260101-000000.1", age_s=0)
    runs = [_make_run(tmp_path / "logs", "exp_20260101-000000", age_s=10), _make_run(tmp_path / "logs", "x", age_s=0)]
    run_folders.apply_retention(runs, keep=1, archive_dir=archive, protect=runs[1])
    assert sorted(p.name for p in archive.iterdir()) == [
        "exp_20260101-000000",
        "exp_20260101-000000.1",
        "exp_20260101-000000.2",
    ]


# -- writable folders --------------------------------------------------------------------------------
def test_a_writable_folder_is_created_and_left_without_a_probe(tmp_path: Path) -> None:
    root = tmp_path / "new" / "deeper"
    assert run_folders.unwritable_reason(root) is None
    assert root.is_dir() and list(root.iterdir()) == []


def test_a_file_in_the_way_is_the_reason(tmp_path: Path) -> None:
    blocker = _touch(tmp_path / "a-file")
    assert run_folders.unwritable_reason(blocker) == "it exists and is not a directory"
    assert run_folders.unwritable_reason(blocker / "tb") == "Not a directory"
