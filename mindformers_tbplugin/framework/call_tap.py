"""A read in front of every callback of a classic training's step end.

MindFormers runs its own callbacks (MFLossMonitor, TopkBiasBalanceCallback, ...) first at every step
end, whatever the YAML order. They zero the accumulators an mcore model's step adds to, and they queue
work on the device (zeroing, the expert-bias update) that any later host read of the step's outputs
waits for: on this CPU a logged step's first read waited 3-6 ms in about one step in eight (measured on
the tiny DeepSeek-V3). Reading in front of them gets the step's own values at no wait.

The tap is an instance attribute ``on_train_step_end`` on the first object of ``cb_params.list_callback``
(the objects MindSpore's callback manager calls, in that order). It changes nothing the callbacks do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mindformers_tbplugin.log import WarnOnce

STEP_END = "on_train_step_end"


class StepEndTap:
    """Calls ``before(run_context)`` ahead of every callback of each step end, from install to remove."""

    def __init__(self, before: Callable[[Any], None]) -> None:
        self._before: Callable[[Any], None] | None = before
        self._first: Any = None
        self._wrapper: Any = None
        self._own: Any = None  # an instance attribute the first callback already had, restored at removal
        self._warn_once = WarnOnce()

    def install(self, callbacks: Any) -> bool:
        """``callbacks``: MindSpore's ``cb_params.list_callback``. False when there is nothing to tap."""
        if not isinstance(callbacks, list) or not callbacks:
            return False
        first = callbacks[0]
        original = getattr(first, STEP_END)
        self._own = vars(first).get(STEP_END)

        def step_end(run_context: Any) -> Any:
            before = self._before
            if before is not None:
                try:
                    before(run_context)
                except Exception as exc:  # monitoring never stops training
                    self._warn_once("tap", f"TensorBoardMonitor: reading the step's outputs failed ({exc!r})")
            return original(run_context)

        setattr(first, STEP_END, step_end)
        self._first, self._wrapper = first, step_end
        return True

    def remove(self) -> None:
        """Stop reading. The callback gets back what it had, unless another tap went on top of this one
        since (two monitors in one training): then this one stays in the chain, reading nothing."""
        first, self._first = self._first, None
        self._before = None
        if first is None or vars(first).get(STEP_END) is not self._wrapper:
            return
        if self._own is not None:
            setattr(first, STEP_END, self._own)
        else:
            delattr(first, STEP_END)
