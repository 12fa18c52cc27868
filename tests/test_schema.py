"""One source of truth: the callback classes. A new parameter reaches validation, `mftb schema` and the
JSON Schema with no second edit; `mftb schema` prints config/json_schema.py's schema (which
tests/config/test_json_schema.py holds to the bundled configs and to what validation rejects)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from conftest import MFTB, REPO, subprocess_env

from mindformers_tbplugin.callbacks import TensorBoardMonitor
from mindformers_tbplugin.config.checker import check_file
from mindformers_tbplugin.config.json_schema import config_schema, entry_schema
from mindformers_tbplugin.registration.catalog import our_callbacks
from mindformers_tbplugin.schema import Range, did_you_mean, params_of


class SmoothedMonitor(TensorBoardMonitor):
    """A TensorBoardMonitor with one more parameter, as a user or a later version would add it.

    Args:
        smoothing_window: Steps averaged into train/loss_smoothed.
    """

    def __init__(self, smoothing_window: Annotated[int, Range(min=2)] = 8, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.smoothing_window = smoothing_window


@pytest.fixture(scope="module")
def printed_schema() -> dict:
    result = subprocess.run([MFTB, "schema"], env=subprocess_env(), capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_a_new_parameter_shows_up_in_the_derived_schema(tmp_path: Path) -> None:
    (param,) = [p for p in params_of(SmoothedMonitor) if p.name == "smoothing_window"]
    assert (param.default, param.range, param.doc) == (8, Range(min=2), "Steps averaged into train/loss_smoothed.")
    prop = entry_schema(SmoothedMonitor)["properties"]["smoothing_window"]
    assert prop == {
        "type": "integer",
        "minimum": 2,
        "description": "Steps averaged into train/loss_smoothed.",
        "default": 8,
    }
    config = tmp_path / "smoothed.yaml"
    config.write_text("callbacks:\n  - type: SmoothedMonitor\n    smoothing_window: 1\n    smoothing_windw: 4\n")
    report = check_file(config, {"SmoothedMonitor": SmoothedMonitor})
    rendered = report.render()
    assert "callbacks[0].smoothing_window (line 3): expected integer >= 2, got 1" in rendered
    assert (
        "callbacks[0].smoothing_windw (line 4): unknown key 'smoothing_windw' for SmoothedMonitor; did you "
        "mean 'smoothing_window'?" in rendered
    )


def test_a_subclass_passing_kwargs_on_has_its_base_parameters_too(tmp_path: Path) -> None:
    names = [p.name for p in params_of(SmoothedMonitor)]
    assert names == ["smoothing_window", *(p.name for p in params_of(TensorBoardMonitor))]
    config = tmp_path / "smoothed.yaml"
    config.write_text("callbacks:\n  - type: SmoothedMonitor\n    log_dir: /tmp/tb\n    log_every: 0\n")
    report = check_file(config, {"SmoothedMonitor": SmoothedMonitor})
    assert [f.render() for f in report.errors] == ["callbacks[0].log_every (line 4): expected integer >= 1, got 0"]


def test_did_you_mean_ignores_case_and_stays_quiet_when_nothing_is_close() -> None:
    assert did_you_mean("Log_Evry", ["log_every", "log_dir"]) == "did you mean 'log_every'?"
    assert did_you_mean("zzz", ["log_every", "log_dir"]) is None
    assert did_you_mean(5, ["spike"]) is None


@pytest.mark.process
def test_every_exported_callback_has_an_entry_in_the_printed_schema(printed_schema: dict) -> None:
    ours = our_callbacks()
    assert {"TensorBoardMonitor", "HistogramMonitor", "AlertMonitor"} <= set(ours)
    assert set(printed_schema["definitions"]) == {*ours, "OtherCallback"}
    for name, cls in ours.items():
        assert set(printed_schema["definitions"][name]["properties"]) == {
            "type",
            "auto_register",
            *(p.name for p in params_of(cls)),
        }
    assert printed_schema == json.loads(json.dumps(config_schema(ours)))


def test_npu_configs_carry_every_callback_type_we_offer() -> None:
    for config in (
        REPO / "configs/llama3_1/finetune_llama3_1_8b_tb.yaml",
        REPO / "configs/qwen2_5/finetune_qwen2_5_7b_tb.yaml",
    ):
        types = {entry["type"] for entry in yaml.safe_load(config.read_text())["callbacks"]}
        assert set(our_callbacks()) - {"TensorBoard"} <= types, config.name  # TensorBoard: an alias


@pytest.mark.process
def test_markdown_format_prints_one_table_per_callback() -> None:
    result = subprocess.run(
        [MFTB, "schema", "--format", "markdown"], env=subprocess_env(), capture_output=True, text=True, check=True
    )
    assert "### `TensorBoardMonitor`" in result.stdout
    assert "| `log_every` | `1` | Write the scalars every this many steps. |" in result.stdout


# -- warnings: legal but likely wrong ----------------------------------------------------------------
def _warnings(tmp_path: Path, text: str) -> str:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    report = check_file(config, our_callbacks())
    assert report.exit_code == 0, report.render()
    return "\n".join(f.render() for f in report.warnings)


def _notes(tmp_path: Path, text: str) -> list[str]:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    report = check_file(config, our_callbacks())
    assert report.exit_code == 0 and report.warnings == [], report.render()
    return [f.render() for f in report.notes]


def test_where_runs_go_is_a_note_naming_the_folder_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MFTB_LOG_DIR", raising=False)
    text = "callbacks:\n  - type: TensorBoardMonitor\n    log_dir: runs/tb\n  - type: TensorBoardMonitor\n"
    assert _notes(tmp_path, text) == [
        f"callbacks[0].log_dir (line 3): runs go to {tmp_path / 'runs' / 'tb'} "
        f"(log_dir 'runs/tb' from the working directory {tmp_path})",
        f"callbacks[1] (line 4): runs go to {tmp_path / 'output' / 'tensorboard'} "
        f"(the default ./output/tensorboard from the working directory {tmp_path})",
    ]


def test_non_ascii_missing_parent_and_unwritable_paths_are_flagged(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    text = _warnings(
        tmp_path,
        "callbacks:\n"
        f"  - type: TensorBoardMonitor\n    log_dir: {tmp_path}/日志/tb\n    experiment: one\n"
        f"  - type: TensorBoardMonitor\n    log_dir: {tmp_path}/missing/deeper/tb\n    experiment: two\n"
        f"  - type: TensorBoardMonitor\n    log_dir: {blocker}/tb\n    experiment: three\n",
    )
    assert f"callbacks[0].log_dir (line 3): {tmp_path}/日志/tb contains non-ASCII characters" in text
    assert f"{tmp_path}/missing/deeper" not in text  # created at train begin: nothing to change
    assert f"callbacks[2].log_dir (line 9): {blocker} exists and is not a folder, so {blocker}/tb cannot be" in text


def test_per_step_aggregation_and_per_step_histograms_on_a_large_model(tmp_path: Path) -> None:
    text = _warnings(
        tmp_path,
        "model:\n  model_config: {hidden_size: 4096, num_layers: 32, vocab_size: 128256}\n"
        f"callbacks:\n  - type: TensorBoardMonitor\n    log_dir: {tmp_path}/tb\n    aggregate_every: 1\n"
        "  - type: HistogramMonitor\n    every_steps: 1\n",
    )
    assert "callbacks[0].aggregate_every (line 6): 1 runs a cross-rank collective after every step" in text
    assert (
        "callbacks[1].every_steps (line 8): histograms of every parameter after every step on a model of ~7.5B" in text
    )
    small = _warnings(
        tmp_path, f"callbacks:\n  - type: TensorBoardMonitor\n    log_dir: {tmp_path}/tb\n  - type: HistogramMonitor\n"
    )
    assert small == ""


def test_histograms_that_never_come_due_are_flagged(tmp_path: Path) -> None:
    text = _warnings(
        tmp_path,
        "runner_config: {epochs: 2, batch_size: 2}\n"
        "train_dataset: {data_loader: {num_samples: 64}}\n"
        f"callbacks:\n  - type: TensorBoardMonitor\n    log_dir: {tmp_path}/tb\n"
        "  - type: HistogramMonitor\n    every_steps: 500\n"
        "  - type: HistogramMonitor\n    every_steps: 0\n    every_epochs: 3\n"
        "  - type: HistogramMonitor\n    every_steps: 500\n    every_epochs: 1\n",  # the epochs come due
    )
    assert text.splitlines() == [
        "callbacks[1] (line 6): no histogram would be written: every_steps 500, and the training runs about 64 steps",
        "callbacks[2] (line 8): no histogram would be written: every_epochs 3, and the training runs 2 epoch(s)",
    ]


def test_an_alert_rule_on_a_misspelt_tag_is_flagged_and_a_custom_one_noted(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"callbacks:\n  - type: TensorBoardMonitor\n    log_dir: {tmp_path}/tb\n  - type: AlertMonitor\n"
        "    rules:\n      - {rule: spike, tag: train/los}\n      - {rule: threshold, tag: router/aux, above: 3}\n"
    )
    report = check_file(config, our_callbacks())
    assert [f.render() for f in report.warnings] == [
        "callbacks[1].rules[0].tag (line 6): no monitor writes 'train/los'; did you mean 'train/loss'?"
    ]
    assert (
        "callbacks[1].rules[1].tag (line 7): 'router/aux' is not a tag TensorBoardMonitor writes itself: "
        "extra_metrics or log_scalars must"
    ) in [f.render() for f in report.notes]


def test_a_written_log_dir_wins_over_the_launchers_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # scripts/msrun_launch.sh exports MFTB_LOG_DIR: the folder of the entries that set no log_dir.
    monkeypatch.setenv("MFTB_LOG_DIR", str(tmp_path / "shared"))
    text = (
        f"callbacks:\n  - type: TensorBoardMonitor\n    log_dir: {tmp_path}/mine\n"
        "  - type: TensorBoardMonitor\n    experiment: other\n"
    )
    assert _notes(tmp_path, text) == [
        f"callbacks[0].log_dir (line 3): runs go to {tmp_path}/mine (log_dir)",
        f"callbacks[1] (line 4): runs go to {tmp_path}/shared (the launcher's folder MFTB_LOG_DIR, "
        "as this entry sets no log_dir)",
    ]


def test_two_entries_without_log_dir_under_the_launcher_share_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MFTB_LOG_DIR", str(tmp_path / "shared"))
    config = tmp_path / "config.yaml"
    config.write_text("callbacks:\n  - type: TensorBoardMonitor\n  - type: TensorBoardMonitor\n")
    (error,) = check_file(config, our_callbacks()).errors
    assert error.render().startswith(
        f"callbacks[1] (line 3): TensorBoardMonitor writes the same run folder as callbacks[0] ({tmp_path}/shared/"
    )


class NeedsTarget(TensorBoardMonitor):
    """A callback with a required parameter.

    Args:
        target: Tag to follow.
    """

    def __init__(self, target: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.target = target


def test_a_required_parameter_is_required_everywhere(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("callbacks:\n  - type: MFLossMonitor\n  - type: NeedsTarget\n")
    report = check_file(config, {"NeedsTarget": NeedsTarget})
    assert [f.render() for f in report.errors] == [
        "callbacks[1] (line 3): missing required key 'target' (string) for NeedsTarget"
    ]
    assert entry_schema(NeedsTarget)["required"] == ["type", "target"]
