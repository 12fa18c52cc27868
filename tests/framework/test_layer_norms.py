"""Per-layer gradient and parameter norms (``runner_wrapper.local_norm: True``) in real trainings of
the tiny LLaMA and the tiny Qwen2.5 through ``mftb train``: the tags, their agreement with what
MindFormers' wrapper returned, the histogram, an exploding layer named by the alert, and a training
without ``local_norm`` writing none of it."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import HELPERS, MFTB, REPO, TrainingRun, read_scalars, run_dirs, subprocess_env, train

pytestmark = pytest.mark.process

CONFIGS = {"llama": REPO / "configs/tiny/llama_tiny_cpu.yaml", "qwen2_5": REPO / "configs/tiny/qwen2_5_tiny_cpu.yaml"}
GROUPS = ("embedding", "layers.0", "layers.1", "final_norm", "head")
# The same function, with layer 1's attention output projection getting 100x its gradient.
EXPLODING = {"model.layers.1.attention.wv.weight": 100.0, "model.layers.1.attention.wo.weight": 0.01}


def _local_norm_config(folder: Path, data: Path, model: str, callbacks: list[dict], num_samples: int) -> Path:
    config = yaml.safe_load(CONFIGS[model].read_text())
    config["output_dir"] = str(folder / "output")
    config["train_dataset"]["data_loader"].update(dataset_dir=str(data), num_samples=num_samples)
    config["train_dataset_task"]["dataset_config"] = config["train_dataset"]
    config["runner_wrapper"]["local_norm"] = True  # the one line users add
    config["callbacks"] = callbacks
    path = folder / f"{model}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _histograms(run_dir: Path) -> dict[str, list]:
    from tensorboard.backend.event_processing.event_accumulator import HISTOGRAMS, EventAccumulator

    accumulator = EventAccumulator(str(run_dir), size_guidance={HISTOGRAMS: 0})
    accumulator.Reload()
    return {tag: accumulator.Histograms(tag) for tag in accumulator.Tags()["histograms"]}


def _train(folder: Path, config: Path, **env: str) -> TrainingRun:
    run = train(config, folder, env=subprocess_env(PYTHONPATH=str(HELPERS), **env))
    assert run.returncode == 0, run.output[-5000:]
    return run


def _group_of(name: str) -> str:
    """The tiny LLaMA's and Qwen2.5's parameters by the part of the model their names say they are in."""
    layer = re.match(r"model\.layers\.(\d+)\.", name)
    if layer:
        return f"layers.{layer.group(1)}"
    parts = {"model.tok_embeddings.": "embedding", "model.norm_out.": "final_norm", "lm_head.": "head"}
    (group,) = [group for prefix, group in parts.items() if name.startswith(prefix)]
    return group


def _by_group(values: dict[str, float]) -> dict[str, float]:
    """Square roots of per-parameter sums of squares summed per group."""
    sums = dict.fromkeys(GROUPS, 0.0)
    for name, value in values.items():
        sums[_group_of(name)] += value
    return {group: math.sqrt(value) for group, value in sums.items()}


@pytest.mark.parametrize("model", [pytest.param("llama", marks=pytest.mark.compat), "qwen2_5"])
def test_group_norms_are_the_norms_of_the_parameters_named_for_the_group(
    tmp_path: Path, tiny_data: Path, model: str
) -> None:
    """Each grad_norm/<group> against the wrapper's per-parameter squared gradient norms of that group's
    parameters (named by the wrapper's weights, grouped here by their names), and each param_norm/<group>
    against the group's parameters read at that step; totals against all of them."""
    monitor = {
        "type": "TensorBoardMonitor",
        "log_dir": str(tmp_path / "tb"),
        "log_every": 2,
        "param_norm_every": 4,
        "grad_hist_every": 4,
        "extra_metrics": ["layer_norm_hooks:record_local_norms"],
    }
    config = _local_norm_config(tmp_path, tiny_data, model, [monitor], num_samples=24)
    recorded = tmp_path / "local_norms.jsonl"
    run = _train(tmp_path, config, MFTB_TEST_LOCAL_NORMS=str(recorded))
    assert "per-layer gradient norms of" in run.output
    scalars = {tag: dict(points) for tag, points in read_scalars(run.run_dir).items()}
    logged = [2, 4, 6, 8, 10, 12]
    returned = {r["step"]: r for r in map(json.loads, recorded.read_text().splitlines())}
    assert sorted(returned) == logged
    for group in (*GROUPS, "total"):
        assert sorted(scalars[f"grad_norm/{group}"]) == logged, group
    for step in logged:
        squares = dict(zip(returned[step]["names"], returned[step]["squares"], strict=True))
        for group, expected in _by_group(squares).items():
            assert scalars[f"grad_norm/{group}"][step] == pytest.approx(expected, rel=1e-4), (group, step)
        assert scalars["grad_norm/total"][step] == pytest.approx(math.sqrt(sum(squares.values())), rel=1e-4)
        # one rank: the clipped wrapper's global norm is the same (pre-clip) figure
        assert scalars["train/grad_norm"][step] == pytest.approx(scalars["grad_norm/total"][step], rel=1e-4)
    assert not any(
        tag.startswith("grad_norm/") for tag in scalars if tag.removeprefix("grad_norm/") not in (*GROUPS, "total")
    )
    for step in (4, 8, 12):
        params = returned[step]["params"]
        for group, expected in _by_group(params).items():
            assert scalars[f"param_norm/{group}"][step] == pytest.approx(expected, rel=1e-5), (group, step)
        assert scalars["train/param_norm"][step] == pytest.approx(math.sqrt(sum(params.values())), rel=1e-5)
    histogram = _histograms(run.run_dir)["grad_norm/per_param_log10"]
    assert [event.step for event in histogram] == [4, 8, 12]
    nonzero = [s for s in returned[4]["squares"] if s > 0]
    assert histogram[0].histogram_value.num == len(nonzero)
    assert histogram[0].histogram_value.max == pytest.approx(0.5 * math.log10(max(nonzero)), rel=1e-6)


def test_an_exploding_layer_is_the_one_the_alert_names(tmp_path: Path, tiny_data: Path) -> None:
    alerts = tmp_path / "alerts.jsonl"
    callbacks = [
        {"type": "ExplodeLayer", "auto_register": "layer_norm_hooks.ExplodeLayer", "step": 9, "scales": EXPLODING},
        {"type": "TensorBoardMonitor", "log_dir": str(tmp_path / "tb")},
        {
            "type": "AlertMonitor",
            "rules": [{"rule": "spike", "tag": "grad_norm/total", "k": 20, "min_points": 6, "window": 6}],
            "sinks": ["log", {"jsonl": str(alerts)}],
        },
    ]
    config = _local_norm_config(tmp_path, tiny_data, "llama", callbacks, num_samples=20)
    run = _train(tmp_path, config, REGISTER_PATH=str(HELPERS))
    fired = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert [(a["tag"], a["step"]) for a in fired][:1] == [("grad_norm/total", 9)], run.output[-3000:]
    message = fired[0]["message"]
    culprits = message.split("largest gradient norms against their recent median: ")[1].split(", ")
    assert culprits[0].startswith("layers.1 "), message
    assert len(culprits) == 3
    assert "layers.1" in run.output and "its median" in run.output  # the log sink says the same
    # mftb watch reads the group tags like any other
    rule = "spike,tag=grad_norm/layers.1,k=20,window=6,min_points=6"
    watch = subprocess.run(
        [MFTB, "watch", "--once", "--rule", rule, str(tmp_path / "tb")],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert watch.returncode == 1, watch.stdout + watch.stderr
    assert "grad_norm/layers.1 spiked" in watch.stdout and "at step 9" in watch.stdout, watch.stdout


def test_without_local_norm_nothing_of_it_is_written(tiny_run: TrainingRun) -> None:
    scalars = read_scalars(tiny_run.run_dir)
    assert not [tag for tag in scalars if tag.startswith(("grad_norm/", "param_norm/"))]
    assert "grad_norm/per_param_log10" not in _histograms(tiny_run.run_dir)
    assert "per-layer gradient norms" not in tiny_run.output
    assert [step for step, _ in scalars["train/param_norm"]] == [8, 16, 24, 32]
    assert run_dirs(tiny_run.log_root) == [tiny_run.run_dir]
