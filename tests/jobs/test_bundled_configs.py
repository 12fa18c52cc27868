"""The bundled configs are what they say: the tiny Qwen2.5-style config trains on the CPU through
`mftb train` as shipped (only its paths and length changed) and its model is Qwen2.5-shaped; the mcore
pretraining configs keep MindFormers r1.9.0's published settings (no copy of them is needed: a table of
what was copied), their headers say where they come from and how to launch them; the tiny mcore models
are the models they claim; every monitoring value says why; `mftb validate` passes them."""

from __future__ import annotations

import itertools
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import MFTB, REPO, read_scalars, subprocess_env, train

QWEN_TINY = REPO / "configs" / "tiny" / "qwen2_5_tiny_cpu.yaml"


def test_qwen2_5_tiny_config_is_qwen_shaped() -> None:
    model = yaml.safe_load(QWEN_TINY.read_text())["model"]["model_config"]
    assert model["n_kv_heads"] < model["num_heads"]
    assert model["qkv_has_bias"] is True
    assert model["theta"] == 1_000_000


def test_qwen2_5_tiny_config_trains_on_cpu(tmp_path: Path, tiny_data: Path) -> None:
    config = yaml.safe_load(QWEN_TINY.read_text())
    config["output_dir"] = str(tmp_path / "output")
    config["train_dataset"]["data_loader"]["dataset_dir"] = str(tiny_data)
    config["train_dataset"]["data_loader"]["num_samples"] = 16  # 8 steps of batch 2
    config["train_dataset_task"]["dataset_config"] = config["train_dataset"]
    (monitor,) = [entry for entry in config["callbacks"] if entry["type"] == "TensorBoardMonitor"]
    monitor["log_dir"] = str(tmp_path / "tb")
    path = tmp_path / "qwen2_5_tiny_cpu.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))

    run = train(path, tmp_path)

    assert run.returncode == 0, run.output[-5000:]
    scalars = read_scalars(run.run_dir)
    assert [step for step, _ in scalars["train/loss"]] == list(range(1, 9))
    assert run.run_dir.name.startswith("qwen2_5_tiny_")


# -- MindFormers r1.9.0's mcore pretraining configs, and their tiny CPU counterparts -------------------
CONFIGS = REPO / "configs"
OUR_ENTRIES = {"TensorBoardMonitor", "AlertMonitor", "HistogramMonitor"}


@dataclass(frozen=True)
class Published:
    """What a bundled pretraining config copied from MindFormers r1.9.0 (nothing but our callbacks and
    the header may differ): the source, the parallel layout and model facts, MindFormers' callbacks."""

    source: str
    parallel: dict
    model: dict
    model_keys: int  # model.model_config holds exactly these many keys, as published
    top_level: frozenset[str]  # besides PUBLISHED_TOP_LEVEL
    mindformers_callbacks: tuple[str, ...]


