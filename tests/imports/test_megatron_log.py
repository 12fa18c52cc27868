"""Megatron-LM's printed training log read back, with lines built by the releases' own ``training_log``
format code (copied from the fetched sources, refs named at each builder), launchers' prefixes, fields
reordered or added by forks, validation lines and lines that do not parse."""

# The builders copy training_log's str.format calls as the sources have them.
# ruff: noqa: UP032
from __future__ import annotations

import json
import math
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
from conftest import MFTB, read_scalars, subprocess_env

from mindformers_tbplugin.imports import detect, megatron_log

TOTAL = 1000


def _loss(it: int) -> float:
    return 2.0 + 8.0 / math.sqrt(it)


def _lr(it: int) -> float:
    return 3e-4 * min(1.0, it / 200)


def _grad_norm(it: int) -> float:
    return 0.25 + 1.0 / it


def line_2304(it: int) -> str:
    """NVIDIA/Megatron-LM 23.04 (2360d732a3), megatron/training.py training_log."""
    log_string = " iteration {:8d}/{:8d} |".format(it, TOTAL)
    log_string += " consumed samples: {:12d} |".format(it * 32)
    log_string += " elapsed time per iteration (ms): {:.1f} |".format(1234.56)
    log_string += " learning rate: {:.3E} |".format(_lr(it))
    log_string += " global batch size: {:5d} |".format(32)
    for key, avg in (("lm loss", _loss(it)),):
        if avg > 0.0:
            log_string += " {}: {:.6E} |".format(key, avg)
    log_string += " loss scale: {:.1f} |".format(65536.0)
    log_string += " grad norm: {:.3f} |".format(_grad_norm(it))
    log_string += " num zeros: {:.1f} |".format(0.0)
    log_string += " params norm: {:.3f} |".format(250.123456)
    log_string += " number of skipped iterations: {:3d} |".format(0)
    log_string += " number of nan iterations: {:3d} |".format(0)
    return log_string


def line_r06(it: int, now: datetime) -> str:
    """core_r0.6.0 (cac60ce4c8), megatron/training/training.py: the timestamp, throughput, .6E lr."""
    log_string = f" [{now.strftime('%Y-%m-%d %H:%M:%S')}]"
    log_string += " iteration {:8d}/{:8d} |".format(it, TOTAL)
    log_string += " consumed samples: {:12d} |".format(it * 32)
    log_string += " elapsed time per iteration (ms): {:.1f} |".format(1234.56)
    throughput = 201.27
    log_string += f" throughput per GPU (TFLOP/s/GPU): {throughput:.1f} |"
    log_string += " learning rate: {:.6E} |".format(_lr(it))
    log_string += " global batch size: {:5d} |".format(32)
    for key, avg in (("lm loss", _loss(it)),):
        if avg > 0.0:
            log_string += " {}: {:.6E} |".format(key, avg)
    log_string += " loss scale: {:.1f} |".format(1.0)
    log_string += " grad norm: {:.3f} |".format(_grad_norm(it))
    log_string += " number of skipped iterations: {:3d} |".format(0)
    log_string += " number of nan iterations: {:3d} |".format(0)
    return log_string


