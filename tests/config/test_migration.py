"""`mftb migrate`: configs that log through MindFormers' own `tensorboard:` section, the articles'
`type: TensorBoard` or a SummaryCollector entry, rewritten with TensorBoardMonitor entries. Real
`mftb migrate` processes on the bundled configs (with those added), on MindFormers' published Qwen3
finetune config with the sections its guide adds, and on hand-written entries. Every line that is not
migrated must come out byte for byte, and the result must pass `mftb validate`."""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import MFTB, REPO, documentation, subprocess_env

from mindformers_tbplugin.config.checker import check_file
from mindformers_tbplugin.registration.catalog import our_callbacks

BUNDLED = sorted((REPO / "configs").glob("*/*.yaml"))
MIGRATE_CONFIGS = Path(__file__).resolve().parent / "migrate_configs"
QWEN3 = MIGRATE_CONFIGS / "finetune_qwen3_tensorboard.yaml"
# MindFormers master's, unchanged: a PyNative trainer config (monitor.tensorboard) and an mcore MoE config.
PYNATIVE = MIGRATE_CONFIGS / "pynative_train_config_master.yaml"
QWEN3_MOE = MIGRATE_CONFIGS / "pretrain_qwen3_moe_master.yaml"
# The section as MindFormers' documentation shows it.
SECTION = (
    "tensorboard:\n"
    "    tensorboard_dir: 'worker/tensorboard'\n"
    "    tensorboard_queue_size: 10\n"
    "    log_loss_scale_to_tensorboard: True\n"
    "    log_timers_to_tensorboard: True\n"
)


def migrate(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MFTB, "migrate", *map(str, args)], cwd=cwd, env=subprocess_env(), capture_output=True, text=True, timeout=120
    )


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    """(lines only in ``before``, lines only in ``after``); every other line is in both, byte for byte."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    removed: list[str] = []
    added: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            removed += old[i1:i2]
            added += new[j1:j2]
    return removed, added


def with_section(text: str) -> str:
    """A config with MindFormers' section added right above its callbacks."""
    assert text.count("\n\ncallbacks:\n") == 1
    return text.replace("\n\ncallbacks:\n", f"\n\n{SECTION}\ncallbacks:\n")


def validate_ours(path: Path) -> list[str]:
    """Errors and warnings of `mftb validate` for a config holding only this package's callbacks."""
    report = check_file(path, our_callbacks())
    return [f.render() for f in report.errors + report.warnings]


# -- the bundled configs ----------------------------------------------------------------------------
@pytest.mark.parametrize("config", BUNDLED, ids=lambda p: p.name)
def test_a_bundled_config_with_the_section_added_migrates_back_to_itself(config: Path, tmp_path: Path) -> None:
    source = tmp_path / "with_section.yaml"
    source.write_text(with_section(config.read_text()))
    result = migrate(source, "-o", tmp_path / "out.yaml")
    assert result.returncode == 0, result.stderr
    # The config already has its TensorBoardMonitor: removing the section gives back the file, every byte.
    assert (tmp_path / "out.yaml").read_bytes() == config.read_bytes()
    listing = result.stdout
    line = source.read_text().splitlines().index("tensorboard:") + 1
    assert f"  tensorboard (line {line}): removed: MindFormers' built-in writer" in listing
    assert re.search(
        rf"  no equivalent: tensorboard.tensorboard_dir \(line {line + 1}\): not carried: callbacks\[\d\] is a "
        r"TensorBoardMonitor; add log_dir: 'worker/tensorboard' to it to keep this",
        listing,
    )
    assert (
        f"  mapped: tensorboard.log_loss_scale_to_tensorboard (line {line + 3}): -> always written: "
        "train/loss_scale and train/overflow"
    ) in listing
    assert f"  no equivalent: tensorboard.tensorboard_queue_size (line {line + 2}): tensorboardX's" in listing


