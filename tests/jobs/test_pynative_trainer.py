"""MindFormers 2.x's PyNative trainer (``mindformers.pynative.trainer.Trainer``) with the same YAML
callback entries as the classic trainer: real tiny Qwen3 trainings on CPU, read back with
TensorBoard's reader, compared with what the trainer's own LossCallback printed.

Runs where MindFormers 2.x is installed (``make compat`` builds that environment, with CPU stand-ins
for kernels that exist only on Ascend: tests/compat/mf2x_cpu/); skipped elsewhere.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
    folder: Path, data: Path, callbacks: list[dict], steps: int = STEPS, name: str = "qwen3.yaml", **sections: dict
) -> Path:
    config = yaml.safe_load((MF2X / "tiny_qwen3_cpu.yaml").read_text())
    config["train_dataset"]["dataloader"]["dataset_files"] = str(data)
    config["training"]["steps"] = steps
    log_dir = str(folder / "tb")
    config["callbacks"] = [dict(e, log_dir=log_dir) if e["type"] == "TensorBoardMonitor" else e for e in callbacks]
    for section, values in sections.items():
        config[section].update(values)
    path = folder / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def pynative_train(config: Path, *modules: str) -> PyNativeRun:
    result = subprocess.run(
        [sys.executable, str(MF2X / "train.py"), str(config), *modules],
        cwd=config.parent,
        env=subprocess_env(PYTHONPATH=str(HELPERS)),
        capture_output=True,
        text=True,
        timeout=900,
    )
    return PyNativeRun(config.parent, config.parent / "tb", result.stdout + result.stderr, result.returncode)


@pytest.fixture(scope="module")
def pynative_run(tmp_path_factory: pytest.TempPathFactory, xy_data: Path) -> PyNativeRun:
    folder = tmp_path_factory.mktemp("pynative")
    run = pynative_train(qwen3_config(folder, xy_data, MONITORS))
    assert run.returncode == 0, run.output[-5000:]
    return run


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
    """Multi-rank: the trainer's CallbackHandler and hooks, driven by a stand-in loop (see the helper)."""
    config = yaml.safe_load((MF2X / "tiny_qwen3_cpu.yaml").read_text())
    config["callbacks"] = [dict(MONITORS[0], log_dir=str(tmp_path / "tb"), aggregate_every=4)]
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
    reported = [line.split()[1:] for line in logs.splitlines() if line.startswith("RANK_STEP ")]
    losses: dict[int, list[float]] = {}
    lrs: dict[int, float] = {}
    for _rank, step, loss, lr in reported:
        losses.setdefault(int(step), []).append(float(loss))
        lrs[int(step)] = float(lr)
    assert sorted(losses) == list(range(1, steps + 1)) and all(len(v) == 2 for v in losses.values())
    (run_dir,) = run_dirs(tmp_path / "tb")
    scalars = read_scalars(run_dir)
    for step, loss in scalars["train/loss"]:
        assert loss == pytest.approx(sum(losses[step]) / 2, abs=1e-5), step
    for step, lr in scalars["train/lr"]:
        assert lr == pytest.approx(lrs[step], rel=1e-6), step
    assert [step for step, _ in scalars["train/grad_norm"]] == list(range(1, steps + 1))
    for rank in (0, 1):
        rank_scalars = read_scalars(run_dir / f"rank_{rank}")
        assert [step for step, _ in rank_scalars["perf/step_time_ms"]] == list(range(1, steps + 1))
