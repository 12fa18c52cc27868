"""The chat bot sinks against servers on loopback that check each bot's documented payload and recompute
its signature (tests/bot_servers.py), answering as the bots do, refusals included."""

from __future__ import annotations

import pytest
from bot_servers import URL_TOKENS, BotServer
from conftest import plugin_log

from mindformers_tbplugin.alerts.chat_sinks import DingTalkSink, FeishuSink, SlackSink, WeComSink, clip
from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.alerts.sinks import build_sinks, unavailable_sinks, usable_sinks

SECRET = "SEC-team-signing-secret-0123456789"
INCIDENT = {
    "step": 42,
    "ranks": [{"rank": 3, "value": "nan"}, {"rank": 0, "value": 2.5}],
    "ranks_tag": "train/loss",
    "layers": [{"group": "layers.1.attention", "grad_norm": 91.5, "times_median": 12.0}],
    "checkpoint": {"step": 40, "path": "/ckpt/checkpoint/rank_0/tiny_rank_0-40_1.ckpt"},
    "resume": ["load_checkpoint: '/ckpt/checkpoint'", "resume_training: 'tiny_rank_0-40_1.ckpt'"],
    "resume_note": None,
}
ALERT = Alert(
    "spike", "train/loss", 42, 9.5, 2.25, "train/loss spiked to 9.5", "warning", run="exp/run1", incident=INCIDENT
)


@pytest.fixture
def servers():
    started: list[BotServer] = []

    def start(kind: str, **options) -> BotServer:
        started.append(BotServer(kind, **options))
        return started[-1]

    yield start
    for server in started:
        server.close()


def _expected_lines(link: str) -> list[str]:
    return [
        "rule: spike (warning, action warn)",
        "run: exp/run1",
        "step: 42",
        "tag: train/loss",
        "value: 9.5 (baseline 2.25)",
        "train/loss spiked to 9.5",
        "ranks by train/loss, highest first: rank 3 nan, rank 0 2.5",
        "layers: layers.1.attention 91.5 (12x its median)",
        "last checkpoint before it: /ckpt/checkpoint/rank_0/tiny_rank_0-40_1.ckpt (step 40)",
        "resume with:",
        "    load_checkpoint: '/ckpt/checkpoint'",
        "    resume_training: 'tiny_rank_0-40_1.ckpt'",
        f"TensorBoard: {link}",
    ]


@pytest.mark.parametrize("kind", ["feishu", "dingtalk"])
def test_signed_bots_accept_the_message_and_its_signature(servers, kind: str) -> None:
    bot = servers(kind, secret=SECRET)
    sink = {"feishu": FeishuSink, "dingtalk": DingTalkSink}[kind](bot.url, SECRET, "http://tb.team:6006/")
    with plugin_log() as log:
        sink.emit(ALERT)
        sink.close(timeout=30)
    assert log == [] and sink.sent == 1
    (text,) = bot.received
    link = "http://tb.team:6006/?runFilter=exp%2Frun1#timeseries"
    assert text.splitlines() == ["[warning] spike on train/loss at step 42 on run exp/run1", *_expected_lines(link)]


@pytest.mark.parametrize("kind", ["feishu", "dingtalk"])
def test_a_wrong_secret_is_a_refusal_said_once_with_the_url_masked(servers, kind: str) -> None:
    """The bots answer HTTP 200 with a non-zero code: a failure, not retried (a signature does not heal)."""
    bot = servers(kind, secret=SECRET)
    sink = {"feishu": FeishuSink, "dingtalk": DingTalkSink}[kind](bot.url, "SEC-wrong", None, backoff=0.01)
    with plugin_log() as log:
        for step in (1, 2):
            sink.emit(Alert("nonfinite", "train/loss", step, float("nan"), None, "nan", "critical"))
        sink.close(timeout=30)
    assert bot.received == [] and bot.requests == 2  # one try each
    (line,) = log
    expected = "code 19021: sign match fail" if kind == "feishu" else "errcode 310000: sign not match"
    assert f"alert {kind} http://127.0.0.1:" in line and expected in line, line
    assert not any(token in line for token in URL_TOKENS) and "SEC-" not in line


def test_wecom_gets_markdown_with_a_link(servers) -> None:
    bot = servers("wecom")
    sink = WeComSink(bot.url, tensorboard="https://tb.team")
    sink.emit(ALERT)
    sink.close(timeout=30)
    (content,) = bot.received
    assert bot.bodies[0]["msgtype"] == "markdown"
    link = "https://tb.team/?runFilter=exp%2Frun1#timeseries"
    lines = _expected_lines(link)
    lines[-1] = f"[TensorBoard]({link})"
    assert content.splitlines() == ["**[warning] spike on train/loss at step 42 on run exp/run1**", *lines]


def test_slack_gets_text_and_an_invalid_payload_is_a_failure(servers) -> None:
    bot = servers("slack")
    sink = SlackSink(bot.url)
    sink.emit(ALERT)
    sink.close(timeout=30)
    (text,) = bot.received
    assert bot.bodies == [{"text": text}] and "TensorBoard" not in text  # no URL configured: no link
    assert text.splitlines()[1:6] == _expected_lines("")[:5]


def test_a_5xx_is_retried_with_backoff_until_accepted(servers) -> None:
    bot = servers("feishu", secret=SECRET, fail_first=2)
    sink = FeishuSink(bot.url, SECRET, backoff=0.01)
    with plugin_log() as log:
        sink.emit(ALERT)
        sink.close(timeout=30)
    assert bot.requests == 3 and len(bot.received) == 1 and sink.sent == 1
    assert log == []  # delivered in the end: nothing to say


