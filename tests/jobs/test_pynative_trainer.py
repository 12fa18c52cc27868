"""MindFormers 2.x's PyNative trainer (``mindformers.pynative.trainer.Trainer``) with the same YAML
callback entries as the classic trainer: real tiny Qwen3, DeepSeek-V3 and Qwen3-MoE-shaped trainings on
CPU, read back with TensorBoard's reader, compared with what the trainer's own LossCallback,
MaxLogitsMonitor and TrainStateMonitor printed, and with a probe callback put ahead of the trainer's own
(tests/helpers/pynative_probe.py) that reads the model's trackers, expert token counts, moments and
inputs its own way.

Runs where MindFormers 2.x is installed (``make compat`` builds that environment, with CPU stand-ins
for kernels that exist only on Ascend: tests/compat/mf2x_cpu/); skipped elsewhere.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import HELPERS, REPO, TrainingRun, read_scalars, run_dirs, subprocess_env

from mindformers_tbplugin.framework import versions
from mindformers_tbplugin.viewer.tensorboard_server import any_free_port


def _mindformers_2x() -> bool:
    version = versions.find("mindformers").version
    return version is not None and int(version.split(".")[0]) >= 2


# MindFormers 1.9.0 ships an earlier preview of this trainer, with another config schema: not covered.
pytestmark = [
    pytest.mark.process,
    pytest.mark.compat,
    pytest.mark.skipif(not _mindformers_2x(), reason="needs MindFormers 2.x (make compat COMPAT_ENVS=mf2.0)"),
]

MF2X = REPO / "tests" / "compat" / "mf2x_cpu"
STEPS = 12
# LossCallback's line: "{ step:[    1/   12], loss:   6.907755, per_step_time: ..., lr: 1.000000e-03, grad_norm: ... }"
LOSS_CALLBACK_LINE = re.compile(
    r"step:\[\s*(\d+)/\s*\d+\], loss:\s*(-?[0-9.]+), per_step_time:.*?lr: ([0-9.e+-]+), grad_norm:\s*([0-9.]+)"
)
# The entries a classic-trainer config uses, unchanged.
MONITORS = [
    {"type": "TensorBoardMonitor", "experiment": "qwen3", "log_every": 1, "param_norm_every": 4},
    {"type": "HistogramMonitor", "every_steps": 6},
    {"type": "AlertMonitor"},
]


class PyNativeRun(TrainingRun):
    def printed(self) -> dict[int, tuple[float, float, float]]:
        """{step: (loss, lr, grad_norm)} as LossCallback printed them."""
        return {
            int(m.group(1)): (float(m.group(2)), float(m.group(3)), float(m.group(4)))
            for m in LOSS_CALLBACK_LINE.finditer(self.output)
        }


@pytest.fixture(scope="module")
def xy_data(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path) -> Path:
    """The tiny dataset with a ``labels`` column: the PyNative GPT models do not shift inputs themselves."""
    path = tmp_path_factory.mktemp("xy") / "tiny_xy.mindrecord"
    subprocess.run(
        [sys.executable, str(MF2X / "make_xy.py"), str(tiny_data), str(path)], check=True, capture_output=True
    )
    return path


def qwen3_config(
    folder: Path,
    data: Path,
    callbacks: list[dict],
    steps: int = STEPS,
    name: str = "qwen3.yaml",
    model: str = "tiny_qwen3_cpu.yaml",
    model_settings: dict | None = None,
    **sections: dict,
) -> Path:
    config = yaml.safe_load((MF2X / model).read_text())
    config["train_dataset"]["dataloader"]["dataset_files"] = str(data)
    config["training"]["steps"] = steps
    log_dir = str(folder / "tb")
    config["callbacks"] = [dict(e, log_dir=log_dir) if e["type"] == "TensorBoardMonitor" else e for e in callbacks]
    for section, values in sections.items():
        config.setdefault(section, {}).update(values)
    config["model"].update(model_settings or {})
    path = folder / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def pynative_train(config: Path, *modules: str, **env: str) -> PyNativeRun:
    result = subprocess.run(
        [sys.executable, str(MF2X / "train.py"), str(config), *modules],
        cwd=config.parent,
        env=subprocess_env(PYTHONPATH=str(HELPERS), **env),
        capture_output=True,
        text=True,
        timeout=900,
    )
    return PyNativeRun(config.parent, config.parent / "tb", result.stdout + result.stderr, result.returncode)


@pytest.fixture(scope="module")
def pynative_run(tmp_path_factory: pytest.TempPathFactory, xy_data: Path) -> PyNativeRun:
    """The tiny dense Qwen3 with flash attention, whose max attention logits a MaxLogitsMonitor listed ahead of
    the monitor tracks and zeroes at every step end."""
    folder = tmp_path_factory.mktemp("pynative")
    monitors = [{"type": "MaxLogitsMonitor"}, dict(MONITORS[0], attention_logit_every=4), *MONITORS[1:]]
    run = pynative_train(qwen3_config(folder, xy_data, monitors, model_settings={"use_flash_attention": True}))
    assert run.returncode == 0, run.output[-5000:]
    return run


def test_a_dense_models_attention_logits_are_read_in_front_of_maxlogitsmonitors_reset(
    pynative_run: PyNativeRun,
) -> None:
    """No LossCallback model call to read in front of: the read rides on MaxLogitsMonitor's own reset."""
    printed = {
        int(m.group(1)): float(m.group(2))
        for m in re.finditer(r"step:\[\s*(\d+)/\s*\d+\] max_attention_logit/max: ([0-9.]+)", pynative_run.output)
    }
    assert sorted(printed) == list(range(1, STEPS + 1))
    written = dict(read_scalars(pynative_run.run_dir)["attention_logit_max/all"])
    assert sorted(written) == [4, 8, 12]
    for step, value in written.items():
        assert value == pytest.approx(printed[step], rel=5e-4), step  # printed to 4 digits