def line_main(it: int, now: datetime) -> str:
    """main (d98e8a64dd): microseconds in the timestamp, MoE losses and mtp_<k> loss in total_loss_dict,
    the MoE tracker's other metrics (moe_logging.py _format: " {k}: {v:.2f} |")."""
    log_string = f" [{now.strftime('%Y-%m-%d %H:%M:%S.%f')}]"
    log_string += " iteration {:8d}/{:8d} |".format(it, TOTAL)
    log_string += " consumed samples: {:12d} |".format(it * 32)
    log_string += " elapsed time per iteration (ms): {:.1f} |".format(1234.56)
    learning_rate, batch_size = _lr(it), 32
    log_string += f" learning rate: {learning_rate:.6E} |"
    log_string += f" global batch size: {batch_size:5d} |"
    total_loss_dict = {"lm loss": _loss(it), "load_balancing_loss": 1.0123, "mtp_1 loss": _loss(it) + 0.5}
    for key, avg in total_loss_dict.items():
        if avg >= 0.0:
            log_string += " {}: {:.6E} |".format(key, avg)
    log_string += "".join(f" {k}: {v:.2f} |" for k, v in {"max_violation": 0.75}.items())
    loss_scale, grad_norm, num_zeros_in_grad = 1.0, _grad_norm(it), 7
    log_string += f" loss scale: {loss_scale:.1f} |"
    log_string += f" grad norm: {grad_norm:.3f} |"
    log_string += f" num zeros: {num_zeros_in_grad} |"
    log_string += " number of skipped iterations: {:3d} |".format(0)
    log_string += " number of nan iterations: {:3d} |".format(0)
    return log_string


def line_deepspeed(it: int) -> str:
    """microsoft/Megatron-DeepSpeed (f4157bea69), megatron/training.py: consumed tokens, actual seqlen,
    samples per second, tgs, TFLOPs."""
    log_string = " iteration {:8d}/{:8d} |".format(it, TOTAL)
    log_string += " consumed samples: {:12d} |".format(it * 32)
    log_string += " consumed tokens: {:12d} |".format(it * 32 * 2048)
    log_string += " elapsed time per iteration (ms): {:.1f} |".format(1234.56)
    log_string += " learning rate: {:.3E} |".format(_lr(it))
    log_string += " global batch size: {:5d} |".format(32)
    log_string += " {}: {:.6E} |".format("lm loss", _loss(it))
    log_string += " loss scale: {:.1f} |".format(1.0)
    log_string += " grad norm: {:.3f} |".format(_grad_norm(it))
    log_string += " actual seqlen: {:5d} |".format(2048)
    log_string += " number of skipped iterations: {:3d} |".format(0)
    log_string += " number of nan iterations: {:3d} |".format(0)
    log_string += " samples per second: {:.3f} |".format(25.9213)
    log_string += " tokens per gpu per second (tgs): {:.3f} |".format(6635.85)
    log_string += " TFLOPs: {:.2f} |".format(150.3)
    return log_string


def line_mindspeed(it: int, now: datetime) -> str:
    """Ascend/MindSpeed-LLM 2.3.0 (62d4640b97), mindspeed_llm/training/training.py: core attn ratio, and the
    note printed when fix-router is set (a piece without a colon)."""
    log_string = f" [{now.strftime('%Y-%m-%d %H:%M:%S')}]"
    log_string += " iteration {:8d}/{:8d} |".format(it, TOTAL)
    log_string += " consumed samples: {:12d} |".format(it * 32)
    log_string += " elapsed time per iteration (ms): {:.1f} |".format(1234.56)
    throughput, attn_ratio, learning_rate, batch_size = 180.4, 37.5, _lr(it), 32
    log_string += f" throughput per GPU (TFLOP/s/GPU): {throughput:.1f} |"
    log_string += f" core attn ratio (%): {attn_ratio:.1f} |"
    log_string += f" learning rate: {learning_rate:.6E} |"
    log_string += f" global batch size: {batch_size:5d} |"
    log_string += " {}: {:.6E} |".format("lm loss", _loss(it))
    loss_scale, grad_norm = 1.0, _grad_norm(it)
    log_string += f" loss scale: {loss_scale:.1f} |"
    log_string += f" grad norm: {grad_norm:.3f} |"
    log_string += " number of skipped iterations: {:3d} |".format(0)
    log_string += " number of nan iterations: {:3d} |".format(0)
    if it % 20 == 0:
        log_string += " fix-router or fix-sub-seq-length is set, current loss is not reliable, only for test |"
    return log_string