@pytest.mark.parametrize("config", BUNDLED, ids=lambda p: p.name)
def test_a_bundled_config_with_type_tensorboard_migrates_back_to_itself(config: Path, tmp_path: Path) -> None:
    text = config.read_text()
    entry = "  - type: TensorBoardMonitor\n"
    assert text.count(entry) == 1
    source = tmp_path / "articles.yaml"
    source.write_text(text.replace(entry, "  - type: TensorBoard\n    update_time: 60   # seconds\n    profile: 0\n"))
    result = migrate(source, "-o", tmp_path / "out.yaml")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.yaml").read_bytes() == config.read_bytes()
    assert "`mftb tensorboard LOGDIR --reload_interval 60`" in result.stdout
    assert "no equivalent: callbacks[" in result.stdout and ".profile (line " in result.stdout


@pytest.mark.parametrize("config", BUNDLED, ids=lambda p: p.name)
def test_a_summary_collector_beside_the_monitor_goes_without_a_trace(config: Path, tmp_path: Path) -> None:
    text = config.read_text()
    first = "callbacks:\n  - type: MFLossMonitor\n"
    collector = "  - summary_collector:\n      summary_dir: './summary_dir'\n      keep_default_action: False\n"
    source = tmp_path / "summary.yaml"
    source.write_text(text.replace(first, first + collector))
    result = migrate(source, "-o", tmp_path / "out.yaml")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.yaml").read_bytes() == config.read_bytes()
    assert re.search(r"callbacks\[1\] \(line \d+\): SummaryCollector entry replaced by nothing", result.stdout)
    assert re.search(r"summary_collector.summary_dir \(line \d+\): not carried: callbacks\[\d\] is a", result.stdout)


def test_the_diff_shows_only_the_section_and_nothing_is_written(tmp_path: Path) -> None:
    config = REPO / "configs" / "tiny" / "llama_tiny_cpu.yaml"
    source = tmp_path / "tiny.yaml"
    source.write_text(with_section(config.read_text()))
    before = sorted(tmp_path.iterdir())
    result = migrate(source)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"--- {source}\n+++ {source} (migrated)\n@@ ")
    body = result.stdout.splitlines(keepends=True)[2:]
    assert [line[1:] for line in body if line.startswith("-")] == [*SECTION.splitlines(keepends=True), "\n"]
    assert not [line for line in body if line.startswith("+")]
    assert "tensorboard (line 67): removed" in result.stderr  # the listing goes to stderr
    assert sorted(tmp_path.iterdir()) == before and source.read_text() == with_section(config.read_text())


# -- MindFormers' published finetune config ---------------------------------------------------------
FINETUNE_ADDED = [
    "  - type: TensorBoardMonitor  # replaces the tensorboard: section\n",
    "    log_dir: 'worker/tensorboard'\n",
]


def test_mindformers_finetune_config_diff_and_listing(tmp_path: Path) -> None:
    result = migrate(QWEN3)
    assert result.returncode == 0, result.stderr
    body = result.stdout.splitlines(keepends=True)[2:]
    assert [line[1:] for line in body if line.startswith("-")] == [*SECTION.splitlines(keepends=True), "\n"]
    assert [line[1:] for line in body if line.startswith("+")] == FINETUNE_ADDED
    out = tmp_path / "out.yaml"
    assert migrate(QWEN3, "-o", out).returncode == 0
    assert changed_lines(QWEN3.read_text(), out.read_text()) == (
        [*SECTION.splitlines(keepends=True), "\n"],
        FINETUNE_ADDED,
    )
    # The new entry follows the list's last one, before the blank line that ends the list.
    last = '    checkpoint_format: "safetensors"  # Format for saving checkpoints\n'
    assert f"{last}{''.join(FINETUNE_ADDED)}\n# Wrapper cell configuration\n" in out.read_text()
    listing = result.stderr
    for expected in [
        "tensorboard (line 168): removed: MindFormers' built-in writer (tensorboardX, a folder per rank)",
        "callbacks (line 175): TensorBoardMonitor added at callbacks[2], in place of the section",
        "mapped: tensorboard.tensorboard_dir (line 169): -> log_dir: 'worker/tensorboard' (runs in "
        "worker/tensorboard/<experiment>_<timestamp>/: one for the job, not per rank)",
        "mapped: tensorboard.log_timers_to_tensorboard (line 172): -> always written: perf/step_time_ms, "
        "perf/samples_per_s and perf/tokens_per_s (its B-samples-per-day is perf/samples_per_s x 86400 / 1e9)",
        "no equivalent: tensorboard.tensorboard_queue_size (line 170): tensorboardX's write-out threshold",
        "no equivalent: monitor_config.local_loss_format (line 156): the local loss of each micro batch: not "
        "written by TensorBoardMonitor; without the tensorboard: section MindFormers logs it instead",
        "no equivalent: monitor_config.device_local_norm_format (line 159): each device's local gradient norm",
        "mapped: monitor_config.device_local_loss_format (line 157): -> each rank's loss, per aggregation "
        "interval, in the ranks dashboard's loss channel, and the highest rank loss of every logged step in "
        "train/loss_max and train/loss_max_rank",
        "mapped: monitor_config.local_norm_format (line 158): -> grad_norm/<layer> with runner_wrapper.local_norm: "
        "True (norm_groups: param for one per parameter) (each parameter's local gradient norm)",
    ]:
        assert f"  {expected}" in listing, listing


