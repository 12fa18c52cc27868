"""MindFormers' printed training log read back: the log of a real training against what the same
training's TensorBoardMonitor wrote (read with TensorBoard's own reader), and the lines of the releases
not installed here built with their callback.py's own format strings (the refs are named)."""

# The lines are built with the releases' own %-format strings, copied as callback.py has them.
# ruff: noqa: UP031
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import MFTB, TrainingRun, read_scalars, subprocess_env

from mindformers_tbplugin.imports import detect, mindformers_log

FILE_PREFIX = "[INFO] 2026-12-07 17:45:34,288 [mindformers/core/callback/callback.py:747] print_output_info: "
# mindformers/tools/logger.py DEFAULT_STDOUT_FORMAT: '%(asctime)s - %(name)s[%(filepath)s:%(lineno)d] - ...'
CONSOLE_PREFIX = "2026-12-07 17:50:37,266 - mindformers./out/log[mindformers/core/callback/callback.py:747] - INFO - "


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# -- a real training ------------------------------------------------------------------------------------------
def test_the_tiny_trainings_log_is_what_its_monitor_wrote_within_the_printed_resolution(tiny_run: TrainingRun) -> None:
    log = tiny_run.folder / "output" / "log" / "rank_0" / "info.log"
    assert mindformers_log.sniff(log, log.read_bytes()[:4096])
    run = mindformers_log.read([log])
    written = {tag: dict(points) for tag, points in read_scalars(tiny_run.run_dir).items()}
    assert sorted(run.scalars["train/loss"]) == sorted(written["train/loss"]) == list(range(1, 33))
    assert run.resolution["train/loss"] == pytest.approx(1e-6)  # 1.9 prints 6 decimals
    for tag in ("train/loss", "train/lr", "train/grad_norm"):
        resolution = run.resolution[tag]
        for step, value in written[tag].items():
            # the event holds a float32: half its spacing on top of half the printed resolution
            allowed = resolution / 2 + abs(value) * 2**-24 + 1e-12
            assert abs(run.scalars[tag][step] - value) <= allowed, (tag, step, run.scalars[tag][step], value)
    assert run.scalars["train/overflow"] == dict.fromkeys(range(1, 33), 0.0)
    assert set(run.scalars["perf/step_time_ms"].values()) != {0.0}
    assert sorted(run.wall_times) == list(range(1, 33)) and run.skipped == []