def test_the_same_yaml_entries_log_every_step(pynative_run: PyNativeRun) -> None:
    scalars = read_scalars(pynative_run.run_dir)
    for tag in ("train/loss", "train/lr", "train/grad_norm", "perf/step_time_ms", "perf/samples_per_s"):
        assert [step for step, _ in scalars[tag]] == list(range(1, STEPS + 1)), tag
    assert "perf/tokens_per_s" in scalars and "system/host_rss_gb" in scalars
    assert [step for step, _ in scalars["train/param_norm"]] == [4, 8, 12]
    # model FLOPs from MindFormers' formula on the live config: TFLOPS x step time is one step's FLOPs
    tflops, step_ms = dict(scalars["perf/model_tflops_per_device"]), dict(scalars["perf/step_time_ms"])
    flops = [tflops[step] * 1e12 * step_ms[step] / 1e3 for step in range(2, STEPS + 1)]
    assert min(flops) > 0 and max(flops) == pytest.approx(min(flops), rel=1e-4)
    assert re.fullmatch(r"qwen3_\d{8}-\d{6}", pynative_run.run_dir.name)


def test_loss_lr_and_grad_norm_equal_what_losscallback_printed(pynative_run: PyNativeRun) -> None:
    printed = pynative_run.printed()
    assert sorted(printed) == list(range(1, STEPS + 1))
    scalars = read_scalars(pynative_run.run_dir)
    for column, tag in enumerate(("train/loss", "train/lr", "train/grad_norm")):
        for step, value in scalars[tag]:
            expected = printed[step][column]
            assert value == pytest.approx(expected, rel=1e-5, abs=5e-7), (tag, step, value, expected)


def test_histograms_hparams_and_status_as_under_the_classic_trainer(pynative_run: PyNativeRun) -> None:
    from tensorboard.backend.event_processing.event_accumulator import HISTOGRAMS, EventAccumulator

    accumulator = EventAccumulator(str(pynative_run.run_dir), size_guidance={HISTOGRAMS: 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    histograms = [tag for tag in tags["histograms"] if tag.startswith("params/")]
    assert histograms
    assert [event.step for event in accumulator.Histograms(histograms[0])] == [6, 12]
    (status,) = accumulator.Tensors("meta/status")
    assert status.tensor_proto.string_val[0].decode() == f"completed at step {STEPS}"
    assert "AlertMonitor received no values" not in pynative_run.output


def test_an_alert_stop_ends_the_pynative_training_after_that_step(tmp_path: Path, xy_data: Path) -> None:
    alert = {
        "type": "AlertMonitor",
        "rules": [{"rule": "threshold", "tag": "train/loss", "above": 0.0, "action": "stop"}],
    }
    run = pynative_train(qwen3_config(tmp_path, xy_data, [MONITORS[0], alert]))
    # A stop is not a normal end: the entry script exits 3 and says why, as under run_mindformer.py.
    assert run.returncode == 3, run.output[-5000:]
    stopped = "stopped by AlertMonitor (threshold on train/loss) at step 1"
    assert f"train.py: {stopped}; exit status 3" in run.output.splitlines()
    assert sorted(run.printed()) == [1]
    assert [step for step, _ in read_scalars(run.run_dir)["train/loss"]] == [1]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run.run_dir))
    accumulator.Reload()
    (status,) = accumulator.Tensors("meta/status")
    assert status.tensor_proto.string_val[0].decode() == stopped


