"""A real tiny MindFormers training through `mftb train`, read back with TensorBoard's reader."""

from __future__ import annotations

import math
import re

import pytest
import yaml
from conftest import TINY_CONFIG, TrainingRun, mf_losses, read_scalars

pytestmark = [pytest.mark.process, pytest.mark.compat]

STEPS = 32  # 64 samples, batch 2
# One process: perf/tokens_per_s is the job's own; no perf/job_* tags (they come from the cross-rank aggregation).
PER_STEP_TAGS = {
    "train/loss",
    "train/lr",
    "train/grad_norm",
    "train/loss_scale",
    "train/overflow",
    "perf/step_time_ms",
    "perf/samples_per_s",
    "perf/tokens_per_s",
    "perf/model_tflops_per_device",  # the estimate for a legacy model (no MFU: no peak on a CPU)
    "perf/linearity",  # throughput_baseline 40
    "system/host_rss_gb",
    "custom/step_parity",
    "custom/batch_tokens",
}
ADAM_GROUPS = ("embedding", "layers.0", "layers.1", "final_norm", "head", "total")  # optimizer_state_every 8
# stable_rank_every 8, stable_rank_params: the attention and feed-forward matrices of both layers
MATRICES = ("attention.wq", "attention.wk", "attention.wv", "attention.wo", "feed_forward.w1", "feed_forward.w2")
STABLE_RANK_WEIGHTS = [
    f"model.layers.{layer}.{part}.weight" for layer in (0, 1) for part in (*MATRICES, "feed_forward.w3")
]
STABLE_RANK_REFERENCE = ("model.layers.1.attention.wq.weight", "model.layers.0.feed_forward.w2.weight")  # the hook's
X_AXIS_TAGS = {"train/loss_vs_samples", "train/lr_vs_samples", "train/loss_vs_tokens", "train/lr_vs_tokens"}


def expected_lr(step: int) -> float:
    """CosineWithWarmUpLR of the tiny config, evaluated independently of MindFormers."""
    schedule = yaml.safe_load(TINY_CONFIG.read_text())["lr_schedule"]
    peak, end, warmup = schedule["learning_rate"], schedule["lr_end"], schedule["warmup_steps"]
    index = step - 1  # the optimizer's global_step before the update
    if index < warmup:
        return peak * index / warmup
    progress = (index - warmup) / (STEPS - warmup)
    return end + 0.5 * (peak - end) * (1 + math.cos(math.pi * progress))


def test_run_folder_is_named_from_experiment_and_timestamp(tiny_run: TrainingRun) -> None:
    assert re.fullmatch(r"llama_tiny_\d{8}-\d{6}", tiny_run.run_dir.name)
    names = sorted(f.name for f in tiny_run.run_dir.iterdir())
    # its event files, and the status record `mftb runs` reads (session/status_writer.py)
    assert names[:-1] and all("tfevents" in name for name in names[:-1]) and names[-1] == "mftb_status.json"
    # The same viewing command make demo prints.
    assert f"[mftb] TensorBoardMonitor: writing {tiny_run.run_dir}. View it: mftb tensorboard {tiny_run.log_root}" in (
        tiny_run.output
    )


def test_exactly_the_expected_tags(tiny_run: TrainingRun) -> None:
    scalars = read_scalars(tiny_run.run_dir)
    adam = {f"{prefix}/{group}" for prefix in ("adam_m_norm", "adam_v_norm") for group in ADAM_GROUPS}
    updates = {f"{prefix}/{group}" for prefix in ("update_norm", "update_ratio") for group in ADAM_GROUPS}
    tsm = {f"custom/tsm_adam_{moment}_{group}" for moment in "mv" for group in ("total", "layers.1")}
    reference = {"custom/ref_update_total", "custom/ref_update_layers.1", "custom/ref_update_ratio_layers.1"}
    spectra = {f"weight_{kind}/{name}" for kind in ("stable_rank", "eigenvalue") for name in STABLE_RANK_WEIGHTS}
    reference |= {
        f"custom/mf_{kind}/{name}" for kind in ("stable_rank", "eigenvalue") for name in STABLE_RANK_REFERENCE
    }
    expected = PER_STEP_TAGS | X_AXIS_TAGS | {"train/param_norm"} | adam | updates | tsm | reference | spectra
    assert set(scalars) == expected


def test_one_point_per_logged_step_strictly_increasing(tiny_run: TrainingRun) -> None:
    scalars = read_scalars(tiny_run.run_dir)
    for tag in PER_STEP_TAGS:
        assert [step for step, _ in scalars[tag]] == list(range(1, STEPS + 1)), tag
    assert [step for step, _ in scalars["train/param_norm"]] == [8, 16, 24, 32]
    assert all(value > 0 for _, value in scalars["train/param_norm"])


def test_loss_equals_what_mflossmonitor_printed(tiny_run: TrainingRun) -> None:
    printed = mf_losses(tiny_run.output)
    assert sorted(printed) == list(range(1, STEPS + 1))
    for step, loss in read_scalars(tiny_run.run_dir)["train/loss"]:
        assert abs(loss - printed[step][0]) <= 1e-6, (step, loss, printed[step])


def test_lr_follows_the_schedule(tiny_run: TrainingRun) -> None:
    printed = mf_losses(tiny_run.output)
    for step, lr in read_scalars(tiny_run.run_dir)["train/lr"]:
        assert math.isclose(lr, expected_lr(step), rel_tol=1e-5, abs_tol=1e-9), (step, lr)
        assert math.isclose(lr, printed[step][1], rel_tol=1e-5, abs_tol=1e-9), (step, lr)


