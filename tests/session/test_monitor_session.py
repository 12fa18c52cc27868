"""A training's session (session/monitor_session.py) at each step. Its periodic outputs come due at the
logged steps that cross a multiple of their ``every`` (pipeline/schedules.py); the session checks one
number per step before doing any of that work (its next due step end, its next step begin with work), so
these tests drive a real TensorBoardMonitor over real MindSpore Parameters with ``log_every`` > 1, where a
logged step may cross a multiple or not, and read the written event files back with TensorBoard's reader."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import plugin_log, read_scalars
from mindspore import Parameter, Tensor

from mindformers_tbplugin import TensorBoardMonitor
from mindformers_tbplugin.framework.model_facts import ModelFacts
from mindformers_tbplugin.framework.trainers import StepEnd, TrainStart
from mindformers_tbplugin.pipeline.metrics import StepMetrics
from mindformers_tbplugin.pipeline.routing import MetricRouter
from mindformers_tbplugin.pipeline.topology import Topology

STEPS = 30
LOG_EVERY = 3
SHAPE = (4, 3)


def _crossing(logged: list[int], every: int) -> set[int]:
    """The rule as docs/options.md states it, computed the long way: the logged steps whose period since
    the previous logged step holds a multiple of ``every``."""
    due, previous = set(), 0
    for step in logged:
        if any(multiple % every == 0 for multiple in range(previous + 1, step + 1)):
            due.add(step)
        previous = step
    return due


def test_periodic_outputs_and_the_step_begin_copy_come_due_where_the_rule_says(tmp_path: Path) -> None:
    weight = Parameter(Tensor(np.zeros(SHAPE, np.float32)), name="model.layers.0.attention.wq.weight")
    head = Parameter(Tensor(np.ones(SHAPE, np.float32)), name="lm_head.weight")
    monitor = TensorBoardMonitor(
        log_dir=str(tmp_path / "tb"),
        experiment="schedules",
        log_every=LOG_EVERY,
        aggregate_every=LOG_EVERY * 4,
        optimizer_state_every=4,  # update_norm: a copy at the due step's begin, the change at its end
        param_norm_every=5,
        resume=False,
        log_hparams=False,
    )
    topology = Topology(0, 1, 1, "stand_alone", False, communicating=False)
    facts = ModelFacts(trainable_params=[weight, head])
    start = TrainStart("classic", facts, topology, None, None, 1, STEPS, None, None, None, {}, lambda: None)
    monitor.train_started(start)
    for step in range(1, STEPS + 1):
        monitor.step_began(step)
        weight.set_data(Tensor(np.full(SHAPE, float(step), np.float32)))  # each step moves it by 1 per element
        outputs = (2.0, False, 1.0, 0.001, 1.0)
        monitor.step_ended(StepEnd(step, None, lambda _args, _step, outputs=outputs: outputs))
    monitor.train_ended(None)
    scalars = read_scalars(monitor.run_dir)

    logged = list(range(LOG_EVERY, STEPS + 1, LOG_EVERY))
    assert [step for step, _ in scalars["train/loss"]] == logged
    param_norm_steps = [step for step, _ in scalars["train/param_norm"]]
    assert param_norm_steps == sorted(_crossing(logged, 5)) == [6, 12, 15, 21, 27, 30]
    update_steps = [step for step, _ in scalars["update_norm/layers.0"]]
    assert update_steps == sorted(_crossing(logged, 4)) == [6, 9, 12, 18, 21, 24, 30]
    # Each is the change over its own step, whose begin was copied: 1 per element of a 4 x 3 weight.
    assert all(math.isclose(value, math.sqrt(12), rel_tol=1e-6) for _, value in scalars["update_norm/layers.0"])
    assert all(value == 0.0 for _, value in scalars["update_norm/head"])


def test_a_step_end_that_fails_is_said_once_and_the_next_steps_are_written(tmp_path: Path) -> None:
    # The step end's guard is inlined in the callback (it runs at every step): still one warning, no raise.
    monitor = TensorBoardMonitor(log_dir=str(tmp_path / "tb"), experiment="failing", log_every=1, resume=False)
    topology = Topology(0, 1, 1, "stand_alone", False, communicating=False)
    start = TrainStart("classic", ModelFacts(), topology, None, None, 1, 6, None, None, None, {}, lambda: None)
    monitor.train_started(start)

    def outputs(_args: object, step: int) -> tuple:
        if step <= 3:
            raise RuntimeError(f"device lost at step {step}")
        return (2.0, False, 1.0, 0.001, 1.0)

    with plugin_log() as messages:
        for step in range(1, 7):
            monitor.step_began(step)
            monitor.step_ended(StepEnd(step, None, outputs))
    monitor.train_ended(None)
    said = [message for message in messages if "device lost" in message]
    assert said == ["TensorBoardMonitor: RuntimeError('device lost at step 1') in step_ended; training continues"]
    assert [step for step, _ in read_scalars(monitor.run_dir)["train/loss"]] == [4, 5, 6]


def test_logged_steps_are_routed_on_the_writer_thread_unless_a_listener_needs_them_at_their_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # session/step_backlog.py: a step end queues its read values; the writer thread routes them in a batch
    # before it writes. A listener (AlertMonitor's rules) gets each step's values at that step's end.
    routed_on: list[tuple[int, str]] = []
    log_step = MetricRouter.log_step

    def recording(router: MetricRouter, step_metrics: StepMetrics) -> None:
        routed_on.append((step_metrics.step, threading.current_thread().name))
        log_step(router, step_metrics)

    monkeypatch.setattr(MetricRouter, "log_step", recording)
    monitor = TensorBoardMonitor(log_dir=str(tmp_path / "tb"), experiment="backlog", log_every=1, resume=False)
    topology = Topology(0, 1, 1, "stand_alone", False, communicating=False)
    start = TrainStart("classic", ModelFacts(), topology, None, None, 1, 20, None, None, None, {}, lambda: None)
    monitor.train_started(start)

    def step_to(step: int) -> None:
        monitor.step_began(step)
        outputs = (float(step), False, 1.0, 0.001, 1.0)
        monitor.step_ended(StepEnd(step, None, lambda _args, _step, outputs=outputs: outputs))

    for step in range(1, 11):
        step_to(step)
    assert all(name != threading.current_thread().name for _, name in routed_on)  # none at a step end
    assert monitor.session.writer.flush()  # a flush carries every step queued before it
    assert [step for step, _ in routed_on] == list(range(1, 11))
    assert {name for _, name in routed_on} == {"mftb-writer:" + monitor.run_dir.name}
    assert [step for step, _ in read_scalars(monitor.run_dir)["train/loss"]] == list(range(1, 11))

    heard: list[tuple[int, float]] = []
    monitor.run.subscribe(lambda step, values: heard.append((step, values["train/loss"])))
    for step in range(11, 16):
        step_to(step)
        assert heard[-1] == (step, float(step))  # at its own step end, on the training thread
    assert routed_on[10:] == [(step, threading.current_thread().name) for step in range(11, 16)]

    monitor.run.unsubscribe(monitor.run._listeners[0])
    for step in range(16, 21):
        step_to(step)
    monitor.train_ended(None)  # what the writer thread has not routed yet is routed at the end
    assert [step for step, _ in routed_on] == list(range(1, 21))
    assert read_scalars(monitor.run_dir)["train/loss"] == [(step, float(step)) for step in range(1, 21)]