def test_a_failing_pynative_training_still_gets_its_status(tmp_path: Path, xy_data: Path) -> None:
    """The trainer lets an exception out without calling on_train_end: the status comes at exit."""
    failing = {"type": "RaiseAtStep", "step": 3}
    run = pynative_train(qwen3_config(tmp_path, xy_data, [MONITORS[0], failing]), "pynative_fault")
    assert run.returncode != 0 and "test failure at step 3" in run.output
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run.run_dir))
    accumulator.Reload()
    (status,) = accumulator.Tensors("meta/status")
    assert status.tensor_proto.string_val[0].decode() == "failed at step 3: the process exited before training ended"
    assert [step for step, _ in read_scalars(run.run_dir)["train/loss"]] == [1, 2, 3]  # logged before the raise


def test_a_resumed_pynative_training_continues_its_run_without_fold_back(tmp_path: Path, xy_data: Path) -> None:
    """Attempt 1 saves a checkpoint at step 5 and runs on to 8; attempt 2 resumes from step 5 to 10."""
    saving = {"enable_save": True, "save_path": "./ckpt", "save_interleaved_steps": 5, "no_save_optim": False}
    first = pynative_train(qwen3_config(tmp_path, xy_data, [MONITORS[0]], steps=8, checkpoint=saving))
    assert first.returncode == 0, first.output[-5000:]
    loading = {"load_path": str(tmp_path / "ckpt" / "iteration_00000005"), "no_load_optim": False}
    second_config = qwen3_config(tmp_path, xy_data, [MONITORS[0]], steps=10, name="resume.yaml", checkpoint=loading)
    second = pynative_train(second_config)
    assert second.returncode == 0, second.output[-5000:]
    assert sorted(second.printed()) == list(range(6, 11))
    scalars = read_scalars(second.run_dir)  # one run folder: the resumed attempt continued it
    losses = dict(scalars["train/loss"])
    assert sorted(losses) == list(range(1, 11))  # the first attempt's steps 6-8 are purged
    for step, (loss, _, _) in second.printed().items():
        assert losses[step] == pytest.approx(loss, abs=5e-7), step
    assert scalars["meta/restart"] == [(6, 5.0)]


def test_two_ranks_through_the_trainers_callback_handler(tmp_path: Path) -> None:
    """Multi-rank: the trainer's CallbackHandler and hooks, driven by a stand-in loop with a real model,
    forward, backward and all-reduce (see the helper). The loss callbacks get is the mean over the ranks
    (as the trainer hands it), so each rank's own values, its loss, the highest loss and the rank holding
    it, the incident's ranks and the per-layer gradient norms, can only come from the monitor's own reads."""
    config = yaml.safe_load((MF2X / "tiny_qwen3_cpu.yaml").read_text())
    monitor = dict(
        MONITORS[0], log_dir=str(tmp_path / "tb"), aggregate_every=4, aggregate_seconds=0, layer_grad_norms=True
    )
    spike = {"rule": "spike", "tag": "train/loss_max", "window": 10, "min_points": 3}
    alerts = {"type": "AlertMonitor", "rules": [spike], "sinks": [{"jsonl": str(tmp_path / "alerts.jsonl")}]}
    config["callbacks"] = [monitor, alerts]
    path = tmp_path / "handler.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    steps = 8
    result = subprocess.run(
        [
            "msrun",
            "--worker_num=2",
            "--local_worker_num=2",
            f"--master_port={any_free_port()}",
            f"--log_dir={tmp_path / 'msrun_log'}",
            "--join=True",
            str(HELPERS / "pynative_handler_rank.py"),
            str(path),
            str(steps),
        ],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    logs = "".join(p.read_text(errors="replace") for p in sorted((tmp_path / "msrun_log").glob("worker_*.log")))
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:] + logs[-3000:]
    losses: dict[int, dict[int, float]] = {}
    lrs: dict[int, float] = {}
    grads: dict[int, dict[int, dict[str, float]]] = {}
    for line in logs.splitlines():
        if line.startswith("RANK_STEP "):
            _, rank, step, loss, lr = line.split()
            losses.setdefault(int(step), {})[int(rank)] = float(loss)
            lrs[int(step)] = float(lr)
        elif line.startswith("RANK_GRADS "):
            _, rank, step, squares = line.split(" ", 3)
            grads.setdefault(int(step), {})[int(rank)] = json.loads(squares)
    assert sorted(losses) == list(range(1, steps + 1)) and all(len(v) == 2 for v in losses.values())
    (run_dir,) = run_dirs(tmp_path / "tb")
    scalars = {tag: dict(points) for tag, points in read_scalars(run_dir).items()}
    for step, own in losses.items():
        assert scalars["train/loss"][step] == pytest.approx((own[0] + own[1]) / 2, rel=1e-6), step
        assert scalars["train/loss_max"][step] == pytest.approx(max(own.values()), rel=1e-6), step
        assert scalars["train/loss_max_rank"][step] == max(own, key=own.get), step
        assert scalars["train/lr"][step] == pytest.approx(lrs[step], rel=1e-6), step
        # each rank's own per-layer gradient norms, their squares averaged over the ranks
        for group in ("layers.0", "layers.1", "head"):
            mean = sum(sum(v for k, v in grads[step][r].items() if k.startswith(group + ".")) for r in (0, 1)) / 2
            assert scalars[f"grad_norm/{group}"][step] == pytest.approx(math.sqrt(mean), rel=1e-5), (group, step)
    assert losses[6][1] > 4 * losses[6][0]  # the spike is rank 1's alone
    (line,) = (tmp_path / "alerts.jsonl").read_text().splitlines()
    alert = json.loads(line)
    assert (alert["rule"], alert["step"]) == ("spike", 6)
    ranks = alert["incident"]["ranks"]
    assert [entry["rank"] for entry in ranks] == [1, 0]
    assert [entry["value"] for entry in ranks] == pytest.approx([losses[6][1], losses[6][0]], rel=1e-6)
    # the job's throughput counts both data-parallel replicas: each rank's own rate over the interval
    # (harmonic mean of its logged samples/s), halved (each replica reads half of the global batch), summed
    rates = {rank: dict(read_scalars(run_dir / f"rank_{rank}")["perf/samples_per_s"]) for rank in (0, 1)}
    assert sorted(rates[0]) == list(range(1, steps + 1))
    for last in (4, 8):
        interval = range(last - 3, last + 1)
        job = sum(len(interval) / sum(1 / rates[rank][s] for s in interval) / 2 for rank in (0, 1))
        assert scalars["perf/job_samples_per_s"][last] == pytest.approx(job, rel=1e-4), last
    assert "2 data-parallel replica(s)" in logs
    # a model that is not one of MindFormers' mcore models: said once per rank, the rest written
    assert logs.count("Tiny is not a MindFormers mcore model (no get_gpt_transformer_config)") == 2


