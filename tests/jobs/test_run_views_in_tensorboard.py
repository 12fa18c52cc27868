"""Histograms, HParams, config text, graph and eval scalars of two real tiny trainings, read back
through a real TensorBoard server's HTTP API."""

from __future__ import annotations

import json
import math
import re
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import MFTB, TrainingRun, subprocess_env, train, write_tiny_config
from tb_helpers import plain_tensorboard, wait_for

pytestmark = pytest.mark.process

STEPS = 16  # 32 samples, batch 2
SECRET = "hf-not-a-real-token-8c1f"
RUNS = {"lr_high": 3e-3, "lr_low": 1e-3}
EVAL_LINE = re.compile(r"Eval result: \{'PerplexityMetric': \{'loss': ([0-9.]+), 'PPL': ([0-9.]+)\}\}")


@dataclass
class Views:
    port: int
    runs: dict[str, TrainingRun]  # by experiment name
    names: dict[str, str]  # experiment -> TensorBoard run name (the run folder)

    def get(self, path: str, **query: str) -> bytes:
        url = f"http://127.0.0.1:{self.port}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.read()

    def get_json(self, path: str, **query: str) -> object:
        return json.loads(self.get(path, **query))

    def post_json(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())


def _config(folder: Path, data: Path, eval_data: Path, experiment: str, lr: float, histograms: dict) -> Path:
    callbacks = [
        {"type": "MFLossMonitor"},
        {"type": "HistogramMonitor", **histograms},
        {"type": "TensorBoardMonitor", "log_dir": str(folder / "tb"), "experiment": experiment},
    ]
    config = write_tiny_config(folder, data, callbacks, num_samples=2 * STEPS, name=f"{experiment}.yaml")
    import yaml

    values = yaml.safe_load(config.read_text())
    values["lr_schedule"]["learning_rate"] = lr
    values["optimizer"]["learning_rate"] = lr
    eval_dataset = json.loads(json.dumps(values["train_dataset"]))
    eval_dataset["data_loader"].update(dataset_dir=str(eval_data), num_samples=8)
    values.update(
        do_eval=True,
        eval_step_interval=8,
        eval_dataset=eval_dataset,
        eval_dataset_task={"type": "CausalLanguageModelDataset", "dataset_config": eval_dataset},
        metric={"type": "PerplexityMetric"},
        hf_token=SECRET,
    )
    config.write_text(yaml.safe_dump(values, sort_keys=False))
    return config


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path) -> Iterator[Views]:
    """Two trainings (lr 3e-3 and 1e-3) in one log root, with eval and histograms, and a server on it."""
    folder = tmp_path_factory.mktemp("views")
    eval_data = folder / "eval.mindrecord"  # the eval network reads seq_length tokens, training seq_length + 1
    subprocess.run(
        [MFTB, "make-data", "--output", str(eval_data), "--num_samples", "8", "--seq_length", "31"],
        check=True,
        env=subprocess_env(),
        capture_output=True,
    )
    histogram_options = {
        "lr_high": {"every_steps": 4, "include": ["*layers.0.*", "*embedding*"], "exclude": ["*feed_forward*"]},
        "lr_low": {"every_steps": 0, "every_epochs": 1, "max_elements": 1000},
    }
    runs = {}
    for experiment, lr in RUNS.items():
        config = _config(folder, tiny_data, eval_data, experiment, lr, histogram_options[experiment])
        run = train(config, folder)
        assert run.returncode == 0, run.output[-5000:]
        runs[experiment] = run
    log_root = folder / "tb"
    names = {
        experiment: next(p.name for p in log_root.iterdir() if p.name.startswith(experiment)) for experiment in RUNS
    }
    with plain_tensorboard(log_root) as port:
        served = Views(port, runs, names)
        assert wait_for(lambda: len(served.get_json("/data/runs")) == 2), served.get_json("/data/runs")
        yield served


def test_histograms_follow_the_schedule_and_patterns(views: Views) -> None:
    tags = wait_for(lambda: views.get_json("/data/plugin/histograms/tags"))
    high = set(tags[views.names["lr_high"]])
    assert "params/model.layers.0.attention.wq.weight" in high
    assert "params/model.tok_embeddings.embedding_weight" in high
    assert not any("feed_forward" in tag or "layers.1." in tag or "lm_head" in tag for tag in high)
    low = set(tags[views.names["lr_low"]])
    assert {"params/lm_head.weight", "params/model.layers.1.feed_forward.w2.weight"} <= low
    assert set(views.get_json("/data/plugin/distributions/tags")[views.names["lr_high"]]) == high

    def histogram(run: str, tag: str) -> list:
        return views.get_json("/data/plugin/histograms/histograms", run=views.names[run], tag=tag)

    points = histogram("lr_high", "params/model.layers.0.attention.wq.weight")
    assert [step for _, step, _ in points] == [4, 8, 12, 16]  # every_steps: 4
    # [left, right, count] buckets of all 64x64 values (4,096 < max_elements: no sampling)
    assert sum(count for _, _, count in points[0][2]) == 64 * 64
    assert points[0][2] != points[-1][2]  # the weights changed while training
    sampled = histogram("lr_low", "params/model.tok_embeddings.embedding_weight")
    assert [step for _, step, _ in sampled] == [STEPS]  # every_epochs: 1, one epoch
    assert 900 <= sum(count for _, _, count in sampled[0][2]) <= 1000  # 256x64 sampled to max_elements