def test_weight_state_format_becomes_param_norm_every(tmp_path: Path) -> None:
    text = QWEN3.read_text().replace("    weight_state_format: null\n", "    weight_state_format: ['tensorboard']\n")
    source = tmp_path / "weights.yaml"
    source.write_text(text.replace("    step_interval: 1\n", "    step_interval: 5\n"))
    result = migrate(source, "-o", tmp_path / "out.yaml")
    assert result.returncode == 0, result.stderr
    assert changed_lines(source.read_text(), (tmp_path / "out.yaml").read_text())[1] == [
        *FINETUNE_ADDED,
        "    param_norm_every: 5\n",
    ]
    assert "mapped: monitor_config.weight_state_format (line 161): -> param_norm_every: 5 (train/param_norm" in (
        result.stdout
    )


def test_throughput_baseline_becomes_the_monitors_and_writes_perf_linearity(tmp_path: Path) -> None:
    source = tmp_path / "baseline.yaml"
    source.write_text(QWEN3.read_text().replace("    throughput_baseline: null\n", "    throughput_baseline: 120.5\n"))
    result = migrate(source, "-o", tmp_path / "out.yaml")
    assert result.returncode == 0, result.stderr
    assert changed_lines(source.read_text(), (tmp_path / "out.yaml").read_text())[1] == [
        *FINETUNE_ADDED,
        "    throughput_baseline: 120.5\n",
    ]
    assert "mapped: monitor_config.throughput_baseline (line 162): -> throughput_baseline: 120.5 (perf/linearity" in (
        result.stdout
    )


def test_attention_logits_and_stable_rank_are_mapped(tmp_path: Path) -> None:
    stable_rank = (
        "    stable_rank_config:\n      format: ['tensorboard']\n      step_interval: 50\n"
        "      target: ['self_attention', 'mlp\\.linear_fc1']\n      power_iteration_num: 8\n"
    )
    text = QWEN3.read_text().replace(
        "    optimizer_state_format: null\n", f"    max_attention_logit_format: ['tensorboard']\n{stable_rank}"
    )
    source = tmp_path / "logits.yaml"
    source.write_text(text)
    result = migrate(source, "-o", tmp_path / "out.yaml")
    assert result.returncode == 0, result.stderr
    assert (
        "mapped: monitor_config.max_attention_logit_format (line 160): -> attention_logit_max/<layer> and "
        "attention_logit_max/all every attention_logit_every steps" in result.stdout
    )
    assert (
        "mapped: monitor_config.stable_rank_config.format (line 162): -> stable_rank_every: 50 "
        "(weight_stable_rank/<name> and weight_eigenvalue/<name>, the same tags)" in result.stdout
    )
    assert "mapped: monitor_config.stable_rank_config.target (line 164): -> stable_rank_params: " in result.stdout
    assert "no equivalent: monitor_config.stable_rank_config.power_iteration_num (line 165): not needed" in (
        result.stdout
    )
    added = changed_lines(source.read_text(), (tmp_path / "out.yaml").read_text())[1]
    assert "    stable_rank_every: 50\n" in added
    assert "    stable_rank_params: [self_attention, mlp\\.linear_fc1]\n" in added
    assert validate_ours(tmp_path / "out.yaml") == []


