"""The largest attention logit per layer, from an mcore model's own tracking: ``attention_logit_max/<group>``
(the max over the layer's heads) and ``attention_logit_max/all`` (over every layer), the early sign of
attention-logit growth that MindFormers' TrainingStateMonitor writes as ``max_attention_logit/*``.

MindFormers keeps it only when ``model.model_config.track_max_attention_logit`` is on (the Muon optimizer
and ``monitor_config.max_attention_logit_format`` turn it on): each core attention's ``max_logits_val``
holds its heads' running max of the scaled logits, which MindFormers' ``MaxLogitsMonitor`` (added with
Muon or that format) zeroes at every step end, after the YAML callbacks. Without that callback nothing
resets it, so the monitor zeroes it through the model's own ``reset_max_attention_logit`` at the begin
of each step it reads: every written value is that step's own. Nothing in training reads it then (only
Muon's QK-clip does, and Muon brings MaxLogitsMonitor).

Under MindFormers 2.x's PyNative trainer the model tracks them only when the optimizer is Muon or the
callbacks list a ``MaxLogitsMonitor`` (the trainer sets ``track_max_attention_logit`` itself, whatever
the YAML says), and that callback zeroes them at every step end wherever it stands in the list: a step
due is read in front of its reset (:meth:`AttentionLogits.capture`, from the session's tap on the
model's ``reset_max_attention_logit``), else at the monitor's own step end.

The values are this rank's (MindFormers all-reduces them over data-parallel ranks only inside Muon's
QK-clip), read as one host copy of every layer's head maxima.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mindformers_tbplugin.framework.host_values import joined_reader
from mindformers_tbplugin.framework.trainers import CLASSIC, TrainStart
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.gradient_groups import layer_group

RESETTING_CALLBACK = "MaxLogitsMonitor"


class AttentionLogits:
    def __init__(self, groups: Sequence[str], values: Sequence[Any], reset: Any) -> None:
        """``values``: each layer's ``max_logits_val`` (one value per head); ``reset``: the model's
        ``reset_max_attention_logit`` when the monitor must zero them itself, else None."""
        self.groups = list(groups)
        self._heads = int(np.prod(values[0].shape))
        self._read = joined_reader(values)
        self._reset = reset
        self._tags = [metrics.ATTENTION_LOGIT_MAX_PREFIX + group for group in self.groups]
        self._captured: tuple[int, np.ndarray] | None = None

    @classmethod
    def for_training(cls, start: TrainStart, config: Any, model: Any) -> AttentionLogits | None:
        """None unless the model tracks its attention logits. Under the PyNative trainer tracking implies a
        MaxLogitsMonitor, which zeroes them at every step end."""
        if start.trainer != CLASSIC:
            return cls.of_model(config, model, resetting=True)
        callbacks = start.eval_callbacks or ()
        return cls.of_model(config, model, any(type(cb).__name__ == RESETTING_CALLBACK for cb in callbacks))

    @classmethod
    def of_model(cls, config: Any, model: Any, resetting: bool) -> AttentionLogits | None:
        """None unless the model tracks its attention logits. ``resetting``: a callback of the training zeroes
        them at every step end (else the monitor does, at the begin of each step it reads)."""
        if not getattr(config, "track_max_attention_logit", False):
            return None
        found = []
        for _, cell in model.cells_and_names():
            value = getattr(cell, "max_logits_val", None)
            if value is not None and hasattr(value, "name"):
                found.append((layer_group(str(value.name)), value))
        if not found or len({int(np.prod(value.shape)) for _, value in found}) != 1:
            return None
        reset = None if resetting else getattr(model, "reset_max_attention_logit", None)
        return cls([group for group, _ in found], [value for _, value in found], reset)

    def describe(self) -> str:
        who = "the monitor zeroes it at each read step" if self._reset else "MaxLogitsMonitor zeroes it every step"
        return f"max attention logit of {len(self.groups)} layers x {self._heads} heads ({who})"

    def step_began(self) -> None:
        """At the begin of a step that will be read."""
        if self._reset is not None:
            self._reset()

    def capture(self, step: int) -> None:
        """In front of a reset at the end of ``step`` (a step due): its values, for :meth:`tags`."""
        self._captured = (step, self._read())

    def tags(self, step: int) -> dict[str, float]:
        """``step``'s values: captured ahead of a reset, or read now."""
        captured, self._captured = self._captured, None
        values = captured[1] if captured is not None and captured[0] == step else self._read()
        maxima = values.reshape(len(self.groups), self._heads).max(axis=1).astype(np.float64)
        values = dict(zip(self._tags, maxima.tolist(), strict=True))
        values[metrics.ATTENTION_LOGIT_MAX_ALL] = float(maxima.max())
        return values
