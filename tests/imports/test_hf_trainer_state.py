"""Hugging Face Trainer's trainer_state.json, written by transformers' own ``TrainerState.save_to_json``
with a ``log_history`` built as ``Trainer.log`` builds it (``{**logs, "step": global_step}``, the loss a
mean over ``logging_steps`` rounded to 4 decimals, as ``_maybe_log_save_evaluate`` computes it). A
whole ``Trainer.train`` needs torch, which is not installed here."""

from __future__ import annotations

from pathlib import Path

import pytest

from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.imports.detect import read_source
from mindformers_tbplugin.imports.hf_trainer_state import sniff

LOGGING_STEPS = 5


def trainer_state(folder: Path, max_steps: int = 30, logging_steps: int = LOGGING_STEPS) -> dict[int, dict]:
    """Write ``folder/trainer_state.json``; returns the logs per step as Trainer would have logged them."""
    from transformers.trainer_callback import TrainerState

    state = TrainerState(max_steps=max_steps, logging_steps=logging_steps, eval_steps=10)
    step_losses = {step: 2.0 + 1.0 / step for step in range(1, max_steps + 1)}
    logged: dict[int, dict] = {}
    for step in range(logging_steps, max_steps + 1, logging_steps):
        state.global_step, state.epoch = step, step / max_steps
        window = [step_losses[s] for s in range(step - logging_steps + 1, step + 1)]
        logs = {
            "loss": round(sum(window) / logging_steps, 4),
            "grad_norm": 0.5 + step / 100,
            "learning_rate": 2e-5 * (1 - step / max_steps),
        }
        state.log_history.append({**logs, "epoch": state.epoch, "step": step})
        logged[step] = logs
        if step % 10 == 0:
            evaluation = {"eval_loss": 2.05 + 1.0 / step, "eval_runtime": 1.25, "eval_samples_per_second": 80.0}
            state.log_history.append({**evaluation, "epoch": state.epoch, "step": step})
            logged[step] = {**logs, **evaluation}
    state.log_history.append(
        {"epoch": 1.0, "step": max_steps, "train_loss": 2.1, "train_runtime": 12.5, "total_flos": 1e12}
    )
    folder.mkdir(parents=True, exist_ok=True)
    state.save_to_json(str(folder / "trainer_state.json"))
    return logged


def test_log_history_under_our_tags(tmp_path: Path) -> None:
    logged = trainer_state(tmp_path / "sft")
    run = read_source([tmp_path / "sft" / "trainer_state.json"])
    assert run.format == "hf-trainer-state"
    assert run.scalars["train/loss"] == {step: logs["loss"] for step, logs in logged.items()}
    assert run.scalars["train/grad_norm"] == {step: logs["grad_norm"] for step, logs in logged.items()}
    assert run.scalars["train/lr"] == {step: logs["learning_rate"] for step, logs in logged.items()}
    assert run.scalars["eval/loss"] == {s: logs["eval_loss"] for s, logs in logged.items() if "eval_loss" in logs}
    assert run.scalars["eval/runtime"] == {10: 1.25, 20: 1.25, 30: 1.25}
    assert run.scalars["import/train_loss"] == {30: 2.1}
    assert run.scalars["import/epoch"][15] == 0.5
    assert run.averaged_over == {"train/loss": LOGGING_STEPS}
    assert run.resolution == {"train/loss": 0.0001}


def test_output_folder_with_checkpoint_copies(tmp_path: Path) -> None:
    trainer_state(tmp_path / "out")
    trainer_state(tmp_path / "out" / "checkpoint-20", max_steps=20)
    (tmp_path / "out" / "config.json").write_text('{"model_type": "llama"}\n')
    run = read_source([tmp_path / "out"])
    assert max(run.scalars["train/loss"]) == 30
    assert any("checkpoint-20/ (hf-trainer-state) under it is not imported" in note for note in run.notes)


def test_logging_interval_from_the_steps_when_the_state_does_not_record_it(tmp_path: Path) -> None:
    import json

    trainer_state(tmp_path, logging_steps=3)
    state = json.loads((tmp_path / "trainer_state.json").read_text())
    del state["logging_steps"]
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))
    assert read_source([tmp_path / "trainer_state.json"]).averaged_over == {"train/loss": 3}


def test_bad_files(tmp_path: Path) -> None:
    bad = tmp_path / "trainer_state.json"
    bad.write_text('{"log_history": 5}')
    with pytest.raises(UsageError, match="its log_history is not a list"):
        read_source([bad])
    bad.write_text('{"log_history": [{"loss": 1.0}, {"loss": 0.9, "step": 2}]')  # cut short
    with pytest.raises(UsageError, match=r"not a readable trainer_state\.json"):
        read_source([bad])
    bad.write_text('{"log_history": [{"loss": 1.0}, {"loss": 0.9, "step": 2}, {"loss": 0.8, "step": "3"}]}')
    run = read_source([bad])
    assert run.scalars["train/loss"] == {2: 0.9}
    assert run.skipped == ["2 log_history entries without an integer step (entries 0, 2)"]
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "hidden_size": 64}')
    assert not sniff(config, config.read_bytes())