def test_retries_give_up_and_say_so_once(servers) -> None:
    bot = servers("slack", fail_first=100)
    sink = SlackSink(bot.url, attempts=3, backoff=0.01)
    with plugin_log() as log:
        sink.emit(ALERT)
        sink.emit(Alert("nonfinite", "train/loss", 43, float("nan"), None, "nan", "critical", run="exp/run1"))
        sink.close(timeout=30)
    assert bot.requests == 6 and bot.received == []
    (line,) = log
    assert "alert slack http://127.0.0.1:" in line and "failed after 3 tries: HTTP 503 upstream unavailable" in line
    assert "SLACK-TOKEN-SECRET" not in line


def test_sinks_from_yaml_and_a_secret_variable_unset(monkeypatch: pytest.MonkeyPatch, servers) -> None:
    feishu, dingtalk = servers("feishu", secret=SECRET), servers("dingtalk", secret=SECRET)
    monkeypatch.setenv("TEAM_FEISHU_SECRET", SECRET)
    monkeypatch.delenv("TEAM_DINGTALK_SECRET", raising=False)
    specs = [
        "log",
        {"feishu": feishu.url, "secret_env": "TEAM_FEISHU_SECRET"},
        {"dingtalk": dingtalk.url, "secret_env": "TEAM_DINGTALK_SECRET"},
    ]
    sinks, problems = build_sinks(specs)
    assert problems == []
    (warning,) = unavailable_sinks(specs)
    assert warning.key == "sinks[2]"
    assert warning.message == (
        f"alert sink dingtalk http://127.0.0.1:{dingtalk.url.split(':')[2].split('/')[0]}/*** is off: "
        "environment variable TEAM_DINGTALK_SECRET is not set; the other sinks carry on"
    )
    with plugin_log() as log:
        usable = usable_sinks(sinks)
    assert log == [warning.message] and [sink.label for sink in usable] == ["log", "feishu"]
    usable[1].emit(ALERT)
    usable[1].close(timeout=30)
    assert len(feishu.received) == 1 and dingtalk.requests == 0


def test_the_url_from_the_environment(monkeypatch: pytest.MonkeyPatch, servers) -> None:
    """``${VAR}``: the URL (which holds the bot's token) stays out of the YAML that MindFormers prints."""
    bot = servers("wecom")
    monkeypatch.setenv("TEAM_WECOM_URL", bot.url)
    monkeypatch.delenv("TEAM_SLACK_URL", raising=False)
    monkeypatch.setenv("TEAM_BAD_URL", "ftp://h/TOKEN")
    specs = [{"wecom": "${TEAM_WECOM_URL}"}, {"slack": "${TEAM_SLACK_URL}"}]
    (wecom, slack), problems = build_sinks(specs)
    assert problems == [] and wecom.describe() == "wecom ${TEAM_WECOM_URL}" and wecom.unavailable is None
    assert slack.unavailable == "environment variable TEAM_SLACK_URL (the bot's URL) is not set"
    wecom.emit(ALERT)
    wecom.close(timeout=30)
    assert len(bot.received) == 1
    (problem,) = build_sinks([{"slack": "${TEAM_BAD_URL}"}])[1]
    assert problem.render() == "sinks[0].slack: environment variable TEAM_BAD_URL holds no http:// or https:// URL"


def test_secret_from_a_file(tmp_path, servers) -> None:
    bot = servers("dingtalk", secret=SECRET)
    (tmp_path / "dingtalk.secret").write_text(SECRET + "\n")
    (sink,), _ = build_sinks([{"dingtalk": bot.url, "secret_file": str(tmp_path / "dingtalk.secret")}])
    sink.emit(ALERT)
    sink.close(timeout=30)
    assert len(bot.received) == 1
    (missing,) = unavailable_sinks([{"dingtalk": bot.url, "secret_file": str(tmp_path / "nope")}])
    assert f"cannot read secret file {tmp_path / 'nope'}: No such file or directory" in missing.message


def test_bad_chat_sink_entries_are_config_errors_naming_the_key() -> None:
    _, problems = build_sinks(
        [
            {"feishu": "ftp://open.feishu.cn/open-apis/bot/v2/hook/HOOK-ID-SECRET"},
            {"slack": "https://hooks.slack.com/services/T/B/X", "secret_env": "S"},
            {"dingtalk": "https://oapi.dingtalk.com/robot/send?access_token=T", "secret_env": "A", "secret_file": "f"},
            {"wecom": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=K", "secert_env": "X"},
            {"feishu": "https://open.feishu.cn/x", "secret_env": ""},
        ]
    )
    assert [problem.render() for problem in problems] == [
        "sinks[0].feishu: expected the bot's http:// or https:// URL or ${VARIABLE}, got 'ftp://open.feishu.cn/***'",
        "sinks[1].secret_env: unknown option of the slack sink (a slack sink takes only its URL)",
        "sinks[2].secret_file: give secret_env or secret_file, not both",
        "sinks[3].secert_env: unknown option of the wecom sink (a wecom sink takes only its URL)",
        "sinks[4].secret_env: expected an environment variable name or a file path, got ''",
    ]


def test_clip_keeps_whole_characters_under_the_byte_limit() -> None:
    text = "告警" * 3000  # 3 bytes a character
    clipped = clip(text)
    assert len(clipped.encode()) <= 4000 and clipped.endswith("\n...") and clipped.startswith("告警")
    assert clip("short") == "short"
