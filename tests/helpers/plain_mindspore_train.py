"""TensorBoardMonitor as a plain MindSpore callback (no MindFormers Trainer).

argv: LOG_DIR CHDIR_TO MODE [MONITOR_KWARGS_JSON]   (MODE: ok | raise | overwrite)
The monitor is built with LOG_DIR (possibly relative), then the process changes directory to
CHDIR_TO before training: the run must still land under the original LOG_DIR.
"""

import json
import os
import sys

import mindspore as ms
import numpy as np
from mindspore import dataset, nn
from mindspore.train import Callback, Model

from mindformers_tbplugin import TensorBoardMonitor, log_scalars

log_dir, chdir_to, mode = sys.argv[1:4]
extra_kwargs = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
ms.set_context(mode=0)
ms.set_device("CPU")
monitor = TensorBoardMonitor(log_dir=log_dir, experiment="plain", param_norm_every=5, **extra_kwargs)
os.chdir(chdir_to)


class UserCode(Callback):
    """Any other callback can write through the running monitor."""

    def on_train_step_end(self, run_context):
        step = run_context.original_args().cur_step_num
        log_scalars({"user/step_x2": step * 2.0}, kind="data")


class FailAtStepSix(Callback):
    def on_train_step_end(self, run_context):
        if mode == "raise" and run_context.original_args().cur_step_num == 6:
            raise RuntimeError("simulated failure at step 6")


class OverwriteOutputs(Callback):
    """Listed ahead of the monitor, as MindFormers' own callbacks always are: prints the step's loss, then
    changes what any later read of the step's outputs would see."""

    def on_train_step_end(self, run_context):
        cb_params = run_context.original_args()
        print("LOSS", cb_params.cur_step_num, float(cb_params.net_outputs.asnumpy()), flush=True)
        cb_params.net_outputs = ms.Tensor(1000.0, ms.float32)


rng = np.random.default_rng(0)
features = rng.standard_normal((64, 4)).astype(np.float32)
targets = (features @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype=np.float32)).astype(np.float32)
data = dataset.NumpySlicesDataset({"x": features, "y": targets}, shuffle=False).batch(8)
net = nn.Dense(4, 1)
model = Model(net, loss_fn=nn.MSELoss(), optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9))
ahead = [OverwriteOutputs()] if mode == "overwrite" else []
model.train(2, data, callbacks=[*ahead, monitor, UserCode(), FailAtStepSix()], dataset_sink_mode=False)
print("RUN_DIR", monitor.run_dir)