def test_mftb_import_of_the_tiny_trainings_log_overlays_its_run(tiny_run: TrainingRun, tmp_path: Path) -> None:
    """`mftb import output/log` (the command as a user types it) writes a run whose train/loss is the monitored
    run's at every step, within the printed resolution and the two runs' float32 events."""
    result = subprocess.run(
        [MFTB, "import", str(tiny_run.folder / "output" / "log"), "--logdir", str(tmp_path), "--name", "fromlog"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "imported mindformers-log" in result.stdout
    imported = {tag: dict(points) for tag, points in read_scalars(tmp_path / "fromlog").items()}
    written = {tag: dict(points) for tag, points in read_scalars(tiny_run.run_dir).items()}
    metadata = json.loads((tmp_path / "fromlog" / "mftb_import.json").read_text())
    assert metadata["format"] == "mindformers-log" and metadata["resolution"]["train/loss"] == pytest.approx(1e-6)
    for tag in ("train/loss", "train/grad_norm"):
        assert sorted(imported[tag]) == sorted(written[tag]) == list(range(1, 33))
        for step, value in written[tag].items():
            allowed = metadata["resolution"][tag] / 2 + abs(value) * 2**-23
            assert abs(imported[tag][step] - value) <= allowed, (tag, step)


# -- the releases' own format strings -------------------------------------------------------------------------
def _line_r13(epoch, epochs, step, per_epoch, loss, mean, sink):  # r1.3.0 f90b5b9, print_output_info
    if sink:
        text = (
            "{ Epoch:[%3d/%3d], step:[%5d/%5d], loss: %5.3f, "
            "per_step_time: %dms, lr: %s, overflow cond: %s, loss_scale: %s, global_norm: %s"
            % (
                epoch,
                epochs,
                step,
                per_epoch,
                loss,
                180,
                np.array2string(np.array([1e-4], np.float32)),
                "False",
                "1.0",
                np.array([1.2345678], np.float32),
            )
        )
    else:
        text = (
            "{ Epoch:[%3d/%3d], step:[%5d/%5d], loss:[%5.3f/%5.3f], "
            "per_step_time: %dms, lr: %s, overflow cond: %s, loss_scale: %s, global_norm: %s"
            % (
                epoch,
                epochs,
                step,
                per_epoch,
                loss,
                mean,
                180,
                np.array2string(np.array([1e-4], np.float32)),
                "False",
                "1.0",
                np.array([1.2345678], np.float32),
            )
        )
    return text


def _line_r16(epoch, epochs, step, per_epoch, loss, mean, sink):
    """r1.6.0 29ac301 (r1.4.0-beta1 86acd01 and r1.5.0 6753ecf print the same): + train_throughput_per_npu."""
    throughput_info = ", train_throughput_per_npu: %.3fT" % (12.3456)
    loss_part = "loss: %5.3f, " % loss if sink else "loss:[%5.3f/%5.3f], " % (loss, mean)
    return (
        "{ Epoch:[%3d/%3d], step:[%5d/%5d], "
        + loss_part
        + "per_step_time: %dms, lr: %s, overflow cond: %s, loss_scale: %s, global_norm: %s%s"
    ) % (
        epoch,
        epochs,
        step,
        per_epoch,
        180,
        "0.0005",
        "False",
        "unavailable",
        np.array([0.5], np.float32),
        throughput_info,
    )


def _line_r17(epoch, epochs, step, per_epoch, loss, mean, sink):  # r1.7.0 b77980d: 6 decimals, loss parts
    loss_info = "loss: %5.6f, " % loss if sink else "loss:[%5.6f/%5.6f], " % (loss, mean)
    separate_loss = "lm_loss: %5.6f, " % (loss - 0.25)
    separate_loss += "load_balancing_loss: %5.6f, " % 1.01
    separate_loss += "mtp_loss: %5.6f, " % 0.25
    return (
        "{ Epoch:[%3d/%3d], step:[%5d/%5d], "
        + loss_info
        + separate_loss
        + "per_step_time: %dms, lr: %s, overflow cond: %s, loss_scale: %s, global_norm: %s%s"
    ) % (
        epoch,
        epochs,
        step,
        per_epoch,
        180,
        "[0.0005]",
        "False",
        "1.0",
        np.array([0.5], np.float32),
        ", train_throughput_per_npu: 12.346T",
    )


def _line_r18(epoch, epochs, step, per_epoch, loss, mean, sink):  # r1.8.0 54827e5: f-strings, MoE without aux
    loss_info = f"loss: {loss:5.6f}, " if sink else f"loss:[{loss:5.6f}/{mean:5.6f}], "
    separate_loss = f"lm_loss: {loss - 0.25:5.6f}, " + f"mtp_loss: {0.25:5.6f}, "
    return (
        "{ Epoch:[%3d/%3d], step:[%5d/%5d], "
        + loss_info
        + separate_loss
        + "per_step_time: %dms, lr: %s, overflow cond: %s, loss_scale: %s, global_norm: %s%s"
    ) % (epoch, epochs, step, per_epoch, 180, "[0.0005]", "False", "1.0", np.array([0.5], np.float32), "")


def _line_r19(epoch, epochs, step, per_epoch, loss, mean, sink):  # r1.9.0 6e2f7f4: + indexer_loss, f-strings
    loss_info = f"loss: {loss:5.6f}, " if sink else f"loss:[{loss:5.6f}/{mean:5.6f}], "
    separate_loss = f"lm_loss: {loss - 0.25:5.6f}, " + f"mtp_loss: {0.25:5.6f}, " + f"indexer_loss: {0.125:5.6f}, "
    return (
        "{ Epoch:[%3d/%3d], step:[%5d/%5d], "
        + loss_info
        + separate_loss
        + "per_step_time: %dms, overflow cond: %s, loss_scale: %s, global_norm: %s%s"
    ) % (epoch, epochs, step, per_epoch, 180, "False", "1.0", np.array([0.5], np.float32), "")


def _progress(percent: float) -> str:  # the line print_output_info prints after each step's (r1.3.0 on)
    show_str = ("|%%-%ds|" % 50) % (int(50 * percent / 100) * "█")
    return "  %4.1f%% %s %.5f samples/s/p  %s }" % (percent, show_str, 3.21, "0:00:10")


@pytest.mark.parametrize(
    ("release", "make", "decimals"),
    [
        ("r1.3.0", _line_r13, 3),
        ("r1.6.0", _line_r16, 3),
        ("r1.7.0", _line_r17, 6),
        ("r1.8.0", _line_r18, 6),
        ("r1.9.0", _line_r19, 6),
    ],
)
@pytest.mark.parametrize("sink", [False, True])
def test_each_releases_line_folds_epochs_into_the_global_step(tmp_path: Path, release, make, decimals, sink) -> None:
    per_epoch, epochs = 4, 3
    lines, losses = [], {}
    for global_step in range(1, per_epoch * epochs + 1):
        epoch, step = (global_step - 1) // per_epoch + 1, (global_step - 1) % per_epoch + 1
        loss = 7.0 - global_step / 7
        losses[global_step] = loss
        prefix = FILE_PREFIX if global_step % 2 else CONSOLE_PREFIX
        lines += [prefix + make(epoch, epochs, step, per_epoch, loss, loss + 1, sink), prefix + _progress(50.0)]
    log = _write(tmp_path / "output" / "log" / "rank_0" / "info.log", ["config: {...}", *lines])
    run = mindformers_log.read([log])
    assert run.resolution["train/loss"] == pytest.approx(10.0**-decimals)
    assert sorted(run.scalars["train/loss"]) == list(range(1, 13))
    for step, loss in losses.items():
        assert run.scalars["train/loss"][step] == pytest.approx(round(loss, decimals), abs=1e-12)
    assert run.scalars["train/grad_norm"][5] == pytest.approx(
        float(np.float32(1.2345678 if release == "r1.3.0" else 0.5))
    )
    assert run.resolution["train/grad_norm"] < 1e-6  # printed as float32's shortest text
    assert run.scalars["perf/step_time_ms"][12] == 180.0
    assert run.scalars["import/samples_per_s_per_npu"][12] == 3.21
    if release == "r1.3.0":
        assert run.scalars["train/lr"][1] == pytest.approx(1e-4, rel=1e-6)
    if release == "r1.6.0":
        assert run.scalars["perf/model_tflops_per_device"][3] == 12.346 and "train/loss_scale" not in run.scalars
        assert run.skipped == ["12 value(s) of 'loss_scale' that are not numbers"]  # "unavailable"
    if release in ("r1.7.0", "r1.8.0", "r1.9.0"):
        assert run.scalars["train/loss_lm"][7] == pytest.approx(round(losses[7] - 0.25, 6))
        assert run.scalars["train/loss_mtp"][7] == 0.25
    if release == "r1.7.0":
        assert run.scalars["import/load_balancing_loss"][7] == 1.01
    if release == "r1.9.0":
        assert run.scalars["import/indexer_loss"][7] == 0.125 and "train/lr" not in run.scalars


def _pynative_line(step: int, loss: float | None, master: bool) -> str:
    """mindformers/pynative/callback/loss_callback.py _print_log: r2.0.0 a5110b7, master 167a50d (+ consumed
    samples and global batch size)."""
    head = [f"step:[{step:5d}/{12:5d}]"]
    if master:
        head += [f"consumed_samples: {4 * step}", f"global_batch_size: {4}"]
    if loss is None:
        log_parts = [
            *head,
            "loss: N/A (non-last PP stage, refer to last stage for real loss)",
            f"per_step_time: {300:6d}ms",
        ]
    else:
        log_parts = [*head, f"loss: {loss:10.6f}", f"per_step_time: {300:6d}ms"]
    log_parts.append(f"load_balancing_loss: {1.0015:10.6f}")
    log_parts.append(", ".join([f"mtp_{ind + 1}_loss: {val:10.6f}" for ind, val in enumerate((2.0, 0.5))]))
    log_parts.append(f"lr: {1e-3 * step:10.6e}")
    log_parts.append(f"grad_norm: {1.25:10.6f}")
    log_parts.append(f"throughput: {0.123:6.2f}T")
    return "[INFO] 2026-12-07 15:30:52,917 [mindformers/pynative/callback/loss_callback.py:310] _print_log: " + (
        f"{{ {', '.join(log_parts)} }}"
    )


@pytest.mark.parametrize("master", [False, True])
def test_the_pynative_trainers_line_sums_its_mtp_depths(tmp_path: Path, master: bool) -> None:
    log = _write(tmp_path / "info.log", [_pynative_line(step, 7.0 - step / 10, master) for step in range(1, 13)])
    run = mindformers_log.read([log])
    assert run.scalars["train/loss"][3] == 6.7 and run.resolution["train/loss"] == pytest.approx(1e-6)
    assert run.scalars["train/loss_mtp"][3] == 2.5 and run.scalars["import/mtp_2_loss"][3] == 0.5
    assert run.scalars["train/lr"][12] == pytest.approx(0.012) and run.resolution["train/lr"] == pytest.approx(1e-8)
    assert (
        run.scalars["perf/model_tflops_per_device"][1] == 0.12
        and run.resolution["perf/model_tflops_per_device"] == 0.01
    )
    assert ("import/consumed_samples" in run.scalars) == master
    assert run.skipped == []


def test_a_non_last_stages_na_loss_is_counted_not_imported(tmp_path: Path) -> None:
    log = _write(tmp_path / "info.log", [_pynative_line(step, None, True) for step in range(1, 4)])
    run = mindformers_log.read([log])
    assert "train/loss" not in run.scalars and run.scalars["train/grad_norm"] == {1: 1.25, 2: 1.25, 3: 1.25}
    assert run.skipped == ["3 value(s) of 'loss' that are not numbers"]


def test_rotated_parts_and_ranks_through_the_registry(tmp_path: Path) -> None:
    """output/log/rank_N/info.log{,.1,.2} as `mftb import output` reads them: each rank's parts oldest first,
    a sub-run per rank."""

    def part(rank: int, steps: range) -> list[str]:
        return [FILE_PREFIX + _line_r19(1, 1, step, 9, 5.0 + rank + step / 100, 0.0, False) for step in steps]

    for rank in (0, 1):
        folder = tmp_path / "output" / "log" / f"rank_{rank}"
        _write(folder / "info.log", part(rank, range(7, 10)))
        _write(folder / "info.log.1", part(rank, range(4, 7)))
        _write(folder / "info.log.2", part(rank, range(1, 4)))
        _write(folder / "error.log", [FILE_PREFIX.replace("INFO", "ERROR") + "nothing wrong"])
    run = detect.read_source([tmp_path / "output"])
    assert sorted(run.sub_runs) == ["rank_0", "rank_1"]
    for rank in (0, 1):
        sub = run.sub_runs[f"rank_{rank}"]
        assert sub.format == "mindformers-log"
        assert [p.name for p in sub.source] == ["info.log.2", "info.log.1", "info.log"]
        assert sub.scalars["train/loss"] == {step: pytest.approx(5.0 + rank + step / 100) for step in range(1, 10)}


def test_lines_that_look_like_the_format_but_do_not_parse_are_counted_with_their_line_numbers(tmp_path: Path) -> None:
    good = [FILE_PREFIX + _line_r19(1, 1, step, 9, 5.0, 5.0, False) for step in range(1, 10)]
    lines = [
        "start\x0cing\u2028",  # a form feed and a line separator: no line ends for a log
        good[0],
        good[1],
        FILE_PREFIX + "{ Epoch:[  1/  1], step:[    3/",
        *good[3:],
        "{ Epoch:[ garbage",
    ]
    run = mindformers_log.read([_write(tmp_path / "info.log", lines)])
    assert sorted(run.scalars["train/loss"]) == [1, 2, 4, 5, 6, 7, 8, 9]
    assert run.skipped == ["2 line(s) that look like MindFormers' step line but do not parse (info.log:4, info.log:11)"]


def test_a_restarted_training_in_the_same_log_keeps_the_last_lines_values(tmp_path: Path) -> None:
    first = [FILE_PREFIX + _line_r19(1, 1, step, 6, 9.0, 9.0, False) for step in range(1, 7)]
    again = [FILE_PREFIX + _line_r19(1, 1, step, 6, 4.0, 4.0, False) for step in range(4, 7)]
    run = mindformers_log.read([_write(tmp_path / "info.log", first + again)])
    assert run.scalars["train/loss"] == {1: 9.0, 2: 9.0, 3: 9.0, 4: 4.0, 5: 4.0, 6: 4.0}
    assert "3 step line(s) printed again" in run.skipped[0]


def test_sniff_knows_mindformers_logger_records_and_step_lines(tmp_path: Path) -> None:
    assert mindformers_log.sniff(tmp_path, FILE_PREFIX.encode() + b"Loading config\n")
    assert mindformers_log.sniff(tmp_path, CONSOLE_PREFIX.encode() + b"Loading config\n")
    assert mindformers_log.sniff(tmp_path, _line_r19(1, 1, 1, 9, 5.0, 5.0, False).encode())
    assert not mindformers_log.sniff(tmp_path, b" iteration      100/    1000 | lm loss: 2.0E+00 |")
    assert mindformers_log.read([_write(tmp_path / "empty.log", [FILE_PREFIX + "nothing"])]).scalars == {}