def test_diagnostics_are_plausible(tiny_run: TrainingRun) -> None:
    scalars = read_scalars(tiny_run.run_dir)
    assert all(value == 1.0 for _, value in scalars["train/loss_scale"])
    assert all(value == 0.0 for _, value in scalars["train/overflow"])
    assert all(0 < value < 100 for _, value in scalars["train/grad_norm"])
    assert all(0.1 < value < 8 for _, value in scalars["system/host_rss_gb"])
    samples = dict(scalars["perf/samples_per_s"])
    for step, tokens in scalars["perf/tokens_per_s"]:
        assert math.isclose(tokens, samples[step] * 32, rel_tol=1e-5)
    for step, ms in scalars["perf/step_time_ms"]:
        assert math.isclose(samples[step], 2 / (ms / 1000), rel_tol=1e-4)
    for step, linearity in scalars["perf/linearity"]:  # TrainingStateMonitor's: samples/s per device over baseline
        assert math.isclose(linearity, samples[step] / 1 / 40.0, rel_tol=1e-5)
    # The first step includes graph compilation.
    assert scalars["perf/step_time_ms"][0][1] > 10 * sorted(v for _, v in scalars["perf/step_time_ms"])[STEPS // 2]


def test_a_legacy_model_gets_no_mcore_warning(tiny_run: TrainingRun) -> None:
    assert "looks like an mcore model" not in tiny_run.output  # MindFormers' ModelMixin accessor, unused


def test_adam_moment_norms_are_trainingstatemonitors_per_layer(tiny_run: TrainingRun) -> None:
    """adam_m_norm / adam_v_norm every 8 steps against MindFormers' own per-parameter moment norms
    (TrainingStateMonitor's _get_optimizer_state, read by an extra_metrics hook at the same steps)."""
    scalars = read_scalars(tiny_run.run_dir)
    for moment in "mv":
        for group in ("total", "layers.1"):
            ours, theirs = scalars[f"adam_{moment}_norm/{group}"], scalars[f"custom/tsm_adam_{moment}_{group}"]
            assert [step for step, _ in ours] == [step for step, _ in theirs] == [8, 16, 24, 32]
            for (step, value), (_, expected) in zip(ours, theirs, strict=True):
                assert math.isclose(value, expected, rel_tol=1e-5), (moment, group, step, value, expected)
        groups = [dict(scalars[f"adam_{moment}_norm/{group}"])[8] ** 2 for group in ADAM_GROUPS[:-1]]
        assert math.isclose(sum(groups), dict(scalars[f"adam_{moment}_norm/total"])[8] ** 2, rel_tol=1e-6)


def test_update_norms_are_the_parameter_change_over_the_step(tiny_run: TrainingRun) -> None:
    """update_norm / update_ratio every 8 steps against the change recomputed from the network's own
    parameters, copied by an extra_metrics hook at the end of the step before."""
    scalars = read_scalars(tiny_run.run_dir)
    for ours, theirs in (
        ("update_norm/total", "custom/ref_update_total"),
        ("update_norm/layers.1", "custom/ref_update_layers.1"),
        ("update_ratio/layers.1", "custom/ref_update_ratio_layers.1"),
    ):
        assert [step for step, _ in scalars[ours]] == [step for step, _ in scalars[theirs]] == [8, 16, 24, 32]
        for (step, value), (_, expected) in zip(scalars[ours], scalars[theirs], strict=True):
            assert value > 0 and math.isclose(value, expected, rel_tol=1e-4), (ours, step, value, expected)
    groups = [dict(scalars[f"update_norm/{group}"])[16] ** 2 for group in ADAM_GROUPS[:-1]]
    assert math.isclose(sum(groups), dict(scalars["update_norm/total"])[16] ** 2, rel_tol=1e-6)


def test_stable_rank_is_mindformers_own_converged(tiny_run: TrainingRun) -> None:
    """weight_stable_rank / weight_eigenvalue every 8 steps, computed off the training thread from the
    due step's weights, against MindFormers' _get_stable_rank of the same weights at the same steps (an
    extra_metrics hook, 500 power iterations)."""
    scalars = read_scalars(tiny_run.run_dir)
    for name in STABLE_RANK_REFERENCE:
        for kind in ("stable_rank", "eigenvalue"):
            ours, theirs = scalars[f"weight_{kind}/{name}"], scalars[f"custom/mf_{kind}/{name}"]
            assert [step for step, _ in ours] == [step for step, _ in theirs] == [8, 16, 24, 32]
            for (step, value), (_, expected) in zip(ours, theirs, strict=True):
                assert value > 0 and math.isclose(value, expected, rel_tol=1e-3), (kind, name, step, value, expected)
    changes = [value for _, value in scalars[f"weight_eigenvalue/{STABLE_RANK_REFERENCE[0]}"]]
    assert len(set(changes)) == 4  # each due step's own weights, not one copy four times


def test_x_axis_variants_count_samples_and_tokens(tiny_run: TrainingRun) -> None:
    scalars = read_scalars(tiny_run.run_dir)
    losses = [value for _, value in scalars["train/loss"]]
    assert [s for s, _ in scalars["train/loss_vs_samples"]] == [2 * k for k in range(1, STEPS + 1)]
    assert [s for s, _ in scalars["train/loss_vs_tokens"]] == [64 * k for k in range(1, STEPS + 1)]
    assert [v for _, v in scalars["train/loss_vs_tokens"]] == losses


def test_extra_metrics_from_yaml(tiny_run: TrainingRun) -> None:
    scalars = read_scalars(tiny_run.run_dir)
    assert scalars["custom/step_parity"] == [(k, float(k % 2)) for k in range(1, STEPS + 1)]
    assert all(value == 64.0 for _, value in scalars["custom/batch_tokens"])