# -- MindFormers master: the PyNative trainer's monitor.tensorboard, and the loss parts -----------------
PYNATIVE_SECTION = [
    "  tensorboard:\n",
    "    # TensorBoard configuration\n",
    "    output_dir: ''       # directory to store TensorBoard logs\n",
    "    log_interval: 1      # logging interval (in steps)\n",
    "    queue_size: 1000     # maximum size of the TensorBoard event queue\n",
    "\n",
]


def test_master_pynative_section_without_output_dir_is_removed(tmp_path: Path) -> None:
    out = tmp_path / "out.yaml"
    result = migrate(PYNATIVE, "-o", out)
    assert result.returncode == 0, result.stderr
    assert changed_lines(PYNATIVE.read_text(), out.read_text()) == (PYNATIVE_SECTION, [])
    assert "  monitor.tensorboard (line 86): removed; it wrote nothing (output_dir empty or missing)\n" in result.stdout


def test_master_pynative_section_becomes_a_monitor(tmp_path: Path) -> None:
    source, out = tmp_path / "pynative.yaml", tmp_path / "out.yaml"
    source.write_text(PYNATIVE.read_text().replace("output_dir: ''  ", "output_dir: './tb'"))
    result = migrate(source, "-o", out)
    assert result.returncode == 0, result.stderr
    added = [
        "  - type: TensorBoardMonitor  # replaces the monitor.tensorboard section\n",
        "    log_dir: './tb'\n",
        "    log_every: 1\n",
    ]
    removed = [line.replace("output_dir: ''  ", "output_dir: './tb'") for line in PYNATIVE_SECTION]
    assert changed_lines(source.read_text(), out.read_text()) == (removed, added)
    # After the list's last entry; monitor: keeps health_checkpoint and train_state.
    assert f"    param: 1\n{''.join(added)}\ncontext:\n" in out.read_text()
    assert "\nmonitor:\n  health_checkpoint:" in out.read_text()
    for expected in [
        "monitor.tensorboard (line 86): removed: MindFormers' PyNative writer (tensorboardX, from the last rank)",
        "callbacks (line 92): TensorBoardMonitor added at callbacks[2], in place of the section",
        "mapped: monitor.tensorboard.output_dir (line 88): -> log_dir: './tb' (runs in ./tb/<experiment>_<timestamp>/: "
        "a run folder per training)",
        "mapped: monitor.tensorboard.log_interval (line 89): -> log_every: 1",
        "no equivalent: monitor.tensorboard.queue_size (line 90): tensorboardX's write-out threshold",
    ]:
        assert f"  {expected}" in result.stdout, result.stdout


OLD_NAMES = """\
training:
  steps: 10

# monitoring
monitor:
  # TensorBoard
  tensorboard:
    tensorboard_dir: /tmp/tb   # MindFormers 2.0
    tensorboard_log_interval: 4
    tensorboard_queue_size: 100
    output_dir: ""

callbacks:
  - type: TensorBoardMonitor
"""


@pytest.mark.parametrize("monitor", [False, True], ids=["added", "already there"])
def test_mindformers_2_0_names_and_a_monitor_holding_only_the_section(tmp_path: Path, monitor: bool) -> None:
    source = tmp_path / "old_names.yaml"
    source.write_text(OLD_NAMES if monitor else OLD_NAMES.replace("  - type: TensorBoardMonitor\n", "  - type: X\n"))
    result = migrate(source, "--in-place")
    assert result.returncode == 0, result.stderr
    entry = (
        "  - type: TensorBoardMonitor\n"
        if monitor
        else (
            "  - type: X\n  - type: TensorBoardMonitor  # replaces the monitor.tensorboard section\n"
            "    log_dir: /tmp/tb\n    log_every: 4\n    aggregate_every: 12\n"
        )
    )
    assert source.read_text() == f"training:\n  steps: 10\n\ncallbacks:\n{entry}"  # monitor: held nothing else
    renamed = "MindFormers 2.0's name of {}, which nothing wrote from"
    expected = [
        "monitor.tensorboard (line 7): removed (and monitor:, which held nothing else): MindFormers' PyNative writer",
        f"no equivalent: monitor.tensorboard.tensorboard_queue_size (line 10): tensorboardX's write-out threshold; "
        f"TensorBoardMonitor's writer thread never holds up a step and writes out every flush_secs (5 s) "
        f"(tensorboard_queue_size: {renamed.format('queue_size')})",
    ]
    if monitor:
        expected.append(
            "no equivalent: monitor.tensorboard.tensorboard_dir (line 8): not carried: callbacks[0] is a "
            "TensorBoardMonitor; add log_dir: /tmp/tb to it to keep this"
        )
    else:
        expected += [
            "mapped: monitor.tensorboard.tensorboard_dir (line 8): -> log_dir: /tmp/tb (runs in "
            "/tmp/tb/<experiment>_<timestamp>/: a run folder per training) "
            f"(tensorboard_dir: {renamed.format('output_dir')})",
            "mapped: monitor.tensorboard.tensorboard_log_interval (line 9): -> log_every: 4 "
            f"(tensorboard_log_interval: {renamed.format('log_interval')})",
            "no equivalent: monitor.tensorboard.output_dir (line 11): not carried: log_dir is /tmp/tb, from "
            "tensorboard_dir",
        ]
    for line in expected:
        assert f"  {line}" in result.stdout, result.stdout