# -- mixture-of-experts and multi-token prediction models: the views the classic trainer gets ----------------
# LossCallback's line for MoE / MTP models: "..., load_balancing_loss:   1.001519, mtp_1_loss:   2.076350, lr: ..."
# (MindFormers' master branch prints "consumed_samples: N, global_batch_size: N, " before the loss.)
MOE_PARTS_LINE = re.compile(
    r"step:\[\s*(\d+)/\s*\d+\],(?: \w+: \d+,)* loss:\s*(-?[0-9.]+), per_step_time:.*?load_balancing_loss:\s*([0-9.]+)"
    r"(?:, mtp_1_loss:\s*([0-9.]+))?, lr: [0-9.e+-]+, grad_norm:\s*([0-9.]+)"
)
# MaxLogitsMonitor's lines: "step:[    2/   10] max_attention_logit/decoder.layers.0....max_logits_val: [0.02, ...]"
MAX_LOGITS_LINE = re.compile(r"step:\[\s*(\d+)/\s*\d+\] max_attention_logit/(\S+)\.self_attention\S*: \[([^\]]*)\]")
PROBE = {"MF2X_FRONT_CALLBACK": "pynative_probe:FrontProbe"}
DS3_STEPS, TRIGGER, SAVE_EVERY = 10, 7, 4
AUX_COEFFICIENT = {"tiny_deepseek3_cpu.yaml": 1e-4, "tiny_qwen3_moe_cpu.yaml": 1e-3}


def probed(run: PyNativeRun) -> dict[int, dict]:
    """{step: the probe's record}, read ahead of the trainer's own callbacks."""
    return {
        record["step"]: record
        for record in (json.loads(line[6:]) for line in run.output.splitlines() if line.startswith("PROBE "))
    }


def printed_parts(run: PyNativeRun) -> dict[int, tuple[float, float, float | None, float]]:
    """{step: (loss, load_balancing_loss, mtp_1_loss or None, grad_norm)} as LossCallback printed them."""
    return {
        int(m.group(1)): (float(m.group(2)), float(m.group(3)), m.group(4) and float(m.group(4)), float(m.group(5)))
        for m in MOE_PARTS_LINE.finditer(run.output)
    }