def line_mindspeed_fsdp2(it: int) -> str:
    """Ascend/MindSpeed-LLM master (c77308a14b), mindspeed_llm/fsdp2/utils/train_monitor.py log templates."""
    templates = {
        "base": " iteration {:8d}/{:8d} | consumed samples: {:10d} | consumed tokens: {:10d} | elapsed time per iteration (ms): {:.2f} |",  # noqa: E501
        "optimizer": " learning rate: {:.6E} | global batch size: {:5d} | lm loss: {:.6E} | mtp loss: {:.6E} |",
        "grad_norm": " grad norm: {:.3f} |",
        "npu_memory": " max_memory_allocated(GB): {:.2f} | max_memory_reserved(GB): {:.2f} |",
    }
    log_string = templates["base"].format(it, TOTAL, it * 32, it * 32 * 4096, 1234.567)
    log_string += templates["optimizer"].format(_lr(it), 32, _loss(it), 0.31)
    log_string += templates["grad_norm"].format(_grad_norm(it))
    log_string += templates["npu_memory"].format(51.234, 60.0)
    return log_string


def _validation(it: int, prefix: str | None = None) -> list[str]:
    """evaluate_and_print_results: the line between two rules of dashes (core_r0.6.0 on)."""
    string = " validation loss at {} | ".format(prefix or "iteration {}".format(it))
    loss = _loss(it) - 0.05
    string += "{} value: {:.6E} | ".format("lm loss", loss)
    string += "{} PPL: {:.6E} | ".format("lm loss", math.exp(min(20, loss)))
    length = len(string) + 1
    return ["-" * length, string, "-" * length]


