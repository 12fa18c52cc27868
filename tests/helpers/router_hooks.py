"""Test-only callbacks for mcore MoE models (loaded through PYTHONPATH / auto_register).

``RouterProbe`` writes every router's per-expert load accumulator (``expert_load``, or ``fi_accu`` of
``gbs_aux_loss`` routers) of each step to the JSON-lines file MFTB_TEST_ROUTER_LOADS: read at the
start of the step end, before MindFormers' callbacks zero it (by its own hook in front of the first
callback: an implementation of its own, to check the monitor's against), and again at its own step
end, after them (``after``: what the next step adds to, where nothing zeroes it). Read at the same
place: the expert bias of the routers that have one (``bias``), and the loss parts MindFormers' wrapper
accumulated in its ``parameter_register`` (``parts``: its own accessor, ``parameter_register.get``),
each as its contribution to the loss: ``lm_loss`` and ``mtp_loss`` as accumulated (the MTP loss
already weighted), ``aux_loss`` times MindFormers' ``get_aux_loss_scale`` of the model's config (the
wrapper divides by it).
``CollapseLayer`` sets one layer's expert bias from step ``step`` on, so that its top-k selection
skips some experts: a real routing collapse (the router's scores are untouched; the bias only moves
which experts are chosen).
"""

import json
import os

import numpy as np
from mindspore import Tensor
from mindspore.train import Callback


def _routers(cb_params):
    """(name, router) of every MoE router, decoder layers then MTP layers, by the parameter names."""
    found = []
    for _, cell in cb_params.train_network.cells_and_names():
        if hasattr(cell, "fi_accu") and getattr(cell, "weight", None) is not None:
            found.append((cell.weight.name, cell))
    return found


class RouterProbe(Callback):
    def on_train_begin(self, run_context):
        cb_params = run_context.original_args()
        first = cb_params.list_callback[0]
        original = first.on_train_step_end

        def read_first(context):
            self.before = _loads(context.original_args())
            self.bias = _bias(context.original_args())
            self.parts = _parts(context.original_args())
            return original(context)

        first.on_train_step_end = read_first

    def on_train_step_end(self, run_context):
        cb_params = run_context.original_args()
        record = {"step": int(cb_params.cur_step_num), "loads": self.before, "after": _loads(cb_params)}
        record.update(bias=self.bias, parts=self.parts)
        with open(os.environ["MFTB_TEST_ROUTER_LOADS"], "a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")


def _loads(cb_params):
    loads = {}
    for name, router in _routers(cb_params):
        accumulator = router.expert_load if getattr(router, "expert_load", None) is not None else router.fi_accu
        loads[name] = np.array(accumulator.asnumpy(), dtype=np.float64).tolist()
    return loads


def _bias(cb_params):
    return {
        name: np.array(router.expert_bias.asnumpy(), dtype=np.float64).tolist()
        for name, router in _routers(cb_params)
        if getattr(router, "moe_router_enable_expert_bias", False)
    }


def _parts(cb_params):
    from mindformers.utils.parameter_register import parameter_register
    from mindformers.wrapper.wrapper import get_aux_loss_scale, get_real_models

    config = get_real_models(cb_params.train_network).get_gpt_transformer_config()
    scale = get_aux_loss_scale(config.moe_aux_loss_coeff, config.moe_layer_freq, config.num_layers)
    parts = {
        name: float(np.array(parameter_register.get(name).asnumpy()).reshape(-1)[0])
        for name in ("lm_loss", "mtp_loss", "aux_loss")
    }
    parts["aux_loss"] *= scale
    return parts


class CollapseLayer(Callback):
    def __init__(self, step, layer, bias):
        super().__init__()
        self.step, self.layer, self.bias = int(step), f".layers.{int(layer)}.", [float(b) for b in bias]

    def on_train_step_end(self, run_context):
        cb_params = run_context.original_args()
        if cb_params.cur_step_num != self.step - 1:  # set after this step: step ``step`` routes with it
            return
        for name, router in _routers(cb_params):
            if self.layer in name and "mtp" not in name:
                router.expert_bias.set_data(Tensor(np.array(self.bias, dtype=np.float32)))
