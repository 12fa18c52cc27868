"""Test-only callback recording what a rank trained from (loaded through REGISTER_PATH/auto_register).

``ReadRecorder`` appends JSON lines to the file MFTB_TEST_READS names (``{rank}`` in it is replaced by
the rank): at train begin the optimizer's ``global_step`` (a checkpoint resumed from sets it) and every
trainable parameter's sum of squares (float64, the network's values once MindFormers has loaded any
checkpoint); at each step end the optimizer's ``global_step`` (the step just trained) and the first token
of each row of the batch the network was given. The tests write each row's own index as its first
token, so that is the rows read, from the batch itself.
"""

import json
import os

import numpy as np
from mindspore.train import Callback


def _global_step(cb_params):
    return int(cb_params.train_network.optimizer.global_step.asnumpy().reshape(-1)[0])


def _write(record):
    path = os.environ["MFTB_TEST_READS"].format(rank=os.environ.get("RANK_ID", "0"))
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps(record) + "\n")


class ReadRecorder(Callback):
    def on_train_begin(self, run_context):
        cb_params = run_context.original_args()
        squares = {
            param.name: float(np.sum(np.square(param.asnumpy().astype(np.float64))))
            for param in cb_params.train_network.trainable_params()
        }
        _write({"begin": _global_step(cb_params), "squares": squares})

    def on_train_step_end(self, run_context):
        cb_params = run_context.original_args()
        input_ids = cb_params.train_dataset_element[0].asnumpy()
        _write({"step": _global_step(cb_params), "rows": [int(row[0]) for row in input_ids]})
