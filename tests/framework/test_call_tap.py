"""A read in front of every call of one method (framework/call_tap.py). That it runs ahead of real
callbacks in a real training: tests/jobs/test_plain_mindspore.py (classic), tests/jobs/test_pynative_trainer.py
(the PyNative trainer's LossCallback)."""

from __future__ import annotations

from conftest import plugin_log

from mindformers_tbplugin.framework.call_tap import CallTap, tap_first_step_end


def test_the_tap_reads_ahead_of_the_first_callback_and_leaves_it_as_it_was() -> None:
    calls: list[str] = []

    class Callback:
        def on_train_step_end(self, run_context: object) -> None:
            calls.append(f"callback {run_context}")

    first = Callback()
    tap = tap_first_step_end([first, Callback()], lambda run_context: calls.append(f"tap {run_context}"))
    assert tap is not None
    first.on_train_step_end(1)
    assert calls == ["tap 1", "callback 1"]
    tap.remove()
    assert "on_train_step_end" not in vars(first)
    assert tap_first_step_end([], print) is None


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
    tap = tap_first_step_end([first], failing)
    assert tap is not None
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
    lower = tap_first_step_end([first], lambda run_context: calls.append("lower"))
    upper = tap_first_step_end([first], lambda run_context: calls.append("upper"))
    assert lower is not None and upper is not None
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


def test_a_method_of_a_cell_is_tapped_with_its_arguments_and_keywords_and_restored() -> None:
    """The PyNative trainer's LossCallback calls model methods with arguments; the tap sees them, the
    method still gets them all and returns its own result."""
    seen: list[tuple] = []

    class Model:
        def get_load_balancing_loss(self, group: object, size: int, **kwargs: object) -> str:
            return f"loss {group} {size} {kwargs}"

    model = Model()
    tap = CallTap(lambda *args: seen.append(args))
    assert tap.install(model, "get_load_balancing_loss")
    assert model.get_load_balancing_loss("g", 2, has_last=True) == "loss g 2 {'has_last': True}"
    assert seen == [("g", 2)]
    assert not CallTap(print).install(model, "no_such_method")
    tap.remove()
    assert "get_load_balancing_loss" not in vars(model)