MOE_SECTION = "tensorboard:\n  tensorboard_dir: 'worker/tensorboard'\n  log_expert_load_to_tensorboard: True\n\n"
LOSS_PARTS = "train/loss_lm, train/loss_mtp, train/loss_aux and train/loss_indexer"


@pytest.mark.parametrize(
    ("top_level", "expected"),
    [
        (
            "use_legacy: False\nprint_separate_loss: True\n",
            f"mapped: print_separate_loss (line 16): -> {LOSS_PARTS}: MindFormers' lm-loss, mtp-loss, "
            "load-balancing-loss and indexer-loss, each as its contribution to train/loss",
        ),
        (
            "use_legacy: False\nprint_separate_loss: False\n",
            "note: print_separate_loss (line 16): kept as written: False turns off MindFormers' loss-part "
            "accumulation (its train wrapper registers the lm_loss, mtp_loss, aux_loss and indexer_loss "
            f"accumulators only while it is True, its default), so TensorBoardMonitor cannot write {LOSS_PARTS}; "
            "remove it or set it to True to have them",
        ),
        (
            "use_legacy: True\nprint_separate_loss: True\n",
            "no equivalent: print_separate_loss (line 16): legacy models (use_legacy not False) have no loss parts; "
            "MindFormers ignores it",
        ),
        ("use_legacy: False\n\n", None),  # a blank line in its place keeps the line numbers
    ],
    ids=["on", "off", "legacy", "absent"],
)
def test_master_moe_config_loss_parts_and_expert_load(tmp_path: Path, top_level: str, expected: str | None) -> None:
    text = QWEN3_MOE.read_text()
    assert text.count("\n# callbacks\ncallbacks:\n") == 1
    text = text.replace("\n# callbacks\ncallbacks:\n", f"\n{MOE_SECTION}# callbacks\ncallbacks:\n")
    source, out = tmp_path / "moe.yaml", tmp_path / "out.yaml"
    source.write_text(text.replace("use_legacy: False\nprint_separate_loss: True\n", top_level))
    result = migrate(source, "-o", out)
    assert result.returncode == 0, result.stderr
    # print_separate_loss stays as written, whatever it says: only the section and the new entry change.
    assert changed_lines(source.read_text(), out.read_text()) == (
        MOE_SECTION.splitlines(keepends=True),
        ["  - type: TensorBoardMonitor  # replaces the tensorboard: section\n", "    log_dir: 'worker/tensorboard'\n"],
    )
    assert (
        "  mapped: tensorboard.log_expert_load_to_tensorboard (line 198): -> always written in MoE models, every "
        "moe_every steps (default 10; 0 turns it off): moe/load, the moe dashboard's layer x expert load (for "
        "expert_load/<router>'s ep_<i> runs), and per layer moe/<layer>/max_violation, min_load, dead_experts "
        "and bias_range\n"
    ) in result.stdout
    lines = [line for line in result.stdout.splitlines() if "print_separate_loss" in line]
    assert lines == ([f"  {expected}"] if expected else []), result.stdout


