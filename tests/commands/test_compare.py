"""`mftb compare` as a user runs it, over two real tiny trainings written by TensorBoardMonitor: the run
against itself, and against a training with another learning rate, every field checked against errors
recomputed here from TensorBoard's own reading (EventAccumulator) of both run folders."""

# The Megatron-LM line is built with training_log's str.format calls as the source has them.
# ruff: noqa: UP032

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import MFTB, TrainingRun, read_scalars, subprocess_env, train, write_tiny_config

from mindformers_tbplugin.cli import main

TAGS = ("train/loss", "train/grad_norm", "train/lr")


def compare(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([MFTB, "compare", *args], env=subprocess_env(), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def low_lr_run(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path) -> TrainingRun:
    """The shared tiny training's twin (same data, seed and steps) with a tenth of its learning rate."""
    folder = tmp_path_factory.mktemp("low_lr_run")
    monitor = {"type": "TensorBoardMonitor", "log_dir": str(folder / "tb"), "log_every": 1, "vs_samples": True}
    lr = {"type": "CosineWithWarmUpLR", "learning_rate": 3.0e-4, "lr_end": 3.0e-5, "warmup_steps": 4, "total_steps": -1}
    config = write_tiny_config(folder, tiny_data, [{"type": "MFLossMonitor"}, monitor], num_samples=64, lr_schedule=lr)
    run = train(config, folder)
    assert run.returncode == 0, run.output[-5000:]
    return run


def expected_fields(run_dir: Path, base_dir: Path, tag: str) -> dict:
    """The summary of one tag, from TensorBoard's reading of both folders, with plain Python arithmetic."""
    run, base = dict(read_scalars(run_dir)[tag]), dict(read_scalars(base_dir)[tag])
    steps = sorted(set(run) & set(base))
    abs_err = [abs(run[s] - base[s]) for s in steps]
    rel_err = [abs(run[s] - base[s]) / abs(base[s]) if base[s] else (0.0 if run[s] == base[s] else None) for s in steps]
    defined = [r for r in rel_err if r is not None]
    max_at = abs_err.index(max(abs_err))
    if tag == "train/loss":  # over the first-step tolerance both ways: abs 0.005, rel 0.5%
        divergent = [
            s for s, a, r in zip(steps, abs_err, rel_err, strict=True) if a >= 0.005 and (r is None or r >= 0.005)
        ]
    elif tag == "train/grad_norm":  # only a mean tolerance: rel 10%
        divergent = [s for s, r in zip(steps, rel_err, strict=True) if r is None or r > 0.10]
    else:
        divergent = []
    fields = {
        "steps": len(steps),
        "first_step": steps[0],
        "first_abs_err": abs_err[0],
        "first_rel_err": rel_err[0],
        "mean_abs_err": sum(abs_err) / len(steps),
        "mean_rel_err": sum(defined) / len(defined),
        "max_abs_err": abs_err[max_at],
        "max_rel_err": max(defined),
        "max_step": steps[max_at],
        "first_divergent_step": divergent[0] if divergent else None,
    }
    if tag == "train/loss":
        first_ok = fields["first_abs_err"] < 0.005 or (rel_err[0] is not None and rel_err[0] < 0.005)
        fields["pass"] = first_ok and (fields["mean_abs_err"] < 0.01 or fields["mean_rel_err"] < 0.01)
    elif tag == "train/grad_norm":
        fields["pass"] = fields["mean_rel_err"] <= 0.10
    else:
        fields["pass"] = None
    return fields


def test_a_run_against_itself_passes_with_zero_errors(tiny_run: TrainingRun) -> None:
    result = compare(str(tiny_run.run_dir), str(tiny_run.run_dir), "--json", "-")
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["verdict"] == "pass"
    assert list(document["tags"]) == list(TAGS)
    steps = len(read_scalars(tiny_run.run_dir)["train/loss"])
    for tag in ("train/loss", "train/grad_norm"):
        fields = document["tags"][tag]
        assert fields["steps"] == steps == 32
        assert fields["first_abs_err"] == fields["mean_abs_err"] == fields["max_abs_err"] == 0
        assert fields["mean_rel_err"] == fields["max_rel_err"] == 0
        assert fields["first_divergent_step"] is None and fields["pass"] is True
    assert document["tags"]["train/lr"]["pass"] is None  # not in MindFormers' standard
    # 32 steps: the standard's 1000-step rule is reported, and --strict fails on it
    assert document["step_rule"]["pass"] is False
    assert compare(str(tiny_run.run_dir), str(tiny_run.run_dir), "--strict").returncode == 1


def test_another_learning_rate_fails_with_the_errors_recomputed(tiny_run: TrainingRun, low_lr_run: TrainingRun) -> None:
    json_path = low_lr_run.folder / "compare.json"
    result = compare(str(low_lr_run.run_dir), str(tiny_run.run_dir), "--json", str(json_path))
    assert result.returncode == 1, result.stdout + result.stderr
    document = json.loads(json_path.read_text())
    assert document["verdict"] == "fail"
    assert document["criteria"]["name"] == "mindformers"
    for tag in TAGS:
        expected = expected_fields(low_lr_run.run_dir, tiny_run.run_dir, tag)
        got = document["tags"][tag]
        assert list(got) == list(expected)
        for name, value in expected.items():
            if isinstance(value, float):
                assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-12), (tag, name)
            else:
                assert got[name] == value, (tag, name)
    loss = document["tags"]["train/loss"]
    # the same weights, data and seed: the first step's loss (before any update) is the same
    assert loss["first_abs_err"] == pytest.approx(0.0, abs=1e-6)
    assert loss["pass"] is False and loss["first_divergent_step"] > loss["first_step"]
    # the table shows the first divergent step with both values, as TensorBoard reads them
    step = loss["first_divergent_step"]
    run_loss, base_loss = (dict(read_scalars(d)["train/loss"])[step] for d in (low_lr_run.run_dir, tiny_run.run_dir))
    line = next(line for line in result.stdout.splitlines() if line.startswith(f">{step} "))
    assert line.split()[1:3] == [f"{run_loss:.6g}", f"{base_loss:.6g}"]
    markdown = compare(str(low_lr_run.run_dir), str(tiny_run.run_dir), "--markdown")
    assert markdown.returncode == 1
    assert markdown.stdout.startswith("## Run against its baseline: FAIL")
    assert f"| first_divergent_step | {step} |" in markdown.stdout


def test_unusable_input_exits_2_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["compare", str(tmp_path / "missing"), str(tmp_path)]) == 2
    assert f"mftb compare: error: RUN {tmp_path / 'missing'}: no such file or folder" in capsys.readouterr().err
    bad = tmp_path / "criteria.yaml"
    bad.write_text("tags:\n  train/loss:\n    mean: {abs_lt: high}\n")
    assert main(["compare", str(tmp_path), str(tmp_path), "--criteria", str(bad)]) == 2
    assert f"{bad}:3: tags.train/loss.mean.abs_lt: expected a number >= 0, got 'high'" in capsys.readouterr().err


