"""Shared fixtures: one real tiny MindFormers training reused by many tests, readers, subprocess environments.

Tests marked ``process`` start processes (trainings, msrun jobs, interpreters that import MindSpore or
MindFormers, TensorBoard servers, a browser); ``make test-fast`` runs the others. A module says so with
``pytestmark``, a test with ``@pytest.mark.process``; a test that uses the training fixtures below
(``tiny_data`` and everything built on it) is marked here, wherever it lives."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# MindSpore switches protobuf to its pure-Python implementation when it is imported, and its
# generated modules fail to load if protobuf was already loaded otherwise. Tests import TensorBoard's
# protobufs and MindSpore in one process, in any order: start the way a training process runs.
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
TINY_CONFIG = REPO / "configs" / "tiny" / "llama_tiny_cpu.yaml"
HELPERS = Path(__file__).resolve().parent / "helpers"
BIN = Path(sys.executable).parent
MFTB = str(BIN / "mftb")
MF_LOSS_LINE = re.compile(
    r"step:\[\s*(\d+)/\s*\d+\], loss:\[([0-9.]+)/[0-9.]+\], per_step_time: \d+ms, lr: ([0-9.e-]+)"
)


def run_mindformer_script() -> Path:
    """The installed MindFormers release's run_mindformer.py (r1.9.0's for MindFormers 1.9 and 2.x), as a
    release checkout would run it (tests/compat/run_mindformer/)."""
    from mindformers_tbplugin.framework import versions

    major, minor = (int(part) for part in (versions.find("mindformers").version or "1.9").split(".")[:2])
    release = "r1.7.0" if (major, minor) <= (1, 7) else "r1.8.0" if (major, minor) == (1, 8) else "r1.9.0"
    return REPO / "tests" / "compat" / "run_mindformer" / release / "run_mindformer.py"


def documentation() -> str:
    """README.md and every page of docs/, one text: what the tests check the code against."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return "\n".join(page.read_text(encoding="utf-8") for page in pages)


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for child processes: the venv first on PATH (msrun starts `python` from PATH). A
    PYTHONPATH given goes before the inherited one, which stays (it may hold a MindFormers checkout)."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("MFTB_NO_AUTOREGISTER", None)
    if extra.get("PYTHONPATH") and env.get("PYTHONPATH"):
        extra = {**extra, "PYTHONPATH": f"{extra['PYTHONPATH']}{os.pathsep}{env['PYTHONPATH']}"}
    env.update(extra)
    return env


# Builds tiny mcore models in a fresh interpreter (MindFormers' context is process-wide and it logs
# under ./output) and prints their trainable parameters' names.
BUILD_MCORE_MODELS = """
import json
from mindformers.core.context.build_context import build_context
build_context({"use_legacy": False, "context": {"mode": 0, "device_target": "CPU"}, "parallel": {}})
from mindformers.models.deepseek3.configuration_deepseek_v3 import DeepseekV3Config
from mindformers.models.deepseek3.modeling_deepseek_v3_train import TrainingDeepseekV3ForCausalLM
from mindformers.models.qwen3.configuration_qwen3 import Qwen3Config
from mindformers.models.qwen3.modeling_qwen3_train import TrainingQwen3ForCausalLM
tiny = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, max_position_embeddings=64, seq_length=32, tie_word_embeddings=False,
            params_dtype="float32", compute_dtype="float32", layernorm_compute_dtype="float32",
            softmax_compute_dtype="float32", rotary_dtype="float32", use_flash_attention=False)
qwen3 = TrainingQwen3ForCausalLM(Qwen3Config(head_dim=16, **tiny))
deepseek = TrainingDeepseekV3ForCausalLM(DeepseekV3Config(
    moe_intermediate_size=32, num_nextn_predict_layers=1, n_shared_experts=1, n_routed_experts=4,
    num_experts_per_tok=2, n_group=1, topk_group=1, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8,
    v_head_dim=16, qk_nope_head_dim=16, first_k_dense_replace=1, moe_grouped_gemm=True, **tiny))
print("NAMES " + json.dumps({model: [p.name for p in net.trainable_params()]
                             for model, net in (("qwen3", qwen3), ("deepseek_v3", deepseek))}))
"""


def printed_json(code: str, cwd: Path, prefix: str) -> Any:
    """Runs ``code`` in a fresh interpreter (MindFormers' context is process-wide and it logs under ./output)
    and returns the JSON it printed after ``prefix`` on a line of its own."""
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=subprocess_env(), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith(prefix + " ")]
    return json.loads(line.removeprefix(prefix + " "))