@pytest.mark.process
def test_the_results_pass_mftb_validate(tmp_path: Path) -> None:
    """`mftb validate` warns about the section beside a monitor; every migrated file is valid."""
    sources = [QWEN3]
    for config in BUNDLED:
        sources.append(tmp_path / f"with_section_{config.name}")
        sources[-1].write_text(with_section(config.read_text()))
    sources.append(tmp_path / "moe.yaml")
    sources[-1].write_text(QWEN3_MOE.read_text().replace("\n# callbacks\n", f"\n{MOE_SECTION}# callbacks\n"))
    result = subprocess.run([MFTB, "validate", str(sources[1])], env=subprocess_env(), capture_output=True, text=True)
    assert result.returncode == 0 and "warning: tensorboard (line " in result.stdout, result.stdout
    outputs = []
    for index, source in enumerate(sources):
        outputs.append(tmp_path / f"out{index}.yaml")
        assert migrate(source, "-o", outputs[-1]).returncode == 0
    in_place = tmp_path / "in_place.yaml"
    shutil.copy(QWEN3, in_place)
    assert migrate(in_place, "--in-place").returncode == 0
    assert in_place.read_bytes() == outputs[0].read_bytes()
    result = subprocess.run(
        [MFTB, "validate", *map(str, [*outputs, in_place])], env=subprocess_env(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": OK (") == len(outputs) + 1 and "warning:" not in result.stdout, result.stdout


# -- hand-written entries ---------------------------------------------------------------------------
ARTICLES = """\
# an article's snippet
callbacks:
  - histogram_interval: 2      # every 2 epochs
    # the articles' spelling
    type: "TensorBoard"
    log_dir: ./tb_logs/llm_finetune
    update_time: 60
    profile: 0
    experiment: llm   # ours too
  - {type: TensorBoard, log_dir: ./tb_logs/other, update_time: 3}
runner_config:
  epochs: 2
"""
ARTICLES_MIGRATED = """\
# an article's snippet
callbacks:
  # the articles' spelling
  - type: "TensorBoardMonitor"
    log_dir: ./tb_logs/llm_finetune
    experiment: llm   # ours too
  - type: HistogramMonitor
    every_steps: 0
    every_epochs: 2
  - type: TensorBoardMonitor
    log_dir: ./tb_logs/other
runner_config:
  epochs: 2
"""


def test_type_tensorboard_entries_keep_their_comments(tmp_path: Path) -> None:
    source = tmp_path / "articles.yaml"
    source.write_text(ARTICLES)
    result = migrate(source, "--in-place")
    assert result.returncode == 0, result.stderr
    assert source.read_text() == ARTICLES_MIGRATED
    for expected in [
        "callbacks[0].type (line 5): type: TensorBoard -> TensorBoardMonitor, its other keys kept as they are",
        "mapped: callbacks[0].histogram_interval (line 3): -> a HistogramMonitor entry after it, every_epochs: 2",
        "no equivalent: callbacks[0].update_time (line 7): update_time ignored: it is how often the viewer reloads; "
        "use `mftb tensorboard LOGDIR --reload_interval 60`",
        "no equivalent: callbacks[0].profile (line 8): profile ignored: profiling is MindSpore's Profiler",
        "no equivalent: callbacks[1].update_time (line 10): update_time ignored",
    ]:
        assert f"  {expected}" in result.stdout, result.stdout
    assert validate_ours(source) == []


SUMMARY = """\
callbacks:
  # MindInsight, from an article
  - summary_collector:
      summary_dir: './summary_dir'   # where the summaries went
      collect_freq: 3
      collect_specified_data: {collect_graph: True, histogram_regular: 'layers'}
      export_options: null
eval_callbacks:
  - type: SummaryCollector
    summary_dir: /tmp/eval_summary
    keep_default_action: False
"""
SUMMARY_MIGRATED = """\
callbacks:
  # MindInsight, from an article
  - type: TensorBoardMonitor
    log_dir: './summary_dir'
    log_every: 3
    aggregate_every: 12
  - type: HistogramMonitor
    every_steps: 3
eval_callbacks:
"""


def test_summary_collector_entries_become_monitor_entries(tmp_path: Path) -> None:
    source = tmp_path / "summary.yaml"
    source.write_text(SUMMARY)
    result = migrate(source, "-o", tmp_path / "out.yaml")
    assert result.returncode == 0, result.stderr
    out = (tmp_path / "out.yaml").read_text()
    assert out == SUMMARY_MIGRATED  # every entry of eval_callbacks gone: the key stays, empty
    for expected in [
        "callbacks[0] (line 3): SummaryCollector entry replaced by TensorBoardMonitor + HistogramMonitor",
        "mapped: callbacks[0].summary_collector.summary_dir (line 4): -> TensorBoardMonitor log_dir",
        "mapped: callbacks[0].summary_collector.collect_freq (line 5): -> TensorBoardMonitor log_every",
        "mapped: callbacks[0].summary_collector.collect_specified_data.collect_graph (line 6): -> log_graph",
        "no equivalent: callbacks[0].summary_collector.collect_specified_data.histogram_regular (line 6): a regular "
        "expression; HistogramMonitor's include takes shell-style patterns",
        "no equivalent: callbacks[0].summary_collector.export_options (line 7): no TensorBoardMonitor equivalent",
        "eval_callbacks[0] (line 9): SummaryCollector entry replaced by nothing (callbacks[0] writes the runs)",
        "no equivalent: eval_callbacks[0].summary_dir (line 10): not carried: callbacks[0] is a TensorBoardMonitor",
    ]:
        assert f"  {expected}" in result.stdout, result.stdout
    assert validate_ours(tmp_path / "out.yaml") == []


@pytest.mark.parametrize("callbacks", ["", "callbacks:\n", "callbacks: []\n"], ids=["none", "empty", "[]"])
def test_a_section_without_callbacks_gets_a_list(tmp_path: Path, callbacks: str) -> None:
    source = tmp_path / "bare.yaml"
    source.write_text(f"seed: 0\n{callbacks}tensorboard:\n  tensorboard_dir: /tmp/tb\n  tensorboard_log_interval: 4\n")
    assert migrate(source, "--in-place").returncode == 0
    assert source.read_text() == (
        "seed: 0\ncallbacks:\n  - type: TensorBoardMonitor  # replaces the tensorboard: section\n    log_dir: /tmp/tb\n"
        "    log_every: 4\n    aggregate_every: 12\n"
    )
    assert validate_ours(source) == []


def test_windows_line_endings_stay(tmp_path: Path) -> None:
    source = tmp_path / "crlf.yaml"
    source.write_bytes(b"seed: 0\r\ntensorboard:\r\n  tensorboard_dir: tb\r\ncallbacks:\r\n  - type: TensorBoard\r\n")
    assert migrate(source, "--in-place").returncode == 0
    assert source.read_bytes() == b"seed: 0\r\ncallbacks:\r\n  - type: TensorBoardMonitor\r\n"


def test_a_section_that_wrote_nothing_is_removed_without_a_monitor(tmp_path: Path) -> None:
    source = tmp_path / "off.yaml"
    source.write_text("tensorboard:\n  tensorboard_on: False\n  tensorboard_dir: tb\ncallbacks:\n  - type: X\n")
    result = migrate(source, "--in-place")
    assert result.returncode == 0, result.stderr
    assert source.read_text() == "callbacks:\n  - type: X\n"
    assert "tensorboard (line 1): removed; it wrote nothing" in result.stdout


# -- mistakes: a clear message, exit status 2, no traceback, nothing written -------------------------
@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, [], "file not found: {config}"),
        (b"\x00\x01binary", [], "{config} is a binary file (it contains NUL bytes), not YAML text"),
        (b"callbacks: [\n", [], "YAML syntax error (line 2, column 1)"),
        (b"- a\n- b\n", [], "{config}: expected a MindFormers config (a YAML mapping at the top level)"),
        (
            b"callbacks:\n  - type: MFLossMonitor\n",
            [],
            "{config}: nothing to migrate: no tensorboard: or monitor.tensorboard section, no type: TensorBoard "
            "entry and no SummaryCollector entry (summary_collector:, type: SummaryCollector or SummaryMonitor)",
        ),
        (SECTION.encode(), ["-o", "{out}", "--in-place"], "give either -o OUT or --in-place, not both"),
        (
            b"callbacks: [{type: TensorBoard, log_dir: tb}]\n",
            ["-o", "{out}"],
            "{config}: callbacks (line 1) is not a block list; write it as one ('- type: ...' per entry) and run again",
        ),
        (
            b"callbacks: &all\n  - type: TensorBoard\n    log_dir: tb\neval_callbacks: *all\n",
            [],
            "{config}: eval_callbacks (line 4) is an alias of a list written elsewhere; write the list out under it",
        ),
        (
            b"base: &b\n  log_dir: tb\ncallbacks:\n  - type: TensorBoard\n    <<: *b\n",
            [],
            "{config}: callbacks[0] (line 4) takes keys from a merge key (<<); write them out in the entry",
        ),
    ],
    ids=["missing", "binary", "syntax", "not a mapping", "nothing", "both outputs", "flow list", "alias", "merge"],
)
def test_mistakes_exit_2_with_a_message(tmp_path: Path, content: bytes | None, args: list[str], message: str) -> None:
    config, out = tmp_path / "config.yaml", tmp_path / "out.yaml"
    if content is not None:
        config.write_bytes(content)
    result = migrate(config, *(arg.format(out=out) for arg in args))
    assert result.returncode == 2
    assert result.stderr.startswith(f"mftb migrate: error: {message.format(config=config)}"), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not out.exists()
    assert content is None or config.read_bytes() == content


