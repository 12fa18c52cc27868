"""`mftb watch` as a user runs it, over event files written by tensorboardX, and following new points."""

from __future__ import annotations

import json
import math
import os
import selectors
import subprocess
import time
from pathlib import Path

import tensorboardX
from bot_servers import URL_TOKENS, BotServer
from conftest import MFTB, subprocess_env
from fakes import tensor_scalar_summary


def watch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([MFTB, "watch", *args], env=subprocess_env(), capture_output=True, text=True, timeout=120)


def write_tbx_run(run_dir: Path, steps: int, nan_at: int | None = None, start_wall: float | None = None) -> None:
    """A torch/tensorboardX-style run: one event per add_scalar, loss as simple_value, grad norm as a tensor."""
    writer = tensorboardX.SummaryWriter(str(run_dir))
    start_wall = time.time() - steps if start_wall is None else start_wall
    for step in range(1, steps + 1):
        loss = math.nan if step == nan_at else 5.0 / math.sqrt(step)
        writer.add_scalar("train/loss", loss, step, walltime=start_wall + step)
        summary = tensor_scalar_summary("train/grad_norm", 1.0 + 0.01 * (step % 7), step == 1)
        writer._get_file_writer().add_summary(summary, step, walltime=start_wall + step)
    writer.close()


