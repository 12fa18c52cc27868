"""The read in front of the first callback of a classic step end (framework/step_end_tap.py). That it
runs ahead of real callbacks in a real training: tests/jobs/test_plain_mindspore.py."""

from __future__ import annotations

from conftest import plugin_log

from mindformers_tbplugin.framework.step_end_tap import StepEndTap


def test_the_tap_reads_ahead_of_the_first_callback_and_leaves_it_as_it_was() -> None:
    calls: list[str] = []

    class Callback:
        def on_train_step_end(self, run_context: object) -> None:
            calls.append(f"callback {run_context}")

    first = Callback()
    tap = StepEndTap(lambda run_context: calls.append(f"tap {run_context}"))
    assert tap.install([first, Callback()])
    first.on_train_step_end(1)
    assert calls == ["tap 1", "callback 1"]
    tap.remove()
    assert "on_train_step_end" not in vars(first)
    assert not tap.install([])


def test_a_failing_read_warns_once_and_the_callback_still_runs() -> None:
    calls: list[int] = []

    class Callback:
        def on_train_step_end(self, run_context: int) -> None:
            calls.append(run_context)

    def failing(run_context: object) -> None:
        raise RuntimeError("device busy")

    first = Callback()
    own = first.on_train_step_end
    first.on_train_step_end = own  # an instance attribute it already had: restored as it was
    tap = StepEndTap(failing)
    tap.install([first])
    with plugin_log() as messages:
        first.on_train_step_end(1)
        first.on_train_step_end(2)
    assert calls == [1, 2]
    assert len([m for m in messages if "device busy" in m]) == 1
    tap.remove()
    assert vars(first)["on_train_step_end"] == own


def test_two_taps_on_one_callback_come_off_in_either_order() -> None:
    """Two monitors in one training tap the same first callback; the first one's train end comes first."""
    calls: list[str] = []

    class Callback:
        def on_train_step_end(self, run_context: object) -> None:
            calls.append("callback")

    first = Callback()
    lower = StepEndTap(lambda run_context: calls.append("lower"))
    upper = StepEndTap(lambda run_context: calls.append("upper"))
    assert lower.install([first]) and upper.install([first])
    first.on_train_step_end(1)
    assert calls == ["upper", "lower", "callback"]
    lower.remove()
    calls.clear()
    first.on_train_step_end(2)
    assert calls == ["upper", "callback"]  # the lower one reads no more, the upper one still does
    upper.remove()
    calls.clear()
    first.on_train_step_end(3)
    assert calls == ["callback"]