def test_the_docs_name_every_tag_the_builtin_writer_wrote() -> None:
    """Each tag MindFormers' writer writes has its row in docs/migration.md, each "vs samples" twin its tag's."""
    spec = importlib.util.find_spec("mindformers")
    if spec is None or spec.origin is None:
        pytest.skip("no MindFormers installed")
    source = (Path(spec.origin).parent / "core" / "callback" / "callback.py").read_text()
    calls = re.findall(r"\.add_scalars?\(\s*f?(['\"])(.+?)\1", source)
    tags = {tag.replace("{layer}", "<router>") for _, tag in calls}
    readme = documentation()
    section = readme[readme.index("## Coming from MindFormers' `tensorboard:` section") :]
    rows = {row.split(" | ")[0].strip("| ") for row in section[: section.index("\n\n`train/loss_lm`")].splitlines()}
    twins = next(row for row in rows if row.startswith("`<tag>_vs_samples` (MindFormers names them `<tag> vs samples`"))
    assert {"loss", "lm-loss", "load-balancing-loss", "expert_load/<router>", "loss-scale vs samples"} <= tags
    assert any(row.startswith("a text per top-level config key") for row in rows)  # utils/tensorboard.py's add_text
    for tag in tags:
        if tag.endswith(" vs samples"):
            assert f"`{tag.removesuffix(' vs samples')}`" in twins, tag
        else:
            assert any(row == f"`{tag}`" or row.startswith(f"`{tag}`,") for row in rows), tag


