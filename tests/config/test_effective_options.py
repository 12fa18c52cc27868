"""`mftb validate` with a team defaults file: the config checked as a training gets it, every option of our
entries with where it comes from, and a defaults file that cannot be used stopping it (exit status 2)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import MFTB, subprocess_env

from mindformers_tbplugin.config.checker import check_file
from mindformers_tbplugin.registration.team_defaults import DEFAULTS_ENV

TEAM = """\
callbacks:
  - type: TensorBoardMonitor
    log_dir: /shared/tb
    run_name_pattern: "{experiment}-team-{timestamp}"
  - type: AlertMonitor
"""
# Only our entries: another one would import MindFormers to check it against its registry.
CONFIG = """\
run_mode: train
callbacks:
  - type: HistogramMonitor
  - type: TensorBoardMonitor
    experiment: mine
    log_every: 2
"""


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(TEAM)
    monkeypatch.setenv(DEFAULTS_ENV, str(path))
    return path


def _config(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_every_option_says_where_it_comes_from(tmp_path: Path, team: Path) -> None:
    report = check_file(_config(tmp_path))
    assert report.exit_code == 0 and report.log_dirs == [Path("/shared/tb")]
    text = report.render()
    assert (
        f"  note: team defaults {team} ({DEFAULTS_ENV}): filled callbacks[1].log_dir (line 3), "
        "callbacks[1].run_name_pattern (line 4)"
    ) in text
    assert f"  note: callbacks[1].log_dir ({team} line 3): runs go to /shared/tb (log_dir)" in text
    block = text.split("  options of callbacks[1] TensorBoardMonitor (line 4):\n")[1].splitlines()
    assert block[0] == '    from the config: experiment "mine" (line 5), log_every 2 (line 6)'
    assert " ".join(line.strip() for line in block[1:3]) == (
        f'from the team defaults {team}: log_dir "/shared/tb" (line 3), '
        'run_name_pattern "{experiment}-team-{timestamp}" (line 4)'
    )
    built_in = " ".join(line.strip() for line in block[3:])
    assert built_in.startswith("built-in defaults: flush_secs 5.0, param_norm_every 100,")
    assert "log_every" not in built_in and "AlertMonitor" not in text  # the config has a monitor of its own


def test_a_config_with_none_of_ours_lists_the_entries_it_gets(tmp_path: Path, team: Path) -> None:
    report = check_file(_config(tmp_path, "run_mode: finetune\n"))
    text = report.render()
    assert report.exit_code == 0 and report.entries_checked == 2
    assert "added TensorBoardMonitor (line 2); added AlertMonitor (line 5)" in text
    assert f"  options of callbacks[0] TensorBoardMonitor (added from {team} line 2):" in text
    alerts = f"  options of callbacks[1] AlertMonitor (added from {team} line 5):\n"
    assert alerts + "    built-in defaults: rules null, sinks null" in text


def test_a_problem_the_defaults_cause_names_their_line(tmp_path: Path, team: Path) -> None:
    team.write_text("callbacks:\n  - type: TensorBoardMonitor\n    log_every: 4\n    aggregate_every: 8\n")
    report = check_file(
        _config(tmp_path, "run_mode: train\ncallbacks:\n  - type: TensorBoardMonitor\n    log_every: 3\n")
    )
    assert report.exit_code == 1
    assert (
        f"  error: callbacks[0].aggregate_every ({team} line 4): expected a multiple of log_every (3)"
        in report.render()
    )


def test_a_broken_defaults_file_makes_every_training_config_unusable(tmp_path: Path, team: Path) -> None:
    team.write_text(TEAM + "    rules: {rule: spike}\n")
    report = check_file(_config(tmp_path))
    assert report.exit_code == 2 and report.unusable
    assert f"{team}:6: callbacks[1].rules: expected" in report.render()


def test_off_for_one_config_and_for_configs_that_do_not_train(tmp_path: Path, team: Path) -> None:
    report = check_file(_config(tmp_path, CONFIG + "mftb_defaults: false\n"))
    assert report.exit_code == 0 and report.effective == [] and report.log_dirs != [Path("/shared/tb")]
    assert f"  note: mftb_defaults (line 7): the team defaults {team} ({DEFAULTS_ENV}) are off" in report.render()
    report = check_file(_config(tmp_path, CONFIG.replace("run_mode: train", "run_mode: predict")))
    assert "  note: run_mode (line 1): the team defaults" in report.render() and report.effective == []
    report = check_file(_config(tmp_path, CONFIG + "mftb_defaults: 'no'\n"))
    assert report.exit_code == 1
    assert (
        "  error: mftb_defaults (line 7): expected true or false (false: no team defaults for this config), got 'no'"
        in (report.render())
    )


def test_without_a_defaults_file_the_options_are_listed_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DEFAULTS_ENV, raising=False)
    assert check_file(_config(tmp_path)).effective == []
    lines = check_file(_config(tmp_path), effective=True).effective
    lines = lines[lines.index("  options of callbacks[1] TensorBoardMonitor (line 4):") :]
    assert lines[:2] == [
        "  options of callbacks[1] TensorBoardMonitor (line 4):",
        '    from the config: experiment "mine" (line 5), log_every 2 (line 6)',
    ]
    assert lines[2].startswith("    built-in defaults: log_dir null, run_name_pattern ")


@pytest.mark.process
def test_mftb_validate_prints_them(tmp_path: Path, team: Path) -> None:
    config = _config(tmp_path)
    result = subprocess.run([MFTB, "validate", str(config)], env=subprocess_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert f'    from the team defaults {team}: log_dir "/shared/tb" (line 3),' in result.stdout
    off = subprocess_env(**{DEFAULTS_ENV: ""})
    result = subprocess.run([MFTB, "validate", "--effective", str(config)], env=off, capture_output=True, text=True)
    assert "team defaults" not in result.stdout and "    from the config: experiment" in result.stdout
    team.write_text("callbacks: [")
    result = subprocess.run([MFTB, "validate", str(config)], env=subprocess_env(), capture_output=True, text=True)
    assert result.returncode == 2 and f"{team}:1: YAML syntax error" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_the_options_block_shows_no_secret(tmp_path: Path, team: Path) -> None:
    hook = "https://hooks.example.com/services/T000/B000/XXXXSECRET?token=SECRET"
    team.write_text(f"callbacks:\n  - type: AlertMonitor\n    sinks: [log, {{webhook: '{hook}'}}]\n")
    report = check_file(_config(tmp_path, "run_mode: train\n"))
    assert report.exit_code == 0, report.render()
    text = report.render()
    assert 'sinks ["log", {"webhook": "https://hooks.example.com/***"}] (line 3)' in text and "SECRET" not in text
