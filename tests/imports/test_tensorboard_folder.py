"""TensorBoard folders read into our tag names, each written by the real writer code, and every value
checked against TensorBoard's own reader (EventAccumulator) of the same folder.

Megatron-LM writes with ``torch.utils.tensorboard``, whose ``add_scalar`` puts the tag into the
``Summary`` as given (no cleaning, unlike tensorboardX): torch is not installed here, so the test hands
the same ``Summary`` protos to tensorboardX's ``FileWriter`` (the bytes torch's writer would write).
Hugging Face's folders are written by transformers' own ``TensorBoardCallback`` (on tensorboardX, its
fallback when torch is absent) fed logs in the shape ``Trainer`` logs them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import read_scalars
from tensorboardX import SummaryWriter
from tensorboardX.proto.summary_pb2 import Summary

from mindformers_tbplugin.imports import tensorboard_folder
from mindformers_tbplugin.imports.detect import read_source
from mindformers_tbplugin.imports.imported_run import ImportedRun
from mindformers_tbplugin.imports.run_writer import write_run
from mindformers_tbplugin.tfevents.events import CellInfo, graph_event, hparams_experiment_event
from mindformers_tbplugin.tfevents.run_folders import event_files
from mindformers_tbplugin.tfevents.writer import RunWriter

STEPS = range(1, 11)


def as_torch_writes(writer: SummaryWriter, tag: str, value: float, step: int) -> None:
    """``torch.utils.tensorboard.SummaryWriter.add_scalar``: the tag kept verbatim, a simple_value."""
    writer.file_writer.add_summary(Summary(value=[Summary.Value(tag=tag, simple_value=value)]), step)


def megatron_folder(folder: Path, log_timers: bool = True) -> None:
    """The tags ``training_log`` (megatron/training/training.py) writes at each iteration, with the
    MTP and MoE trackers' and ``evaluate_and_print_results``' ones."""
    writer = SummaryWriter(str(folder))
    global_batch = 16
    for it in STEPS:
        samples = it * global_batch
        lm_loss = 10.0 - 0.37 * it + 0.01 * (it % 3)
        for tag, value, step in [
            ("learning-rate", 3e-4 * it / 10, it),
            ("learning-rate vs samples", 3e-4 * it / 10, samples),
            ("batch-size", global_batch, it),
            ("batch-size vs samples", global_batch, samples),
            ("lm loss", lm_loss, it),
            ("lm loss vs samples", lm_loss, samples),
            ("mtp_1 loss", lm_loss + 0.5, it),
            ("load_balancing_loss", 0.01 * it, it),
            ("loss-scale", 65536.0, it),
            ("grad-norm", 1.5 / it, it),
            ("params-norm", 250.0 + it, it),
        ]:
            as_torch_writes(writer, tag, value, step)
        if log_timers:
            as_torch_writes(writer, "iteration-time", 0.2 + it / 1000, it)
            as_torch_writes(writer, "throughput", 120.0 + it, it)
        if it % 5 == 0:
            as_torch_writes(writer, "lm loss validation", lm_loss + 0.2, it)
            as_torch_writes(writer, "lm loss validation ppl", float(np.exp(lm_loss + 0.2)), it)
    writer.close()


def test_megatron_folder_mapped_to_our_tags(tmp_path: Path) -> None:
    megatron_folder(tmp_path)
    theirs = dict(read_scalars(tmp_path))
    run = read_source([tmp_path])
    assert run.format == "megatron-tensorboard"
    mapping = {
        "lm loss": "train/loss",
        "lm loss vs samples": "train/loss_vs_samples",
        "learning-rate": "train/lr",
        "learning-rate vs samples": "train/lr_vs_samples",
        "grad-norm": "train/grad_norm",
        "loss-scale": "train/loss_scale",
        "params-norm": "train/param_norm",
        "throughput": "perf/model_tflops_per_device",
        "lm loss validation": "eval/loss",
        "lm loss validation ppl": "eval/perplexity",
        "mtp_1 loss": "import/mtp_1 loss",
        "load_balancing_loss": "import/load_balancing_loss",
        "batch-size": "import/batch-size",
        "batch-size vs samples": "import/batch-size vs samples",
    }
    for their_tag, ours in mapping.items():
        assert run.scalars[ours] == dict(theirs[their_tag]), their_tag
    # Megatron's iteration-time is in seconds; ours in milliseconds.
    assert run.scalars["perf/step_time_ms"] == pytest.approx({s: v * 1000 for s, v in theirs["iteration-time"]})
    assert set(run.scalars) == {*mapping.values(), "perf/step_time_ms"}
    assert run.averaged_over == {}  # TensorBoard gets each iteration's own value, not the printed means


def test_mindformers_builtin_writer_tags(tmp_path: Path) -> None:
    """MFLossMonitor's ``tensor_writer.add_scalar`` calls (tensorboardX, MindFormers' writer): its
    cleaning turns ``loss vs samples`` into ``loss_vs_samples``."""
    writer = SummaryWriter(str(tmp_path))
    for step in STEPS:
        writer.add_scalar("batch-size", 8, global_step=step)
        writer.add_scalar("loss", 11.0 - step * 0.1, global_step=step)
        writer.add_scalar("loss vs samples", 11.0 - step * 0.1, global_step=step * 8)
        writer.add_scalar("lm-loss", 10.9 - step * 0.1, global_step=step)
        writer.add_scalar("load-balancing-loss", 0.1, global_step=step)
        writer.add_scalar("mtp-loss", 0.3, global_step=step)
        writer.add_scalar("learning-rate", 1e-5 * step, global_step=step)
        writer.add_scalar("grad-norm", 2.0 / step, global_step=step)
        writer.add_scalar("iteration-time", 93, global_step=step)
        writer.add_scalar("throughput", 12.5, global_step=step)
        writer.add_scalar("model-flops-throughput-per-npu", 4.25, global_step=step)
    writer.close()
    theirs = dict(read_scalars(tmp_path))
    run = read_source([tmp_path])
    assert run.format == "mindformers-tensorboard"
    assert "train/loss_aux" not in run.scalars
    for their_tag, ours in {
        "loss": "train/loss",
        "loss_vs_samples": "train/loss_vs_samples",
        "lm-loss": "train/loss_lm",
        "load-balancing-loss": "import/load-balancing-loss",  # before its coefficient: not train/loss_aux
        "mtp-loss": "train/loss_mtp",
        "learning-rate": "train/lr",
        "grad-norm": "train/grad_norm",
        "iteration-time": "perf/step_time_ms",
        "model-flops-throughput-per-npu": "perf/model_tflops_per_device",
        "throughput": "import/throughput",  # samples/s per device: not our job-wide rate
        "batch-size": "import/batch-size",
    }.items():
        assert run.scalars[ours] == dict(theirs[their_tag]), their_tag
    assert run.resolution == {"perf/step_time_ms": 1.0}  # MindFormers writes whole milliseconds


def test_hugging_face_tensorboard_callback(tmp_path: Path) -> None:
    from transformers.integrations.integration_utils import TensorBoardCallback
    from transformers.trainer_callback import TrainerControl, TrainerState
    from transformers.training_args import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "tb"), report_to=[])
    state, control = TrainerState(), TrainerControl()
    callback = TensorBoardCallback()
    callback.on_train_begin(args, state, control)
    for step in STEPS:
        state.global_step = step
        logs = {"loss": 2.5 - step * 0.1, "grad_norm": 1.0 / step, "learning_rate": 5e-5 * (1 - step / 20)}
        callback.on_log(args, state, control, logs={**logs, "epoch": step / 10})
        if step % 5 == 0:
            callback.on_log(args, state, control, logs={"eval_loss": 2.6 - step * 0.1, "eval_runtime": 0.5})
    callback.on_train_end(args, state, control)
    theirs = dict(read_scalars(tmp_path / "tb"))
    run = read_source([tmp_path / "tb"])
    assert run.format == "hf-tensorboard"
    for their_tag, ours in {
        "train/loss": "train/loss",
        "train/grad_norm": "train/grad_norm",
        "train/learning_rate": "train/lr",
        "eval/loss": "eval/loss",
        "eval/runtime": "eval/runtime",
        "train/epoch": "import/train/epoch",
    }.items():
        assert run.scalars[ours] == dict(theirs[their_tag]), their_tag
    assert '"logging_dir"' in run.texts["import/args/text_summary"][0]
    # Trainer logs the loss as the mean of the steps since its previous log, to 4 decimals.
    assert run.averaged_over == {} and run.resolution == {"train/loss": 0.0001}


def test_our_run_keeps_every_tag_and_its_histograms_and_texts(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run")
    writer.add_session_start(1)
    for step in STEPS:
        # "loss", a custom tag spelled as MindFormers' writer's: the run stays ours
        writer.add_scalars(step, {"train/loss": 3.0 / step, "train/lr": 1e-4, "my/custom": float(step), "loss": 1.0})
    counts = [0.0, 2.0, 5.0, 1.0]
    writer.add_histogram(
        4,
        "grad_norm/per_param_log10",
        {"min": -3.0, "max": 0.5, "num": 8, "sum": -6.0, "sum_squares": 14.0},
        [-2.0, -1.0, 0.0, 0.5],
        counts,
    )
    writer.add_text(0, "run/config", "model: tiny")
    writer.add_built(0, lambda step, wall: graph_event(step, wall, [CellInfo("", "TinyModel")]))
    writer.add_built(0, lambda step, wall: hparams_experiment_event(step, wall, {"lr": float}, ["train/loss"], wall))
    writer.close()
    run = read_source([tmp_path / "run"])
    assert run.format == "tensorboard"
    assert {tag: series for tag, series in run.scalars.items()} == {
        tag: dict(points) for tag, points in read_scalars(tmp_path / "run").items()
    }
    assert set(run.scalars) == {"train/loss", "train/lr", "my/custom", "loss"}
    histogram = run.histograms["grad_norm/per_param_log10"][4]
    assert (histogram.limits, histogram.counts, histogram.stats["sum_squares"]) == (
        [-2.0, -1.0, 0.0, 0.5],
        counts,
        14.0,
    )
    assert run.texts["run/config"] == {0: "model: tiny"}
    assert run.skipped == ["the graph (graph_def): 1 record", "the hparams plugin's records: 1 record"]


def test_a_resume_purges_later_points_as_tensorboard_does(tmp_path: Path) -> None:
    first = RunWriter(tmp_path)
    first.add_session_start(1)
    for step in range(1, 9):
        first.add_scalars(step, {"train/loss": 1.0})
    first.close()
    second = RunWriter(tmp_path)
    second.add_session_start(5)
    for step in range(5, 7):
        second.add_scalars(step, {"train/loss": 2.0})
    second.close()
    run = read_source([tmp_path])
    assert run.scalars["train/loss"] == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 2.0, 6: 2.0}
    assert run.scalars["train/loss"] == dict(read_scalars(tmp_path)["train/loss"])


def test_a_truncated_file_is_imported_up_to_where_it_stops(tmp_path: Path) -> None:
    megatron_folder(tmp_path / "whole")
    (path,) = event_files(tmp_path / "whole")
    data = path.read_bytes()
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / path.name).write_bytes(data[: len(data) * 2 // 3])
    run = read_source([cut])
    whole = read_source([tmp_path / "whole"])
    kept = run.scalars["train/loss"]
    assert 0 < len(kept) < len(whole.scalars["train/loss"])
    assert kept == {step: whole.scalars["train/loss"][step] for step in kept}
    assert f"{cut / path.name}: stops at byte " in run.stopped_at
    assert "the middle of a record" in run.stopped_at


def test_a_record_failing_its_checksum_is_skipped_and_said(tmp_path: Path) -> None:
    megatron_folder(tmp_path, log_timers=False)
    (path,) = event_files(tmp_path)
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF  # inside the last record's payload
    path.write_bytes(bytes(data))
    run = read_source([tmp_path])
    assert "fails its checksum, skipped" in run.stopped_at
    assert len(run.scalars["train/loss"]) == len(STEPS)


def test_sniff_reads_content_not_names(tmp_path: Path) -> None:
    megatron_folder(tmp_path / "tb")
    (path,) = event_files(tmp_path / "tb")
    renamed = tmp_path / "notes.txt"
    renamed.write_bytes(path.read_bytes())
    assert tensorboard_folder.sniff(renamed, renamed.read_bytes()[:65536])
    fake = tmp_path / "events.out.tfevents.1.host"
    fake.write_text("iteration 1/ 10 | lm loss: 1.0 |\n")
    assert not tensorboard_folder.sniff(fake, fake.read_bytes())
    assert read_source([renamed]).format == "megatron-tensorboard"


def test_a_folder_mftb_import_wrote_keeps_each_steps_wall_time(tmp_path: Path) -> None:
    """The restart mark at the first step is written when the folder is, not when the step ran: the
    step's wall time is its values' (a comparison's "over N s" comes from them)."""
    source = ImportedRun(source=[tmp_path / "train.log"], format="megatron-log")
    for step in range(1, 101):  # the first records one by one, the rest as one block of columns
        source.add("train/loss", step, 3.0 - 0.1 * step)
        source.wall_times[step] = 1_767_600_000.0 + 10 * step
    write_run(source, tmp_path / "run")
    back = read_source([tmp_path / "run"])
    assert {step: back.wall_times[step] for step in range(1, 101)} == source.wall_times