# Top-level keys all three published configs have.
PUBLISHED_TOP_LEVEL = frozenset(
    {
        "seed",
        "output_dir",
        "load_checkpoint",
        "load_ckpt_format",
        "auto_trans_ckpt",
        "only_save_strategy",
        "resume_training",
        "use_parallel",
        "run_mode",
        "use_legacy",
        "trainer",
        "runner_config",
        "optimizer",
        "lr_schedule",
        "train_dataset",
        "train_dataset_task",
        "context",
        "parallel_config",
        "micro_batch_interleave_num",
        "parallel",
        "recompute_config",
        "model",
        "callbacks",
        "runner_wrapper",
        "profile",
        "profile_start_step",
        "profile_stop_step",
        "init_start_profile",
        "profile_communication",
        "profile_memory",
    }
)
PRETRAINING = {
    "qwen3/pretrain_qwen3_32b_4k_tb.yaml": Published(
        source="configs/qwen3/pretrain_qwen3_32b_4k.yaml",
        parallel={
            "data_parallel": 1,
            "model_parallel": 4,
            "pipeline_stage": 4,
            "micro_batch_num": 4,
            "use_seq_parallel": False,
            "gradient_aggregation_group": 1,
        },
        model={
            "model_type": "qwen3",
            "num_hidden_layers": 64,
            "hidden_size": 5120,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "seq_length": 4096,
            "offset": [-1, -1, 1, 1],
        },
        model_keys=38,
        top_level=frozenset({"src_strategy_path_or_dir", "layer_scale", "layer_decay", "lr_scale_factor"}),
        mindformers_callbacks=("MFLossMonitor", "CheckpointMonitor"),
    ),
    "qwen3_moe/pretrain_qwen3_30b_a3b_4k_tb.yaml": Published(
        source="configs/qwen3_moe/pretrain_qwen3_30b_a3b_4k.yaml",
        parallel={
            "data_parallel": 1,
            "model_parallel": 4,
            "pipeline_stage": 4,
            "micro_batch_num": 16,
            "expert_parallel": 4,
            "use_seq_parallel": True,
            "gradient_aggregation_group": 1,
        },
        model={
            "model_type": "qwen3_moe",
            "num_hidden_layers": 48,
            "hidden_size": 2048,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "moe_router_load_balancing_type": "gbs_aux_loss",
        },
        model_keys=41,
        top_level=frozenset({"print_separate_loss"}),
        mindformers_callbacks=("MFLossMonitor",),
    ),
    "deepseek3/pretrain_deepseek3_671b_tb.yaml": Published(
        source="configs/deepseek3/pretrain_deepseek3_671b.yaml",
        parallel={
            "data_parallel": 4,
            "model_parallel": 8,
            "pipeline_stage": 8,
            "expert_parallel": 32,
            "micro_batch_num": 32,
            "use_seq_parallel": True,
            "gradient_aggregation_group": 4,
        },
        model={
            "model_type": "deepseek_v3",
            "num_hidden_layers": 61,
            "hidden_size": 7168,
            "seq_length": 4096,
            "num_nextn_predict_layers": 1,
            "mtp_loss_factor": 0.3,
            "moe_router_enable_expert_bias": True,
            "pp_interleave_num": 2,
            "offset": [[1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, -2]],
        },
        model_keys=40,
        top_level=frozenset({"src_strategy_path_or_dir", "train_precision_sync"}),
        mindformers_callbacks=("MFLossMonitor", "TopkBiasBalanceCallback", "CheckpointMonitor"),
    ),
}
# The tiny mcore models: what each claims to be (its header and the table in configs/README.md).
TINY_MCORE = {
    "qwen3_tiny_cpu.yaml": {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "qk_layernorm": True,
    },
    "qwen3_moe_tiny_cpu.yaml": {
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        "num_hidden_layers": 2,  # every layer is an MoE layer
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_router_load_balancing_type": "gbs_aux_loss",
    },
    "deepseek3_tiny_cpu.yaml": {
        "model_type": "deepseek_v3",
        "architectures": ["DeepseekV3ForCausalLM"],
        "num_hidden_layers": 3,
        "first_k_dense_replace": 1,  # 1 dense + 2 MoE layers
        "multi_latent_attention": True,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "moe_router_enable_expert_bias": True,
        "num_nextn_predict_layers": 1,  # MTP depth 1
        "mtp_loss_factor": 0.3,
    },
}
MOE_KEYS = ("num_experts", "n_routed_experts", "num_experts_per_tok")


def _entries(config: dict, kind: str) -> list[dict]:
    return [entry for entry in config["callbacks"] if entry["type"] == kind]


def _header(path: Path) -> str:
    """The leading comment block as one line of text (a shell line continuation joined up)."""
    lines = itertools.takewhile(lambda line: line.startswith("#"), path.read_text().splitlines())
    return " ".join(" ".join(line[1:].removesuffix("\\").split()) for line in lines)


@pytest.mark.parametrize("name", PRETRAINING)
def test_pretraining_config_keeps_what_mindformers_published(name: str) -> None:
    published = PRETRAINING[name]
    config = yaml.safe_load((CONFIGS / name).read_text())
    assert set(config) == PUBLISHED_TOP_LEVEL | published.top_level  # no tensorboard: section either
    assert config["use_legacy"] is False
    assert config["parallel_config"] == published.parallel
    model = config["model"]["model_config"]
    assert {key: model[key] for key in published.model} == published.model
    assert len(model) == published.model_keys
    assert config["runner_wrapper"] == {"type": "MFTrainOneStepCell", "scale_sense": 1.0, "use_clip_grad": True}
    types = [entry["type"] for entry in config["callbacks"]]
    assert types == [*published.mindformers_callbacks, "TensorBoardMonitor", "AlertMonitor"]


@pytest.mark.parametrize("name", PRETRAINING)
def test_pretraining_config_header_says_source_hardware_and_launch(name: str) -> None:
    published = PRETRAINING[name]
    config = yaml.safe_load((CONFIGS / name).read_text())
    layout = config["parallel_config"]
    dp, mp, pp = layout["data_parallel"], layout["model_parallel"], layout["pipeline_stage"]
    devices = dp * mp * pp
    header = _header(CONFIGS / name)
    assert f"Source: MindFormers r1.9.0, {published.source}." in header
    assert "Copyright Huawei Technologies Co., Ltd; Apache License 2.0." in header
    assert f"Hardware: {devices} NPUs," in header and "Atlas 800T A2 (64 GB) nodes of 8" in header
    assert f"data_parallel {dp} x model_parallel {mp} x pipeline_stage {pp}" in header
    assert f"mftb validate configs/{name}" in header
    assert f"scripts/msrun_launch.sh --config configs/{name} --worker_num {devices} --local_worker_num 8" in header
    # A file the config names relative to the launch folder (the repository root) is there.
    speed_up = config["context"].get("ascend_config", {}).get("parallel_speed_up_json_path")
    assert speed_up is None or (REPO / speed_up).is_file()


