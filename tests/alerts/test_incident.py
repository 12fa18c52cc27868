"""An alert's incident (alerts/incident.py): the ranks' losses at its step highest first (a NaN loss
first, ranks that sent none left out), the layers, the step's optimizer values merged from the step's
writes, the last checkpoint saved before the step (real files) and the lines that resume past it, and
the Markdown the Text tab and ``mftb incident`` show."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from mindformers_tbplugin.alerts.culprits import GradientCulprits
from mindformers_tbplugin.alerts.incident import TOP_RANKS, IncidentRecorder, markdown
from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.framework.checkpoints import CallbackCheckpoints, IterationCheckpoints
from mindformers_tbplugin.pipeline.run import Run


def _alert(step: int, tag: str = "train/loss") -> Alert:
    return Alert("spike", tag, step, 4.38, 2.0, "train/loss 4.38 is 2.2x its median", "warning")


def _saved(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"ckpt")
    return folder


def test_ranks_come_highest_first_a_nan_loss_first_and_at_most_the_top_eight() -> None:
    run = Run()
    losses = np.array([2.0, 2.1, 4.38, -np.inf, *np.linspace(1.0, 1.9, 8), math.nan])  # rank 3 sent none
    run.keep_rank_losses([(7, np.zeros(13)), (8, losses)])
    incident = IncidentRecorder(run, GradientCulprits()).incident(_alert(8))
    ranks = incident["ranks"]
    assert len(ranks) == TOP_RANKS and ranks[0] == {"rank": 12, "value": "nan"}
    assert [entry["rank"] for entry in ranks[1:4]] == [2, 1, 0] and 3 not in [entry["rank"] for entry in ranks]
    assert incident["ranks_tag"] == "train/loss" and incident["samples"] is None and incident["samples_unknown"]


def test_a_single_process_names_itself_with_the_written_loss_and_the_steps_state() -> None:
    recorder = IncidentRecorder(Run(), GradientCulprits())
    recorder.remember(5, {"train/lr": 1e-4, "train/grad_norm": 3.5})  # a step's values in two writes
    recorder.remember(5, {"train/loss": 4.0, "train/loss_scale": 1024.0})
    incident = recorder.incident(_alert(5))
    assert incident["ranks"] == [{"rank": 0, "value": 4.0}]
    assert (incident["lr"], incident["grad_norm"], incident["loss_scale"]) == (1e-4, 3.5, 1024.0)
    assert recorder.incident(_alert(6))["lr"] is None  # nothing written at that step
    assert json.loads(json.dumps(_alert(5).as_dict()))  # no incident key outside AlertMonitor
    assert "incident" not in _alert(5).as_dict()


def test_layers_are_the_groups_that_stand_out_against_their_median() -> None:
    culprits = GradientCulprits()
    for _ in range(5):
        culprits.remember({"grad_norm/embedding": 1.0, "grad_norm/layers.0": 0.1, "grad_norm/layers.1": 0.01})
    recorder = IncidentRecorder(Run(), culprits)
    recorder.remember(6, {"grad_norm/embedding": 1.1, "grad_norm/layers.1": 0.5, "grad_norm/total": 1.2})
    layers = recorder.incident(_alert(6))["layers"]
    assert layers[0] == {"group": "layers.1", "grad_norm": 0.5, "times_median": 50.0}
    assert [entry["group"] for entry in layers] == ["layers.1", "embedding"]


def test_the_last_checkpoint_before_the_step_and_the_lines_that_resume_past_it(tmp_path: Path) -> None:
    folder = _saved(tmp_path / "checkpoint" / "rank_0", "llama-1_4.ckpt", "llama-1_8.ckpt", "llama-2_2.ckpt", "x.txt")
    recorder = IncidentRecorder(Run(), GradientCulprits(), CallbackCheckpoints([folder], steps_per_epoch=8))
    incident = recorder.incident(_alert(10))  # epoch 2 step 2 is global step 10: saved after the bad batch
    assert incident["checkpoint"] == {"step": 8, "path": str(folder / "llama-1_8.ckpt")}
    assert incident["resume"] == [
        f"load_checkpoint: '{tmp_path / 'checkpoint'}'",
        "resume_training: 'llama-1_8.ckpt'",
        "ignore_data_skip: False",
        "data_skip_steps: 10",
    ]
    assert recorder.incident(_alert(4))["checkpoint"] is None  # nothing saved before step 4
    flat = IncidentRecorder(
        Run(), GradientCulprits(), CallbackCheckpoints([_saved(tmp_path / "flat", "m-1_3.safetensors")], None)
    )
    assert flat.incident(_alert(5))["resume"][0] == f"load_checkpoint: '{tmp_path / 'flat'}'"  # no rank folder


def test_the_markdown_says_it_all_and_a_failure_leaves_the_alert_as_it_was(tmp_path: Path) -> None:
    run = Run()
    run.keep_rank_losses([(8, np.array([2.0, 4.38]))])
    folder = _saved(tmp_path / "checkpoint" / "rank_0", "llama-1_4.ckpt")
    recorder = IncidentRecorder(run, GradientCulprits(), CallbackCheckpoints([folder], None))
    recorder.remember(8, {"train/lr": 1e-4})
    text = markdown(recorder.attach(_alert(8)))
    assert text.startswith("**spike** on `train/loss` at step 8 (warning): train/loss 4.38 is 2.2x its median")
    assert "- ranks by `train/loss`, highest first: rank 1 4.38, rank 0 2" in text
    assert "- at that step: lr 0.0001, grad_norm n/a, loss_scale n/a" in text
    assert "```yaml\nload_checkpoint: " in text and "data_skip_steps: 8\n```" in text
    broken = IncidentRecorder(run, GradientCulprits(), CallbackCheckpoints([tmp_path / "missing"], "not a number"))  # type: ignore[arg-type]
    _saved(tmp_path / "missing", "llama-2_1.ckpt")
    assert broken.attach(_alert(8)).incident is None


def test_the_pynative_trainers_iteration_folders_and_a_resume_that_says_it_cannot_skip(tmp_path: Path) -> None:
    """MindFormers 2.x's PyNative trainer: complete ``iteration_<step>`` folders (common.json written) under
    checkpoint.save_path; its resume keys, and the note that no key skips the bad batch."""
    for step, complete in ((4, True), (8, True), (9, False), (12, True)):
        folder = tmp_path / "ckpt" / f"iteration_{step:08d}"
        folder.mkdir(parents=True)
        if complete:
            (folder / "common.json").write_text("{}")
    recorder = IncidentRecorder(Run(), GradientCulprits(), IterationCheckpoints(tmp_path / "ckpt"))
    incident = recorder.incident(_alert(10))  # iteration 9 is not complete, 12 is after the step
    saved = tmp_path / "ckpt" / "iteration_00000008"
    assert incident["checkpoint"] == {"step": 8, "path": str(saved)}
    assert incident["resume"] == ["checkpoint:", f"  load_path: '{saved}'", "  no_load_optim: False"]
    assert incident["resume_note"] == (
        "MindFormers' PyNative trainer has no key that skips data: from this checkpoint it reads the batches "
        "of steps 9 to 10 again, the batch of step 10 included"
    )
    text = markdown(recorder.attach(_alert(10)))
    assert "- to resume from it, set:\n\n```yaml\ncheckpoint:\n" in text and "no key that skips data" in text
    assert (
        IncidentRecorder(Run(), GradientCulprits(), IterationCheckpoints(None)).incident(_alert(10))["resume"] is None
    )
