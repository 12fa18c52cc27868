"""The logged steps' backlog (session/step_backlog.py): routed in order, once, by one thread at a time; a
route that fails is said once and the rest still run; a thread that is routing never enters it again."""

from __future__ import annotations

import threading

from mindformers_tbplugin.session.step_backlog import StepBacklog


def test_routes_in_order_and_a_failure_costs_only_its_own_entry() -> None:
    failures: list[tuple[str, Exception]] = []
    backlog = StepBacklog(lambda key, _fn, exc: failures.append((key, exc)))
    routed: list[int] = []

    def route(step: int) -> None:
        if step == 2:
            raise ValueError("bad step")
        routed.append(step)

    for step in (1, 2, 3):
        backlog.add(route, step)
    assert len(backlog) == 3
    assert backlog.route() is True
    assert routed == [1, 3] and len(backlog) == 0
    assert [(key, str(exc)) for key, exc in failures] == [("route", "bad step")]
    assert backlog.route() is False  # nothing left


def test_the_writer_thread_does_not_wait_while_another_thread_routes() -> None:
    backlog = StepBacklog(lambda *_: None)
    entered, release = threading.Event(), threading.Event()
    backlog.add(lambda: (entered.set(), release.wait(10)))
    routing = threading.Thread(target=backlog.route)
    routing.start()
    assert entered.wait(10)
    backlog.add(lambda: None)
    assert backlog.route(wait=False) is False  # the other thread empties the queue
    release.set()
    routing.join(10)
    assert len(backlog) == 0


def test_a_routing_thread_interrupted_by_a_handler_does_not_route_again() -> None:
    # SIGTERM's handler runs on the training thread, possibly inside its own routing: finish() routes then.
    backlog = StepBacklog(lambda *_: None)
    inner: list[bool] = []
    backlog.add(lambda: inner.append(backlog.route()))
    backlog.add(lambda: None)
    assert backlog.route() is True
    assert inner == [False] and len(backlog) == 0
