"""AlertMonitor in a real tiny MindFormers training that diverges, and `mftb watch` over real runs."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse
from pathlib import Path

import pytest
import yaml
from bot_servers import BotServer
from conftest import (
    MFTB,
    TrainingRun,
    documentation,
    read_scalars,
    run_mindformer_script,
    subprocess_env,
    train,
    write_tiny_config,
)

# MindSpore must be imported before any protobuf user (tensorboard, tensorboardX protos): its import
# switches protobuf to the pure-Python implementation, which fails once protobuf is loaded.
from mindformers_tbplugin.alerts.rule_catalog import RULES
from mindformers_tbplugin.alerts.rules import Rule
from mindformers_tbplugin.callbacks import AlertMonitor
from mindformers_tbplugin.registration.exit_status import STOPPED_BY_ALERT
from mindformers_tbplugin.schema import params_of

STEPS = 32
STEP_LINE = re.compile(r"step:\[\s*(\d+)/\s*\d+\], loss:")
DIVERGING_LR = 1.0e38  # the first update makes the weights overflow: the loss is NaN from step 2
BOT_SECRET = "SEC-diverged-team-secret"  # the Feishu bot's signing secret, in the training's environment only
TEAM_TENSORBOARD = "http://tensorboard.team.example:6006"


def diverging_config(folder: Path, tiny_data: Path, steps: int = STEPS, bot: BotServer | None = None) -> Path:
    """The tiny LLaMA with a learning rate that makes its loss NaN from step 2; AlertMonitor stops it. With
    ``bot``: also a signed Feishu sink to it (its URL from the environment: MindFormers prints the config),
    and a DingTalk sink whose secret variable is not set."""
    team_sinks = []
    if bot is not None:
        team_sinks = [
            {"feishu": "${MFTB_TEST_FEISHU_URL}", "secret_env": "MFTB_TEST_FEISHU_SECRET"},
            {"dingtalk": "http://127.0.0.1:9/robot/send", "secret_env": "MFTB_TEST_UNSET_SECRET"},
        ]
    callbacks = [
        {"type": "MFLossMonitor"},
        {"type": "TensorBoardMonitor", "log_dir": str(folder / "tb"), "experiment": "diverged"},
        {
            "type": "AlertMonitor",
            "rules": [
                {"rule": "nonfinite", "action": "stop"},
                {"rule": "spike", "tag": "train/loss", "k": 6},
                {"rule": "threshold", "tag": "custom/never_written", "above": 1.0},  # nothing writes it
            ],
            "sinks": ["log", "tensorboard", {"jsonl": str(folder / "alerts.jsonl")}, *team_sinks],
            **({"tensorboard_url": TEAM_TENSORBOARD} if bot is not None else {}),
        },
        {
            "type": "CheckpointMonitor",
            "prefix": "tiny",
            "directory": str(folder / "ckpt"),
            "save_checkpoint_steps": 1,  # after step 1 too: the incident's checkpoint before the bad step
        },
    ]
    config = write_tiny_config(
        folder,
        tiny_data,
        callbacks,
        num_samples=2 * steps,
        optimizer={"type": "AdamW", "betas": [0.9, 0.95], "eps": 1.0e-8, "weight_decay": 0.0},
        lr_schedule={"type": "ConstantWarmUpLR", "learning_rate": DIVERGING_LR, "warmup_steps": 0, "total_steps": -1},
        runner_wrapper={"type": "CPUTrainOneStepCell", "scale_sense": 1.0, "use_clip_grad": False},
    )
    return config


@pytest.fixture(scope="module")
def feishu_bot() -> BotServer:
    """A Feishu custom bot on loopback that checks the message and recomputes its signature."""
    bot = BotServer("feishu", secret=BOT_SECRET)
    yield bot
    bot.close()


@pytest.fixture(scope="module")
def diverged_run(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path, feishu_bot: BotServer) -> TrainingRun:
    folder = tmp_path_factory.mktemp("diverged")
    env = subprocess_env(MFTB_TEST_FEISHU_SECRET=BOT_SECRET, MFTB_TEST_FEISHU_URL=feishu_bot.url)
    env.pop("MFTB_TEST_UNSET_SECRET", None)
    run = train(diverging_config(folder, tiny_data, bot=feishu_bot), folder, env=env)
    assert run.returncode == STOPPED_BY_ALERT, run.output[-5000:]
    return run


def test_nonfinite_stop_ends_training_at_the_alerting_step(diverged_run: TrainingRun) -> None:
    printed = [int(step) for step in STEP_LINE.findall(diverged_run.output)]
    assert printed == [1, 2], printed  # MFLossMonitor printed two of the 32 steps
    assert "AlertMonitor: stopping training after step 2 (nonfinite: train/loss)" in diverged_run.output
    run_name = diverged_run.run_dir.name  # as mftb watch names it (test_watch_once_over_our_runs)
    assert f"ALERT [critical] nonfinite run={run_name} tag=train/loss step=2" in diverged_run.output


def test_it_says_at_start_what_it_watches_and_at_the_end_what_nothing_wrote(diverged_run: TrainingRun) -> None:
    jsonl = diverged_run.folder / "alerts.jsonl"
    assert (
        "AlertMonitor: rules nonfinite on train/loss, train/grad_norm (stop); spike on train/loss (warn); "
        f"threshold on custom/never_written (warn); alerts to log, tensorboard, jsonl {jsonl}, "
        "feishu ${MFTB_TEST_FEISHU_URL}"
    ) in diverged_run.output
    assert (
        "AlertMonitor: the rules watched custom/never_written, which nothing wrote in this training; check"
    ) in diverged_run.output
    assert "the rules watched train/grad_norm" not in diverged_run.output  # a default tag: no clipping, no norm


def test_mftb_train_exits_with_its_alert_status_naming_the_rule(diverged_run: TrainingRun) -> None:
    assert STOPPED_BY_ALERT == 3  # the fixture checked the exit status; documented in docs/alerts.md
    line = "mftb train: stopped by AlertMonitor (nonfinite on train/loss) at step 2; exit status 3"
    assert line in diverged_run.output.splitlines()
    assert "Traceback" not in diverged_run.output


def test_run_mindformer_py_exits_with_the_same_alert_status(tmp_path: Path, tiny_data: Path) -> None:
    """MindFormers' own entry returns normally after training; the plugin's exit handler makes the
    process exit 3 all the same, after the checkpoint callback and every other exit handler ran."""
    run = train(diverging_config(tmp_path, tiny_data, steps=4), tmp_path, entry=run_mindformer_script())
    assert run.returncode == STOPPED_BY_ALERT, run.output[-5000:]
    line = "run_mindformer.py: stopped by AlertMonitor (nonfinite on train/loss) at step 2; exit status 3"
    assert line in run.output.splitlines()
    assert "Traceback" not in run.output
    assert [int(step) for step in STEP_LINE.findall(run.output)] == [1, 2]


def test_the_run_says_an_alert_stopped_it(diverged_run: TrainingRun) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import api_pb2, metadata

    accumulator = EventAccumulator(str(diverged_run.run_dir))
    accumulator.Reload()
    (status,) = accumulator.Tensors("meta/status")
    assert (status.step, status.tensor_proto.string_val[0].decode()) == (
        2,
        "stopped by AlertMonitor (nonfinite on train/loss) at step 2",
    )
    content = accumulator.SummaryMetadata(metadata.SESSION_END_INFO_TAG).plugin_data.content
    end = metadata.parse_session_end_info_plugin_data(content)
    assert api_pb2.Status.Name(end.status) == "STATUS_FAILURE"  # the HParams session is no success


def test_the_status_record_says_stopped_by_alert_with_its_alerts(diverged_run: TrainingRun) -> None:
    from mindformers_tbplugin.pipeline.status_record import STATUS_FILE, decode

    record = decode((diverged_run.run_dir / STATUS_FILE).read_text())
    alerts = [json.loads(line) for line in (diverged_run.folder / "alerts.jsonl").read_text().splitlines()]
    assert (record.state, record.detail) == (
        "stopped by alert",
        "stopped by AlertMonitor (nonfinite on train/loss) at step 2",
    )
    assert (record.step, record.loss) == (2, None)  # the loss is NaN at step 2: no JSON number
    assert record.alerts == len(alerts) and record.alert_rules == sorted({alert["rule"] for alert in alerts})
    assert record.last_incident_step == max(alert["step"] for alert in alerts if "incident" in alert) == 2
    listed = subprocess.run(
        [MFTB, "runs", str(diverged_run.log_root), "--json"], env=subprocess_env(), capture_output=True, text=True
    )
    (row,) = json.loads(listed.stdout)
    assert (row["state"], row["step"], row["alerts"], row["last_incident_step"]) == (
        "stopped by alert",
        2,
        len(alerts),
        2,
    )


def test_the_jsonl_sink_holds_the_alert(diverged_run: TrainingRun) -> None:
    lines = (diverged_run.folder / "alerts.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["rule"], r["tag"], r["step"], r["value"], r["action"]) for r in records] == [
        ("nonfinite", "train/loss", 2, "nan", "stop")
    ]
    assert records[0]["severity"] == "critical" and records[0]["message"] == "train/loss is nan at step 2"
    assert records[0]["run"] == diverged_run.run_dir.name  # the main run's folder below log_dir


def test_the_team_chat_got_one_signed_message_matching_the_incident(
    diverged_run: TrainingRun, feishu_bot: BotServer
) -> None:
    """The Feishu bot on loopback checked the payload and recomputed the signature with the secret the
    training read from its environment; the message says what the jsonl record (the incident) says."""
    (record,) = [json.loads(line) for line in (diverged_run.folder / "alerts.jsonl").read_text().splitlines()]
    assert feishu_bot.requests == 1  # one message for the one alert, accepted at the first try
    (text,) = feishu_bot.received
    lines = text.splitlines()
    run, incident = record["run"], record["incident"]
    assert lines[0] == f"[critical] nonfinite on train/loss at step {record['step']} on run {run}"
    assert lines[1:6] == [
        f"rule: {record['rule']} ({record['severity']}, action {record['action']})",
        f"run: {run}",
        f"step: {record['step']}",
        f"tag: {record['tag']}",
        f"value: {record['value']}",
    ]
    ranks = ", ".join(f"rank {entry['rank']} {entry['value']}" for entry in incident["ranks"])
    assert f"ranks by train/loss, highest first: {ranks}" in lines
    assert f"last checkpoint before it: {incident['checkpoint']['path']} (step {incident['checkpoint']['step']})" in (
        lines
    )
    start = lines.index("resume with:")
    assert lines[start + 1 : start + 1 + len(incident["resume"])] == [f"    {line}" for line in incident["resume"]]
    run_filter = urllib.parse.quote(re.escape(run), safe="")
    assert lines[-1] == f"TensorBoard: {TEAM_TENSORBOARD}/?runFilter={run_filter}#timeseries"


def test_a_sink_whose_secret_is_unset_is_said_at_start_and_secrets_stay_out_of_logs(diverged_run: TrainingRun) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert (
        "alert sink dingtalk http://127.0.0.1:9/*** is off: environment variable MFTB_TEST_UNSET_SECRET is not set; "
        "the other sinks carry on"
    ) in diverged_run.output
    accumulator = EventAccumulator(str(diverged_run.run_dir))
    accumulator.Reload()
    (config,) = accumulator.Tensors("run/config")
    logged = config.tensor_proto.string_val[0].decode()
    assert "feishu: ${MFTB_TEST_FEISHU_URL}" in logged and "dingtalk: http://127.0.0.1:9/***" in logged
    for text in (logged, diverged_run.output):
        assert BOT_SECRET not in text and "HOOK-ID-SECRET" not in text


def test_logs_and_checkpoint_are_closed_normally(diverged_run: TrainingRun) -> None:
    scalars = read_scalars(diverged_run.run_dir)
    assert [step for step, _ in scalars["train/loss"]] == [1, 2]  # every step written, file closed cleanly
    assert scalars["alerts/nonfinite"] == [(2, 1.0)]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(diverged_run.run_dir))
    accumulator.Reload()
    (message,) = accumulator.Tensors("alerts/messages")
    assert message.step == 2
    assert b"nonfinite train/loss: train/loss is nan at step 2" in message.tensor_proto.string_val[0]
    checkpoints = sorted(path.name for path in (diverged_run.folder / "ckpt").rglob("*.ckpt"))
    assert checkpoints == ["tiny_rank_0-1_1.ckpt", "tiny_rank_0-1_2.ckpt"]  # the last at the stop, step 2


def test_the_alert_carries_its_incident_with_a_resume_that_validates(diverged_run: TrainingRun) -> None:
    """The jsonl record's incident: this rank's NaN loss, the checkpoint saved after step 1 (before the bad
    step 2), the resume lines; applied to the config, `mftb validate` accepts them; `mftb incident` prints it."""
    (record,) = [json.loads(line) for line in (diverged_run.folder / "alerts.jsonl").read_text().splitlines()]
    incident = record["incident"]
    folder = diverged_run.folder / "ckpt" / "checkpoint"
    assert incident["ranks"] == [{"rank": 0, "value": "nan"}] and incident["step"] == 2
    assert incident["checkpoint"] == {"step": 1, "path": str(folder / "rank_0" / "tiny_rank_0-1_1.ckpt")}
    assert incident["resume"] == [
        f"load_checkpoint: '{folder}'",
        "resume_training: 'tiny_rank_0-1_1.ckpt'",
        "ignore_data_skip: False",
        "data_skip_steps: 2",
    ]
    assert incident["lr"] == pytest.approx(DIVERGING_LR, rel=1e-6) and incident["loss_scale"] == 1.0
    # Unshuffled, one process, batch 2: step 2 read rows 2 and 3.
    assert incident["samples"] == [{"rank": 0, "indices": [2, 3]}] and incident["samples_unknown"] is None
    config = yaml.safe_load((diverged_run.folder / "tiny.yaml").read_text())
    config.update(yaml.safe_load("\n".join(incident["resume"])))
    resumed = diverged_run.folder / "resume.yaml"
    resumed.write_text(yaml.safe_dump(config, sort_keys=False))
    validate = subprocess.run([MFTB, "validate", str(resumed)], env=subprocess_env(), capture_output=True, text=True)
    assert validate.returncode == 0, validate.stdout + validate.stderr
    printed = subprocess.run([MFTB, "incident", str(diverged_run.log_root)], capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    assert f"## {diverged_run.run_dir.name}, step 2" in printed.stdout
    assert "**nonfinite** on `train/loss` at step 2 (critical)" in printed.stdout
    assert "- ranks by `train/loss`, highest first: rank 0 nan" in printed.stdout
    assert "data_skip_steps: 2" in printed.stdout
    none = subprocess.run([MFTB, "incident", str(diverged_run.log_root), "--step", "1"], capture_output=True, text=True)
    assert none.returncode == 2 and "no incident at step 1" in none.stderr


def test_watch_once_over_our_runs(diverged_run: TrainingRun, tiny_run: TrainingRun) -> None:
    healthy = subprocess.run(
        [MFTB, "watch", str(tiny_run.log_root), "--once", "--rule", "nonfinite", "--rule", "loss_scale_collapse"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
    )
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert healthy.stdout == ""
    diverged = subprocess.run(
        [MFTB, "watch", str(diverged_run.log_root), "--once", "--rule", "nonfinite"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
    )
    assert diverged.returncode == 1, diverged.stdout + diverged.stderr
    run_name = diverged_run.run_dir.name
    assert f"ALERT [critical] nonfinite run={run_name} tag=train/loss step=2: train/loss is nan at step 2" in (
        diverged.stdout
    )


def test_bad_alert_monitor_config_fails_before_training(tmp_path: Path, tiny_data: Path) -> None:
    callbacks = [
        {"type": "TensorBoardMonitor", "log_dir": str(tmp_path / "tb")},
        {"type": "AlertMonitor", "rules": [{"rule": "spkie", "k": 6}], "sinks": [{"webhook": "ftp://h/TOKEN"}]},
    ]
    run = train(write_tiny_config(tmp_path, tiny_data, callbacks), tmp_path)
    assert run.returncode != 0
    assert "unknown rule 'spkie'; did you mean 'spike'?" in run.output
    assert "expected an http:// or https:// URL" in run.output
    assert "TOKEN" not in run.output
    assert "Traceback" not in run.output


def test_validate_says_which_sink_has_no_secret_and_masks_bot_urls(tmp_path: Path) -> None:
    config = tmp_path / "team.yaml"
    config.write_text(
        "callbacks:\n"
        "  - type: TensorBoardMonitor\n"
        "  - type: AlertMonitor\n"
        "    sinks:\n"
        "      - log\n"
        '      - {dingtalk: "https://oapi.dingtalk.com/robot/send?access_token=TOKEN123", secret_env: MFTB_TEST_UNSET}'
        "\n"
        '      - {wecom: "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=KEY123", secret_env: X}\n'
    )
    env = subprocess_env()
    env.pop("MFTB_TEST_UNSET", None)
    bad = subprocess.run([MFTB, "validate", str(config)], env=env, capture_output=True, text=True)
    assert bad.returncode != 0
    assert "callbacks[1].sinks[2].secret_env (line 7): unknown option of the wecom sink" in bad.stdout + bad.stderr
    config.write_text("\n".join(config.read_text().splitlines()[:-1]) + "\n")
    good = subprocess.run([MFTB, "validate", str(config)], env=env, capture_output=True, text=True)
    assert good.returncode == 0, good.stdout + good.stderr
    assert (
        "warning: callbacks[1].sinks[1] (line 6): alert sink dingtalk https://oapi.dingtalk.com/*** is off: "
        "environment variable MFTB_TEST_UNSET is not set; the other sinks carry on"
    ) in good.stdout
    for output in (bad, good):
        assert "TOKEN123" not in output.stdout + output.stderr and "KEY123" not in output.stdout + output.stderr


def _readme_default(value: object) -> str:
    if isinstance(value, tuple):
        return ", ".join(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_readme_documents_alert_monitor_and_every_rule_parameter() -> None:
    readme = documentation()
    start = readme.index("Every parameter of `AlertMonitor`")
    table = re.search(r"(?:^\|.*\n)+", readme[start:], flags=re.M).group(0)
    rows = dict(re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", table, flags=re.M))
    assert rows == {param.name: "null" for param in params_of(AlertMonitor)}
    assert all(param.doc for param in params_of(AlertMonitor))
    common = {param.name for param in params_of(Rule)}  # action, severity, cooldown: documented once
    for name, rule in RULES.items():
        (row,) = re.findall(rf"^\| `{name}` \|.*$", readme, flags=re.M)
        for param in params_of(rule):
            if param.name in common:
                continue
            expected = (
                f"{param.name} (required)" if param.required else f"{param.name} ({_readme_default(param.default)}"
            )
            assert expected in row or param.optional, (name, expected)
