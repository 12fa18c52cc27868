"""`mftb validate`: every mistake in the callbacks block reported with its YAML path and line.

The broken configs under tests/config/broken_configs/ are real files; each case names the exact message
(path, line, what is allowed) and the exit status the launcher relies on: 1 problems, 2 unusable.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import MFTB, REPO, subprocess_env

from mindformers_tbplugin.config.checker import check_file
from mindformers_tbplugin.registration.catalog import our_callbacks

BROKEN = Path(__file__).resolve().parent / "broken_configs"
MIGRATE_CONFIGS = Path(__file__).resolve().parent / "migrate_configs"
ALLOWED_TB_KEYS = "allowed: log_dir, experiment, run_name_pattern, log_every"

# file -> (exit status, messages that must appear in its report)
CASES: dict[str, tuple[int, list[str]]] = {
    "key_typo.yaml": (
        1,
        [
            f"callbacks[1].log_evry (line 5): unknown key 'log_evry' for TensorBoardMonitor; did you mean "
            f"'log_every'? {ALLOWED_TB_KEYS}"
        ],
    ),
    "type_typo_ours.yaml": (
        1,
        ["callbacks[1].type (line 3): unknown callback type 'TensorboardMonitor'; did you mean 'TensorBoardMonitor'?"],
    ),
    "type_typo_foreign.yaml": (
        1,
        ["callbacks[0].type (line 2): unknown callback type 'MFLosMonitor'; did you mean 'MFLossMonitor'?"],
    ),
    "foreign_key_typo.yaml": (
        1,
        [
            "callbacks[1].save_checkpoint_step (line 5): unknown key 'save_checkpoint_step' for CheckpointMonitor; "
            "did you mean 'save_checkpoint_steps'?"
        ],
    ),
    "negative_log_every.yaml": (1, ["callbacks[0].log_every (line 4): expected integer >= 1, got -5"]),
    "zero_log_every.yaml": (1, ["callbacks[0].log_every (line 4): expected integer >= 1, got 0"]),
    "string_for_number.yaml": (1, ["callbacks[0].flush_secs (line 4): expected number, got 'often' (string)"]),
    "string_for_boolean.yaml": (1, ["callbacks[0].vs_tokens (line 4): expected boolean, got 'yes' (string)"]),
    "float_for_integer.yaml": (1, ["callbacks[0].param_norm_every (line 4): expected integer, got 2.5 (number)"]),
    "string_for_list.yaml": (
        1,
        ["callbacks[0].extra_metrics (line 4): expected list of string or null, got 'my_team.metrics:padding_ratio'"],
    ),
    "unknown_choice.yaml": (1, ["callbacks[0].rank_policy (line 4): expected one of 'writer', 'all', got 'everyone'"]),
    "empty_strings.yaml": (
        1,
        [
            "callbacks[0].log_dir (line 4): expected non-empty string or null, got '' (string)",
            "callbacks[0].experiment (line 5): expected non-empty string, got '  ' (string)",
            "callbacks[0].run_name_pattern (line 6): expected non-empty string, got '' (string)",
        ],
    ),
    "extra_metrics_not_importable.yaml": (
        1,
        [
            "callbacks[0].extra_metrics[0] (line 4): cannot import module 'my_team.metrics' (ModuleNotFoundError: "
            "No module named 'my_team'); the module must be importable in every rank's process (PYTHONPATH, or an "
            "installed package)"
        ],
    ),
    "alert_command_missing.yaml": (
        1,
        ["callbacks[1].sinks[1].command (line 7): program '/opt/oncall/page.sh' not found or not executable"],
    ),
    "stable_rank_bad_pattern.yaml": (
        1,
        [
            "callbacks[0].stable_rank_params[1] (line 4): not a regular expression: missing ), unterminated "
            "subpattern at position 14"
        ],
    ),
    "out_of_range.yaml": (1, ["callbacks[0].flush_secs (line 4): expected number between 0.1 and 3600, got 0"]),
    "aggregate_not_multiple.yaml": (
        1,
        ["callbacks[0].aggregate_every (line 5): expected a multiple of log_every (4) or 0, got 10"],
    ),
    "unknown_placeholder.yaml": (
        1,
        ["callbacks[0].run_name_pattern (line 4): unknown placeholder(s) host; allowed: {experiment}, {timestamp}"],
    ),
    "duplicate_writers.yaml": (
        1,
        [
            "callbacks[2] (line 6): TensorBoardMonitor writes the same run folder as callbacks[0] "
            "(/tmp/mftb_tb/llama_{timestamp})"
        ],
    ),
    "histogram_negative.yaml": (1, ["callbacks[1].every_steps (line 5): expected integer >= 0, got -1"]),
    "histogram_never.yaml": (
        1,
        ["callbacks[1].every_steps (line 5): every_steps and every_epochs are both 0: no histogram would be written"],
    ),
    "alert_rule_typo.yaml": (1, ["callbacks[1].rules[1].rule (line 7): unknown rule 'spik'; did you mean 'spike'?"]),
    "eval_callbacks_bad.yaml": (1, ["eval_callbacks[0].log_every (line 6): expected integer >= 1, got 0"]),
    "many_problems.yaml": (
        1,
        [
            "many_problems.yaml: 3 problems",
            "callbacks[0].log_every (line 5): expected integer >= 1, got -1",
            "callbacks[0].flush_secs (line 6): expected number, got 'fast' (string)",
            "callbacks[0].experimnt (line 7): unknown key 'experimnt' for TensorBoardMonitor; "
            "did you mean 'experiment'?",
        ],
    ),
    "syntax_bad_indent.yaml": (
        2,
        ["YAML syntax error (line 4, column 4): expected <block end>, but found '<block mapping start>'"],
    ),
    "syntax_unclosed_bracket.yaml": (
        2,
        [
            "YAML syntax error (line 5, column 3): expected ',' or ']', but got '-' (while parsing a flow sequence "
            "at line 4)"
        ],
    ),
    "syntax_tab_indent.yaml": (2, ["YAML syntax error (line 3, column 1): found character '\\t'"]),
    "callbacks_mapping.yaml": (
        2,
        ["callbacks (line 1): expected a list of callback entries ('- type: ...'), got a mapping"],
    ),
    "callbacks_string.yaml": (
        2,
        [
            "callbacks (line 1): expected a list of callback entries ('- type: ...'), got a string "
            "('TensorBoardMonitor')"
        ],
    ),
    "entry_without_type.yaml": (2, ["callbacks[1] (line 3): entry has no 'type' key (the callback class name)"]),
    "entry_not_mapping.yaml": (
        2,
        ["callbacks[0] (line 2): expected a mapping with a 'type' key, got a string ('MFLossMonitor')"],
    ),
    "empty.yaml": (2, ["empty.yaml is empty: expected a MindFormers config (a YAML mapping)"]),
    "comments_only.yaml": (2, ["comments_only.yaml is empty: expected a MindFormers config (a YAML mapping)"]),
    "top_level_list.yaml": (2, ["line 1: expected a YAML mapping at the top level, got a list"]),
    "binary_garbage.yaml": (2, ["binary_garbage.yaml is a binary file (it contains NUL bytes), not YAML text"]),
    "latin1_text.yaml": (2, ["latin1_text.yaml is not UTF-8 text (byte 0xe9 at offset 59)"]),
}
MISSING = BROKEN / "does_not_exist.yaml"


def _reports_by_file(output: str) -> dict[str, str]:
    """Split `mftb validate` output into each file's block (a header line, then indented lines)."""
    blocks: dict[str, str] = {}
    for block in re.split(r"\n(?=\S)", output.strip()):
        header = block.split("\n", 1)[0]
        blocks[Path(header.split(": ", 1)[0]).name] = block
    return blocks