def test_the_same_runs_imported_from_their_printed_logs_give_the_same_verdict(
    tiny_run: TrainingRun, low_lr_run: TrainingRun
) -> None:
    def log(run: TrainingRun) -> str:
        return str(run.folder / "output" / "log" / "rank_0" / "info.log")

    from_folders = json.loads(compare(str(low_lr_run.run_dir), str(tiny_run.run_dir), "--json", "-").stdout)
    result = compare(log(low_lr_run), log(tiny_run), "--json", "-")
    assert result.returncode == 1, result.stdout + result.stderr
    from_logs = json.loads(result.stdout)
    assert from_logs["verdict"] == from_folders["verdict"] == "fail"
    assert list(from_logs["tags"]) == list(from_folders["tags"])
    for tag, fields in from_folders["tags"].items():
        printed = from_logs["tags"][tag]
        assert printed["pass"] == fields["pass"], tag
        assert printed["steps"] == fields["steps"] and printed["max_step"] == fields["max_step"], tag
        # the log prints the loss with 6 decimals: the errors agree to that
        assert printed["mean_abs_err"] == pytest.approx(fields["mean_abs_err"], abs=2e-6), tag


def test_by_samples_and_inside_a_second_baselines_spread(tiny_run: TrainingRun, low_lr_run: TrainingRun) -> None:
    by_steps = json.loads(compare(str(low_lr_run.run_dir), str(tiny_run.run_dir), "--json", "-").stdout)
    result = compare(str(low_lr_run.run_dir), str(tiny_run.run_dir), "--x", "samples", "--json", "-")
    assert result.returncode == 1, result.stdout + result.stderr
    by_samples = json.loads(result.stdout)
    # both write train/loss_vs_samples: the same points, at x = step x the samples per step
    twin = dict(read_scalars(tiny_run.run_dir)["train/loss_vs_samples"])
    per_step = min(twin) // min(dict(read_scalars(tiny_run.run_dir)["train/loss"]))
    assert list(by_samples["tags"]) == ["train/loss", "train/lr"]  # grad_norm has no samples twin
    assert any("not compared by samples: train/grad_norm" in note for note in by_samples["notes"])
    for tag in by_samples["tags"]:
        steps, samples = by_steps["tags"][tag], by_samples["tags"][tag]
        for name in ("first_step", "max_step", "first_divergent_step"):
            assert samples[name] == (None if steps[name] is None else steps[name] * per_step), (tag, name)
        for name in ("steps", "mean_abs_err", "max_abs_err", "mean_rel_err", "pass"):
            assert samples[name] == steps[name], (tag, name)
    # a second baseline: the baseline's own printed log, the same training, so its spread is the
    # log's rounding alone; the run is far outside it
    log = str(tiny_run.folder / "output" / "log" / "rank_0" / "info.log")
    result = compare(str(low_lr_run.run_dir), str(tiny_run.run_dir), "--noise", log, "--json", "-")
    assert result.returncode == 1, result.stdout + result.stderr
    noise = json.loads(result.stdout)["noise"]["train/loss"]
    assert noise["steps"] == 32 and noise["spread_max_abs_err"] <= 1e-6
    assert noise["within_fraction"] < 0.9 and noise["pass"] is False


