"""A training's shared state (pipeline/run.py): the Run each training's callbacks find by its identity
and user code as the current one; its listeners of written values and of MoE loads (a failing one
is removed, the others still called); the job-wide stop, what it keeps of the first request, and the
``meta/status`` sentence of a stop. The stop riding in the aggregation: tests/pipeline/test_routing.py."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import plugin_log

from mindformers_tbplugin.pipeline import run as run_module
from mindformers_tbplugin.pipeline.run import AlertStop, JobStop, Run, current_run, training_run


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process in which no training began yet (the process's current Run is put back afterwards)."""
    monkeypatch.setattr(run_module._CURRENT, "run", None)


# -- which Run ---------------------------------------------------------------------------------------------
def test_the_callbacks_of_one_training_share_its_run_and_user_code_finds_it(no_training: None) -> None:
    assert current_run() is None
    training = object()  # the callback parameters object a training's callbacks share
    first = training_run(training)
    assert training_run(training) is first
    assert current_run() is first


def test_a_new_training_gets_a_new_run_by_identity_not_equality(no_training: None) -> None:
    first = training_run({"epoch": 1})
    second = training_run({"epoch": 1})  # equal, but another training's object
    assert second is not first and second.key == {"epoch": 1}
    assert current_run() is second  # the last training's Run is the current one


def test_a_caller_without_a_training_gets_a_run_of_its_own_each_time(no_training: None) -> None:
    first = training_run(None)
    assert training_run(None) is not first
    assert first.key is None and first.name == "" and first.monitor is None


# -- listeners ---------------------------------------------------------------------------------------------
def test_each_listener_gets_each_published_step_once() -> None:
    run = Run()
    seen: list[tuple[int, dict[str, float]]] = []

    def listener(step: int, values: dict[str, float]) -> None:
        seen.append((step, values))

    run.subscribe(listener)
    run.subscribe(listener)  # a second subscription of the same listener is ignored
    run.publish(3, {"train/loss": 2.5})
    run.unsubscribe(listener)
    run.unsubscribe(listener)  # not subscribed any more: nothing to do
    run.publish(4, {"train/loss": 2.0})
    assert seen == [(3, {"train/loss": 2.5})]


def test_a_failing_listener_is_removed_with_a_warning_and_the_others_still_run() -> None:
    run = Run()
    seen: list[int] = []

    def failing(step: int, values: dict[str, float]) -> None:
        raise KeyError("train/grad_norm")

    run.subscribe(failing)
    run.subscribe(lambda step, values: seen.append(step))
    with plugin_log() as messages:
        run.publish(1, {})
        run.publish(2, {})
    assert seen == [1, 2]  # the listener after the failing one ran both times
    assert len(messages) == 1  # removed at its first failure: not called at step 2
    assert messages[0].endswith("failed (KeyError('train/grad_norm')) and was removed")


def test_expert_load_listeners_get_the_loads_and_not_the_written_values() -> None:
    run = Run()
    loads: list[tuple[int, Any, Any]] = []
    values: list[int] = []
    run.subscribe_expert_loads(lambda step, relative, statistics: loads.append((step, relative, statistics)))
    run.subscribe(lambda step, written: values.append(step))
    run.publish_expert_loads(5, [[1.0, 1.0]], "statistics")
    assert loads == [(5, [[1.0, 1.0]], "statistics")] and values == []
    run.publish(5, {"moe/max_violation": 0.0})
    assert len(loads) == 1 and values == [5]


def test_an_expert_load_listener_can_be_unsubscribed() -> None:
    run = Run()
    loads: list[int] = []

    def listener(step: int, relative: Any, statistics: Any) -> None:
        loads.append(step)

    run.subscribe_expert_loads(listener)
    run.subscribe_expert_loads(listener)
    run.publish_expert_loads(1, None, None)
    run.unsubscribe_expert_loads(listener)
    run.publish_expert_loads(2, None, None)
    assert loads == [1]


# -- the job-wide stop ---------------------------------------------------------------------------------
def test_what_a_training_stopped_by_an_alert_says_on_each_rank() -> None:
    """meta/status and mftb train's line: the requesting (writing) rank names the rule; ranks that
    learned of the stop from the aggregation name the rank; a single process stops at the alert."""
    said = []
    for request in (True, False):
        stop = JobStop()
        stop.carriers = 1  # a router that aggregates
        if request:
            assert stop.request("spike on train/loss", 3)
        stop.agreed(writer_rank=0)
        said.append(stop.finish(4).status())
    stop = JobStop()
    stop.alone("nonfinite on train/loss", 2)
    said.append(stop.finish(2).status())
    assert said == [
        "stopped by AlertMonitor (spike on train/loss at step 3) at step 4",
        "stopped by AlertMonitor (an alert on rank 0) at step 4",
        "stopped by AlertMonitor (nonfinite on train/loss) at step 2",
    ]
    assert JobStop().finish(1) is None and not JobStop().take_request()


def test_the_first_request_is_the_cause_and_a_request_is_taken_once() -> None:
    stop = JobStop()
    assert not stop.request("spike on train/loss", 3)  # nothing carries it to other ranks yet
    assert stop.requested is None and not stop.take_request()
    stop.carriers = 1
    assert stop.request("spike on train/loss", 3)
    assert stop.request("nonfinite on train/grad_norm", 4)  # a second alert before the aggregation
    assert stop.requested == AlertStop("spike on train/loss", 3)
    assert stop.take_request()
    assert not stop.take_request()  # the aggregation that carried it consumed it


def test_a_stop_keeps_its_first_cause_and_its_first_last_step() -> None:
    stop = JobStop()
    stop.alone("nonfinite on train/loss", 2)
    stop.alone("spike on train/loss", 3)
    stop.agreed(writer_rank=0)  # already stopping for its own alert: not "an alert on rank 0"
    assert stop.finish(3) == AlertStop("nonfinite on train/loss", 2, 3)
    assert stop.finish(5).stopped_at == 3  # a later end does not move the step it stopped at


def test_the_status_names_the_alert_step_only_when_it_differs_from_the_last_step() -> None:
    assert AlertStop("spike on train/loss", 3, 3).status() == "stopped by AlertMonitor (spike on train/loss) at step 3"
    assert AlertStop("spike on train/loss", 3).status() == "stopped by AlertMonitor (spike on train/loss at step 3)"
    assert AlertStop("an alert on rank 2").status() == "stopped by AlertMonitor (an alert on rank 2)"
