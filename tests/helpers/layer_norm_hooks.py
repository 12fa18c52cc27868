"""Test-only hooks for per-layer gradient norms (loaded through PYTHONPATH / auto_register).

``record_local_norms`` (an extra_metrics function) appends what MindFormers' wrapper returned as
its ``local_norm`` output at each logged step to the JSON-lines file MFTB_TEST_LOCAL_NORMS, with the
names of the wrapper's ``weights`` (the parameters the optimizer updates, whose gradients it returns,
in that order) and each one's sum of squares (float64) at that step's end.
``ExplodeLayer`` multiplies parameters by factors (``scales: {name: factor}``) just before step
``step``. Scaling one layer's ``wv`` by c and its ``wo`` by 1/c leaves the model's function unchanged
and multiplies that ``wo``'s gradient by c: one layer's gradient explodes, nothing else moves.
"""

import json
import os

import numpy as np
from mindspore import Tensor
from mindspore.train import Callback


def record_local_norms(cb_params):
    outputs = cb_params.net_outputs
    with open(os.environ["MFTB_TEST_LOCAL_NORMS"], "a", encoding="utf-8") as file:
        record = {
            "step": int(cb_params.cur_step_num),
            "squares": outputs[5].asnumpy().tolist(),
            "names": [param.name for param in cb_params.train_network.weights],
            "params": {
                param.name: float(np.sum(np.square(param.asnumpy().astype(np.float64))))
                for param in cb_params.train_network.weights
            },
        }
        file.write(json.dumps(record) + "\n")
    return {}


class ExplodeLayer(Callback):
    def __init__(self, step, scales):
        super().__init__()
        self.step, self.scales = int(step), {name: float(factor) for name, factor in scales.items()}

    def on_train_step_end(self, run_context):
        cb_params = run_context.original_args()
        if cb_params.cur_step_num != self.step - 1:  # scaled after this step: step ``step`` feels it
            return
        for parameter in cb_params.train_network.optimizer.parameters:
            if parameter.name in self.scales:
                parameter.set_data(Tensor(parameter.asnumpy() * self.scales[parameter.name]))
