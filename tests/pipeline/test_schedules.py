"""Schedules that never come due within a training (pipeline/schedules.py): named with the number to set."""

from __future__ import annotations

from mindformers_tbplugin.pipeline.schedules import NEVER, never_due, never_logs, next_due


def test_a_schedule_beyond_the_last_step_is_named_with_the_number_that_would_fire() -> None:
    said = never_due({"grad_hist_every": 100, "param_norm_every": 50, "moe_every": 0}, 0, 64)
    assert said == ["grad_hist_every 100 never comes due: training ends at step 64 (set 64 or less)"]
    assert never_due({"grad_hist_every": 64}, 0, 64) == []  # step 64 is a multiple


def test_a_resumed_training_counts_from_its_first_step() -> None:
    # Steps 101..164: a multiple of 150 falls inside, one of 200 does not; 64 steps always hold one of 64.
    assert never_due({"param_norm_every": 150}, 100, 164) == []
    assert never_due({"param_norm_every": 200}, 100, 164) == [
        "param_norm_every 200 never comes due: training ends at step 164 (set 64 or less)"
    ]
    assert all(never_due({"x": 64}, first, first + 64) == [] for first in range(0, 200, 7))


def test_log_every_beyond_the_training_writes_no_scalars() -> None:
    assert never_logs(100, 0, 64) == "log_every 100 is more than this training's 64 steps: no scalars (set 64 or less)"
    assert never_logs(64, 0, 64) is None
    assert never_logs(10, 64, 64) is None  # nothing left to train: nothing to say


def test_next_due_is_the_first_multiple_after_the_last_logged_step() -> None:
    assert next_due((4, 10), 0) == 4
    assert next_due((4, 10), 8) == 10  # 8 itself was due at the step that logged it
    assert next_due((4, 10), 10) == 12
    assert next_due((4, 10), 9) == 10
    assert next_due((), 9) == NEVER