def _write(tmp_path: Path, lines: list[str], name: str = "train.log") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _timestamp(it: int) -> datetime:
    return datetime(2024, 5, 1, 10, 0, 0, 250000).replace(second=it % 60, minute=it // 60 % 60)


RELEASES = {
    "23.04": lambda it: line_2304(it),
    "core_r0.6.0": lambda it: line_r06(it, _timestamp(it)),
    "main": lambda it: line_main(it, _timestamp(it)),
    "Megatron-DeepSpeed": lambda it: line_deepspeed(it),
    "MindSpeed-LLM 2.3.0": lambda it: line_mindspeed(it, _timestamp(it)),
    "MindSpeed-LLM fsdp2": lambda it: line_mindspeed_fsdp2(it),
}
# What each release prints with an exponent: the learning rate's mantissa digits.
LR_DECIMALS = {"23.04": 3, "Megatron-DeepSpeed": 3}


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("prefix", ["", "[default7]:", "0: "])
def test_each_releases_line_with_a_launchers_prefix(tmp_path: Path, release: str, prefix: str) -> None:
    make = RELEASES[release]
    iterations = list(range(10, 310, 10))
    lines = ["using world size: 8", *(prefix + make(it) for it in iterations)]
    lines += [prefix + line for line in _validation(100)]
    run = megatron_log.read([_write(tmp_path, lines)])
    assert run.skipped == []
    for tag in ("train/loss", "train/loss_lm"):
        assert run.scalars[tag] == {it: pytest.approx(_loss(it), rel=5e-7) for it in iterations}
        assert run.averaged_over[tag] == 10 and run.resolution[tag] == pytest.approx(1e-6)
    assert run.scalars["train/grad_norm"] == {it: round(_grad_norm(it), 3) for it in iterations}
    assert run.resolution["train/grad_norm"] == pytest.approx(0.001) and "train/grad_norm" not in run.averaged_over
    digits = LR_DECIMALS.get(release, 6)
    assert run.scalars["train/lr"][300] == pytest.approx(3e-4, rel=10.0**-digits)
    assert run.resolution["train/lr"] == pytest.approx(10.0 ** (-4 - digits))
    assert run.scalars["eval/loss"] == {100: pytest.approx(_loss(100) - 0.05, rel=1e-6)}
    assert run.scalars["eval/perplexity"][100] == pytest.approx(math.exp(_loss(100) - 0.05), rel=1e-6)
    assert run.averaged_over["perf/step_time_ms"] == 10
    if release == "main":
        assert (
            run.scalars["import/load_balancing_loss"][20] == 1.0123
            and run.averaged_over["import/load_balancing_loss"] == 10
        )
        assert run.scalars["import/mtp_1_loss"][20] == pytest.approx(_loss(20) + 0.5, rel=1e-6)
        assert run.scalars["import/max_violation"][20] == 0.75 and run.scalars["import/num_zeros"][20] == 7
    if release in ("core_r0.6.0", "main", "MindSpeed-LLM 2.3.0"):
        stamp = _timestamp(20)
        assert run.wall_times[20] - run.wall_times[10] == pytest.approx((stamp - _timestamp(10)).total_seconds())
        if release == "main":
            assert run.wall_times[20] == pytest.approx(stamp.timestamp())
    if release == "core_r0.6.0":
        assert run.scalars["perf/model_tflops_per_device"][10] == 201.3
    if release == "Megatron-DeepSpeed":
        assert run.scalars["perf/samples_per_s"][10] == 25.921 and run.scalars["import/tflops"][10] == 150.3
        assert run.scalars["import/tokens_per_gpu_per_second_tgs"][10] == 6635.85
        assert run.averaged_over["perf/samples_per_s"] == run.averaged_over["import/tflops"] == 10
    if release == "MindSpeed-LLM 2.3.0":
        assert run.scalars["import/core_attn_ratio"][10] == 37.5
    if release == "MindSpeed-LLM fsdp2":
        assert run.scalars["import/mtp_loss"][10] == 0.31 and run.scalars["import/max_memory_allocated_gb"][10] == 51.23


def test_fields_are_read_by_name_in_any_order_with_unknown_ones_kept_under_import(tmp_path: Path) -> None:
    def reordered(it: int) -> str:
        pieces = line_r06(it, _timestamp(it)).split("|")
        head, fields = pieces[0], [p for p in pieces[1:] if p.strip()]
        fields = fields[::-1] if it % 20 else fields
        return "|".join([head, *fields, " my fork's field: 42 ", ""])

    run = megatron_log.read([_write(tmp_path, [reordered(it) for it in range(5, 55, 5)])])
    assert run.scalars["train/loss"] == {it: pytest.approx(_loss(it), rel=5e-7) for it in range(5, 55, 5)}
    assert run.scalars["import/my_fork_s_field"] == dict.fromkeys(range(5, 55, 5), 42.0)
    assert run.averaged_over["train/loss"] == 5 and run.skipped == []


def test_the_log_interval_comes_from_the_iterations_even_with_the_first_iteration_printed(tmp_path: Path) -> None:
    iterations = [1, *range(50, 501, 50)]  # main prints the first iteration too
    run = megatron_log.read([_write(tmp_path, [line_main(it, _timestamp(it)) for it in iterations])])
    assert sorted(run.scalars["train/loss"]) == iterations
    assert run.averaged_over["train/loss"] == 50 and run.averaged_over["import/mtp_1_loss"] == 50


def test_lines_cut_short_or_garbled_are_counted_with_their_line_numbers(tmp_path: Path) -> None:
    good = [line_r06(it, _timestamp(it)) for it in range(10, 110, 10)]
    lines = [good[0], good[1][:120], *good[2:5], " [2024-05-01 10:00:00] iteration       x0/    1000 | lm loss: 1 |"]
    lines += [*good[5:], " iteration      100/    1000 | no values here |"]
    run = megatron_log.read([_write(tmp_path, lines, "job.log")])
    assert sorted(run.scalars["train/loss"]) == [10, *range(30, 110, 10)]
    assert run.skipped == [
        "3 line(s) that look like Megatron's iteration line but do not parse (job.log:2, job.log:6, job.log:12)"
    ]


def test_a_value_that_is_not_a_number_is_counted(tmp_path: Path) -> None:
    lines = [
        line_2304(it).replace("grad norm: ", "grad norm: nan" if it == 20 else "grad norm: ") for it in (10, 20, 30)
    ]
    lines[1] = lines[1].replace("nan0.", "nan |x: 0.")  # grad norm: nan (a NaN step)
    run = megatron_log.read([_write(tmp_path, lines)])
    assert math.isnan(run.scalars["train/grad_norm"][20]) and run.scalars["train/grad_norm"][30] == round(
        _grad_norm(30), 3
    )
    lines = [line_2304(it).replace("global batch size:    32", "global batch size: many") for it in (10, 20)]
    run = megatron_log.read([_write(tmp_path, lines, "b.log")])
    assert run.skipped == ["2 value(s) of 'global batch size' that are not numbers"]


def test_rotated_parts_oldest_first_and_a_resumed_run_keeps_the_last_values(tmp_path: Path) -> None:
    older = _write(tmp_path, [line_2304(it) for it in range(10, 60, 10)], "train.log.1")
    newer = _write(tmp_path, [line_2304(it).replace("lm loss: ", "lm loss: 1") for it in range(40, 90, 10)])
    run = detect.read_source([tmp_path])  # as `mftb import` reads a folder: the parts oldest first
    assert run.format == "megatron-log" and run.source == [older, newer]
    assert sorted(run.scalars["train/loss"]) == list(range(10, 90, 10))
    assert run.scalars["train/loss"][50] == pytest.approx(float("1" + "{:.6E}".format(_loss(50))))
    assert "2 iteration line(s) printed again" in run.skipped[0]


def test_validation_at_the_end_of_training_and_on_the_test_set(tmp_path: Path) -> None:
    lines = [line_r06(it, _timestamp(it)) for it in range(10, 40, 10)]
    lines += _validation(30, "iteration 30 on validation set") + _validation(30, "the end of training for test data")
    run = megatron_log.read([_write(tmp_path, lines)])
    assert run.scalars["eval/loss"] == {30: pytest.approx(_loss(30) - 0.05, rel=1e-6)}
    assert run.scalars["eval/test_loss"] == {30: pytest.approx(_loss(30) - 0.05, rel=1e-6)}
    assert 30 in run.scalars["eval/test_perplexity"]


def test_sniff_finds_an_iteration_line_and_nothing_else(tmp_path: Path) -> None:
    assert megatron_log.sniff(tmp_path, ("[default0]:" + line_main(1, _timestamp(1))).encode())
    assert megatron_log.sniff(tmp_path, line_mindspeed_fsdp2(3).encode())
    assert not megatron_log.sniff(tmp_path, b"{ Epoch:[  1/  1], step:[    1/   10], loss:[5.5/5.5], lr: 0.1")
    assert not megatron_log.sniff(tmp_path, b"saved checkpoint from iteration     100 to /ckpt")
    # main's _print_args and validate_args, printed long before the first iteration line
    assert megatron_log.sniff(tmp_path, b"------------------------ arguments ------------------------\n")
    assert megatron_log.sniff(tmp_path, b"[default0]:using world size: 8, data-parallel size: 8, context-parallel")


def test_mftb_import_of_a_megatron_log_records_its_interval_and_resolution(tmp_path: Path) -> None:
    """`mftb import train.log` as a user types it: the run folder TensorBoard reads, and mftb_import.json
    with what a comparison needs."""
    iterations = [1, *range(10, 401, 10)]  # main prints the first iteration, then every --log-interval 10
    lines = [line_main(it, _timestamp(it)) for it in iterations]
    source = _write(tmp_path, ["[default7]:" + line for line in lines])
    result = subprocess.run(
        [MFTB, "import", str(source), "--logdir", str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert f"imported megatron-log into {tmp_path / 'logs' / 'train'}" in result.stdout
    points = dict(read_scalars(tmp_path / "logs" / "train")["train/loss"])
    assert points == {it: pytest.approx(_loss(it), rel=1e-6) for it in iterations}
    metadata = json.loads((tmp_path / "logs" / "train" / "mftb_import.json").read_text())
    assert metadata["averaged_over"]["train/loss"] == 10 and metadata["resolution"]["train/grad_norm"] == 0.001
