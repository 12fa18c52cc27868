"""Schedules that can never come due within a training, said at its start (a `grad_hist_every: 100`
in a 64-step run writes nothing, silently, otherwise).

Steps are global; a schedule ``every`` comes due at the logged steps that cross a multiple of it, so
within ``(first_step, final_step]`` it comes due at least once exactly when ``final_step // every >
first_step // every``; ``every`` = the training's step count always does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

NEVER = float("inf")  # the next due step of no schedule


def never_due(schedules: Mapping[str, int], first_step: int, final_step: int) -> list[str]:
    """For each ``name: every`` (0: off) that never comes due after ``first_step`` up to ``final_step``,
    what to say: ``grad_hist_every 100 never comes due: training ends at step 64 (set 64 or less)``."""
    steps = final_step - first_step
    return [
        f"{name} {every} never comes due: training ends at step {final_step} (set {steps} or less)"
        for name, every in schedules.items()
        if every > 0 and steps > 0 and final_step // every <= first_step // every
    ]


def never_logs(log_every: int, first_step: int, final_step: int) -> str | None:
    """What to say when ``log_every`` exceeds the training's steps (a step is logged once ``log_every``
    steps have passed since the last logged one), else None."""
    steps = final_step - first_step
    if 0 < steps < log_every:
        return f"log_every {log_every} is more than this training's {steps} steps: no scalars (set {steps} or less)"
    return None


def next_due(everys: Iterable[int], last_step: int) -> float:
    """The first step that crosses a multiple of one of ``everys`` (each > 0) after ``last_step``, the
    last logged one: a logged step before it has none of these schedules due."""
    return min(((last_step // every + 1) * every for every in everys), default=NEVER)
