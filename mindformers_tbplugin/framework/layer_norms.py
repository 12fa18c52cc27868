"""Per-layer gradient and parameter norms for TensorBoardMonitor.

Where each parameter's squared gradient norm comes from depends on the trainer:

* classic: with ``runner_wrapper: {local_norm: True}`` MindFormers' train wrappers (``MFTrainOneStepCell``
  and subclasses) compute, inside the compiled step, each gradient's squared L2 norm after unscaling and
  before the data-parallel reduction, and return them as one vector in the optimizer's parameter order;
  at a logged step the training thread copies that vector to the host once;
* MindFormers 2.x's PyNative trainer: gradient hooks armed for the logged steps
  (framework/gradient_hooks.py), with that trainer's ``monitor.train_state.local_norm`` or the
  monitor's ``layer_grad_norms``; the same values, in the same order.

The router groups the vector (one ``bincount``) and, on a multi-rank job, averages the groups' squares
over the ranks in its one all-reduce. The log10 histogram of the per-parameter norms is built and
encoded on the writer thread (pipeline/histograms.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mindformers_tbplugin.framework.collectives import device_target
from mindformers_tbplugin.framework.gradient_hooks import GradientHooks
from mindformers_tbplugin.framework.host_values import bytes_type, host_copy
from mindformers_tbplugin.framework.running_config import get_path
from mindformers_tbplugin.framework.trainers import CLASSIC, TrainStart
from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.gradient_groups import GroupLayout


def wrapper_computes_local_norms(train_network: Any) -> bool:
    """True when the training cell returns per-parameter gradient norms (``local_norm: True``)."""
    return bool(getattr(train_network, "local_norm", False))


class LayerNorms:
    """The gradient and parameter groups of one training, and what they add to a logged step."""

    def __init__(
        self, gradients: GroupLayout, parameters: GroupLayout, grad_hist_every: int, hooks: GradientHooks | None = None
    ) -> None:
        """``hooks``: where the norms come from under the PyNative trainer (None: the wrapper's output)."""
        self.hooks = hooks
        self.gradients = gradients
        self.parameters = parameters
        self.grad_hist_every = grad_hist_every
        # The vector's numpy type, learnt at its first read: Tensor.dtype costs ~8 µs at a cold step end.
        self._bytes_type: np.dtype | None = None

    @classmethod
    def for_training(
        cls, start: TrainStart, grouping: str | Sequence[str], grad_hist_every: int, requested: bool = False
    ) -> LayerNorms | None:
        """None unless the norms can be had: the classic wrapper computes them, or the PyNative trainer's
        user asked for them (``requested``: the monitor's ``layer_grad_norms``)."""
        optimizer = start.facts.optimizer
        hooks = None
        if start.trainer == CLASSIC:
            if not wrapper_computes_local_norms(start.train_network):
                if requested:
                    logger.warning(
                        "TensorBoardMonitor: layer_grad_norms: the classic trainer computes per-layer gradient "
                        "norms inside its compiled step only with runner_wrapper.local_norm: True; none are written"
                    )
                return None
            params = list(getattr(optimizer, "parameters", None) or [])
        else:
            config = start.config.config if start.config is not None else None
            if not (requested or get_path(config, "monitor.train_state.local_norm")) or optimizer is None:
                return None
            params = [param for param in optimizer.parameters if getattr(param, "requires_grad", True)]
            state = start.training
            micro_batches = lambda: int(getattr(state, "num_accumulation_steps", 1) or 1)  # noqa: E731
            hooks = GradientHooks(params, _loss_sense(start), device_target() == "CPU", micro_batches)
        names = [parameter.name for parameter in params]
        if not names:
            return None
        parameters = GroupLayout.of([parameter.name for parameter in start.facts.trainable_params], grouping)
        return cls(GroupLayout.of(names, grouping), parameters, grad_hist_every, hooks)

    def describe(self) -> str:
        source = " (gradient hooks)" if self.hooks is not None else ""
        return (
            f"per-layer gradient norms of {len(self.gradients.names)} parameters in {len(self.gradients)} groups"
            + source
        )

    def read(self, net_outputs: Any) -> Any:
        """This step's per-parameter squared gradient norms (one host copy of one vector), or None."""
        if self.hooks is not None:
            return self.hooks.read()
        output = metrics.local_norm_output(net_outputs)
        if self._bytes_type is not None and output is not None:
            return np.frombuffer(output.get_bytes(), self._bytes_type)
        if not hasattr(output, "asnumpy"):
            return output
        self._bytes_type = bytes_type(output)
        return host_copy(output)

    def histogram_due(self, step: int, last_logged_step: int) -> bool:
        """Whether ``step`` gets the histogram of log10 per-parameter gradient norms."""
        every = self.grad_hist_every
        return bool(every) and step // every > last_logged_step // every


def parameter_norm(params: Sequence[Any], layer_norms: LayerNorms | None) -> dict[str, float]:
    """``train/param_norm``, plus ``param_norm/<group>`` when per-layer norms are on (one pass)."""
    if layer_norms is None:
        return {metrics.TRAIN_PARAM_NORM: metrics.global_norm(p.asnumpy() for p in params)}
    squares = np.array([metrics.squared_norm(p.asnumpy()) for p in params], dtype=np.float64)
    layout = layer_norms.parameters
    return layout.tags(metrics.PARAM_NORM_PREFIX, layout.group_squares(squares), metrics.TRAIN_PARAM_NORM)


def _loss_sense(start: TrainStart) -> float:
    """The factor the PyNative trainer's backward carries: 1 / (ranks of one pipeline stage)."""
    topology = start.topology
    if topology.world_size <= 1:
        return 1.0
    return 1.0 / max(topology.world_size // max(topology.pipeline_stages, 1), 1)