def group_of(path: str) -> str:
    """``model.decoder.layers.1.mlp`` -> ``layers.1``; ``model.mtp.layers.0.transformer_layer.mlp`` ->
    ``mtp.layers.0``."""
    found = re.search(r"(mtp\.)?layers\.(\d+)", path)
    assert found, path
    return f"{found.group(1) or ''}layers.{found.group(2)}"


def ds3_config(folder: Path, data: Path, callbacks: list[dict], steps: int = DS3_STEPS, **sections: dict) -> Path:
    """The tiny DeepSeek-V3 with two micro-batches per step (global batch 4, local 2) and a checkpoint every
    SAVE_EVERY steps."""
    saving = {"enable_save": True, "save_path": str(folder / "ckpt"), "save_interleaved_steps": SAVE_EVERY}
    sections = {"training": {"global_batch_size": 4}, "checkpoint": {**saving, "no_save_optim": False}, **sections}
    return qwen3_config(folder, data, callbacks, steps, "ds3.yaml", "tiny_deepseek3_cpu.yaml", **sections)


DS3_MONITORS = [
    {"type": "MaxLogitsMonitor"},  # ahead of ours: it zeroes the attention logits at every step end
    {
        "type": "TensorBoardMonitor",
        "experiment": "ds3",
        "layer_grad_norms": True,
        "moe_every": 1,
        "attention_logit_every": 2,
        "optimizer_state_every": 5,
        "param_norm_every": 5,
        "grad_hist_every": 5,
        "stable_rank_every": 5,
        "stable_rank_params": [r"linear_qkv\.weight"],
    },
    {"type": "HistogramMonitor", "every_steps": 5},
    {
        "type": "AlertMonitor",
        "rules": [{"rule": "threshold", "tag": "test/trigger", "above": 0.5}],
        "sinks": [{"jsonl": "alerts.jsonl"}],
    },
]


@pytest.fixture(scope="module")
def ds3_run(tmp_path_factory: pytest.TempPathFactory, xy_data: Path) -> PyNativeRun:
    """The tiny DeepSeek-V3 (MoE with expert bias, MTP) with every view on, the probe ahead of the trainer's
    callbacks, and an alert at step TRIGGER (the probe's ``test/trigger``)."""
    folder = tmp_path_factory.mktemp("ds3")
    env = {**PROBE, "MF2X_PROBE_TRIGGER": str(TRIGGER), "MF2X_PROBE_STABLE": r"linear_qkv\.weight"}
    run = pynative_train(ds3_config(folder, xy_data, DS3_MONITORS), **env)
    assert run.returncode == 0, run.output[-5000:]
    return run


def test_per_layer_gradient_norms_add_up_to_the_trainers_grad_norm_over_two_micro_batches(ds3_run: PyNativeRun) -> None:
    scalars = read_scalars(ds3_run.run_dir)
    printed = printed_parts(ds3_run)
    assert sorted(printed) == list(range(1, DS3_STEPS + 1))
    groups = sorted(tag for tag in scalars if tag.startswith("grad_norm/") and tag != "grad_norm/total")
    assert groups == [f"grad_norm/{g}" for g in ("embedding", "final_norm", "head", "layers.0", "layers.1")] + [
        "grad_norm/layers.2",
        "grad_norm/mtp.layers.0",
    ]
    for step in range(1, DS3_STEPS + 1):
        total = math.sqrt(sum(dict(scalars[tag])[step] ** 2 for tag in groups))
        assert total == pytest.approx(printed[step][3], rel=2e-5, abs=1e-6), step  # the trainer's own grad norm
        assert dict(scalars["grad_norm/total"])[step] == pytest.approx(total, rel=1e-6)
    from tensorboard.backend.event_processing.event_accumulator import HISTOGRAMS, EventAccumulator

    accumulator = EventAccumulator(str(ds3_run.run_dir), size_guidance={HISTOGRAMS: 0})
    accumulator.Reload()
    assert [event.step for event in accumulator.Histograms("grad_norm/per_param_log10")] == [5, 10]
    assert "per-layer gradient norms of 56 parameters in 7 groups (gradient hooks)" in ds3_run.output