def test_the_corpus_is_complete() -> None:
    assert len(CASES) >= 25
    assert {p.name for p in BROKEN.iterdir()} == set(CASES)


@pytest.fixture(scope="module")
def corpus_run() -> subprocess.CompletedProcess[str]:
    """One `mftb validate` over every broken file plus a missing one."""
    files = [str(BROKEN / name) for name in CASES] + [str(MISSING)]
    return subprocess.run([MFTB, "validate", *files], env=subprocess_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.process
def test_each_broken_config_names_path_line_and_what_is_allowed(
    name: str, corpus_run: subprocess.CompletedProcess[str]
) -> None:
    expected_status, messages = CASES[name]
    block = _reports_by_file(corpus_run.stdout)[name]
    for message in messages:
        assert message in block, block
    assert "cannot be checked" in block if expected_status == 2 else f"{name}: " in block
    assert check_file(BROKEN / name, our_callbacks()).exit_code == expected_status


@pytest.mark.process
def test_no_traceback_and_the_worst_status_wins(corpus_run: subprocess.CompletedProcess[str]) -> None:
    assert corpus_run.returncode == 2
    assert "Traceback" not in corpus_run.stdout + corpus_run.stderr
    assert f"error: file not found: {MISSING}" in _reports_by_file(corpus_run.stdout)["does_not_exist.yaml"]


@pytest.mark.parametrize(
    ("files", "status"),
    [
        (["negative_log_every.yaml"], 1),
        (["syntax_tab_indent.yaml"], 2),
        (["does_not_exist.yaml"], 2),
        (["entry_without_type.yaml", "key_typo.yaml"], 2),
    ],
)
@pytest.mark.process
def test_exit_status_contract_for_launchers(files: list[str], status: int) -> None:
    result = subprocess.run(
        [MFTB, "validate", *(str(BROKEN / f) for f in files)], env=subprocess_env(), capture_output=True, text=True
    )
    assert result.returncode == status, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.compat
@pytest.mark.process
def test_every_bundled_config_is_valid() -> None:
    configs = sorted(str(p) for p in (REPO / "configs").rglob("*.yaml"))
    assert len(configs) >= 4
    result = subprocess.run([MFTB, "validate", *configs], env=subprocess_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": OK (") == len(configs)
    assert "error:" not in result.stdout
    assert "warning:" not in result.stdout  # a warning is about something to change: none in what we ship


@pytest.mark.process
def test_mftb_train_stops_before_mindformers_with_the_same_messages(tmp_path: Path) -> None:
    # A misspelt key that the callback's own constructor never sees (MindFormers would pass it as an
    # unexpected keyword): the YAML check names it with its line before anything is built.
    result = subprocess.run(
        [MFTB, "train", "--config", str(BROKEN / "many_problems.yaml")],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "3 problems in the callbacks, nothing built" in result.stderr
    assert "callbacks[0].experimnt (line 7): unknown key 'experimnt' for TensorBoardMonitor" in result.stderr
    assert "callbacks[0].log_every (line 5): expected integer >= 1, got -1" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "output" / "checkpoint").exists()


def test_mftb_train_refuses_an_unparsable_config(tmp_path: Path) -> None:
    result = subprocess.run(
        [MFTB, "train", "--config", str(BROKEN / "syntax_unclosed_bracket.yaml")],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "YAML syntax error (line 5, column 3)" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_lists_the_commands_and_the_exit_statuses() -> None:
    top = subprocess.run([MFTB, "--help"], capture_output=True, text=True, check=True).stdout
    assert re.search(r"^\s+validate\s+check the callbacks", top, flags=re.M)
    assert re.search(r"^\s+schema\s+print the JSON Schema", top, flags=re.M)
    validate = subprocess.run([MFTB, "validate", "--help"], capture_output=True, text=True, check=True).stdout
    assert "CONFIG.yaml" in validate
    assert "0 all valid, 1 problems found, 2 a file could not be read" in " ".join(validate.split())
    schema = subprocess.run([MFTB, "schema", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--format {json,markdown}" in schema
    assert "exit 3: an alert stopped it" in " ".join(top.split())
    train = subprocess.run([MFTB, "train", "--help"], capture_output=True, text=True, check=True).stdout
    assert (
        "Exit status: 0 training ended, 1 training failed, 2 a problem in the command line or the config, "
        "3 an AlertMonitor rule with action: stop ended training" in " ".join(train.split())
    )


# -- MindFormers' own tensorboard: section beside a TensorBoardMonitor ------------------------------
BUILTIN_AND_MONITOR = """\
tensorboard:
    tensorboard_dir: 'worker/tensorboard'
    log_timers_to_tensorboard: True
callbacks:
  - type: TensorBoardMonitor
    log_dir: /tmp/mftb_tb
"""
BUILTIN_WARNING = (
    "tensorboard (line 1): MindFormers' built-in tensorboard: section is on (tensorboard_dir: worker/tensorboard) "
    "besides the TensorBoardMonitor at callbacks[0]: both write, tensorboardX into worker/tensorboard/rank_<id> on "
    "every rank and the monitor its run. Removing the section saves its writer's time at every step: in "
    "BENCHMARKS.md it made the tiny LLaMA's steps 18.20% longer (21.27 against 19.07 ms; TensorBoardMonitor: "
    "-5.88%). `mftb migrate CONFIG` removes it and says what each of its options becomes"
)


@pytest.mark.parametrize(
    ("change", "warned"),
    [
        ((), True),
        (("type: TensorBoardMonitor", "type: TensorBoard"), True),  # the articles' spelling is the same monitor
        (("    log_timers", "    tensorboard_on: False\n    log_timers"), False),  # the section is off
        (("'worker/tensorboard'", "''"), False),  # no folder: MindFormers' writer is off
        (("type: TensorBoardMonitor\n    log_dir: /tmp/mftb_tb", "type: HistogramMonitor"), False),
    ],
    ids=["both", "alias", "tensorboard_on false", "no tensorboard_dir", "no monitor"],
)
def test_mindformers_tensorboard_section_beside_a_monitor_is_a_warning(
    tmp_path: Path, change: tuple[str, str], warned: bool
) -> None:
    config = tmp_path / "both.yaml"
    config.write_text(BUILTIN_AND_MONITOR.replace(*change) if change else BUILTIN_AND_MONITOR)
    report = check_file(config, our_callbacks())
    assert report.exit_code == 0, report.render()
    assert [f.render() for f in report.warnings if f.path == "tensorboard"] == ([BUILTIN_WARNING] if warned else [])


# MindFormers master's PyNative trainer config (real, unchanged): monitor.tensorboard, callbacks to replace.
PYNATIVE = MIGRATE_CONFIGS / "pynative_train_config_master.yaml"
PYNATIVE_CALLBACKS = "  - type: callbackA\n    param: 0\n  - type: callbackB\n    param: 1\n"
PYNATIVE_WARNING = (
    "monitor.tensorboard (line 86): MindFormers' PyNative TensorBoard writer is on (monitor.tensorboard.output_dir: "
    "./tb) besides the TensorBoardMonitor at callbacks[0]: both write, tensorboardX into ./tb from the last rank and "
    "the monitor its run, the same loss, learning rate and gradient norm twice. `mftb migrate CONFIG` removes it and "
    "says what each of its options becomes"
)


@pytest.mark.parametrize(
    ("output_dir", "callbacks", "warned"),
    [
        ("output_dir: './tb'", "  - type: TensorBoardMonitor\n", True),
        ("output_dir: ''  ", "  - type: TensorBoardMonitor\n", False),  # as master ships it: the writer is off
        ("tensorboard_dir: './tb'", "  - type: TensorBoardMonitor\n", False),  # 2.0's name: nothing wrote
        ("output_dir: './tb'", "  - type: HistogramMonitor\n", False),
    ],
    ids=["both", "no output_dir", "2.0 name", "no monitor"],
)
def test_master_pynative_writer_beside_a_monitor_is_a_warning(
    tmp_path: Path, output_dir: str, callbacks: str, warned: bool
) -> None:
    text = PYNATIVE.read_text()
    assert text.count(PYNATIVE_CALLBACKS) == 1 and text.count("output_dir: ''  ") == 1
    config = tmp_path / "pynative.yaml"
    config.write_text(text.replace(PYNATIVE_CALLBACKS, callbacks).replace("output_dir: ''  ", output_dir))
    report = check_file(config, our_callbacks())
    assert report.exit_code == 0, report.render()
    assert [f.render() for f in report.warnings] == ([PYNATIVE_WARNING] if warned else [])


# MindFormers master's Qwen3-MoE config (real, unchanged): use_legacy: False, print_separate_loss: True.
QWEN3_MOE = MIGRATE_CONFIGS / "pretrain_qwen3_moe_master.yaml"
LOSS_PARTS_NOTE = (
    "print_separate_loss (line 16): False turns off MindFormers' loss-part accumulation (its train wrapper "
    "registers the lm_loss, mtp_loss, aux_loss and indexer_loss accumulators only while it is True, its default), "
    "so TensorBoardMonitor cannot write train/loss_lm, train/loss_mtp, train/loss_aux and train/loss_indexer; "
    "remove it or set it to True to have them"
)


@pytest.mark.parametrize(
    ("top_level", "callback", "noted"),
    [
        ("use_legacy: False\nprint_separate_loss: False\n", "TensorBoardMonitor", True),
        ("use_legacy: False\nprint_separate_loss: True\n", "TensorBoardMonitor", False),
        ("use_legacy: True\nprint_separate_loss: False\n", "TensorBoardMonitor", False),  # legacy: no parts at all
        ("use_legacy: False\nprint_separate_loss: False\n", "HistogramMonitor", False),  # no monitor to write them
    ],
    ids=["off", "on", "legacy", "no monitor"],
)
def test_print_separate_loss_off_in_an_mcore_config_is_a_note(
    tmp_path: Path, top_level: str, callback: str, noted: bool
) -> None:
    text = QWEN3_MOE.read_text()
    assert text.count("use_legacy: False\nprint_separate_loss: True\n") == 1
    config = tmp_path / "moe.yaml"
    config.write_text(
        text.replace("use_legacy: False\nprint_separate_loss: True\n", top_level).replace(
            "  - type: MFLossMonitor\n", f"  - type: {callback}\n"
        )
    )
    report = check_file(config, our_callbacks())
    assert report.exit_code == 0 and not report.warnings, report.render()
    notes = [f.render() for f in report.notes if f.path == "print_separate_loss"]
    assert notes == ([LOSS_PARTS_NOTE] if noted else [])


@pytest.mark.process
def test_mftb_validate_prints_the_pynative_warning_and_the_loss_part_note(tmp_path: Path) -> None:
    pynative, moe = tmp_path / "pynative.yaml", tmp_path / "moe.yaml"
    text = PYNATIVE.read_text().replace(PYNATIVE_CALLBACKS, "  - type: TensorBoardMonitor\n")
    pynative.write_text(text.replace("output_dir: ''  ", "output_dir: './tb'"))
    moe.write_text(QWEN3_MOE.read_text().replace("print_separate_loss: True", "print_separate_loss: False"))
    moe.write_text(
        moe.read_text().replace("  - type: MFLossMonitor\n", "  - type: MFLossMonitor\n  - type: TensorBoardMonitor\n")
    )
    result = subprocess.run(
        [MFTB, "validate", str(pynative), str(moe)], env=subprocess_env(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    blocks = _reports_by_file(result.stdout)
    assert f"  warning: {PYNATIVE_WARNING}\n" in blocks["pynative.yaml"]
    assert f"  note: {LOSS_PARTS_NOTE}\n" in blocks["moe.yaml"] and "warning:" not in blocks["moe.yaml"]


@pytest.mark.parametrize("local_norm", [True, False, None])
def test_per_layer_norm_options_without_local_norm_get_a_note(tmp_path: Path, local_norm: bool | None) -> None:
    wrapper = "" if local_norm is None else f"runner_wrapper:\n  type: MFTrainOneStepCell\n  local_norm: {local_norm}\n"
    config = tmp_path / "norms.yaml"
    config.write_text(
        wrapper + "callbacks:\n  - type: TensorBoardMonitor\n    log_dir: ./tb\n    norm_groups: param\n"
        "    grad_hist_every: 50\n"
    )
    report = check_file(config, our_callbacks())
    assert report.exit_code == 0, report.render()
    notes = [f.render() for f in report.notes if f.path.endswith(("norm_groups", "grad_hist_every"))]
    expected = "takes effect only with per-layer gradient norms: add 'local_norm: True' under runner_wrapper"
    assert all(expected in note for note in notes) and len(notes) == (0 if local_norm else 2)


@pytest.mark.parametrize("switch", ["layer_grad_norms", "train_state", None])
def test_per_layer_norm_options_of_a_pynative_trainer_config(tmp_path: Path, switch: str | None) -> None:
    """MindFormers 2.x's PyNative trainer has no runner_wrapper: its switches are the monitor's
    layer_grad_norms and its own monitor.train_state.local_norm."""
    entry = "  - type: TensorBoardMonitor\n    log_dir: ./tb\n    grad_hist_every: 50\n"
    entry += "    layer_grad_norms: true\n" if switch == "layer_grad_norms" else ""
    monitor = "monitor:\n  train_state:\n    local_norm: True\n" if switch == "train_state" else ""
    config = tmp_path / "pynative.yaml"
    config.write_text(
        "training:\n  steps: 10\n  global_batch_size: 4\nparallelism:\n  tensor_parallel: 1\n"
        + monitor
        + "callbacks:\n"
        + entry
    )
    report = check_file(config, our_callbacks())
    assert report.exit_code == 0, report.render()
    notes = [f.render() for f in report.notes if f.path.endswith("grad_hist_every")]
    if switch:
        assert notes == []
    else:
        (note,) = notes
        assert "add 'layer_grad_norms: true' to this entry (MindFormers 2.x's PyNative trainer)" in note


def test_layer_grad_norms_in_a_classic_config_says_what_turns_them_on_there(tmp_path: Path) -> None:
    config = tmp_path / "classic.yaml"
    config.write_text("callbacks:\n  - type: TensorBoardMonitor\n    log_dir: ./tb\n    layer_grad_norms: true\n")
    report = check_file(config, our_callbacks())
    (note,) = [f.render() for f in report.notes if f.path.endswith("layer_grad_norms")]
    assert "the classic trainer computes per-layer gradient norms only with 'local_norm: True' under" in note
