"""MindFormers' mcore models (use_legacy: False) trained for real on the CPU: tiny DeepSeek-V3 (MLA,
MoE with expert-bias routers, multi-token prediction), Qwen3-MoE (gbs_aux_loss routers) and dense
Qwen3, from the bundled configs/tiny/ files, through `mftb train` and MindFormers' own
run_mindformer.py (r1.9.0). The Ascend-only kernels these models build run as CPU stand-ins
(scripts/cpu/mcore_cpu_patch.py: no NPU here); nothing else is replaced. MindFormers' own TensorBoard
writer runs beside the monitor where its values are the reference (expert_load, FLOPs)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import HELPERS, MFTB, REPO, read_scalars, run_dirs, run_mindformer_script, subprocess_env
from tb_helpers import plain_tensorboard, served_json, wait_for
from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator
from tensorboard.util import tensor_util

from mindformers_tbplugin.pipeline.expert_records import ExpertLayout
from mindformers_tbplugin.pipeline.rank_records import CHANNELS, RankLayout

pytestmark = [pytest.mark.process, pytest.mark.compat]  # in every MindSpore/MindFormers environment too
TRAIN_MCORE = REPO / "scripts" / "cpu" / "train_mcore.py"
# MFLossMonitor's line; mcore MoE/MTP models print their loss parts between loss and per_step_time.
MF_LINE = re.compile(r"step:\[\s*(\d+)/\s*\d+\], loss:\[([0-9.]+)/")
MF_FLOPS = re.compile(r"Full model flops calculated: (\d+)")
COLLECTIVES = re.compile(r"TensorBoardMonitor: (\d+) aggregation interval\(s\), \d+ collective\(s\) in all")
PARTS = ("train/loss_lm", "train/loss_mtp", "train/loss_aux", "train/loss_indexer")
STEPS = 16  # 64 samples, batch 4


def _tracks_attention_logits() -> bool:
    """Whether this MindFormers' mcore attention can track its max attention logit (1.9 on)."""
    import importlib.util

    spec = importlib.util.find_spec("mindformers")
    if spec is None or not spec.submodule_search_locations:
        return False
    source = Path(next(iter(spec.submodule_search_locations)), "parallel_core", "transformer_config.py")
    return source.is_file() and "track_max_attention_logit" in source.read_text()


TRACKS_ATTENTION_LOGITS = _tracks_attention_logits()


@pytest.fixture(scope="session")
def mcore_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcore_data") / "mcore_xy.mindrecord"
    command = [MFTB, "make-data", "--output", str(path), "--num_samples", "1024", "--vocab_size", "1000", "--labels"]
    subprocess.run(command, check=True, env=subprocess_env(), capture_output=True)
    return path


def mcore_config(model: str, folder: Path, data: Path, samples: int = 64, **monitor: object) -> dict:
    """configs/tiny/<model>_tiny_cpu.yaml with its paths and length changed for a test."""
    config = yaml.safe_load((REPO / "configs" / "tiny" / f"{model}_tiny_cpu.yaml").read_text())
    config["output_dir"] = str(folder / "output")
    config["train_dataset"]["data_loader"]["dataset_dir"] = str(data)
    config["train_dataset"]["data_loader"]["num_samples"] = samples
    config["train_dataset_task"]["dataset_config"] = config["train_dataset"]
    for entry in config["callbacks"]:
        if entry["type"] == "TensorBoardMonitor":
            entry.update({"log_dir": str(folder / "tb"), **monitor})
        if entry["type"] == "AlertMonitor":
            entry["sinks"] = ["log", {"jsonl": str(folder / "alerts.jsonl")}]
    return config