def test_loss_parts_are_what_losscallback_printed_and_each_layers_aux_what_its_tracker_held(
    ds3_run: PyNativeRun,
) -> None:
    scalars = {tag: dict(points) for tag, points in read_scalars(ds3_run.run_dir).items()}
    printed, probe = printed_parts(ds3_run), probed(ds3_run)
    coefficient, micro_batches = AUX_COEFFICIENT["tiny_deepseek3_cpu.yaml"], 2
    for step, (loss, balancing, mtp, _) in printed.items():
        assert scalars["train/loss"][step] == pytest.approx(loss, abs=5e-7), step
        assert scalars["train/loss_lm"][step] == pytest.approx(loss, abs=5e-7), step  # that trainer's loss
        assert scalars["train/loss_mtp"][step] == pytest.approx(mtp, abs=5e-7), step  # already x its factor
        # printed: the mean over the 3 MoE routers (2 decoder, 1 MTP) of aux / coefficient
        assert scalars["train/loss_aux"][step] == pytest.approx(3 * coefficient * balancing, rel=2e-6), step
        # each layer's own, from the tracker the probe read ahead of LossCallback: slot = layer number
        aux = probe[step]["aux"]
        for group, slot in (("layers.1", 1), ("layers.2", 2), ("mtp.layers.0", 3)):
            expected = coefficient * aux[slot] / micro_batches
            assert scalars[f"loss_aux/{group}"][step] == pytest.approx(expected, rel=1e-5), (group, step)
        assert abs(scalars["loss_aux/layers.1"][step] - scalars["loss_aux/layers.2"][step]) > 0 or step == 1


def test_moe_tags_and_records_come_from_the_routers_own_counts(ds3_run: PyNativeRun) -> None:
    scalars = {tag: dict(points) for tag, points in read_scalars(ds3_run.run_dir).items()}
    probe = probed(ds3_run)
    for step, record in probe.items():
        violations = {}
        for path, counts in record["loads"].items():
            counts = [float(count) for count in counts]
            assert sum(counts) == 2 * 2 * 32 * 2  # micro-batches x rows x tokens x top-2
            group = group_of(path)
            violations[group] = max(counts) / (sum(counts) / len(counts)) - 1
            assert scalars[f"moe/{group}/max_violation"][step] == pytest.approx(violations[group], abs=1e-6)
            assert scalars[f"moe/{group}/min_load"][step] == pytest.approx(min(counts) / (sum(counts) / 4), abs=1e-6)
        assert scalars["moe/max_violation"][step] == pytest.approx(max(violations.values()), abs=1e-6)
    assert set(scalars["moe/layers.1/bias_range"]) == set(range(1, DS3_STEPS + 1))
    assert scalars["moe/layers.1/bias_range"][DS3_STEPS] > 0  # the expert bias moved: its update ran
    # the moe dashboard's record of step 3 (float16, loads over the layer's mean), rows in model order
    from mindformers_tbplugin.viewer import moe_views
    from mindformers_tbplugin.viewer.moe_store import MoeStore

    (run,) = MoeStore(ds3_run.log_root).runs().values()
    body = moe_views.record(run, step=3)
    assert body["step"] == 3
    rows = [[count / (sum(counts) / len(counts)) for count in counts] for counts in probe[3]["loads"].values()]
    np.testing.assert_allclose(np.array(body["load"], dtype=np.float64), rows, rtol=2e-3)


def test_attention_logits_are_read_ahead_of_maxlogitsmonitor_listed_before_the_monitor(ds3_run: PyNativeRun) -> None:
    scalars = {tag: dict(points) for tag, points in read_scalars(ds3_run.run_dir).items()}
    printed: dict[tuple[int, str], float] = {}
    for match in MAX_LOGITS_LINE.finditer(ds3_run.output):
        heads = [float(value) for value in match.group(3).split(",")]
        printed[(int(match.group(1)), group_of(match.group(2)))] = max(heads)
    assert {step for step, _ in printed} == set(range(1, DS3_STEPS + 1))
    for step in range(2, DS3_STEPS + 1, 2):
        for group in ("layers.0", "layers.1", "layers.2", "mtp.layers.0"):
            written = scalars[f"attention_logit_max/{group}"][step]
            assert written == pytest.approx(printed[(step, group)], rel=5e-4), (step, group)  # printed to 4 digits
            assert written > 0
    assert sorted(scalars["attention_logit_max/all"]) == list(range(2, DS3_STEPS + 1, 2))


def test_adam_moments_update_norms_parameter_norms_and_stable_rank_against_the_probes_reads(
    ds3_run: PyNativeRun,
) -> None:
    from mindformers_tbplugin.pipeline.gradient_groups import layer_group

    scalars = {tag: dict(points) for tag, points in read_scalars(ds3_run.run_dir).items()}
    probe = probed(ds3_run)
    for step in (5, 10):
        assert scalars["adam_m_norm/total"][step] == pytest.approx(probe[step]["adam"]["exp_avg"], rel=1e-5)
        assert scalars["adam_v_norm/total"][step] == pytest.approx(probe[step]["adam"]["exp_avg_sq"], rel=1e-5)
        assert scalars["update_norm/total"][step] == pytest.approx(probe[step]["update_norm"], rel=1e-4)
        groups: dict[str, float] = {}
        for name, squares in probe[step]["param_squares"].items():
            groups[layer_group(name)] = groups.get(layer_group(name), 0.0) + squares
        for group, squares in groups.items():
            assert scalars[f"param_norm/{group}"][step] == pytest.approx(math.sqrt(squares), rel=1e-5), group
        assert scalars["train/param_norm"][step] == pytest.approx(math.sqrt(sum(groups.values())), rel=1e-5)
        ranks = probe[step]["stable_rank"]
        assert ranks
        for name, value in ranks.items():
            assert scalars[f"weight_stable_rank/{name}"][step] == pytest.approx(value, rel=1e-4), name


