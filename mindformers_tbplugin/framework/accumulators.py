"""Reading an mcore model's per-step accumulators (loss parts, per-expert loads) before MindFormers'
own callbacks zero them, without changing what training computes.

MindFormers runs MFLossMonitor, TopkBiasBalanceCallback and its other monitors first at every step
end, whatever the YAML order, and they zero what they read: the loss parts (``parameter_register.clear``),
``fi_accu`` and ``expert_load``. So :meth:`Accumulators.capture` runs in front of the first callback the
step's callback manager calls (framework/call_tap.py). Under MindFormers 2.x's PyNative trainer, its
LossCallback reads and clears them at every step end before any YAML callback: they are read in front
of its first call on the model (session/step_reads.py).
Some releases or configs never zero an accumulator (no MFLossMonitor; MindFormers 1.7's ``fi_accu``):
the first logged step finds out, and from then on the value left after the previous step is read at
step begin and subtracted, so a step's value is always that step's alone.

Reads are host copies (framework/host_values.py): on a CPU ``asnumpy()`` would return a view of the
parameter's memory that MindFormers' zeroing then changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mindformers_tbplugin.framework.host_values import first_values_reader, host_reader, joined_reader
from mindformers_tbplugin.framework.mcore import LossPart, Router


@dataclass
class Captured:
    """One step's accumulated values."""

    step: int
    parts: dict[str, float] | None = None  # tag (train/loss_lm, ...) -> contribution to the loss
    loads: np.ndarray | None = None  # (routers, experts): the step's load per expert
    bias: np.ndarray | None = None  # (routers, experts) expert bias (NaN rows: no bias), when read


@dataclass(frozen=True)
class LossParts:
    """Where a model accumulates its loss parts: ``read()`` gives the accumulated values (a tuple or an
    array), ``contributions(values)`` each tag's contribution to the loss from them."""

    count: int  # how many tags
    read: Callable[[], Any]
    contributions: Callable[[Any], dict[str, float]]

    @classmethod
    def of_parameters(cls, parts: Sequence[LossPart]) -> LossParts | None:
        """One-element accumulators (MindFormers' ``parameter_register``), each times its factor."""
        if not parts:
            return None
        tags = [part.tag for part in parts]
        factors = [part.factor for part in parts]

        def contributions(values: Any) -> dict[str, float]:
            # MindFormers' one-element accumulators (Tensor([0])), as Python numbers
            return {tag: float(value) * factor for tag, value, factor in zip(tags, values, factors, strict=True)}

        return cls(len(parts), first_values_reader([part.parameter for part in parts]), contributions)


class _Family:
    """Values that are read together (the loss parts, or the routers' loads) and their zeroing."""

    def __init__(self, read: Callable[[], Any]) -> None:
        """``read``: the values now, an array or a tuple of numbers."""
        self.read = read
        self.zeroed: bool | None = None  # do MindFormers' callbacks zero them at every step end?
        self.baseline: Any = None  # what the previous step left, when they are not zeroed

    def begin(self) -> None:
        if self.zeroed is not True:
            self.baseline = self.read()

    def capture(self) -> Any:
        raw = self.read()
        return np.subtract(raw, self.baseline) if self.baseline is not None and self.zeroed is not True else raw

    def learn(self) -> None:
        """After every callback before ours has run at the first captured step."""
        if self.zeroed is None:
            self.zeroed = not np.any(self.read())
            if self.zeroed:
                self.baseline = None


class Accumulators:
    """The loss parts and router loads of a logged step."""

    def __init__(
        self,
        parts: LossParts | None,
        routers: Sequence[Router],
        bias_every: int = 1,
    ) -> None:
        """``bias_every``: the expert bias is read at the first of every this many reads of the loads."""
        self._parts = parts
        read_loads = joined_reader([router.load for router in routers])
        self._bias_readers = [host_reader(router.bias) if router.bias is not None else None for router in routers]
        self._routers = list(routers)
        experts = int(routers[0].load.shape[0]) if routers else 0
        self._with_bias = any(router.bias is not None for router in routers)
        self._part_family = _Family(parts.read) if parts is not None else None
        self._load_family = _Family(lambda: read_loads().reshape(len(routers), experts)) if routers else None
        self._experts = experts
        self._bias_every = max(bias_every, 1)
        self._reads = 0
        self._captured: Captured | None = None
        self._learning: list[_Family] = []

    def _read_rows(self, readers: list, experts: int) -> np.ndarray:
        rows = np.full((len(readers), experts), np.nan, dtype=np.float32)
        for index, read in enumerate(readers):
            if read is not None:
                rows[index] = read()
        return rows

    def _families(self, parts_due: bool, loads_due: bool) -> list[_Family]:
        due = [(self._part_family, parts_due), (self._load_family, loads_due)]
        return [family for family, is_due in due if family is not None and is_due]

    @property
    def needs_step_begin(self) -> bool:
        """Whether a step's begin may have to read: until every family is known to be zeroed at step ends."""
        families = (self._part_family, self._load_family)
        return any(family is not None and family.zeroed is not True for family in families)

    def step_began(self, parts_due: bool, loads_due: bool) -> None:
        """At the begin of a step whose end will read the loss parts / the loads."""
        for family in self._families(parts_due, loads_due):
            family.begin()

    def capture(self, step: int, parts_due: bool, loads_due: bool) -> None:
        """In front of the step end's first callback (its cost counts at every logged step: plain
        comparisons, one read per family due, no per-step lists)."""
        parts = self._part_family if parts_due else None
        loads = self._load_family if loads_due else None
        if parts is None and loads is None:
            return
        captured = Captured(step)
        if parts is not None:
            captured.parts = self._parts.contributions(parts.capture())
        if loads is not None:
            captured.loads = loads.capture()
            if self._with_bias and self._reads % self._bias_every == 0:
                captured.bias = self._read_rows(self._bias_readers, self._experts)
            self._reads += 1
        self._captured = captured
        if (parts is not None and parts.zeroed is None) or (loads is not None and loads.zeroed is None):
            self._learning = [family for family in (parts, loads) if family is not None and family.zeroed is None]

    def take(self, step: int) -> Captured | None:
        """At the monitor's own step end (after MindFormers' callbacks): this step's values, if captured."""
        if self._learning:  # the first captured steps only
            for family in self._learning:
                family.learn()
            self._learning = []
        captured, self._captured = self._captured, None
        return captured if captured is not None and captured.step == step else None
