"""Reading an mcore model's accumulators ahead of MindFormers' callbacks (framework/accumulators.py):
zeroed or running sums, the bias schedule. The
accumulators here are plain objects with ``asnumpy()`` (what a MindSpore Parameter offers); the real
ones are read in tests/jobs/test_mcore_models.py's trainings."""

from __future__ import annotations

import numpy as np
import pytest

from mindformers_tbplugin.framework.accumulators import Accumulators, LossParts
from mindformers_tbplugin.framework.mcore import LossPart, Router


class Accumulator:
    """A parameter the training adds to (AssignAdd) and a callback may zero; counts its reads."""

    def __init__(self, size: int) -> None:
        self.value = np.zeros(size, dtype=np.float32)
        self.reads = 0
        self.shape = self.value.shape

    def asnumpy(self) -> np.ndarray:
        self.reads += 1
        return self.value  # a view, as on a CPU


def step(
    accumulators: Accumulators,
    number: int,
    parts: list[Accumulator],
    load: Accumulator,
    zero: bool,
    loads_due: bool = True,
):
    """One logged training step: begin, the graph adds, the read ahead of MindFormers' callbacks, their
    zeroing (or not), the monitor's step end."""
    accumulators.step_began(True, loads_due)
    for part in parts:
        part.value += number
    load.value += np.array([1.0, 3.0], dtype=np.float32)
    accumulators.capture(number, True, loads_due)
    if zero:
        for accumulator in [*parts, load]:
            accumulator.value[:] = 0
    return accumulators.take(number)


@pytest.mark.parametrize("zeroed", [True, False], ids=["zeroed by MindFormers", "never zeroed"])
def test_each_step_gets_its_own_values_whether_or_not_they_are_zeroed(zeroed: bool) -> None:
    parts = [Accumulator(1), Accumulator(1)]
    load, bias = Accumulator(2), Accumulator(2)
    accumulators = Accumulators(
        LossParts.of_parameters([LossPart("train/loss_lm", parts[0], 1.0), LossPart("train/loss_aux", parts[1], 0.5)]),
        [Router("layers.1", load, bias)],
    )
    for number in range(1, 6):
        captured = step(accumulators, number, parts, load, zeroed)
        assert captured.parts == {"train/loss_lm": number, "train/loss_aux": number * 0.5}
        np.testing.assert_array_equal(captured.loads, [[1.0, 3.0]])
    before = load.reads
    step(accumulators, 6, parts, load, zeroed)
    assert load.reads - before == (1 if zeroed else 2)  # a running sum costs a read at step begin too


def test_steps_that_are_not_due_are_not_read_and_the_bias_is_read_once_per_record() -> None:
    load, bias = Accumulator(2), Accumulator(2)
    bias.value[:] = [0.01, -0.01]
    accumulators = Accumulators(None, [Router("layers.1", load, bias)], bias_every=3)
    taken = [step(accumulators, number, [], load, zero=True, loads_due=number % 2 == 0) for number in range(1, 15)]
    assert [c.step for c in taken if c is not None] == [2, 4, 6, 8, 10, 12, 14]
    with_bias = [c.step for c in taken if c is not None and c.bias is not None]
    assert with_bias == [2, 8, 14]  # the first of every 3 reads
    np.testing.assert_allclose(taken[1].bias, [[0.01, -0.01]])
