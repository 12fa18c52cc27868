"""The team defaults reach MindFormers' own config classes: the classic ``MindFormerConfig(path)`` of every
release and, under MindFormers 2.x, the PyNative trainer's ``TrainConfig.load_from_yaml(path)``, loaded in a
fresh interpreter that imports nothing but mindformers (as run_mindformer.py does)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import HELPERS, REPO, subprocess_env

from mindformers_tbplugin.framework import versions
from mindformers_tbplugin.registration.team_defaults import DEFAULTS_ENV, OFF_KEY

pytestmark = [pytest.mark.process, pytest.mark.compat]

TEAM = {
    "callbacks": [
        {"type": "TensorBoardMonitor", "log_dir": "/shared/tb", "run_name_pattern": "{experiment}-team-{timestamp}"},
        {"type": "AlertMonitor", "rules": [{"rule": "nonfinite", "tag": "train/loss"}]},
    ]
}
MONITOR, ALERTS = ({"type": entry["type"], **entry} for entry in TEAM["callbacks"])
OWN = {"type": "TensorBoardMonitor", "experiment": "mine", "log_every": 2}


def _mindformers_2x() -> bool:
    version = versions.find("mindformers").version
    return version is not None and int(version.split(".")[0]) >= 2


def _load(kind: str, configs: list[Path], team: Path | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HELPERS / "load_training_configs.py"), kind, *map(str, configs)],
        cwd=configs[0].parent,
        env=subprocess_env(**{DEFAULTS_ENV: str(team)}),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _loaded(result: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("CALLBACKS ")]
    return json.loads(line.removeprefix("CALLBACKS "))


def _write(folder: Path, name: str, document: dict) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _configs(folder: Path, base: dict, callbacks_key: str = "callbacks") -> list[Path]:
    """A config with none of ours, one with its own monitor, one that turns the defaults off."""
    return [
        _write(folder, "none.yaml", {**base, callbacks_key: base.get(callbacks_key, [])}),
        _write(folder, "own.yaml", {**base, callbacks_key: [*base.get(callbacks_key, []), OWN]}),
        _write(folder, "off.yaml", {**base, OFF_KEY: False}),
    ]


def test_the_classic_config_of_a_training_gets_them(tmp_path: Path) -> None:
    team = _write(tmp_path, "team.yaml", TEAM)
    base = {"run_mode": "train", "callbacks": [{"type": "MFLossMonitor"}]}
    predict = _write(tmp_path, "predict.yaml", {"run_mode": "predict", "callbacks": [{"type": "MFLossMonitor"}]})
    result = _load("classic", [*_configs(tmp_path, base), predict], team)
    loaded = {Path(path).name: value for path, value in _loaded(result).items()}
    assert loaded["none.yaml"]["callbacks"] == [{"type": "MFLossMonitor"}, MONITOR, ALERTS]
    own = dict(OWN, log_dir="/shared/tb", run_name_pattern="{experiment}-team-{timestamp}")
    assert loaded["own.yaml"]["callbacks"] == [{"type": "MFLossMonitor"}, own]
    assert loaded["off.yaml"]["callbacks"] == [{"type": "MFLossMonitor"}]
    assert OFF_KEY not in loaded["off.yaml"]["keys"]  # removed before MindFormers' template, which warns of it
    assert f"'{OFF_KEY}'" not in result.stdout + result.stderr
    assert loaded["predict.yaml"]["callbacks"] == [{"type": "MFLossMonitor"}]  # not a training
    assert f"[mftb] team defaults {team} ({DEFAULTS_ENV}): added TensorBoardMonitor (line 2); added AlertMonitor" in (
        result.stdout + result.stderr
    )


def test_a_broken_defaults_file_stops_the_load_with_its_line_and_no_traceback(tmp_path: Path) -> None:
    team = tmp_path / "team.yaml"
    team.write_text("callbacks:\n  - type: TensorBoardMonitor\n    log_every: 0\n")
    config = _write(tmp_path, "job.yaml", {"run_mode": "train"})
    result = _load("classic", [config], team)
    assert result.returncode == 2
    assert (
        f"mindformers_tbplugin: error: the team defaults file {team} ({DEFAULTS_ENV}) cannot be used" in result.stderr
    )
    assert f"  - {team}:3: callbacks[0].log_every: expected integer >= 1, got 0" in result.stderr
    assert "Traceback" not in result.stderr and "CALLBACKS" not in result.stdout


@pytest.mark.skipif(not _mindformers_2x(), reason="needs MindFormers 2.x (make compat COMPAT_ENVS=mf2.0)")
def test_the_pynative_trainers_config_gets_them(tmp_path: Path) -> None:
    team = _write(tmp_path, "team.yaml", TEAM)
    base = yaml.safe_load((REPO / "tests" / "compat" / "mf2x_cpu" / "tiny_qwen3_cpu.yaml").read_text())
    base.pop("callbacks", None)
    loaded = {
        Path(path).name: value for path, value in _loaded(_load("pynative", _configs(tmp_path, base), team)).items()
    }
    assert loaded["none.yaml"]["callbacks"] == [MONITOR, ALERTS]  # as CallbackConfig objects, read back
    own = dict(OWN, log_dir="/shared/tb", run_name_pattern="{experiment}-team-{timestamp}")
    assert loaded["own.yaml"]["callbacks"] == [own]
    assert loaded["off.yaml"]["callbacks"] == [] and OFF_KEY not in loaded["off.yaml"]["keys"]
    # Trainer(config=dict) gets the same, and the caller's dict stays as it was
    assert all(value["same_from_dict"] and value["dict_unchanged"] for value in loaded.values()), loaded