def test_mftb_migrate_needs_no_mindspore(tmp_path: Path) -> None:
    code = (
        "import sys; from mindformers_tbplugin.cli import main; "
        f"status = main(['migrate', {str(QWEN3)!r}, '-o', {str(tmp_path / 'out.yaml')!r}]); "
        "assert status == 0 and 'mindspore' not in sys.modules and 'mindformers' not in sys.modules"
    )
    result = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_writing_keeps_links_pipes_and_file_modes(tmp_path: Path) -> None:
    real, link = tmp_path / "real.yaml", tmp_path / "link.yaml"
    shutil.copy(QWEN3, real)
    link.symlink_to(real)
    assert migrate(link, "--in-place").returncode == 0
    assert link.is_symlink() and "\ntensorboard:\n" not in real.read_text()
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_bytes()))
    reader.start()
    result = migrate(QWEN3, "-o", pipe)
    reader.join(timeout=60)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(pipe.stat().st_mode) and received == [real.read_bytes()]
    fresh, reference = tmp_path / "fresh.yaml", tmp_path / "reference.yaml"
    reference.write_text("")
    assert migrate(QWEN3, "-o", fresh).returncode == 0
    assert stat.S_IMODE(fresh.stat().st_mode) == stat.S_IMODE(reference.stat().st_mode)  # as open() makes files


def test_an_output_folder_that_does_not_exist_is_a_clear_error(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "out.yaml"
    result = migrate(QWEN3, "-o", out)
    assert result.returncode == 2 and not out.parent.exists()
    assert result.stderr == f"mftb migrate: error: cannot write {out}: No such file or directory\n"
