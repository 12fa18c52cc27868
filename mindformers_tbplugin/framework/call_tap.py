"""A read in front of every call of one method of one object: where a monitor reads a step's values
before MindFormers' own step-end work zeroes them or queues device work a later read would wait for.

* Classic trainer: ``on_train_step_end`` of the first object of ``cb_params.list_callback`` (the objects
  MindSpore's callback manager calls, in that order). MindFormers runs its own callbacks
  (MFLossMonitor, TopkBiasBalanceCallback, ...) first at every step end, whatever the YAML order; they
  zero the accumulators an mcore model's step adds to, and they queue work on the device (zeroing, the
  expert-bias update) that any later host read of the step's outputs waits for: on this CPU a logged
  step's first read waited 3-6 ms in about one step in eight (measured on the tiny DeepSeek-V3).
* MindFormers 2.x's PyNative trainer: the model methods its LossCallback and MaxLogitsMonitor call at
  every step end before any YAML callback (``_update_expert_bias``, ``get_load_balancing_loss``,
  ``reset_max_attention_logit``, ...), which read and clear the model's trackers.

The tap is an instance attribute named like the method, wrapping it. It changes nothing the method does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mindformers_tbplugin.log import WarnOnce


class CallTap:
    """Calls ``before(*args)`` ahead of every call of ``target.<name>(*args)``, from install to remove."""

    def __init__(self, before: Callable[..., None]) -> None:
        self._before: Callable[..., None] | None = before
        self._target: Any = None
        self._name = ""
        self._wrapper: Any = None
        self._own: Any = None  # an instance attribute the target already had, restored at removal
        self._warn_once = WarnOnce()

    def install(self, target: Any, name: str) -> bool:
        """False when ``target`` has no such method (nothing tapped)."""
        original = getattr(target, name, None)
        if not callable(original):
            return False
        self._own = vars(target).get(name)

        def tapped(*args: Any, **kwargs: Any) -> Any:
            before = self._before
            if before is not None:
                try:
                    before(*args)
                except Exception as exc:  # monitoring never stops training
                    self._warn_once("tap", f"TensorBoardMonitor: reading the step's values failed ({exc!r})")
            return original(*args, **kwargs)

        object.__setattr__(target, name, tapped)  # a Cell's __setattr__ would register a plain function too
        self._target, self._name, self._wrapper = target, name, tapped
        return True

    def remove(self) -> None:
        """Stop reading. The target gets back what it had, unless another tap went on top of this one
        since (two monitors in one training): then this one stays in the chain, reading nothing."""
        target, self._target = self._target, None
        self._before = None
        if target is None or vars(target).get(self._name) is not self._wrapper:
            return
        if self._own is not None:
            object.__setattr__(target, self._name, self._own)
        else:
            object.__delattr__(target, self._name)


def tap_first_step_end(callbacks: Any, before: Callable[[Any], None]) -> CallTap | None:
    """The classic trainer's tap: ``before(run_context)`` ahead of every callback of each step end
    (``callbacks``: MindSpore's ``cb_params.list_callback``); None when there is no callback to tap."""
    if not isinstance(callbacks, list) or not callbacks:
        return None
    tap = CallTap(before)
    return tap if tap.install(callbacks[0], "on_train_step_end") else None
