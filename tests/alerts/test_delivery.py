"""The delivery thread of the chat and mail sinks, against real servers on loopback: a rule's storm folded
into one summary, and a server that never answers holding neither the caller nor more than the queue."""

from __future__ import annotations

import pytest
from bot_servers import BotServer
from conftest import plugin_log

from mindformers_tbplugin.alerts.chat_sinks import SlackSink
from mindformers_tbplugin.alerts.delivery import secret
from mindformers_tbplugin.alerts.record import Alert


def spike(step: int, value: float, run: str = "exp/run1", rule: str = "spike") -> Alert:
    return Alert(rule, "train/loss", step, value, 2.0, f"train/loss spiked to {value:g}", "warning", run=run)


class Clock:
    """A clock the test moves (the folding window is read from it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def slack():
    server = BotServer("slack")
    yield server
    server.close()


def test_a_storm_is_one_message_then_one_summary(slack: BotServer) -> None:
    sink = SlackSink(slack.url, fold_seconds=600)
    sink.emit(spike(100, 9.0))
    for step in range(110, 200, 10):
        sink.emit(spike(step, step / 10))
    sink.emit(spike(150, 7.0, run="exp/run2"))  # another run: its own first message
    sink.close(timeout=30)
    first, other, summary = slack.received
    assert first.startswith("[warning] spike on train/loss at step 100 on run exp/run1\n")
    assert other.startswith("[warning] spike on train/loss at step 150 on run exp/run2\n")
    assert summary.splitlines()[:5] == [
        "[warning] spike fired 9 more time(s) on run exp/run1 (steps 110-190)",
        "rule: spike, 9 firing(s) within 600 s after the one already sent",
        "run: exp/run1",
        "steps 110-190; tags: train/loss",
        "last: value 19 at step 190: train/loss spiked to 19",
    ]


def test_the_summary_goes_out_when_the_window_closes(slack: BotServer) -> None:
    clock = Clock()
    sink = SlackSink(slack.url, fold_seconds=600, clock=clock)
    sink.emit(spike(1, 5.0))
    slack.wait(1)
    sink.emit(spike(2, 6.0))
    sink.emit(spike(3, 7.0))
    assert sink.pending() == 0 and len(slack.received) == 1  # folded, nothing sent yet
    clock.now += 601
    sink.emit(spike(4, 1.0, rule="nonfinite"))  # wakes the thread: the spike window has closed
    slack.wait(3)
    assert slack.received[1].startswith("[warning] nonfinite on train/loss at step 4")
    assert slack.received[2].startswith("[warning] spike fired 2 more time(s) on run exp/run1 (steps 2-3)")
    sink.emit(spike(5, 8.0))  # a new window is open: folded again
    sink.close(timeout=30)
    assert slack.received[3].startswith("[warning] spike fired 1 more time(s) on run exp/run1 (step 5)")
    assert len(slack.received) == 4


def test_a_server_that_never_answers_blocks_nothing_and_the_queue_stays_bounded() -> None:
    hanging = BotServer("slack", hang=True)
    sink = SlackSink(hanging.url, queue_limit=3, attempts=1)
    try:
        with plugin_log() as log:
            sink.emit(spike(1, 5.0, rule="r0"))
            hanging.wait(1, "requests")  # the delivery thread is inside its request, waiting for an answer
            for index in range(1, 11):  # distinct rules: none folded, every one wants a message
                sink.emit(spike(index, 5.0, rule=f"r{index}"))
            assert sink.thread is not None and sink.thread.is_alive()
            assert sink.pending() == 3 and sink.dropped == 7 and sink.sent == 0
            assert hanging.requests == 1
        (line,) = log
        assert "3 messages waiting, new alerts are dropped" in line and "SLACK-TOKEN-SECRET" not in line
    finally:
        hanging.close()  # the request ends; what waits goes out or fails
        sink.close(timeout=30)


def test_secret_reads_the_environment_or_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("BOT_SECRET", "s3cret")
    monkeypatch.delenv("UNSET_SECRET", raising=False)
    (tmp_path / "empty").write_text("\n")
    assert secret("BOT_SECRET", None) == ("s3cret", None)
    assert secret("UNSET_SECRET", None) == (None, "environment variable UNSET_SECRET is not set")
    assert secret(None, str(tmp_path / "empty")) == (None, f"secret file {tmp_path / 'empty'} is empty")
    assert secret(None, None) == (None, None)
