"""session/tensorboard_options.py: TensorBoardMonitor's options as one frozen dataclass. The cross-field
rules (run folder placeholders, names that must stay inside log_dir, aggregate_every a multiple of
log_every, importable extra_metrics) each with their exact message; ``of`` building checked options or
one ConfigError with every problem; the log root resolved when asked, with the launcher's folder as
fallback; the archive root, the imported extra metrics and the options as a dict. The same rules through
the callback's constructor: tests/callbacks/test_tensorboard_monitor.py."""

from __future__ import annotations

import dataclasses
import os.path
from pathlib import Path

import pytest

from mindformers_tbplugin.pipeline.metrics import MetricKind
from mindformers_tbplugin.schema import ConfigError, Problem
from mindformers_tbplugin.session.tensorboard_options import TensorBoardOptions
from mindformers_tbplugin.tfevents import run_folders

DEFAULTS = {field.name: field.default for field in dataclasses.fields(TensorBoardOptions)}
FOLDER_NAME = "expected a non-empty relative folder name without '..', got"


def problems(**changes: object) -> list[Problem]:
    """The cross-field problems of the defaults with ``changes`` (as check_entry completes an entry)."""
    return TensorBoardOptions.check_cross_fields({**DEFAULTS, **changes})


def test_the_defaults_break_no_rule() -> None:
    assert problems() == []


@pytest.mark.parametrize(
    ("log_every", "aggregate_every", "fine"),
    [(4, 12, True), (4, 0, True), (3, 3, True), (4, 10, False), (7, 1, False)],
)
def test_aggregate_every_is_a_multiple_of_log_every_or_0(log_every: int, aggregate_every: int, fine: bool) -> None:
    expected = (
        []
        if fine
        else [Problem("aggregate_every", f"expected a multiple of log_every ({log_every}) or 0, got {aggregate_every}")]
    )
    assert problems(log_every=log_every, aggregate_every=aggregate_every) == expected


def test_a_malformed_or_unknown_placeholder_is_named_with_the_allowed_ones() -> None:
    allowed = "allowed: {experiment}, {timestamp}, {rank}"
    assert problems(run_name_pattern="{experiment}_{host}") == [
        Problem("run_name_pattern", f"unknown placeholder(s) host; {allowed}")
    ]
    assert problems(run_name_pattern="{experiment") == [
        Problem("run_name_pattern", f"unknown placeholder(s) <expected '}}' before end of string>; {allowed}")
    ]


@pytest.mark.parametrize("name", [" exp", "exp ", "a/../../b", "..", "/abs"])
@pytest.mark.parametrize("key", ["experiment", "run_name_pattern", "resume_run"])
def test_names_that_would_leave_log_dir_or_carry_blanks_are_refused(key: str, name: str) -> None:
    assert problems(**{key: name}) == [Problem(key, f"{FOLDER_NAME} {name!r}")]


def test_a_folder_below_log_dir_is_a_fine_name_and_an_empty_resume_run_is_not() -> None:
    assert problems(experiment="team/exp", resume_run="team/exp_20260101-000000") == []
    assert problems(resume_run="") == [Problem("resume_run", f"{FOLDER_NAME} ''")]


def test_each_extra_metric_that_does_not_import_is_named_by_its_index() -> None:
    found = problems(extra_metrics=["os.path:basename", "os.path:no_such_fn"])
    assert found == [
        Problem(
            "extra_metrics[1]",
            "module 'os.path' has no attribute 'no_such_fn'; the module must be importable in every rank's process "
            "(PYTHONPATH, or an installed package)",
        )
    ]


def test_of_builds_the_options_of_an_entry(tmp_path: Path) -> None:
    options = TensorBoardOptions.of({"log_dir": str(tmp_path / "tb"), "log_every": 5, "aggregate_every": 20}, "X")
    assert (options.log_every, options.aggregate_every, options.experiment) == (5, 20, "mindformers")
    assert (tmp_path / "tb").is_dir()  # checked writable: created
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.log_every = 1  # type: ignore[misc]


def test_of_reports_every_type_problem_at_once_and_stops_before_the_cross_field_rules(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        TensorBoardOptions.of({"log_dir": str(tmp_path), "log_every": 0, "topk_ranks": -1, "aggregate_every": 7}, "Mon")
    assert str(caught.value) == (
        "invalid configuration for Mon:\n"
        "  - Mon.log_every: expected integer >= 1, got 0\n"
        "  - Mon.topk_ranks: expected integer >= 0, got -1"
    )


def test_the_log_root_is_resolved_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(run_folders.LOG_DIR_ENV, raising=False)
    relative = TensorBoardOptions(log_dir="rel")
    assert relative.log_root == tmp_path / "rel"
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert relative.log_root == tmp_path / "sub" / "rel"  # so the callback keeps the one of its construction
    assert TensorBoardOptions().log_root == tmp_path / "sub" / "output" / "tensorboard"
    monkeypatch.setenv(run_folders.LOG_DIR_ENV, str(tmp_path / "launcher"))
    assert TensorBoardOptions().log_root == tmp_path / "launcher"
    assert relative.log_root == tmp_path / "sub" / "rel"  # a written log_dir wins over the launcher's


def test_the_archive_root_is_absolute_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert TensorBoardOptions().archive_root is None
    assert TensorBoardOptions(archive_dir="old").archive_root == tmp_path / "old"


def test_extra_metrics_are_imported_in_order() -> None:
    extra = TensorBoardOptions(extra_metrics=["os.path:basename", "os.path:dirname"]).extra()
    assert [(m.reference, m.fn, m.kind) for m in extra] == [
        ("os.path:basename", os.path.basename, MetricKind.MODEL),
        ("os.path:dirname", os.path.dirname, MetricKind.MODEL),
    ]
    assert TensorBoardOptions().extra() == []


def test_as_dict_holds_every_option() -> None:
    options = TensorBoardOptions(experiment="e", norm_groups=["*attn*"])
    assert options.as_dict() == {**DEFAULTS, "experiment": "e", "norm_groups": ["*attn*"]}