def test_hparams_two_runs_are_two_sessions_with_their_values(views: Views) -> None:
    experiment = views.post_json("/data/plugin/hparams/experiment", {"experimentName": ""})
    names = {info["name"] for info in experiment["hparamInfos"]}
    assert {"learning_rate", "lr_schedule", "batch_size", "global_batch_size", "seq_length", "parameters"} <= names
    assert {"data_parallel", "pipeline_stage", "seed", "experiment", "num_layers", "hidden_size"} <= names
    # With a baseline, the comparison's mean errors too (declared by every run, blank without one).
    compared = {"compare/loss_mean_abs_err", "compare/loss_mean_rel_err"}
    compared |= {"compare/grad_norm_mean_abs_err", "compare/grad_norm_mean_rel_err"}
    assert {info["name"]["tag"] for info in experiment["metricInfos"]} == {"train/loss", "eval/loss", *compared}
    types = {info["name"]: info["type"] for info in experiment["hparamInfos"]}
    assert (types["learning_rate"], types["optimizer"], types["use_parallel"]) == (
        "DATA_TYPE_FLOAT64",
        "DATA_TYPE_STRING",
        "DATA_TYPE_BOOL",
    )

    request = {
        "experimentName": "",
        "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
        "colParams": [],
        "startIndex": 0,
        "sliceSize": 100,
    }
    groups = views.post_json("/data/plugin/hparams/session_groups", request)["sessionGroups"]
    assert len(groups) == 2
    by_lr = {group["hparams"]["learning_rate"]: group for group in groups}
    assert sorted(by_lr) == sorted(RUNS.values())
    for experiment_name, lr in RUNS.items():
        group = by_lr[lr]
        hparams = group["hparams"]
        assert hparams["experiment"] == experiment_name
        assert hparams["lr_schedule"] == "CosineWithWarmUpLR"
        assert (hparams["batch_size"], hparams["global_batch_size"], hparams["seq_length"]) == (2, 2, 32)
        assert (hparams["num_layers"], hparams["hidden_size"], hparams["seed"]) == (2, 64, 0)
        assert (hparams["data_parallel"], hparams["pipeline_stage"], hparams["world_size"]) == (1, 1, 1)
        assert hparams["parameters"] == 133_440
        (session,) = group["sessions"]
        assert session["name"] == views.names[experiment_name]
        assert session["status"] == "STATUS_SUCCESS"
        metrics = {value["name"]["tag"]: value for value in session["metricValues"]}
        assert metrics["train/loss"]["trainingStep"] == STEPS
        assert metrics["eval/loss"]["trainingStep"] == STEPS


def test_graph_shows_the_cell_hierarchy(views: Views) -> None:
    info = views.get_json("/data/plugin/graphs/info")
    run = views.names["lr_high"]
    assert info[run]["run_graph"] is True
    graph = views.get("/data/plugin/graphs/graph", run=run, conceptual="false").decode()
    nodes = dict(re.findall(r'name: "([^"]+)"\n  op: "([^"]+)"', graph))
    assert nodes["LlamaForCausalLM/model/layers/0/LLamaDecodeLayer"] == "LLamaDecodeLayer"
    assert nodes["LlamaForCausalLM/model/layers/1/attention/wq/Linear"] == "Linear"
    assert nodes["LlamaForCausalLM/model/layers/0/attention/wq/weight"] == "Parameter"
    weight = graph[graph.index('name: "LlamaForCausalLM/model/layers/0/attention/wq/weight"') :].split("node {")[0]
    assert "size: 64" in weight and '"Float32"' in weight and "i: 4096" in weight


def test_config_and_parameter_table_as_text(views: Views) -> None:
    run = views.names["lr_high"]
    assert set(views.get_json("/data/plugin/text/tags")[run]) >= {"run/config", "run/parameters"}
    (config,) = views.get_json("/data/plugin/text/text", run=run, tag="run/config")
    assert "learning_rate: 0.003" in config["text"] and "eval_step_interval: 8" in config["text"]
    assert "hf_token: &#39;******&#39;" in config["text"] or "hf_token: '******'" in config["text"]
    assert "pad_token_id: 0" in config["text"]  # token ids are not secrets
    (table,) = views.get_json("/data/plugin/text/text", run=run, tag="run/parameters")
    assert "133,440" in table["text"] and "LlamaModel" in table["text"] and "16,384" in table["text"]


def test_secret_never_reaches_the_event_files(views: Views) -> None:
    files = [f for run in views.runs.values() for f in run.log_root.rglob("*tfevents*")]
    assert files
    assert not any(SECRET.encode() in f.read_bytes() for f in files)


def test_eval_scalars_at_their_training_steps(views: Views) -> None:
    for experiment, run in views.runs.items():
        printed = [(float(loss), float(ppl)) for loss, ppl in EVAL_LINE.findall(run.output)]
        assert len(printed) == STEPS // 8
        name = views.names[experiment]
        losses = views.get_json("/data/plugin/scalars/scalars", run=name, tag="eval/loss")
        perplexities = views.get_json("/data/plugin/scalars/scalars", run=name, tag="eval/perplexity")
        assert [step for _, step, _ in losses] == [8, 16]
        for (_, _, loss), (_, _, ppl), (want_loss, want_ppl) in zip(losses, perplexities, printed, strict=True):
            assert math.isclose(loss, want_loss, rel_tol=1e-6)
            assert math.isclose(ppl, want_ppl, rel_tol=1e-5)
