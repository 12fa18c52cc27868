"""What the model adds to TensorBoardMonitor's logged steps beyond the train wrapper's outputs: an
mcore model's loss parts (data metrics) and its routers' per-expert loads, read ahead of MindFormers'
own callbacks (framework/accumulators.py, from the session's taps: session/step_reads.py), found where
the trainer's models keep them (framework/mcore.py for the classic trainer's, framework/
pynative_accumulators.py for MindFormers 2.x's PyNative trainer's); the model FLOPs per step; what the
live model tells the HParams (layer, head and expert counts whatever the YAML spelling)."""

from __future__ import annotations

from typing import Any

from mindformers_tbplugin.framework import mcore as mcore_models
from mindformers_tbplugin.framework import pynative_accumulators
from mindformers_tbplugin.framework.accumulators import Accumulators, Captured, LossParts
from mindformers_tbplugin.framework.collectives import device_name
from mindformers_tbplugin.framework.model_flops import StepFlops, step_flops
from mindformers_tbplugin.framework.trainers import CLASSIC, TrainStart
from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline import expert_routing, metrics, model_flops
from mindformers_tbplugin.pipeline.expert_load import RouterSet
from mindformers_tbplugin.pipeline.metrics import StepMetrics


class ModelOutputs:
    def __init__(self, flops: StepFlops | None, hparams: dict[str, Any], devices: int, peak: float | None) -> None:
        """``peak``: the device's peak TFLOPS (perf/mfu), or None."""
        self.flops = flops
        self.hparams = hparams
        self.routers: RouterSet | None = None
        self.mcore: mcore_models.McoreModel | None = None
        self._devices = devices
        self._peak = peak
        self._accumulators: Accumulators | None = None
        self._parts = 0
        self._lm_is_the_loss = False  # the PyNative trainer's loss is the language-model part alone

    @classmethod
    def for_training(
        cls,
        start: TrainStart,
        moe: tuple[int, int],
        peak: float | str | None,
        tapped: bool,
    ) -> ModelOutputs:
        """``moe``: TensorBoardMonitor's moe_every and moe_record_budget; ``peak``: its peak_tflops;
        ``tapped``: whether :meth:`capture` will run ahead of MindFormers' callbacks at every step end."""
        facts = start.facts
        # classic: the training cell; MindFormers 2.x's PyNative trainer: the model itself
        mcore = mcore_models.find_mcore_model(start.train_network if start.train_network is not None else start.network)
        batch = (start.config.global_batch_size if start.config else None) or facts.samples_per_step
        flops = step_flops(mcore, start.network, facts.trainable_params, batch, facts.tokens_per_sample)
        hparams = mcore_models.model_hparams(mcore) if mcore is not None else {}
        if flops is not None:
            hparams["model_flops_per_step"] = flops.flops
        outputs = cls(flops, hparams, start.topology.world_size, model_flops.peak_tflops(peak, device_name))
        outputs.mcore = mcore
        if mcore is not None:
            outputs._read_accumulators(start, mcore, moe, tapped)
        elif start.trainer != CLASSIC and start.network is not None:  # every model of that trainer is one
            logger.warning(
                "TensorBoardMonitor: %s is not a MindFormers mcore model (no get_gpt_transformer_config): no loss "
                "parts, expert load, max attention logit or MindFormers' model FLOPs for it; the rest is written",
                type(start.network).__name__,
            )
        return outputs

    def _read_accumulators(
        self, start: TrainStart, mcore: mcore_models.McoreModel, moe: tuple[int, int], tapped: bool
    ) -> None:
        moe_every, record_budget = moe
        if start.trainer == CLASSIC:
            parts = LossParts.of_parameters(mcore_models.loss_parts(mcore))
            found, routers = mcore_models.routers(mcore) if moe_every else ([], None)
        else:
            state = start.training
            parts = pynative_accumulators.loss_parts(
                mcore, lambda: int(getattr(state, "num_accumulation_steps", 1) or 1)
            )
            found, routers = pynative_accumulators.routers(mcore) if moe_every else ([], None)
            self._lm_is_the_loss = parts is not None
        if parts is None and not found:
            return  # a dense model: nothing accumulates per step
        if not tapped:
            logger.warning(
                "TensorBoardMonitor: this trainer gives callbacks no step end ahead of MindFormers' own monitors, "
                "which zero the loss parts and expert loads: train/loss_* and moe/ tags are not written"
            )
            return
        bias_every = expert_routing.record_reads(routers, moe_every, record_budget) if routers else 1
        self._accumulators = Accumulators(parts, found, bias_every)
        self.routers, self._parts = routers, (parts.count if parts is not None else 0)

    def describe(self) -> str:
        flops = f"model FLOPs per step {self.flops.flops:.4g} ({self.flops.source})" if self.flops else "no model FLOPs"
        if self._accumulators is None:
            return flops
        loads = (
            f"expert load of {len(self.routers)} MoE layers x {self.routers.experts} experts" if self.routers else ""
        )
        return f"{flops}; {self._parts} loss part(s){', ' + loads if loads else ''}"

    @property
    def reads_ahead(self) -> bool:
        """Whether loss parts or expert loads are read ahead of MindFormers' own step-end work."""
        return self._accumulators is not None

    @property
    def needs_step_begin(self) -> bool:
        """Whether the loss parts or expert loads may have to be read at a step's begin (until they are known
        to be zeroed at every step end)."""
        return self._accumulators is not None and self._accumulators.needs_step_begin

    def step_began(self, parts_due: bool, loads_due: bool) -> None:
        if self._accumulators is not None:
            self._accumulators.step_began(parts_due, loads_due)

    def capture(self, step: int, parts_due: bool, loads_due: bool) -> None:
        """Ahead of MindFormers' callbacks at a step end: the loss parts / loads when due."""
        if self._accumulators is not None:
            self._accumulators.capture(step, parts_due, loads_due)

    def take(self, step: int) -> Captured | None:
        """At the monitor's step end (training thread): what :meth:`capture` read of ``step``, if anything."""
        return self._accumulators.take(step) if self._accumulators is not None else None

    def add_to(
        self, step_metrics: StepMetrics, captured: Captured | None, loss_divisor: float, step_time_s: float | None
    ) -> None:
        """A logged step's loss parts (scaled like the loss) and expert loads (``captured``: :meth:`take`'s),
        and its model TFLOPS."""
        if self._lm_is_the_loss and metrics.TRAIN_LOSS in step_metrics.data:
            step_metrics.data[metrics.TRAIN_LOSS_LM] = step_metrics.data[metrics.TRAIN_LOSS]
        if captured is not None:
            if captured.parts:
                step_metrics.data.update({tag: value / loss_divisor for tag, value in captured.parts.items()})
            if captured.loads is not None:
                step_metrics.expert_load = (captured.loads, captured.bias)
        if self.flops is not None and step_time_s:
            step_metrics.system.update(
                model_flops.throughput_tags(step_time_s, self.flops.flops, self._devices, self._peak)
            )
