"""The team defaults file in real trainings: a release's own run_mindformer.py (r1.9.0's for MindFormers 1.9)
and ``mftb train`` whose YAMLs name none of our callbacks get the file's entries, a YAML's values win over
the file's, ``MFTB_DEFAULTS=`` turns it off, and a broken file stops the training before anything is built.
(Under msrun: tests/jobs/test_msrun_jobs.py's dp2 job takes its monitor from such a file.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import mf_losses, read_scalars, run_dirs, run_mindformer_script, subprocess_env, train, write_tiny_config

from mindformers_tbplugin.registration.team_defaults import DEFAULTS_ENV

pytestmark = [pytest.mark.process, pytest.mark.compat]

PATTERN = "{experiment}-by-team-{timestamp}"


def _team(folder: Path, **monitor: object) -> Path:
    path = folder / "team.yaml"
    entry = {"type": "TensorBoardMonitor", "log_dir": str(folder / "tb"), "run_name_pattern": PATTERN, **monitor}
    path.write_text(yaml.safe_dump({"callbacks": [entry]}, sort_keys=False))
    return path


def test_run_mindformer_with_none_of_our_entries_gets_the_teams_monitor(tmp_path: Path, tiny_data: Path) -> None:
    team = _team(tmp_path, experiment="team", log_every=2)
    config = write_tiny_config(tmp_path, tiny_data, [{"type": "MFLossMonitor"}], num_samples=16)
    run = train(config, tmp_path, env=subprocess_env(**{DEFAULTS_ENV: str(team)}), entry=run_mindformer_script())
    assert run.returncode == 0, run.output[-5000:]
    assert f"[mftb] team defaults {team} ({DEFAULTS_ENV}): added TensorBoardMonitor (line 2)" in run.output
    assert re.fullmatch(r"team-by-team-\d{8}-\d{6}", run.run_dir.name)  # the file's run_name_pattern
    printed = mf_losses(run.output)
    losses = read_scalars(run.run_dir)["train/loss"]
    assert sorted(printed) == list(range(1, 9))
    assert [step for step, _ in losses] == [2, 4, 6, 8]  # the file's log_every
    for step, loss in losses:
        assert abs(loss - printed[step][0]) <= 1e-6, (step, loss, printed[step])


def test_mftb_train_keeps_the_yamls_values_over_the_files(tmp_path: Path, tiny_data: Path) -> None:
    team = _team(tmp_path, experiment="team", log_every=2)
    own = {"type": "TensorBoardMonitor", "experiment": "mine", "log_every": 1}
    # run_mode given on the command line only: the config is loaded in the mode it trains in
    config = write_tiny_config(tmp_path, tiny_data, [own], num_samples=8, run_mode=None)
    run = train(config, tmp_path, "--run_mode", "train", env=subprocess_env(**{DEFAULTS_ENV: str(team)}))
    assert run.returncode == 0, run.output[-5000:]
    assert re.fullmatch(r"mine-by-team-\d{8}-\d{6}", run.run_dir.name)  # the YAML's experiment, the file's pattern
    assert [step for step, _ in read_scalars(run.run_dir)["train/loss"]] == [1, 2, 3, 4]  # the YAML's log_every


def test_an_empty_mftb_defaults_turns_them_off(tmp_path: Path, tiny_data: Path) -> None:
    _team(tmp_path)
    config = write_tiny_config(tmp_path, tiny_data, [{"type": "MFLossMonitor"}], num_samples=8)
    run = train(config, tmp_path, env=subprocess_env(**{DEFAULTS_ENV: ""}), entry=run_mindformer_script())
    assert run.returncode == 0, run.output[-5000:]
    assert sorted(mf_losses(run.output)) == [1, 2, 3, 4]
    assert run_dirs(tmp_path / "tb") == [] and "team defaults" not in run.output


@pytest.mark.parametrize("entry", ["run_mindformer.py", "mftb train"])
def test_a_broken_defaults_file_stops_the_training_at_start(tmp_path: Path, tiny_data: Path, entry: str) -> None:
    team = tmp_path / "team.yaml"
    team.write_text("callbacks:\n  - type: TensorBoardMonitor\n    log_every: 2\n    flush_secs: often\n")
    config = write_tiny_config(tmp_path, tiny_data, [{"type": "MFLossMonitor"}], num_samples=8)
    script = run_mindformer_script() if entry == "run_mindformer.py" else None
    run = train(config, tmp_path, env=subprocess_env(**{DEFAULTS_ENV: str(team)}), entry=script)
    assert run.returncode == 2, run.output[-5000:]
    assert f"{team}:4: callbacks[0].flush_secs: expected number, got 'often' (string)" in run.output
    assert f"the team defaults file {team} ({DEFAULTS_ENV}) cannot be used" in run.output
    assert "Traceback" not in run.output and "Model Compiling" not in run.output and not mf_losses(run.output)