def _incident(run: PyNativeRun) -> dict:
    (line,) = (run.folder / "alerts.jsonl").read_text().splitlines()
    alert = json.loads(line)
    assert (alert["rule"], alert["step"]) == ("threshold", TRIGGER)
    return alert["incident"]


def _dataset_rows(data: Path) -> list[list[int]]:
    from mindspore.mindrecord import FileReader

    reader = FileReader(str(data))
    try:
        return [[int(token) for token in row["input_ids"]] for row in reader.get_next()]
    finally:
        reader.close()


def test_an_incident_names_the_rows_read_the_iteration_checkpoint_and_a_resume_that_says_what_it_cannot(
    ds3_run: PyNativeRun, xy_data: Path
) -> None:
    incident = _incident(ds3_run)
    saved = ds3_run.folder / "ckpt" / f"iteration_{SAVE_EVERY:08d}"
    assert incident["checkpoint"] == {"step": SAVE_EVERY, "path": str(saved)}
    assert incident["resume"] == ["checkpoint:", f"  load_path: '{saved}'", "  no_load_optim: False"]
    assert "no key that skips data" in incident["resume_note"]
    assert [entry["rank"] for entry in incident["ranks"]] == [0]
    # the rows: what the model's forward got at that step (the probe's pre-hook), found in the dataset
    (sample,) = incident["samples"]
    rows = _dataset_rows(xy_data)
    seen = [row for micro_batch in probed(ds3_run)[TRIGGER]["inputs"] for row in micro_batch]
    assert [rows[index] for index in sample["indices"]] == seen
    assert len(seen) == 4  # two micro-batches of two rows
    layers = [entry["group"] for entry in incident["layers"]]
    assert layers and set(layers) <= {
        "embedding",
        "final_norm",
        "head",
        "layers.0",
        "layers.1",
        "layers.2",
        "mtp.layers.0",
    }


def test_the_resume_lines_as_the_incident_writes_them_resume_from_that_checkpoint(
    ds3_run: PyNativeRun, xy_data: Path
) -> None:
    """Applied to the config as written: the resumed attempt starts after the checkpoint's step, continues the
    run, prints the uninterrupted run's losses, and (as the note says) reads the alert step's batch again."""
    folder = ds3_run.folder / "resume"
    folder.mkdir()
    resumed = yaml.safe_load("\n".join(_incident(ds3_run)["resume"]))
    config = yaml.safe_load((ds3_run.folder / "ds3.yaml").read_text())
    config["checkpoint"].update(resumed["checkpoint"], enable_save=False)
    config["callbacks"] = [dict(entry) for entry in DS3_MONITORS[:2]]
    config["callbacks"][1]["log_dir"] = str(ds3_run.log_root)
    path = folder / "ds3.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    second = pynative_train(path, **PROBE)
    assert second.returncode == 0, second.output[-5000:]
    first = printed_parts(ds3_run)
    again = printed_parts(second)
    assert sorted(again) == list(range(SAVE_EVERY + 1, DS3_STEPS + 1))
    for step, values in again.items():
        assert values == pytest.approx(first[step], abs=2e-6), step
    assert probed(second)[TRIGGER]["inputs"] == probed(ds3_run)[TRIGGER]["inputs"]
    assert read_scalars(ds3_run.run_dir)["meta/restart"] == [(SAVE_EVERY + 1, float(SAVE_EVERY))]


def test_the_printed_training_is_the_same_without_the_monitors(ds3_run: PyNativeRun, xy_data: Path) -> None:
    folder = ds3_run.folder / "without"
    folder.mkdir()
    alone = pynative_train(ds3_config(folder, xy_data, DS3_MONITORS[:1]), **PROBE)
    assert alone.returncode == 0, alone.output[-5000:]
    assert printed_parts(alone) == printed_parts(ds3_run)  # to the last printed digit


