"""A training compared with its baseline while it runs: at each logged step the baseline has, the
step's errors and their running means (the ``compare/*`` tags).

Fed the values the main run writes (``train/loss`` as the writing rank writes it: the data-parallel
mean after the cross-rank aggregation; ``train/grad_norm``), in step order, on whichever thread routes
them. A baseline value that is a mean over several steps (Megatron-LM prints means over
``--log-interval`` steps: ``ImportedRun.averaged_over``) is compared with the mean of the run's
values logged in the same steps (``s - n + 1 .. s``). A difference that a printed baseline's rounding
alone can make (``ImportedRun.resolution``) counts as none (alignment/step_errors.py).
"""

from __future__ import annotations

import math
from collections import deque

from mindformers_tbplugin.alignment.step_errors import rounding_threshold, step_error
from mindformers_tbplugin.imports.imported_run import ImportedRun, Series
from mindformers_tbplugin.pipeline import metrics


class _Quantity:
    """One compared quantity: its baseline series, the run's recent values (a baseline of means) and
    the sums behind the running means."""

    __slots__ = (
        "abs_tag", "base", "mean_abs_tag", "mean_rel_tag", "recent", "rel_tag", "span", "sums", "tag", "threshold",
    )  # fmt: skip

    def __init__(self, quantity: str, baseline: ImportedRun) -> None:
        self.tag, self.abs_tag, self.rel_tag, self.mean_abs_tag, self.mean_rel_tag = metrics.COMPARED[quantity]
        self.base: Series = baseline.scalars[self.tag]
        self.span = max(int(baseline.averaged_over.get(self.tag, 1)), 1)
        # The run's values are full precision; what a printed baseline's rounding can make is no difference.
        self.threshold = rounding_threshold(0.0, baseline.resolution.get(self.tag, 0.0))
        self.recent: deque[tuple[int, float]] = deque()
        self.sums = [0.0, 0.0, 0, 0]  # abs errors, relative errors, steps, steps with a relative error

    def observe(self, step: int, value: float) -> dict[str, float] | None:
        if self.span > 1:
            recent = self.recent
            recent.append((step, value))
            while recent[0][0] <= step - self.span:
                recent.popleft()
        base = self.base.get(step)
        if base is None:
            return None
        if self.span > 1:
            value = math.fsum(v for _, v in self.recent) / len(self.recent)
        step_abs, step_rel = step_error(value, base, self.threshold)
        sums = self.sums
        sums[0] += step_abs
        sums[2] += 1
        if step_rel == step_rel:  # NaN (against a baseline value of 0) stays out of the mean
            sums[1] += step_rel
            sums[3] += 1
        return {
            self.abs_tag: step_abs,
            self.rel_tag: step_rel,
            self.mean_abs_tag: sums[0] / sums[2],
            self.mean_rel_tag: sums[1] / sums[3] if sums[3] else math.nan,
        }


class LiveComparison:
    """The ``compare/*`` values of a run against ``baseline``, one logged step at a time."""

    def __init__(self, baseline: ImportedRun) -> None:
        self.quantities = [
            _Quantity(quantity, baseline)
            for quantity, tags in metrics.COMPARED.items()
            if baseline.scalars.get(tags[0])
        ]
        self.tags = frozenset(quantity.tag for quantity in self.quantities)

    def observe(self, step: int, values: dict[str, float]) -> dict[str, float]:
        """The errors at ``step`` of the compared tags ``values`` holds (empty: none compared there)."""
        found: dict[str, float] = {}
        for quantity in self.quantities:
            value = values.get(quantity.tag)
            if value is not None:
                errors = quantity.observe(step, value)
                if errors is not None:
                    found.update(errors)
        return found