def test_once_over_tensorboardx_runs(tmp_path: Path) -> None:
    write_tbx_run(tmp_path / "healthy", 200)
    assert watch(str(tmp_path), "--once").returncode == 0

    write_tbx_run(tmp_path / "sub" / "broken", 200, nan_at=120)
    spiky = tmp_path / "spiky"
    writer = tensorboardX.SummaryWriter(str(spiky))
    for step in range(1, 201):
        summary = tensor_scalar_summary("train/grad_norm", 50.0 if step == 150 else 1.0 + 0.01 * (step % 7), step == 1)
        writer._get_file_writer().add_summary(summary, step)
    writer.close()
    result = watch(str(tmp_path), "--once", "--jsonl", str(tmp_path / "alerts.jsonl"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == [  # runs in path order
        "ALERT [warning] spike run=spiky tag=train/grad_norm step=150: train/grad_norm spiked to 50 at step 150 "
        "(rolling median 1.03, bound median + 8 MAD = 1.19)",
        "ALERT [critical] nonfinite run=sub/broken tag=train/loss step=120: train/loss is nan at step 120",
    ]
    assert "3 runs, 2 alerts" in result.stderr
    records = [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert [(r["run"], r["rule"], r["step"]) for r in records] == [
        ("spiky", "spike", 150),
        ("sub/broken", "nonfinite", 120),
    ]


def test_once_reports_a_run_that_stopped_advancing(tmp_path: Path) -> None:
    write_tbx_run(tmp_path / "live", 100)  # last point about now
    write_tbx_run(tmp_path / "stuck", 100, start_wall=time.time() - 3600)  # last point an hour ago, 1 s per step
    assert watch(str(tmp_path), "--once").returncode == 0  # stall is not a default rule
    result = watch(str(tmp_path), "--once", "--rule", "stall", "--rule", "nonfinite")
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = result.stdout.splitlines()
    assert line.startswith("ALERT [critical] stall run=stuck tag=* step=100: no new step for 35")
    assert "(median step interval 1 s, limit 10x)" in line
    quiet = watch(str(tmp_path / "stuck"), "--once", "--rule", "stall,min_silence=7200")
    assert quiet.returncode == 0, quiet.stdout


def test_follow_reads_new_points_as_they_arrive(tmp_path: Path) -> None:
    writer = tensorboardX.SummaryWriter(str(tmp_path / "run"), flush_secs=1)
    for step in range(1, 51):
        writer.add_scalar("train/loss", 1.0, step)
    writer.flush()
    process = subprocess.Popen(
        [MFTB, "watch", str(tmp_path), "--interval", "0.2", "--rule", "nonfinite"],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        selector = selectors.DefaultSelector()
        selector.register(process.stdout, selectors.EVENT_READ)
        assert selector.select(timeout=3) == []  # healthy so far: nothing printed
        writer.add_scalar("train/loss", math.inf, 51)
        writer.add_scalar("train/loss", 1.0, 52)
        writer.flush()
        assert selector.select(timeout=60), "no alert printed after the bad point was written"
        line = process.stdout.readline()
        assert line.startswith("ALERT [critical] nonfinite run=run tag=train/loss step=51: train/loss is inf")
    finally:
        writer.close()
        process.terminate()
        process.wait(timeout=30)
    assert process.returncode in (0, -15)


def test_config_file_errors_name_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "alerts.yaml"
    config.write_text(
        "rules:\n"
        "  - rule: spike\n"
        "    tag: train/loss\n"
        "    k: six\n"
        "  - {rule: nonfinit}\n"
        "sinks:\n"
        "  - webhook: https://hooks.example.com/services/T0/SECRET\n"
        "  - {command: 'rm -rf x'}\n"
    )
    result = watch(str(tmp_path), "--once", "--config", str(config))
    assert result.returncode == 2
    assert f"{config}:4: rules[0].k: expected number, got 'six' (string)" in result.stderr
    assert f"{config}:5: rules[1].rule: unknown rule 'nonfinit'; did you mean 'nonfinite'?" in result.stderr
    assert f"{config}:8: sinks[1].command: expected a non-empty list of arguments" in result.stderr
    assert "Traceback" not in result.stderr and "SECRET" not in result.stderr
    bad_flag = watch(str(tmp_path), "--once", "--rule", "spike,k")
    assert bad_flag.returncode == 2 and "--rule 'spike,k': expected NAME,param=value" in bad_flag.stderr
    bad_rules = watch(str(tmp_path), "--once", "--rule", "spkie", "--rule", "spike,k=x", "--webhook", "ftp://h/SECRET")
    assert bad_rules.returncode == 2
    assert "--rule[0].rule: unknown rule 'spkie'; did you mean 'spike'?" in bad_rules.stderr
    assert "--rule[1].k: expected number, got 'x' (string)" in bad_rules.stderr
    bad_sink = watch(str(tmp_path), "--once", "--webhook", "ftp://h/SECRET")
    assert bad_sink.returncode == 2 and "expected an http:// or https:// URL, got 'ftp://h/***'" in bad_sink.stderr
    assert watch(str(tmp_path / "missing"), "--once").returncode == 2


def test_config_file_rules_and_sinks_are_used(tmp_path: Path) -> None:
    write_tbx_run(tmp_path / "runs" / "r", 60)
    config = tmp_path / "alerts.yaml"
    out = tmp_path / "out.jsonl"
    config.write_text(
        f"rules:\n  - {{rule: threshold, tag: train/loss, above: 2.0}}\nsinks: [log, tensorboard, {{jsonl: {out}}}]\n"
    )
    result = watch(str(tmp_path / "runs"), "--once", "--config", str(config))
    assert result.returncode == 1
    assert result.stdout.startswith("ALERT [warning] threshold run=r tag=train/loss step=1: train/loss = 5 at step 1")
    assert "tensorboard sink works only inside training" in result.stderr
    assert json.loads(out.read_text().splitlines()[0])["rule"] == "threshold"
    assert os.path.getsize(out) > 0


def test_chat_sinks_from_the_config_with_a_link_and_a_sink_without_its_secret(tmp_path: Path) -> None:
    write_tbx_run(tmp_path / "runs" / "exp" / "broken", 60, nan_at=40)
    dingtalk, slack = BotServer("dingtalk", secret="SEC-watch-secret"), BotServer("slack")
    config = tmp_path / "alerts.yaml"
    config.write_text(
        "rules: [{rule: nonfinite}]\n"
        "tensorboard_url: http://tb.team:6006\n"
        "sinks:\n"
        f"  - {{dingtalk: '{dingtalk.url}', secret_env: MFTB_TEST_DING_SECRET}}\n"
        "  - {slack: '${MFTB_TEST_SLACK_URL}'}\n"
        "  - {feishu: 'https://open.feishu.cn/open-apis/bot/v2/hook/HOOK-ID-SECRET', secret_env: MFTB_TEST_UNSET}\n"
    )
    env = subprocess_env(MFTB_TEST_DING_SECRET="SEC-watch-secret", MFTB_TEST_SLACK_URL=slack.url)
    env.pop("MFTB_TEST_UNSET", None)
    try:
        result = subprocess.run(
            [MFTB, "watch", str(tmp_path / "runs"), "--once", "--config", str(config)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        dingtalk.close()
        slack.close()
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "alert sink feishu https://open.feishu.cn/*** is off: environment variable MFTB_TEST_UNSET is not set; "
        "the other sinks carry on"
    ) in result.stderr
    link = "TensorBoard: http://tb.team:6006/?runFilter=exp%2Fbroken#timeseries"
    for bot in (dingtalk, slack):  # the signed DingTalk request was checked by the bot, the Slack one too
        (text,) = bot.received
        lines = text.splitlines()
        assert lines[0] == "[critical] nonfinite on train/loss at step 40 on run exp/broken"
        assert "value: nan" in lines and lines[-1] == link
    assert not any(token in result.stdout + result.stderr for token in URL_TOKENS)