def megatron_line(it: int, batch: int, loss: float, lr: float, grad_norm: float) -> str:
    """core_r0.6.0's training_log line (megatron/training/training.py), its format calls as the source has them."""
    log_string = f" [2024-05-01 10:00:{it:02d}]"
    log_string += " iteration {:8d}/{:8d} |".format(it, 32)
    log_string += " consumed samples: {:12d} |".format(it * batch)
    log_string += " elapsed time per iteration (ms): {:.1f} |".format(1234.56)
    log_string += " learning rate: {:.6E} |".format(lr)
    log_string += " global batch size: {:5d} |".format(batch)
    log_string += " {}: {:.6E} |".format("lm loss", loss)
    log_string += " loss scale: {:.1f} |".format(1.0)
    log_string += " grad norm: {:.3f} |".format(grad_norm)
    log_string += " number of skipped iterations: {:3d} |".format(0)
    return log_string


def test_a_megatron_baseline_of_means_over_its_log_interval(tiny_run: TrainingRun, tmp_path: Path) -> None:
    """The tiny training as Megatron-LM would print it with --log-interval 4: the loss a mean over the 4
    iterations, grad norm and lr the iteration's own, at the printed precision."""
    written = {tag: dict(points) for tag, points in read_scalars(tiny_run.run_dir).items()}
    loss, lr, norm = written["train/loss"], written["train/lr"], written["train/grad_norm"]
    per_step = min(written["train/loss_vs_samples"]) // min(loss)

    def log(batch: int) -> Path:
        lines = [
            megatron_line(it, batch, sum(loss[s] for s in range(it - 3, it + 1)) / 4, lr[it], norm[it])
            for it in range(4, 33, 4)
        ]
        path = tmp_path / f"megatron_{batch}.log"
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return path

    result = compare(str(tiny_run.run_dir), str(log(per_step)), "--json", "-")
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    fields = document["tags"]["train/loss"]
    # compared at the 8 printed iterations, each against the run's mean over the same 4 steps, which
    # differs from the printed mean by its {:.6E} rounding only
    assert fields["steps"] == 8 and fields["first_step"] == 4
    assert fields["max_rel_err"] < 1e-6 and fields["pass"] is True
    assert any("baseline's values are means over 4 steps" in note for note in document["notes"])
    # grad norm printed with 3 decimals: differences up to 0.0005 are its rounding, not errors
    assert document["tags"]["train/grad_norm"]["max_abs_err"] == 0
    # a baseline that says another global batch size is not compared by step
    result = compare(str(tiny_run.run_dir), str(log(per_step * 2)))
    assert result.returncode == 2
    assert f"the run consumes {per_step} samples per step and the baseline {per_step * 2}" in result.stderr