def write_tiny_config(
    folder: Path,
    data: Path,
    callbacks: list[dict],
    num_samples: int = 64,
    name: str = "tiny.yaml",
    local_norm: bool = False,
    **top_level: object,
) -> Path:
    """The bundled tiny config with its paths, size and callbacks changed for a test; per-layer
    gradient norms (``runner_wrapper.local_norm``) off unless asked for."""
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["runner_wrapper"]["local_norm"] = local_norm
    config["output_dir"] = str(folder / "output")
    config["train_dataset"]["data_loader"]["dataset_dir"] = str(data)
    config["train_dataset"]["data_loader"]["num_samples"] = num_samples
    config["train_dataset_task"]["dataset_config"] = config["train_dataset"]
    config["callbacks"] = callbacks
    config.update(top_level)
    path = folder / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def resumable_callbacks(monitor: dict) -> list[dict]:
    """Callbacks of a training meant to be killed and resumed: 0.4 s steps on rank 0 (SlowRank with
    MFTB_TEST_SLOW_RANK=0, MFTB_TEST_SLOW_SECONDS=0.4) leave time to kill it mid-run; a checkpoint
    every 8 steps; ``monitor`` last."""
    checkpoints = {
        "type": "CheckpointMonitor",
        "prefix": "tiny",
        "save_checkpoint_steps": 8,
        "keep_checkpoint_max": 10,
        "integrated_save": False,
        "async_save": False,
    }
    return [
        {"type": "MFLossMonitor"},
        {"type": "SlowRank", "auto_register": "rank_hooks.SlowRank"},
        checkpoints,
        monitor,
    ]


def mf_losses(log_text: str) -> dict[int, tuple[float, float]]:
    """{step: (loss, lr)} as MFLossMonitor printed them."""
    return {int(m.group(1)): (float(m.group(2)), float(m.group(3))) for m in MF_LOSS_LINE.finditer(log_text)}


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """All scalar series of a run through TensorBoard's own reader, every point kept."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    accumulator = EventAccumulator(str(run_dir), size_guidance={SCALARS: 0})
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


@contextlib.contextmanager
def plugin_log() -> Iterator[list[str]]:
    """Messages the plugin logs meanwhile (its logger may not propagate to the root logger)."""
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("mindformers_tbplugin")
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


def run_dirs(log_root: Path) -> list[Path]:
    return sorted(p for p in log_root.iterdir() if p.is_dir()) if log_root.exists() else []


# Fixtures that make data or run trainings in subprocesses: a test that needs one, directly or through
# another fixture, starts processes.
TRAINING_FIXTURES = frozenset({"tiny_data"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if TRAINING_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "tiny.mindrecord"
    subprocess.run(
        [MFTB, "make-data", "--output", str(path), "--num_samples", "256"],
        check=True,
        env=subprocess_env(),
        capture_output=True,
    )
    return path


@dataclass
class TrainingRun:
    folder: Path
    log_root: Path
    output: str
    returncode: int

    @property
    def run_dir(self) -> Path:
        (only,) = run_dirs(self.log_root)
        return only


def train(
    config: Path,
    cwd: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: int = 600,
    entry: Path | None = None,
) -> TrainingRun:
    """``mftb train``, or the ``entry`` script (a release's run_mindformer.py) with the same arguments."""
    command = [sys.executable, str(entry)] if entry else [MFTB, "train"]
    result = subprocess.run(
        [*command, "--config", str(config), *args],
        cwd=cwd,
        env=env or subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return TrainingRun(config.parent, config.parent / "tb", result.stdout + result.stderr, result.returncode)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path) -> TrainingRun:
    """32 steps of the tiny LLaMA through `mftb train`, with every TensorBoardMonitor feature on."""
    folder = tmp_path_factory.mktemp("tiny_run")
    callbacks = [
        {"type": "MFLossMonitor"},
        {
            "type": "TensorBoardMonitor",
            "log_dir": str(folder / "tb"),
            "experiment": "llama_tiny",
            "log_every": 1,
            "param_norm_every": 8,
            "vs_samples": True,
            "vs_tokens": True,
            "throughput_baseline": 40.0,  # samples/s per device: perf/linearity
            "optimizer_state_every": 8,
            "stable_rank_every": 8,
            "stable_rank_params": [r"\.attention\.w[qkvo]\.", "feed_forward"],
            "extra_metrics": [
                "custom_metrics_helpers:step_parity",
                "custom_metrics_helpers:batch_tokens",
                "custom_metrics_helpers:mindformers_adam_norms",
                "custom_metrics_helpers:reference_update_norms",
                "custom_metrics_helpers:mindformers_stable_rank",
            ],
        },
    ]
    config = write_tiny_config(folder, tiny_data, callbacks, num_samples=64)
    env = subprocess_env(PYTHONPATH=str(HELPERS))
    run = train(config, folder, env=env)
    assert run.returncode == 0, run.output[-5000:]
    return run
