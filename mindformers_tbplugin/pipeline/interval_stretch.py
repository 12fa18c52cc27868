"""How long the next aggregation interval is, agreed by every rank without an extra collective.

An all-reduce costs about the same however many steps it carries, and it waits for the slowest
rank: when steps are fast (a small model, or CPU), ``aggregate_every`` steps can take a fraction of a
second and the collective becomes a visible share of training time. So an interval stretches to
several ``aggregate_every`` intervals, enough to last ``aggregate_seconds`` at the pace of the last
one, up to :data:`MAX_INTERVAL_STEPS` steps. Every rank must end an interval at the same step, and
ranks' clocks differ: each rank sends its proposal (a whole number of intervals) in the interval's
all-reduce, and every rank takes the same rounded-up mean of the sum it receives. Whole numbers add
exactly in float32 in any order (up to 2**24), so the sum is the same on every rank.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

# An interval never stretches beyond this many steps (nor below aggregate_every): it bounds the
# aggregators' vectors (at 8,192 ranks the per-rank losses are 8,192 floats per step) and how late a
# value reaches the main run.
MAX_INTERVAL_STEPS = 100


class IntervalStretch:
    """The agreed factor (intervals of ``every`` steps per aggregation) and this rank's proposal."""

    def __init__(self, every: int, target_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.target_seconds = target_seconds
        self.most = max(1, MAX_INTERVAL_STEPS // every) if target_seconds > 0 else 1
        self.factor = 1
        self._clock = clock
        self._started = clock()  # the interval's start: the last aggregation, or the training's start

    def proposal(self, steps: int) -> np.ndarray:
        """This rank's proposal for the next interval, as the one float it adds to the all-reduce;
        ``steps``: the steps of the interval ending now."""
        if self.most == 1:
            return np.ones(1, dtype=np.float32)
        seconds_per_step = (self._clock() - self._started) / max(steps, 1)
        wanted = self.most if seconds_per_step <= 0 else math.ceil(self.target_seconds / seconds_per_step / self.every)
        return np.array([min(max(wanted, 1), self.most)], dtype=np.float32)

    def agree(self, summed: float, world_size: int) -> int:
        """The factor of the next interval from the sum of every rank's proposal; starts its clock."""
        self.factor = min(max(math.ceil(round(summed) / world_size), 1), self.most)
        self._started = self._clock()
        return self.factor
