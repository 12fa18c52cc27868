"""What a logged step reads from the trainer and the model, and where: the session asks for a step's
values here, whichever trainer runs.

* Classic trainer: the train wrapper's outputs (loss, overflow, loss scale, lr, global norm and, with
  ``local_norm``, per-parameter gradient norms) and the model's accumulators are read in front of the
  first callback of the step end (framework/call_tap.py), before MindFormers' own callbacks zero the
  accumulators or queue device work a later read would wait for.
* MindFormers 2.x's PyNative trainer: the loss parts and router loads are read in front of the first
  model call its LossCallback makes at the step end (which reads and clears them); the max attention
  logits in front of MaxLogitsMonitor's reset; this rank's own loss from a forward hook
  (framework/local_loss.py) and per-parameter gradient norms from gradient hooks
  (framework/gradient_hooks.py), both armed at the logged step's begin: the trainer hands callbacks the
  loss already averaged over ranks, and frees the gradients before any callback runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mindformers_tbplugin.framework.attention_logits import AttentionLogits
from mindformers_tbplugin.framework.call_tap import CallTap, tap_first_step_end
from mindformers_tbplugin.framework.layer_norms import LayerNorms
from mindformers_tbplugin.framework.local_loss import LocalLoss
from mindformers_tbplugin.framework.model_outputs import ModelOutputs
from mindformers_tbplugin.framework.trainers import CLASSIC, StepEnd, TrainStart
from mindformers_tbplugin.log import WarnOnce
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.metrics import StepMetrics

# The model calls the PyNative trainer's LossCallback makes at every step end, before any YAML callback,
# in the order it makes them; each reads and clears trackers the step's forwards filled (the first one
# that a model has is where they are read).
LOSS_CALLBACK_CALLS = ("_update_expert_bias", "get_load_balancing_loss", "get_index_loss", "get_mtp_loss")
MAX_LOGITS_RESET = "reset_max_attention_logit"  # MaxLogitsMonitor's, on the GPT model, every step end


class StepReads:
    def __init__(
        self,
        start: TrainStart,
        layer_norms: LayerNorms | None,
        outputs: ModelOutputs,
        attention_logits: AttentionLogits | None,
        due: Callable[[int], tuple[bool, bool, bool]],
    ) -> None:
        """``due(step)``: whether ``step`` is logged, reads the routers' loads, reads the attention logits."""
        self._layer_norms = layer_norms
        self._outputs = outputs
        self._attention_logits = attention_logits
        self._due = due
        self._ahead: StepMetrics | None = None  # classic: a logged step's outputs, read in front of the callbacks
        self._taps: list[CallTap] = []
        self._step = start.facts.initial_global_step + 1  # PyNative: the step running now
        self._captured = start.facts.initial_global_step  # PyNative: the last step whose values were captured
        self._local_loss: LocalLoss | None = None
        self._classic = start.trainer == CLASSIC
        self._step_of: Callable[[Any], int] | None = None
        topology = start.topology
        # the one model part, whose forward returns the loss (none under pipeline parallelism)
        if (
            not self._classic
            and topology.world_size > 1
            and topology.pipeline_stages == 1
            and start.network is not None
        ):
            self._local_loss = LocalLoss(start.network)
        self._start = start
        self._warn_once = WarnOnce()

    @property
    def needs_step_begin(self) -> bool:
        """Whether every step's begin must be seen (the PyNative trainer: to know the step running, and
        to arm the hooks of a logged one)."""
        return not self._classic

    def install(self, step_of: Callable[[Any], int]) -> None:
        """Once the session is open. ``step_of``: a classic hook's run context to its global step."""
        start = self._start
        if self._classic:
            self._step_of = step_of
            tap = tap_first_step_end(start.eval_callbacks, self._read_ahead)
            self._taps = [tap] if tap is not None else []
            return
        models = start.hook_args.get("model") if hasattr(start.hook_args, "get") else None
        parts = list(models) if isinstance(models, (list, tuple)) else [models] if models is not None else []
        if self._outputs.reads_ahead:
            for part in parts:
                for name in LOSS_CALLBACK_CALLS:
                    self._tap(part, name)
        if self._attention_logits is not None and self._outputs.mcore is not None:
            self._tap(self._outputs.mcore.model, MAX_LOGITS_RESET)

    def _tap(self, target: Any, name: str) -> None:
        tap = CallTap(self._capture_now)
        if tap.install(target, name):
            self._taps.append(tap)

    @property
    def classic_ahead_available(self) -> bool:
        """Whether the classic trainer's outputs are read ahead of its callbacks (a tap is installed)."""
        return self._classic and bool(self._taps)

    # -- the PyNative trainer's step begin -----------------------------------------------------------
    def step_began(self, step: int) -> None:
        self._step = step
        if self._classic:
            return
        logged = self._due(step)[0]
        if self._gradient_hooks is not None:
            self._gradient_hooks.step_began(logged)
        if self._local_loss is not None and logged:
            self._local_loss.arm()

    @property
    def _gradient_hooks(self) -> Any:
        return self._layer_norms.hooks if self._layer_norms is not None else None

    def _capture_now(self, *args: Any) -> None:
        """In front of LossCallback's first model call, or MaxLogitsMonitor's reset: the step's values, once."""
        step = self._step
        if self._captured == step:
            return
        self._captured = step
        logged, loads_due, logits_due = self._due(step)
        if logged:
            self._outputs.capture(step, logged, loads_due)
            if logits_due and self._attention_logits is not None:
                self._attention_logits.capture(step)

    # -- classic -------------------------------------------------------------------------------------
    def _read_ahead(self, run_context: Any) -> None:
        """In front of the step end's first callback: a logged step's outputs, and the model's accumulators
        when due."""
        step = self._step_of(run_context) if self._step_of is not None else 0
        logged, loads_due, _ = self._due(step)
        if logged:
            self._ahead = self.read_outputs(step, run_context.original_args().net_outputs)
            self._outputs.capture(step, logged, loads_due)

    # -- the step end ----------------------------------------------------------------------------------
    def take(self, step_end: StepEnd) -> StepMetrics:
        """At the monitor's step end of a logged step: its values (read ahead, or now)."""
        step = step_end.step
        step_metrics, self._ahead = self._ahead, None
        if step_metrics is None or step_metrics.step != step:
            step_metrics = self.read_outputs(step, step_end.outputs())
        local = self._local_loss
        if local is not None:
            own = local.read()
            if own is not None and metrics.TRAIN_LOSS in step_metrics.data:
                step_metrics.data[metrics.TRAIN_LOSS] = own
            elif local.unreadable:
                self._warn_once(
                    "local_loss",
                    f"TensorBoardMonitor: each rank's own loss cannot be read ({local.unreadable}): train/loss_max "
                    "and the ranks' losses are the trainer's mean over ranks",
                )
        return step_metrics

    def read_outputs(self, step: int, outputs: Any) -> StepMetrics:
        step_metrics = metrics.train_metrics(step, outputs)
        if self._layer_norms is not None:
            step_metrics.grad_squares = self._layer_norms.read(outputs)
        return step_metrics

    def describe(self) -> str | None:
        """What the log says about where the values come from, when it is not the classic trainer's way."""
        if self._local_loss is None:
            return None
        return "each rank's own loss from the model's forward (the trainer hands callbacks the mean over ranks)"

    def remove(self) -> None:
        taps, self._taps = self._taps, []
        for tap in taps:
            tap.remove()
        for reader in (self._local_loss, self._gradient_hooks):
            if reader is not None:
                reader.disarm()