@pytest.fixture(scope="module")
def qwen3_moe_run(tmp_path_factory: pytest.TempPathFactory, xy_data: Path) -> PyNativeRun:
    """Routers without expert bias (their token counts only grow), per-layer norms on through MindFormers' own
    switch (``monitor.train_state.local_norm``), which also prints each parameter's gradient norm."""
    folder = tmp_path_factory.mktemp("qwen3_moe")
    monitor = {"type": "TensorBoardMonitor", "experiment": "qwen3_moe", "moe_every": 1}
    config = qwen3_config(
        folder,
        xy_data,
        [monitor],
        6,
        "qwen3_moe.yaml",
        "tiny_qwen3_moe_cpu.yaml",
        monitor={"train_state": {"local_norm": True}},
    )
    run = pynative_train(config, **PROBE)
    assert run.returncode == 0, run.output[-5000:]
    return run


def test_each_layer_groups_norm_is_the_norm_of_the_parameters_mindformers_printed_for_it(
    qwen3_moe_run: PyNativeRun,
) -> None:
    """One micro-batch per step: TrainStateMonitor's per-parameter norm of it is the step's gradient norm."""
    from mindformers_tbplugin.pipeline.gradient_groups import layer_group

    printed: dict[int, dict[str, float]] = {}
    step = 0
    for line in qwen3_moe_run.output.splitlines():
        header = re.search(r'\{ "step": (\d+), "micro_step": 1 \}', line)
        if header:
            step = int(header.group(1))
        norm = re.search(r'\{ "local_norm": (\S+):\s+([0-9.]+) \}', line)
        if norm:
            printed.setdefault(step, {})[norm.group(1)] = float(norm.group(2))
    assert sorted(printed) == list(range(1, 7))
    scalars = {tag: dict(points) for tag, points in read_scalars(qwen3_moe_run.run_dir).items()}
    for step, norms in printed.items():
        groups: dict[str, float] = {}
        for name, value in norms.items():
            groups[layer_group(name)] = groups.get(layer_group(name), 0.0) + value**2
        assert sorted(groups) == ["embedding", "final_norm", "head", "layers.0", "layers.1"]
        for group, squares in groups.items():
            written = scalars[f"grad_norm/{group}"][step]
            assert written == pytest.approx(math.sqrt(squares), rel=1e-4, abs=2e-6), (group, step)


def test_routers_without_expert_bias_get_each_steps_own_load(qwen3_moe_run: PyNativeRun) -> None:
    """Their counts only grow (nothing resets them): a step's load is the growth since the step before."""
    scalars = {tag: dict(points) for tag, points in read_scalars(qwen3_moe_run.run_dir).items()}
    probe = probed(qwen3_moe_run)
    printed = printed_parts(qwen3_moe_run)
    for step in range(2, 7):
        for path, counts in probe[step]["loads"].items():
            own = [now - before for now, before in zip(counts, probe[step - 1]["loads"][path], strict=True)]
            assert sum(own) == 2 * 32 * 2
            group = group_of(path)
            expected = max(own) / (sum(own) / len(own)) - 1
            assert scalars[f"moe/{group}/max_violation"][step] == pytest.approx(expected, abs=1e-6), (group, step)
        assert scalars["train/loss_aux"][step] == pytest.approx(2 * 1e-3 * printed[step][1], rel=2e-6)
    assert "moe/layers.0/bias_range" not in scalars  # no expert bias


# -- the trainer's printed log, imported ------------------------------------------------------------------
def _imported_against_written(run: PyNativeRun, tags: tuple[str, ...], steps: int) -> None:
    """LossCallback's printed log (output/log/rank_0/info.log) read by `mftb import`'s reader: every step's
    value within the printed resolution (half of it, and the event's float32) of what the monitor wrote."""
    from mindformers_tbplugin.imports import mindformers_log

    imported = mindformers_log.read([run.folder / "output" / "log" / "rank_0" / "info.log"])
    written = {tag: dict(points) for tag, points in read_scalars(run.run_dir).items()}
    for tag in tags:
        assert sorted(imported.scalars[tag]) == sorted(written[tag]) == list(range(1, steps + 1)), tag
        for step, value in written[tag].items():
            allowed = imported.resolution[tag] / 2 + abs(value) * 2**-24 + 1e-12
            assert abs(imported.scalars[tag][step] - value) <= allowed, (tag, step, imported.scalars[tag][step], value)


def test_the_printed_log_imports_as_what_the_monitor_wrote(pynative_run: PyNativeRun) -> None:
    _imported_against_written(pynative_run, ("train/loss", "train/lr", "train/grad_norm"), STEPS)


def test_the_printed_mtp_depths_import_as_the_monitors_mtp_loss(ds3_run: PyNativeRun) -> None:
    _imported_against_written(ds3_run, ("train/loss", "train/loss_mtp", "train/grad_norm"), DS3_STEPS)