def test_moe_pretraining_configs_read_the_routers_within_their_record_budget() -> None:
    from mindformers_tbplugin.pipeline.expert_records import reads_per_record

    # (file, MoE layers incl. MTP, experts, channels: load [+ expert bias], reads per record the comment states)
    for name, layers, experts, channels, said in [
        ("qwen3_moe/pretrain_qwen3_30b_a3b_4k_tb.yaml", 48, 128, 1, "one record per read"),
        ("deepseek3/pretrain_deepseek3_671b_tb.yaml", 59, 256, 2, "one record per 12 reads"),
    ]:
        text = (CONFIGS / name).read_text()
        (monitor,) = _entries(yaml.safe_load(text), "TensorBoardMonitor")
        reads = reads_per_record(layers, experts, channels, monitor["moe_every"], monitor["moe_record_budget"])
        (line,) = [line for line in text.splitlines() if line.strip().startswith("moe_record_budget:")]
        assert said in line and said == ("one record per read" if reads == 1 else f"one record per {reads} reads")
        assert monitor["aggregate_every"] % monitor["log_every"] == 0
        assert monitor["moe_every"] % monitor["aggregate_every"] == 0  # one read per aggregation interval
        (alerts,) = _entries(yaml.safe_load(text), "AlertMonitor")
        assert {"nonfinite", "expert_collapse"} <= {rule["rule"] for rule in alerts["rules"]}


@pytest.mark.parametrize("name", TINY_MCORE)
def test_tiny_mcore_config_is_the_model_it_claims(name: str) -> None:
    config = yaml.safe_load((CONFIGS / "tiny" / name).read_text())
    model = config["model"]["model_config"]
    assert config["use_legacy"] is False and "arch" not in config["model"]
    assert {key: model[key] for key in TINY_MCORE[name]} == TINY_MCORE[name]
    moe = any(key in model for key in MOE_KEYS)
    assert moe == (name != "qwen3_tiny_cpu.yaml")
    assert config["context"]["device_target"] == "CPU"
    assert config["runner_wrapper"]["type"] == "CPUTrainOneStepCell" and config["runner_wrapper"]["local_norm"] is True
    loader = config["train_dataset"]["data_loader"]
    assert loader["dataset_dir"] == "./output/data/mcore_xy.mindrecord"
    assert config["train_dataset"]["input_columns"] == ["input_ids", "labels", "loss_mask"]
    (monitor,) = _entries(config, "TensorBoardMonitor")
    assert monitor["experiment"] == name.removesuffix("_cpu.yaml") and monitor["log_every"] == 1
    assert monitor.get("moe_every") == (1 if moe else None)
    assert _entries(config, "AlertMonitor") == [{"type": "AlertMonitor"}]  # the default rules
    bias_balance = model.get("moe_router_enable_expert_bias") is True
    assert bool(_entries(config, "TopkBiasBalanceCallback")) == bias_balance
    assert config["callbacks"][0] == {"type": "MFLossMonitor"}


@pytest.mark.parametrize("config", sorted(CONFIGS.rglob("*.yaml")), ids=lambda path: path.name)
def test_every_monitoring_key_says_why_on_its_line(config: Path) -> None:
    """Each key (and each alert rule) of our entries carries a comment on its own line."""
    silent, ours = [], False
    for number, line in enumerate(config.read_text().splitlines(), start=1):
        if line.startswith("  - type: "):
            ours = line.split()[2] in OUR_ENTRIES
        elif not line.startswith("    "):
            ours = False
        elif ours and not line.lstrip().startswith("#") and "#" not in line:
            silent.append(number)
    assert silent == [], f"{config.name}: lines {silent} set a monitoring value without saying why"


@pytest.mark.process
def test_mcore_configs_validate_clean_with_the_cli() -> None:
    """`mftb validate` on the mcore configs: each OK with all its entries checked, notes only (where the
    runs go). Every bundled config passing at once: test_validate.test_every_bundled_config_is_valid."""
    files = [CONFIGS / name for name in PRETRAINING] + [CONFIGS / "tiny" / name for name in TINY_MCORE]
    result = subprocess.run(
        [MFTB, "validate", *map(str, files)], cwd=REPO, env=subprocess_env(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for path in files:
        entries = len(yaml.safe_load(path.read_text())["callbacks"])
        assert f"{path}: OK ({entries} callback entries checked)" in lines, result.stdout
    findings = [line for line in lines if line.startswith("  ")]
    assert len(findings) == len(files) and all(line.startswith("  note: ") for line in findings), result.stdout
    assert all("runs go to" in line for line in findings), result.stdout
