"""A test-only callback put first in MindFormers 2.x's PyNative trainer's callback list (train.py's
MF2X_FRONT_CALLBACK), ahead of its MonitorCallback and LossCallback: it reads, its own way, what the
monitor's values must equal, and prints one ``PROBE {json}`` line per step.

At a step's begin: the trainable parameters (for the step's change), and a forward pre-hook on the model
that keeps each micro-batch's ``input_ids`` (the dataset rows the step read). At its end, before
LossCallback reads and clears them: every MoE layer's ``tokens_per_expert``, the loss-part trackers,
the norms of AdamW's moments (after the optimizer step), the step's parameter change, each parameter's
squared norm after the step, and the stable
rank of the 2-D weights whose name matches MF2X_PROBE_STABLE (a regular expression), when set.
With MF2X_PROBE_TRIGGER=N it also logs ``test/trigger`` = 1 for step N (through the running monitor), for an
AlertMonitor rule to fire on, and 0 for the other steps: at the next step's begin, once the monitor wrote
the step's own values (an incident is built from what was written at its step).
"""

import json
import os
import re

import numpy as np
from mindformers.pynative.callback import TrainerCallback
from mindformers.pynative.transformers.moe.moe_utils import get_moe_layer_wise_logging_tracker
from mindformers.pynative.transformers.multi_token_prediction import get_mtp_layer_wise_logging_tracker

from mindformers_tbplugin import log_scalars


def _values(tracker: dict) -> list[float] | None:
    values = tracker.get("values")
    return None if values is None else [float(v) for v in np.array(values.asnumpy()).reshape(-1)]


def _stable_rank(weight: np.ndarray) -> float:
    """||W||_F^2 over the largest eigenvalue of W^T W (the largest singular value squared)."""
    weight = np.asarray(weight, dtype=np.float64)
    return float(np.sum(np.square(weight)) / np.linalg.svd(weight, compute_uv=False)[0] ** 2)


class FrontProbe(TrainerCallback):
    def __init__(self) -> None:
        self.trigger = int(os.environ.get("MF2X_PROBE_TRIGGER", "0"))
        self.stable = os.environ.get("MF2X_PROBE_STABLE")
        self.before: list[np.ndarray] = []
        self.inputs: list[list[list[int]]] = []
        self.handle = None

    def on_step_begin(self, args, state, **kwargs):
        finished = int(state.global_step)
        if self.trigger and finished:
            log_scalars({"test/trigger": 1.0 if finished == self.trigger else 0.0}, step=finished)
        model = kwargs["model"][0]
        self.before = [np.array(p.asnumpy(), dtype=np.float64) for p in model.trainable_params()]
        self.inputs = []

        def keep_inputs(cell, inputs, kwargs_in=None):
            ids = (kwargs_in or {}).get("input_ids")
            if ids is None and inputs:
                ids = inputs[0]
            if ids is not None:
                self.inputs.append(np.array(ids.asnumpy()).tolist())

        try:
            self.handle = model.register_forward_pre_hook(keep_inputs, with_kwargs=True)
        except TypeError:  # a MindSpore without with_kwargs
            self.handle = model.register_forward_pre_hook(keep_inputs)

    def on_step_end(self, args, state, **kwargs):
        if self.handle is not None:
            self.handle.remove()
        model = kwargs["model"][0]
        step = int(state.global_step)
        loads = {
            name: [float(v) for v in cell.tokens_per_expert.asnumpy()]
            for name, cell in model.cells_and_names()
            if getattr(cell, "tokens_per_expert", None) is not None
        }
        optimizer = kwargs["optimizer"]
        adam = {
            moments: float(np.sqrt(sum(float(np.sum(np.square(m.asnumpy(), dtype=np.float64))) for m in found)))
            for moments in ("exp_avg", "exp_avg_sq")
            if (found := getattr(optimizer, moments, None)) is not None
        }
        after = [np.array(p.asnumpy(), dtype=np.float64) for p in model.trainable_params()]
        squares = {p.name: float(np.sum(np.square(a))) for p, a in zip(model.trainable_params(), after, strict=True)}
        change = float(np.sqrt(sum(float(np.sum(np.square(a - b))) for a, b in zip(after, self.before, strict=True))))
        record = {
            "step": step,
            "loads": loads,
            "aux": _values(get_moe_layer_wise_logging_tracker()),
            "mtp": _values(get_mtp_layer_wise_logging_tracker()),
            "adam": adam,
            "update_norm": change,
            "param_squares": squares,
            "inputs": self.inputs,
            "stable_rank": {
                p.name: _stable_rank(p.asnumpy())
                for p in model.trainable_params()
                if self.stable and re.search(self.stable, p.name) and len(p.shape) == 2
            },
        }
        print("PROBE " + json.dumps(record), flush=True)