def train_mcore(config: dict, folder: Path, *args: str, entry: Path | None = None) -> str:
    """Trains ``config`` through `mftb train` (or ``entry``), with the CPU stand-ins; returns the output."""
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    command = [sys.executable, str(TRAIN_MCORE)] + (["--entry", str(entry)] if entry else [])
    loads = str(folder / "router_loads.jsonl")
    env = subprocess_env(PYTHONPATH=str(HELPERS), REGISTER_PATH=str(HELPERS), MFTB_TEST_ROUTER_LOADS=loads)
    result = subprocess.run(
        [*command, "--config", str(path), *args], cwd=folder, env=env, capture_output=True, text=True, timeout=900
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    return output


def mf_losses(output: str) -> dict[int, float]:
    return {int(step): float(loss) for step, loss in MF_LINE.findall(output)}


def loads_records(run_dir: Path) -> tuple[ExpertLayout, dict[int, np.ndarray]]:
    accumulator = EventAccumulator(str(run_dir), size_guidance={TENSORS: 0})
    accumulator.Reload()
    events = accumulator.Tensors("moe/load")
    content = accumulator.PluginTagToContent("moe")["moe/load"]
    return ExpertLayout.from_content(content), {e.step: tensor_util.make_ndarray(e.tensor_proto) for e in events}


def hparams(run_dir: Path) -> dict[str, object]:
    from tensorboard.plugins.hparams import plugin_data_pb2

    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    content = accumulator.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {
        name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
        for name, value in start.hparams.items()
    }


def mf_expert_loads(mf_tb: Path) -> dict[str, dict[int, list[float]]]:
    """MindFormers' own ``expert_load/<router>`` scalars (one sub-run per expert): {router: {step: loads}}."""
    loads: dict[str, dict[int, list[float]]] = {}
    for router in sorted((mf_tb / "rank_0" / "expert_load").iterdir()):
        experts = sorted(router.iterdir(), key=lambda p: int(p.name.split("_")[1]))
        series = [dict(next(iter(read_scalars(expert).values()))) for expert in experts]
        loads[router.name] = {step: [s[step] for s in series] for step in series[0]}
    return loads


# -- DeepSeek-V3: MoE with expert bias + MTP ------------------------------------------------------------
# MindFormers' own writer as its documentation switches it on, every key of the section set.
MF_SECTION = {
    "tensorboard_dir": "./tb",
    "tensorboard_log_interval": 1,
    "log_loss_scale_to_tensorboard": True,
    "log_timers_to_tensorboard": True,
    "log_expert_load_to_tensorboard": True,
}


@pytest.fixture(scope="module")
def deepseek3_original(tmp_path_factory: pytest.TempPathFactory, mcore_data: Path) -> tuple[Path, str]:
    """The tiny DeepSeek-V3 logging through MindFormers' `tensorboard:` section: the bundled config with its
    monitors removed and the section added. MindFormers' writer writes ./tb/rank_0 under the folder."""
    folder = tmp_path_factory.mktemp("deepseek3_original")
    config = mcore_config("deepseek3", folder, mcore_data)
    config["callbacks"] = [e for e in config["callbacks"] if e["type"] not in ("TensorBoardMonitor", "AlertMonitor")]
    config["tensorboard"] = dict(MF_SECTION)
    return folder, train_mcore(config, folder)


@pytest.fixture(scope="module")
def deepseek3(tmp_path_factory: pytest.TempPathFactory, deepseek3_original: tuple[Path, str]) -> tuple[Path, str]:
    """The original config rewritten by `mftb migrate` and trained: the entry it wrote (log_dir ./tb, so the
    runs go to ./tb under the folder) gets the bundled config's monitor options back (every step's loads, the
    norms within the run), and the AlertMonitor with its default rules follows it; RouterProbe records what
    MindFormers' accumulators held at each step (router_loads.jsonl)."""
    original, _ = deepseek3_original
    folder = tmp_path_factory.mktemp("deepseek3")
    migrated = folder / "migrated.yaml"
    result = subprocess.run(
        [MFTB, "migrate", str(original / "config.yaml"), "-o", str(migrated)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(migrated.read_text())
    assert "tensorboard" not in config
    (entry,) = [entry for entry in config["callbacks"] if entry["type"] == "TensorBoardMonitor"]
    assert entry == {"type": "TensorBoardMonitor", "log_dir": "./tb", "log_every": 1}
    entry.update(experiment="deepseek3_tiny", moe_every=1, param_norm_every=16, optimizer_state_every=16)
    entry.update(grad_hist_every=16)
    config["output_dir"] = str(folder / "output")
    config["callbacks"].append({"type": "AlertMonitor", "sinks": ["log", {"jsonl": str(folder / "alerts.jsonl")}]})
    config["callbacks"].append({"type": "RouterProbe", "auto_register": "router_hooks.RouterProbe"})
    tracking: list[str] = []
    if TRACKS_ATTENTION_LOGITS:  # MindFormers' own switch; nothing resets it (no Muon, no MaxLogitsMonitor)
        tracking = ["--model.model_config.track_max_attention_logit", "True"]
        entry.update(attention_logit_every=4, extra_metrics=["custom_metrics_helpers:mindformers_attention_logit_max"])
    return folder, train_mcore(config, folder, *tracking)


@pytest.mark.skipif(not TRACKS_ATTENTION_LOGITS, reason="this MindFormers' attention keeps no max logit")
def test_deepseek3_attention_logit_max_is_mindformers_own(deepseek3: tuple[Path, str]) -> None:
    """attention_logit_max every 4 steps against MindFormers' get_max_attention_logit at the same steps
    (what TrainingStateMonitor's max_attention_logit_format writes), read by an extra_metrics hook; the
    monitor zeroes the running max at those steps' begin, so each value is its step's own."""
    folder, output = deepseek3
    scalars = read_scalars(run_dirs(folder / "tb")[0])
    layers = {tag for tag in scalars if tag.startswith("attention_logit_max/")}
    assert layers == {
        f"attention_logit_max/{group}" for group in ("layers.0", "layers.1", "layers.2", "mtp.layers.0", "all")
    }
    for ours, theirs in (
        ("all", "custom/mf_attention_logit_max"),
        ("layers.1", "custom/mf_attention_logit_max_layers.1"),
    ):
        assert [step for step, _ in scalars[f"attention_logit_max/{ours}"]] == [4, 8, 12, 16]
        assert scalars[f"attention_logit_max/{ours}"] == scalars[theirs]
    assert all(value > 0 for _, value in scalars["attention_logit_max/all"])
    assert "max attention logit of 4 layers x " in output and "the monitor zeroes it at each read step" in output


def probed(folder: Path) -> dict[int, dict]:
    """RouterProbe's records by step: what MindFormers' accumulators held before its callbacks zeroed them."""
    records = [json.loads(line) for line in (folder / "router_loads.jsonl").read_text().splitlines()]
    return {record["step"]: record for record in records}


def test_deepseek3_loss_parts_are_mindformers_own_at_every_step(deepseek3: tuple[Path, str]) -> None:
    """Each part against what MindFormers' parameter_register held for it at that step (RouterProbe, read
    ahead of MindFormers' callbacks; the aux loss times its get_aux_loss_scale), and the parts' sum against
    the loss MFLossMonitor printed."""
    folder, output = deepseek3
    scalars = read_scalars(run_dirs(folder / "tb")[0])
    loss = dict(scalars["train/loss"])
    assert sorted(loss) == list(range(1, STEPS + 1))
    assert "train/loss_indexer" not in scalars  # no sparse-attention indexer in this model
    parts = {tag: dict(scalars[tag]) for tag in PARTS[:3]}
    theirs = probed(folder)
    assert sorted(theirs) == sorted(loss)
    for step, total in loss.items():
        for tag, name in zip(PARTS[:3], ("lm_loss", "mtp_loss", "aux_loss"), strict=True):
            assert parts[tag][step] == pytest.approx(theirs[step]["parts"][name], rel=1e-6, abs=1e-9), (tag, step)
        assert sum(part[step] for part in parts.values()) == pytest.approx(total, abs=2e-6), step
    printed = mf_losses(output)
    assert all(abs(loss[step] - printed[step]) <= 1e-6 for step in loss)
    # the MTP loss comes already weighted (mtp_loss_factor 0.3), the aux loss is small but not zero
    assert all(0 < value < 1e-2 for value in parts["train/loss_aux"].values())
    assert all(value > 1.0 for value in parts["train/loss_mtp"].values())


def test_deepseek3_max_violation_equals_mindformers_own_expert_load(
    deepseek3: tuple[Path, str], deepseek3_original: tuple[Path, str]
) -> None:
    """Against what MindFormers' own writer wrote in the original config's training."""
    folder, _ = deepseek3
    run_dir = run_dirs(folder / "tb")[0]
    scalars = read_scalars(run_dir)
    mf_loads = mf_expert_loads(deepseek3_original[0] / "tb")
    ours = {"decoder.layers.1.mlp.router": "layers.1", "decoder.layers.2.mlp.router": "layers.2"}
    ours["mtp.layers.0.transformer_layer.mlp.router"] = "mtp.layers.0"
    assert sorted(mf_loads) == sorted(ours)
    layout, records = loads_records(run_dir)
    assert layout.groups == ("layers.1", "layers.2", "mtp.layers.0") and layout.channels == ("load", "bias")
    assert sorted(records) == list(range(1, STEPS + 1))
    for router, group in ours.items():
        violation = dict(scalars[f"moe/{group}/max_violation"])
        assert sorted(violation) == sorted(mf_loads[router]) == list(range(1, STEPS + 1))
        for step, loads in mf_loads[router].items():
            expected = max(loads) / np.mean(loads) - 1
            assert violation[step] == pytest.approx(expected, abs=1e-6), (group, step)
            row = records[step][0, layout.groups.index(group)].astype(np.float64)
            np.testing.assert_allclose(row, np.array(loads) / np.mean(loads), rtol=2e-3)
    assert {dict(scalars["moe/dead_experts"])[step] for step in range(1, STEPS + 1)} == {0.0}
    # the expert bias each router held at the step's end, before TopkBiasBalanceCallback updated it
    theirs = probed(folder)
    for router, group in ours.items():
        name = next(name for name in theirs[1]["bias"] if name.startswith(router))
        bias_range = dict(scalars[f"moe/{group}/bias_range"])
        assert sorted(bias_range) == list(range(1, STEPS + 1))
        for step, record in theirs.items():
            expected = max(record["bias"][name]) - min(record["bias"][name])
            assert bias_range[step] == pytest.approx(expected, rel=1e-5, abs=1e-9), (group, step)
    assert max(bias_range.values()) > 0  # the bias moved


def mindformers_flops(output: str) -> int | None:
    """What MFLossMonitor logged as an mcore model's FLOPs per step; None in MindFormers 1.7-1.8, which have
    no formula for them (the monitor then estimates, and says so)."""
    found = {int(value) for value in MF_FLOPS.findall(output)}
    if not found:
        assert "model FLOPs per step" in output and "(estimate: 6 x tokens" in output
        return None
    (flops,) = found
    return flops


def test_deepseek3_model_flops_are_mindformers_own(
    deepseek3: tuple[Path, str], deepseek3_original: tuple[Path, str]
) -> None:
    folder, output = deepseek3
    run_dir = run_dirs(folder / "tb")[0]
    mf_flops = mindformers_flops(output)
    if mf_flops is None:
        pytest.skip(
            "this MindFormers has no FLOPs formula for mcore models: the estimate is checked in test_model_flops"
        )
    assert hparams(run_dir)["model_flops_per_step"] == mf_flops  # 2.308e8 at global batch 4
    scalars = read_scalars(run_dir)
    tflops, step_ms = dict(scalars["perf/model_tflops_per_device"]), dict(scalars["perf/step_time_ms"])
    for step in range(2, STEPS + 1):  # TFLOPS x step time = FLOPs per step on the one device
        assert tflops[step] * 1e12 * step_ms[step] / 1e3 == pytest.approx(mf_flops, rel=1e-4)
    # MindFormers' model-flops-throughput-per-npu over its own step time (whole ms): the same FLOPs
    mf_run = read_scalars(deepseek3_original[0] / "tb" / "rank_0")
    mf_tflops, mf_ms = dict(mf_run["model-flops-throughput-per-npu"]), dict(mf_run["iteration-time"])
    for step in range(2, STEPS + 1):
        assert mf_tflops[step] * 1e12 * mf_ms[step] / 1e3 == pytest.approx(mf_flops, rel=0.03)
    assert "perf/mfu" not in scalars  # peak_tflops: auto finds no peak on a CPU


def test_deepseek3_hparams_name_its_layers_experts_and_mtp(deepseek3: tuple[Path, str]) -> None:
    folder, _ = deepseek3
    values = hparams(run_dirs(folder / "tb")[0])
    assert values["num_layers"] == 3 and values["num_heads"] == 4 and values["hidden_size"] == 64
    assert values["num_experts"] == 4 and values["moe_top_k"] == 2 and values["num_shared_experts"] == 1
    assert values["mtp_depth"] == 1 and values["moe_aux_loss_coeff"] == pytest.approx(1e-4)
    assert values["router"] == "sigmoid + expert bias, seq_aux_loss"


def test_a_healthy_deepseek3_run_raises_no_routing_alert_and_writes_no_incident(deepseek3: tuple[Path, str]) -> None:
    folder, output = deepseek3
    assert "expert_collapse" in output  # the default rules watch the routing ...
    alerts = folder / "alerts.jsonl"
    fired = [json.loads(line) for line in alerts.read_text().splitlines()] if alerts.exists() else []
    # ... and stay quiet on a healthy run; tokens per second follow the machine's load, not the training
    assert {alert["rule"] for alert in fired} <= {"throughput_drop"}
    printed = subprocess.run([MFTB, "incident", str(folder / "tb")], capture_output=True, text=True)
    if not fired:
        assert printed.returncode == 2 and "no incident under" in printed.stderr  # the demo's config: no incident
        return
    # a loaded machine's throughput_drop: its incidents, and no other
    shown = {int(step) for step in re.findall(r"^## .*, step (\d+)$", printed.stdout, flags=re.MULTILINE)}
    assert printed.returncode == 0 and shown == {alert["step"] for alert in fired if alert.get("incident")}


# The tiny DeepSeek-V3's routers, by MindFormers' name, as the moe records name their layers.
DEEPSEEK3_ROUTERS = {
    "layers.1": "decoder.layers.1.mlp.router",
    "layers.2": "decoder.layers.2.mlp.router",
    "mtp.layers.0": "mtp.layers.0.transformer_layer.mlp.router",
}


def test_the_moe_dashboard_serves_the_deepseek3_runs_loads(
    deepseek3: tuple[Path, str], deepseek3_original: tuple[Path, str]
) -> None:
    """The moe plugin's routes in a real TensorBoard over the run: every step's layer x expert load against
    the loads MindFormers' own writer wrote in the original config's training (over their mean), the bias
    against the routers' own (RouterProbe), MaxVio, least load and dead experts against the scalars written
    beside the records, the strip over all records, and the worst layers with their busiest experts."""
    folder, _ = deepseek3
    run_dir = run_dirs(folder / "tb")[0]
    name = run_dir.name
    scalars = {tag: dict(points) for tag, points in read_scalars(run_dir).items()}
    mf_loads = mf_expert_loads(deepseek3_original[0] / "tb")
    theirs = probed(folder)
    steps = list(range(1, STEPS + 1))

    def relative(group: str, step: int) -> np.ndarray:
        loads = np.array(mf_loads[DEEPSEEK3_ROUTERS[group]][step])
        return loads / loads.mean()

    with plain_tensorboard(folder / "tb") as port:
        (run,) = wait_for(lambda: served_json(port, "/data/plugin/moe/runs"))
        groups = list(DEEPSEEK3_ROUTERS)
        assert (run["run"], run["records"], run["first_step"], run["last_step"]) == (name, STEPS, 1, STEPS)
        assert (run["groups"], run["experts"], run["top_k"]) == (groups, 4, 2)
        assert run["routers"] == ["expert_bias"] * 3 and run["channels"] == ["load", "bias"]
        for step in steps:
            shown = served_json(port, f"/data/plugin/moe/record?run={name}&step={step}")
            assert (shown["step"], shown["index"]) == (step, step - 1)
            for row, group in enumerate(groups):
                np.testing.assert_allclose(shown["load"][row], relative(group, step), atol=2e-3)
                tags = {key: scalars[f"moe/{group}/{key}"][step] for key in ("max_violation", "min_load")}
                assert shown["max_violation"][row] == pytest.approx(tags["max_violation"], abs=2e-3), (group, step)
                assert shown["min_load"][row] == pytest.approx(tags["min_load"], abs=2e-3), (group, step)
                assert shown["dead"][row] == scalars[f"moe/{group}/dead_experts"][step] == 0
                bias = np.array(
                    next(b for r, b in theirs[step]["bias"].items() if r.startswith(DEEPSEEK3_ROUTERS[group]))
                )
                # 3 significant digits of the largest, stored as float16 (spacing 6e-8 below its normal range)
                np.testing.assert_allclose(shown["bias"][row], bias, atol=max(1e-2 * np.abs(bias).max(), 6e-8))
        strip = served_json(port, f"/data/plugin/moe/strip?run={name}&max_steps={STEPS}")
        assert (strip["rows"], strip["columns"], strip["step_block"]) == (3, STEPS, 1)
        assert strip["record_steps"] == steps
        for row, group in enumerate(groups):
            expected = [scalars[f"moe/{group}/max_violation"][step] for step in steps]
            np.testing.assert_allclose(strip["max_violation"][row], expected, atol=2e-3)
            assert strip["dead"][row] == [0] * STEPS
        worst = served_json(port, f"/data/plugin/moe/worst?run={name}&step={STEPS}")
        # every layer, worst balanced first (no dead experts here: by MaxVio, as the record holds it)
        assert sorted(entry["layer"] for entry in worst["at_step"]) == sorted(groups)
        shown = [entry["max_violation"] for entry in worst["at_step"]]
        assert shown == sorted(shown, reverse=True), worst["at_step"]
        for entry in worst["at_step"]:
            expected = scalars[f"moe/{entry['layer']}/max_violation"][STEPS]
            assert entry["max_violation"] == pytest.approx(expected, abs=2e-3) and entry["dead_count"] == 0
            loads = relative(entry["layer"], STEPS)
            busiest = [int(e) for e in np.argsort(-loads, kind="stable")[:3]]
            assert [b["expert"] for b in entry["busiest"]] == busiest, (entry, loads)
            assert [b["load"] for b in entry["busiest"]] == pytest.approx(loads[busiest].tolist(), abs=2e-3)
        means = {group: np.mean([scalars[f"moe/{group}/max_violation"][step] for step in steps]) for group in groups}
        over_run = {entry["layer"]: entry for entry in worst["over_run"]}
        for group in groups:
            assert over_run[group]["mean_max_violation"] == pytest.approx(means[group], abs=2e-3)
            assert over_run[group]["records_with_dead"] == 0


def test_mflossmonitor_prints_the_same_losses_without_the_monitor(
    deepseek3: tuple[Path, str], deepseek3_original: tuple[Path, str]
) -> None:
    """The monitor reads the accumulators ahead of MindFormers' callbacks and changes nothing: the original
    config's training (no monitor) printed the same losses, and its writer the same expert loads as the moe
    records hold (test_deepseek3_max_violation_equals_mindformers_own_expert_load)."""
    assert mf_losses(deepseek3_original[1]) == mf_losses(deepseek3[1])
    assert len(mf_losses(deepseek3_original[1])) == STEPS


# MindFormers' writer's scalars (MFLossMonitor's) -> what TensorBoardMonitor writes for them, as
# docs/migration.md's table says. ``same``: the same value at every step; ``steps``: a value at the same
# steps (timings, which differ between two trainings; the loss parts, which MindFormers' writer reads as 0
# on a CPU: they are checked against MindFormers' accumulators in test_deepseek3_loss_parts_*).
MIGRATED_SCALARS = {
    "loss": ("train/loss", "same"),
    "learning-rate": ("train/lr", "same"),
    "grad-norm": ("train/grad_norm", "same"),
    "loss-scale": ("train/loss_scale", "same"),
    "iteration-time": ("perf/step_time_ms", "steps"),
    "throughput": ("perf/samples_per_s", "steps"),
    "B-samples-per-day": ("perf/samples_per_s", "steps"),
    "model-flops-throughput-per-npu": ("perf/model_tflops_per_device", "steps"),
    "lm-loss": ("train/loss_lm", "steps"),
    "mtp-loss": ("train/loss_mtp", "steps"),
    "load-balancing-loss": ("train/loss_aux", "steps"),
}


def _not_written_by_this_release() -> set[str]:
    """MindFormers' writer's tags the installed release does not write: its model-FLOPs throughput comes with
    the mcore FLOPs formula, from 1.9 on (MFLossMonitor's _calculate_flops_mcore)."""
    from mindformers_tbplugin.framework import versions

    major, minor = (int(part) for part in (versions.find("mindformers").version or "1.9").split(".")[:2])
    return {"model-flops-throughput-per-npu"} if (major, minor) < (1, 9) else set()


def test_the_migrated_config_writes_what_the_sections_writer_wrote(
    deepseek3: tuple[Path, str], deepseek3_original: tuple[Path, str]
) -> None:
    """Every tag MindFormers' writer wrote in the original config's training, against the migrated config's
    run, tag by tag as docs/migration.md maps them: the same values where the two trainings compute the same
    (they are deterministic: the same printed losses), the same steps where they time or cannot read them,
    the samples axes from the steps and the global batch, the expert loads as the moe records, the config
    texts in run/config; and every MindFormers tag in the page's table."""
    original, _ = deepseek3_original
    theirs = read_scalars(original / "tb" / "rank_0")
    run_dir = run_dirs(deepseek3[0] / "tb")[0]
    ours = {tag: dict(points) for tag, points in read_scalars(run_dir).items()}
    batch = hparams(run_dir)["global_batch_size"]
    assert {value for _, value in theirs["batch-size"]} == {batch} == {4}
    samples = {tag.removesuffix("_vs_samples") for tag in theirs if tag.endswith("_vs_samples")}
    written = set(MIGRATED_SCALARS) - _not_written_by_this_release()
    assert set(theirs) == written | {"batch-size"} | {f"{tag}_vs_samples" for tag in samples}
    steps = list(range(1, STEPS + 1))
    for tag, (our_tag, how) in MIGRATED_SCALARS.items():
        if tag not in written:
            continue
        assert [step for step, _ in theirs[tag]] == steps == sorted(ours[our_tag]), tag
        if how == "same":
            for step, value in theirs[tag]:
                assert ours[our_tag][step] == pytest.approx(value, rel=1e-5, abs=1e-7), (tag, step)
    for tag in samples:  # MindFormers' "<tag> vs samples": the tag's value at sample step x global batch
        assert theirs[f"{tag}_vs_samples"] == [(step * batch, value) for step, value in theirs[tag]], tag
    mf_loads = mf_expert_loads(original / "tb")  # expert_load/<router>: the moe records, every moe_every steps
    layout, records = loads_records(run_dir)
    for router, group in zip(sorted(mf_loads), layout.groups, strict=True):
        assert router.replace(".transformer_layer", "").startswith(("decoder." + group, group)), (router, group)
        for step, loads in mf_loads[router].items():
            row = records[step][0, layout.groups.index(group)].astype(np.float64)
            np.testing.assert_allclose(row, np.array(loads) / np.mean(loads), rtol=2e-3)
    accumulator = EventAccumulator(str(original / "tb" / "rank_0"), size_guidance={TENSORS: 0})
    accumulator.Reload()
    keys = {tag.removesuffix("/text_summary") for tag in accumulator.Tags()[TENSORS]}
    ours_text = EventAccumulator(str(run_dir), size_guidance={TENSORS: 0})
    ours_text.Reload()
    (config_text,) = ours_text.Tensors("run/config")
    text = config_text.tensor_proto.string_val[0].decode()
    assert "model" in keys and len(keys) > 20
    assert all(re.search(rf"^{re.escape(key)}:", text, flags=re.M) for key in keys - {"tensorboard"}), keys
    table = (REPO / "docs" / "migration.md").read_text().split("| MindFormers tag |")[1].split("\n\n")[0]
    listed = set(re.findall(r"^\| `([^`]+)`", table, flags=re.M))
    assert set(MIGRATED_SCALARS) | {"batch-size", "expert_load/<router>", "<tag>_vs_samples"} <= listed, listed


def test_import_of_the_sections_writer_folder_keeps_every_value(
    deepseek3_original: tuple[Path, str], tmp_path: Path
) -> None:
    """`mftb import` of the folder MindFormers' own writer wrote: each tag under ours, with the values
    TensorBoard's reader reads there and MFLossMonitor printed; its add_scalars folders (expert_load/...)
    as sub-runs."""
    original, output = deepseek3_original
    theirs = {tag: dict(points) for tag, points in read_scalars(original / "tb" / "rank_0").items()}
    result = subprocess.run(
        [MFTB, "import", str(original / "tb"), "--logdir", str(tmp_path), "--name", "mf"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert f"imported mindformers-tensorboard into {tmp_path / 'mf'}" in result.stdout
    ours = {tag: dict(points) for tag, points in read_scalars(tmp_path / "mf").items()}
    mapped = {
        "loss": "train/loss",
        "learning-rate": "train/lr",
        "grad-norm": "train/grad_norm",
        "loss-scale": "train/loss_scale",
        "iteration-time": "perf/step_time_ms",
        "lm-loss": "train/loss_lm",
        "mtp-loss": "train/loss_mtp",
        "load-balancing-loss": "import/load-balancing-loss",  # before its coefficient: not train/loss_aux
        "loss_vs_samples": "train/loss_vs_samples",
        "throughput": "import/throughput",
        "batch-size": "import/batch-size",
    }
    for tag, our_tag in mapped.items():
        assert ours[our_tag] == theirs[tag], tag
    printed = mf_losses(output)
    assert len(printed) == STEPS
    assert ours["train/loss"] == pytest.approx(printed, abs=1e-6)  # printed with 6 decimals
    routers = sorted((original / "tb" / "rank_0" / "expert_load").iterdir())
    for router in routers:
        for expert in router.iterdir():
            imported = read_scalars(tmp_path / "mf" / "expert_load" / router.name / expert.name)
            assert {tag.removeprefix("import/"): points for tag, points in imported.items()} == read_scalars(expert)


def test_a_routing_collapse_is_named_by_layer_and_experts(tmp_path: Path, mcore_data: Path) -> None:
    """From step 6 layer 2's expert bias sends every token to experts 0 and 1 (group-limited routing)."""
    config = mcore_config("deepseek3", tmp_path, mcore_data, samples=40)
    collapse = {"type": "CollapseLayer", "auto_register": "router_hooks.CollapseLayer", "step": 6, "layer": 2}
    config["callbacks"].insert(0, {**collapse, "bias": [1.0, 1.0, -1.0, -1.0]})
    train_mcore(config, tmp_path)
    scalars = read_scalars(run_dirs(tmp_path / "tb")[0])
    dead = dict(scalars["moe/layers.2/dead_experts"])
    assert [dead[step] for step in range(1, 6)] == [0.0] * 5 and [dead[step] for step in range(6, 11)] == [2.0] * 5
    assert dict(scalars["moe/layers.2/max_violation"])[6] == pytest.approx(1.0)  # experts / top-k - 1: the bound
    (alert,) = [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert alert["rule"] == "expert_collapse" and alert["tag"] == "moe/dead_experts" and alert["step"] == 8
    assert "layers.2: experts 0, 1 took 2.00x, 2.00x the mean load; experts 2, 3 under 10% of it" in alert["message"]


# -- Qwen3-MoE: gbs_aux_loss routers ----------------------------------------------------------------------
def test_qwen3_moe_parts_and_loads_from_its_aux_loss_routers(tmp_path: Path, mcore_data: Path) -> None:
    config = mcore_config("qwen3_moe", tmp_path, mcore_data)
    config["callbacks"].append({"type": "RouterProbe", "auto_register": "router_hooks.RouterProbe"})
    output = train_mcore(config, tmp_path)
    run_dir = run_dirs(tmp_path / "tb")[0]
    scalars = read_scalars(run_dir)
    loss, lm, aux = (dict(scalars[tag]) for tag in ("train/loss", "train/loss_lm", "train/loss_aux"))
    assert "train/loss_mtp" not in scalars  # no multi-token prediction in this model
    for step in range(1, STEPS + 1):
        assert lm[step] + aux[step] == pytest.approx(loss[step], abs=2e-6)
        assert loss[step] == pytest.approx(mf_losses(output)[step], abs=1e-6)
    probed = [json.loads(line) for line in (tmp_path / "router_loads.jsonl").read_text().splitlines()]
    assert [record["step"] for record in probed] == list(range(1, STEPS + 1))
    for record in probed:  # each part as MindFormers' parameter_register held it (aux x its loss scale)
        assert lm[record["step"]] == pytest.approx(record["parts"]["lm_loss"], rel=1e-6), record["step"]
        assert aux[record["step"]] == pytest.approx(record["parts"]["aux_loss"], rel=1e-6), record["step"]
    layout, records = loads_records(run_dir)
    assert layout.groups == ("layers.0", "layers.1") and layout.channels == ("load",)
    assert layout.routers == ("aux_loss", "aux_loss")
    # fi_accu: zeroed by MFLossMonitor at every step end in MindFormers 1.9 and later, never in 1.7-1.8,
    # where a step's load is what it added to what the previous step left
    left = {name: [0.0] * len(loads) for name, loads in probed[0]["loads"].items()}
    for record in probed:
        for name, total in record["loads"].items():
            loads = [value - earlier for value, earlier in zip(total, left[name], strict=True)]
            group = "layers." + name.split(".layers.")[1].split(".")[0]
            expected = max(loads) / np.mean(loads) - 1
            assert dict(scalars[f"moe/{group}/max_violation"])[record["step"]] == pytest.approx(expected, abs=1e-6)
            row = records[record["step"]][0, layout.groups.index(group)].astype(np.float64)
            np.testing.assert_allclose(row, np.array(loads) / np.mean(loads), rtol=2e-3)
        left = record["after"]
    assert not any(tag.endswith("bias_range") for tag in scalars)
    values = hparams(run_dir)
    assert values["router"] == "softmax, gbs_aux_loss" and values["num_experts"] == 4 and values["moe_top_k"] == 2


# -- Qwen3 dense ----------------------------------------------------------------------------------------------
def test_a_dense_qwen3_writes_no_moe_tags_and_no_running_sums(tmp_path: Path, mcore_data: Path) -> None:
    config = mcore_config("qwen3", tmp_path, mcore_data)
    output = train_mcore(config, tmp_path)
    run_dir = run_dirs(tmp_path / "tb")[0]
    scalars = read_scalars(run_dir)
    assert not [tag for tag in scalars if tag.startswith("moe/")]
    assert not [tag for tag in PARTS if tag in scalars]  # lm_loss is a running sum in a dense model
    mf_flops = mindformers_flops(output)
    values = hparams(run_dir)
    assert values["model_flops_per_step"] == (mf_flops or pytest.approx(1.089e8, rel=0.02))  # 1.9's formula
    assert values["num_layers"] == 2 and values["num_heads"] == 4
    assert "num_experts" not in values and "mtp_depth" not in values


# -- MindFormers' own entry ---------------------------------------------------------------------------------
def test_run_mindformer_trains_deepseek3_with_the_same_tags(tmp_path: Path, mcore_data: Path) -> None:
    config = mcore_config("deepseek3", tmp_path, mcore_data, samples=24)
    output = train_mcore(config, tmp_path, entry=run_mindformer_script())
    scalars = read_scalars(run_dirs(tmp_path / "tb")[0])
    loss = dict(scalars["train/loss"])
    assert sorted(loss) == list(range(1, 7)) and loss == pytest.approx(mf_losses(output), abs=1e-6)
    for step, total in loss.items():
        assert sum(dict(scalars[tag])[step] for tag in PARTS[:3]) == pytest.approx(total, abs=2e-6)
    for group in ("layers.1", "layers.2", "mtp.layers.0"):
        assert len(scalars[f"moe/{group}/max_violation"]) == 6


# -- Qwen3-MoE on 2 data-parallel ranks under msrun ------------------------------------------------------
# aggregate_every 2 with aggregate_seconds at its largest: after the first interval (steps 1-2) every rank
# proposes the longest interval, 100 steps, whatever its speed: steps 3-102, then 103-106 (the end).
JOB_STEPS, EVERY = 106, 2
AGGREGATIONS = [2, 102, 106]


@dataclass
class MoeJob:
    run_dir: Path
    logs: list[str]  # each rank's worker log


@pytest.fixture(scope="module")
def moe_job(tmp_path_factory: pytest.TempPathFactory, mcore_data: Path) -> MoeJob:
    """Qwen3-MoE, 2 data-parallel ranks under msrun, each routing its own batches, with per-layer gradient
    norms, every step's expert loads, rank records and each rank's own values in its rank run, in
    stretched aggregation intervals."""
    from mindformers_tbplugin.viewer.tensorboard_server import any_free_port

    tmp_path = tmp_path_factory.mktemp("moe_job")
    monitor = {"aggregate_every": EVERY, "aggregate_seconds": 3600, "rank_policy": "all"}
    # num_samples is each rank's (its shard's) here: 106 batches of 4
    config = mcore_config("qwen3_moe", tmp_path, mcore_data, samples=4 * JOB_STEPS, **monitor)
    (entry,) = [entry for entry in config["callbacks"] if entry["type"] == "TensorBoardMonitor"]
    del entry["log_dir"]  # the launcher's folder: <output_dir>/tensorboard
    assert config["runner_wrapper"]["local_norm"] is True and entry["moe_every"] == 1  # the bundled config's
    config.update(use_parallel=True)
    config["parallel_config"]["data_parallel"] = 2
    config["parallel"]["gradients_mean"] = True
    path = tmp_path / "dp2.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    output = tmp_path / "out"
    launch = [MFTB, "launch", "--config", str(path), "--worker_num", "2", "--master_port", str(any_free_port())]
    launch += ["--output_dir", str(output), "--entry", str(TRAIN_MCORE)]
    result = subprocess.run(launch, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=900)
    logs = [(output / "msrun_log" / "0" / f"worker_{rank}.log").read_text(errors="replace") for rank in (0, 1)]
    assert result.returncode == 0, result.stderr[-3000:] + logs[0][-3000:]
    (run_dir,) = run_dirs(output / "tensorboard")
    return MoeJob(run_dir, logs)


def test_qwen3_moe_under_msrun_averages_parts_and_loads_over_the_ranks(moe_job: MoeJob) -> None:
    """Each rank routes its own batch: the main run holds the mean of the ranks' loss parts and of their
    loads at every step (rank_policy: all keeps each rank's own in its rank run, records included)."""
    run_dir, logs = moe_job.run_dir, moe_job.logs
    main = read_scalars(run_dir)
    own = [read_scalars(run_dir / f"rank_{rank}") for rank in (0, 1)]
    printed = [mf_losses(log) for log in logs]
    loss, lm, aux = (dict(main[tag]) for tag in ("train/loss", "train/loss_lm", "train/loss_aux"))
    highest = dict(main["train/loss_max"])
    steps = list(range(1, JOB_STEPS + 1))
    assert sorted(loss) == sorted(highest) == steps
    for step in loss:
        pair = (printed[0][step], printed[1][step])
        assert loss[step] == pytest.approx(sum(pair) / 2, abs=1e-5)
        assert highest[step] == pytest.approx(max(pair), abs=1e-5)
        assert lm[step] + aux[step] == pytest.approx(loss[step], abs=2e-6)
        mean_lm = (dict(own[0]["train/loss_lm"])[step] + dict(own[1]["train/loss_lm"])[step]) / 2
        assert lm[step] == pytest.approx(mean_lm, abs=1e-5)
    assert dict(own[0]["train/loss_lm"]) != dict(own[1]["train/loss_lm"])  # the ranks' batches differ
    layout, records = loads_records(run_dir)
    rank_records = [loads_records(run_dir / f"rank_{rank}")[1] for rank in (0, 1)]
    assert sorted(records) == sorted(rank_records[0]) == steps
    for step, record in records.items():
        mean = (rank_records[0][step].astype(np.float64) + rank_records[1][step].astype(np.float64)) / 2
        np.testing.assert_allclose(record.astype(np.float64), mean, rtol=2e-3)
        for row, group in enumerate(layout.groups):
            expected = float(record[0, row].astype(np.float64).max()) - 1
            assert dict(main[f"moe/{group}/max_violation"])[step] == pytest.approx(expected, abs=2e-3)
    assert not np.array_equal(rank_records[0][8], rank_records[1][8])


def rank_matrices(run_dir: Path) -> tuple[RankLayout, dict[int, np.ndarray]]:
    """The ranks/matrix records of a run through TensorBoard's reader: {step: (world, channels)}."""
    accumulator = EventAccumulator(str(run_dir), size_guidance={TENSORS: 0})
    accumulator.Reload()
    layout = RankLayout.from_content(accumulator.SummaryMetadata("ranks/matrix").plugin_data.content)
    return layout, {e.step: tensor_util.make_ndarray(e.tensor_proto) for e in accumulator.Tensors("ranks/matrix")}


def test_stretched_intervals_carry_every_steps_norms_and_each_ranks_record(moe_job: MoeJob) -> None:
    """Three aggregations (steps 2, 102, 106) in the whole job, on both ranks: the per-layer gradient norms
    of all 106 steps are each the root mean square of the ranks' own, and each interval's rank record holds
    each rank's mean printed loss and mean step time over the interval's steps."""
    run_dir, logs = moe_job.run_dir, moe_job.logs
    for log in logs:
        (intervals,) = COLLECTIVES.findall(log)
        assert int(intervals) == len(AGGREGATIONS), log[-2000:]
    main = read_scalars(run_dir)
    own = [read_scalars(run_dir / f"rank_{rank}") for rank in (0, 1)]
    steps = list(range(1, JOB_STEPS + 1))
    groups = sorted(tag for tag in main if tag.startswith("grad_norm/") and tag != "grad_norm/total")
    assert groups == ["grad_norm/embedding", "grad_norm/final_norm", "grad_norm/head"] + [
        f"grad_norm/layers.{i}" for i in (0, 1)
    ]
    for tag in [*groups, "grad_norm/total"]:
        written, first, second = dict(main[tag]), dict(own[0][tag]), dict(own[1][tag])
        assert sorted(written) == sorted(first) == sorted(second) == steps, tag
        for step in steps:
            expected = math.sqrt((first[step] ** 2 + second[step] ** 2) / 2)
            assert written[step] == pytest.approx(expected, rel=1e-4), (tag, step)
    layout, records = rank_matrices(run_dir)
    assert sorted(records) == AGGREGATIONS == [step for step, _ in main["ranks/step_time_ms_argmax"]]
    assert (layout.world_size, layout.steps_per_interval, layout.intervals_per_record) == (2, EVERY, 1)
    printed = [mf_losses(log) for log in logs]
    times = [dict(own[rank]["perf/step_time_ms"]) for rank in (0, 1)]
    loss, step_time = CHANNELS.index("loss"), CHANNELS.index("step_time_ms")
    for first, last in zip([0, *AGGREGATIONS[:-1]], AGGREGATIONS, strict=True):
        interval = range(first + 1, last + 1)
        for rank in (0, 1):
            mean_loss = sum(printed[rank][s] for s in interval) / len(interval)
            assert float(records[last][rank, loss]) == pytest.approx(mean_loss, rel=2e-3), (last, rank)
            mean_time = sum(times[rank][s] for s in interval) / len(interval)
            assert float(records[last][rank, step_time]) == pytest.approx(mean_time, rel=2e-3), (last, rank)


def test_the_ranks_dashboard_serves_the_jobs_records(moe_job: MoeJob) -> None:
    """The ranks plugin's routes in a real TensorBoard over the 2-rank job: the heatmap of each channel
    against the ranks/matrix records the job wrote (step time over each record's median), each rank's
    series and worker log, and the stragglers tallied from the records."""
    from mindformers_tbplugin.pipeline.slow_nodes import SLOW_FACTOR

    run_dir = moe_job.run_dir
    name = run_dir.name
    _, records = rank_matrices(run_dir)
    values = np.stack([records[step].astype(np.float32) for step in AGGREGATIONS])  # (records, ranks, channels)
    step_time = values[:, :, CHANNELS.index("step_time_ms")]
    relative = step_time / np.median(step_time, axis=1, keepdims=True)
    held = [CHANNELS.index(channel) for channel in ("step_time_ms", "host_rss_gb", "loss")]
    assert np.isfinite(values[:, :, held]).all() and np.isnan(np.delete(values, held, axis=2)).all()  # no device
    with plain_tensorboard(run_dir.parent) as port:
        (run,) = wait_for(lambda: served_json(port, "/data/plugin/ranks/runs"))
        assert run == {
            "run": name,
            "world_size": 2,
            "records": len(AGGREGATIONS),
            "channels": list(CHANNELS),
            "nodes": 1,
            "first_step": AGGREGATIONS[0],
            "last_step": AGGREGATIONS[-1],
            "steps_per_interval": EVERY,
            "intervals_per_record": 1,
        }
        for index, channel in enumerate(CHANNELS):
            grid = served_json(port, f"/data/plugin/ranks/matrix?run={name}&channel={channel}")
            assert (grid["rows"], grid["columns"], grid["steps"]) == (2, len(AGGREGATIONS), AGGREGATIONS)
            expected = relative if channel == "step_time_ms" else values[:, :, index]
            np.testing.assert_allclose(np.array(grid["values"], dtype=float), expected.T, atol=1e-3, rtol=1e-3)
        for rank in (0, 1):
            series = served_json(port, f"/data/plugin/ranks/rank?run={name}&rank={rank}")
            assert series["steps"] == AGGREGATIONS
            assert series["worker_log"] == str(run_dir.parent.parent / "msrun_log" / "0" / f"worker_{rank}.log")
            assert "per_step_time" in Path(series["worker_log"]).read_text(errors="replace")
            for index, channel in enumerate(CHANNELS):
                shown = np.array(series["channels"][channel], dtype=float)  # null: no value (device memory on a CPU)
                np.testing.assert_allclose(shown, values[:, rank, index], rtol=1e-3, atol=1e-3)
        slow = served_json(port, f"/data/plugin/ranks/stragglers?run={name}")
        slowest = np.bincount(relative.argmax(axis=1), minlength=2)
        above = (relative > SLOW_FACTOR).sum(axis=0)
        listed = {entry["rank"]: entry for entry in slow["ranks"]}
        assert sorted(listed) == [rank for rank in (0, 1) if slowest[rank] or above[rank]]
        for rank, entry in listed.items():
            assert (entry["slowest"], entry["slow"]) == (slowest[rank], above[rank]), (entry, relative)
