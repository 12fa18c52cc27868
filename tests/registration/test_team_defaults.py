"""The team's defaults file: read and checked whole with its lines, and a config completed from it (entries
added when the config names none of ours, unset options filled, the config's values kept)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from conftest import REPO

from mindformers_tbplugin.registration.catalog import our_callbacks
from mindformers_tbplugin.registration.team_defaults import (
    DEFAULTS_ENV,
    OFF_KEY,
    DefaultsError,
    broken_by_defaults,
    complete,
    complete_from_environment,
    defaults_path,
    load,
)
from mindformers_tbplugin.schema import ConfigError

OURS = our_callbacks()
TEAM = """\
# the team's monitoring
callbacks:
  - type: TensorBoardMonitor
    log_dir: /shared/tb
    run_name_pattern: "{experiment}-team-{timestamp}"
    log_every: 5
  - type: AlertMonitor
    rules:
      - {rule: nonfinite, tag: train/loss}
"""


def _file(tmp_path: Path, text: str, name: str = "team.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _problems(path: Path) -> str:
    with pytest.raises(DefaultsError) as caught:
        load(path, OURS)
    message = str(caught.value)
    assert message.startswith(f"the team defaults file {path} ({DEFAULTS_ENV}) cannot be used")
    return message


def test_entries_keep_their_options_and_lines(tmp_path: Path) -> None:
    defaults = load(_file(tmp_path, TEAM), OURS)
    monitor, alerts = defaults.entries
    assert (monitor.type, monitor.line, alerts.type, alerts.line) == ("TensorBoardMonitor", 3, "AlertMonitor", 7)
    assert monitor.options == {
        "log_dir": "/shared/tb",
        "run_name_pattern": "{experiment}-team-{timestamp}",
        "log_every": 5,
    }
    assert monitor.lines == {"log_dir": 4, "run_name_pattern": 5, "log_every": 6}
    assert alerts.lines == {"rules": 8}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "callbacks:\n  - type: TensorBoardMonitor\n    log_evry: 5\n",
            ":3: callbacks[0].log_evry: unknown key 'log_evry' for TensorBoardMonitor; did you mean 'log_every'?",
        ),
        (
            "callbacks:\n  - type: TensorBoardMonitor\n    log_every: 0\n",
            ":3: callbacks[0].log_every: expected integer >= 1, got 0",
        ),
        (
            "callbacks:\n  - type: AlertMonitor\n    rules:\n      - rule: spike\n        tag: train/loss\n"
            "        k: -1\n",
            ":6: callbacks[0].rules[0].k:",
        ),
        (
            "callbacks:\n  - type: TensorboardMonitor\n",
            ":2: callbacks[0]: expected an entry of type TensorBoardMonitor",
        ),
        (
            "callbacks:\n  - type: MFLossMonitor\n",
            ":2: callbacks[0]: expected an entry of type TensorBoardMonitor, HistogramMonitor, AlertMonitor, "
            "got type 'MFLossMonitor'",
        ),
        (
            "callbacks:\n  - type: AlertMonitor\n  - type: AlertMonitor\n",
            ":3: callbacks[1]: a second AlertMonitor; the file gives at most one of each type",
        ),
        ("callback:\n  - type: AlertMonitor\n", ":1: unknown key 'callback'; allowed: callbacks"),
        ("callbacks:\n  - type: AlertMonitor\n   bad indent: 1\n", ":3: YAML syntax error"),
        ("# nothing but a comment\n", ": is empty: expected a 'callbacks:' list of"),
        ("callbacks: {type: AlertMonitor}\n", ":1: callbacks: expected a list of entries"),
    ],
)
def test_a_mistake_names_the_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    path = _file(tmp_path, text)
    assert f"{path}{expected}" in _problems(path)


def test_every_mistake_is_listed_at_once(tmp_path: Path) -> None:
    path = _file(tmp_path, "callbacks:\n  - type: TensorBoardMonitor\n    log_evry: 5\n    flush_secs: often\n")
    message = _problems(path)
    assert f"{path}:3: callbacks[0].log_evry" in message and f"{path}:4: callbacks[0].flush_secs" in message


def test_a_missing_or_unreadable_file_is_named(tmp_path: Path) -> None:
    assert f"{tmp_path / 'nope.yaml'}: file not found" in _problems(tmp_path / "nope.yaml")
    assert f"{tmp_path}: is a folder, not a YAML file" in _problems(tmp_path)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe callbacks")
    assert "not UTF-8 text" in _problems(binary)


def test_a_config_with_none_of_ours_gets_every_entry(tmp_path: Path) -> None:
    defaults = load(_file(tmp_path, TEAM), OURS)
    document = {"run_mode": "train", "callbacks": [{"type": "MFLossMonitor"}]}
    completion = complete(document, defaults, OURS)
    assert document["callbacks"] == [
        {"type": "MFLossMonitor"},
        {"type": "TensorBoardMonitor", **defaults.entries[0].options},
        {"type": "AlertMonitor", "rules": [{"rule": "nonfinite", "tag": "train/loss"}]},
    ]
    assert sorted(completion.added) == [1, 2] and not completion.filled
    assert completion.source_of("callbacks[1].log_every") == f"{defaults.path} line 6"
    assert completion.source_of("callbacks[2].rules[0].tag") == f"{defaults.path} line 8"
    assert completion.source_of("callbacks[0]") is None
    # the file's values are copied: a training that changes its entries leaves the file's alone
    document["callbacks"][2]["rules"][0]["tag"] = "changed"
    assert defaults.entries[1].options["rules"][0]["tag"] == "train/loss"
    no_list = {"run_mode": "train"}
    complete(no_list, defaults, OURS)
    assert [entry["type"] for entry in no_list["callbacks"]] == ["TensorBoardMonitor", "AlertMonitor"]


def test_the_configs_own_entries_get_only_the_options_they_leave_unset(tmp_path: Path) -> None:
    defaults = load(_file(tmp_path, TEAM), OURS)
    own = {"type": "TensorBoardMonitor", "experiment": "mine", "log_every": 1, "log_dir": None}
    document = {"callbacks": [{"type": "MFLossMonitor"}, own]}
    completion = complete(document, defaults, OURS)
    # the config's values win, null included; the entries it left out are not added
    assert document["callbacks"][1] == dict(own, run_name_pattern="{experiment}-team-{timestamp}")
    assert len(document["callbacks"]) == 2
    assert completion.filled == {1: {"run_name_pattern": 5}} and not completion.added
    assert "filled callbacks[1].run_name_pattern (line 5)" in completion.summary()


def test_the_articles_spelling_takes_the_monitors_defaults(tmp_path: Path) -> None:
    defaults = load(_file(tmp_path, TEAM), OURS)
    document = {"callbacks": [{"type": "TensorBoard", "histogram_interval": 1}, {"type": "AlertMonitor", "sinks": []}]}
    completion = complete(document, defaults, OURS)
    assert document["callbacks"][0]["log_dir"] == "/shared/tb" and document["callbacks"][0]["log_every"] == 5
    assert document["callbacks"][1] == {
        "type": "AlertMonitor",
        "sinks": [],
        "rules": defaults.entries[1].options["rules"],
    }
    assert set(completion.filled) == {0, 1}


def test_a_value_that_breaks_the_configs_entry_is_the_files_fault(tmp_path: Path) -> None:
    team = "callbacks:\n  - type: TensorBoardMonitor\n    log_every: 4\n    aggregate_every: 8\n"
    defaults = load(_file(tmp_path, team), OURS)
    document = {"callbacks": [{"type": "TensorBoardMonitor", "aggregate_every": 10}]}
    completion = complete(document, defaults, OURS)
    (problem,) = broken_by_defaults(document, completion, OURS)
    assert problem == "callbacks[0].aggregate_every (the config): expected a multiple of log_every (4) or 0, got 10"
    # an entry that is wrong as written stays the config's own mistake, reported as before
    document = {"callbacks": [{"type": "TensorBoardMonitor", "aggregate_every": 10, "log_every": 0}]}
    assert broken_by_defaults(document, complete(document, defaults, OURS), OURS) == []


def test_the_environment_and_the_config_turn_it_off(tmp_path: Path) -> None:
    path = _file(tmp_path, TEAM)
    assert defaults_path({DEFAULTS_ENV: ""}) is None and defaults_path({}) is None
    assert defaults_path({DEFAULTS_ENV: str(path)}) == path
    config = {"run_mode": "train", "callbacks": [{"type": "MFLossMonitor"}]}
    for environ, document in (({DEFAULTS_ENV: ""}, {}), ({DEFAULTS_ENV: str(path)}, {OFF_KEY: False})):
        document = {**copy.deepcopy(config), **document}
        assert complete_from_environment(document, OURS, environ) is None
        assert document == config  # nothing added, and MindFormers never sees our key
    document = {**copy.deepcopy(config), OFF_KEY: True}
    assert complete_from_environment(document, OURS, {DEFAULTS_ENV: str(path)}) is not None
    assert OFF_KEY not in document and len(document["callbacks"]) == 3
    with pytest.raises(ConfigError, match=f"{OFF_KEY}: expected true or false .*got 'no'"):
        complete_from_environment({OFF_KEY: "no"}, OURS, {})


def test_a_broken_file_adds_nothing(tmp_path: Path) -> None:
    path = _file(tmp_path, TEAM + "  - type: HistogramMonitor\n    bins: -1\n")
    document = {"run_mode": "train", "callbacks": [{"type": "MFLossMonitor"}]}
    with pytest.raises(DefaultsError, match=rf"{path}:11: callbacks\[2\].bins"):
        complete_from_environment(document, OURS, {DEFAULTS_ENV: str(path)})
    assert document["callbacks"] == [{"type": "MFLossMonitor"}]


def test_the_documented_file_gives_the_documented_log_line(tmp_path: Path) -> None:
    page = (REPO / "docs" / "team.md").read_text()
    text = re.search(r"```yaml\n# /etc/mftb/team.yaml\n(.*?)```", page, flags=re.S).group(0)[len("```yaml\n") : -3]
    path = _file(tmp_path, text)
    document: dict = {"run_mode": "train", "callbacks": [{"type": "MFLossMonitor"}]}
    summary = complete(document, load(path, OURS), OURS).summary().replace(str(path), "/etc/mftb/team.yaml")
    assert f"[mftb] {summary}\n" in page
