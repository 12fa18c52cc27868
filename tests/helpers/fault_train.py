"""Plain MindSpore training (40 steps, 50 ms each) with TensorBoardMonitor, for disk-fault tests.

argv: LOG_DIR MODE   (MODE: fsize | delete | fill)
fsize: the caller set RLIMIT_FSIZE with SIGXFSZ ignored, so writes past the limit fail with EFBIG.
delete: the run folder is deleted after step 10.
fill: LOG_DIR is a small file system; a filler file takes all its space at step 10 and is removed
at step 25.
Prints "STEP n" per step and "DONE" at the end.
"""

import os
import shutil
import signal
import sys
import time

import mindspore as ms
import numpy as np
from mindspore import dataset, nn
from mindspore.train import Callback, Model

from mindformers_tbplugin import TensorBoardMonitor

log_dir, mode = sys.argv[1:3]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
ms.set_context(mode=0)
ms.set_device("CPU")
monitor = TensorBoardMonitor(log_dir=log_dir, experiment="fault", flush_secs=0.2, param_norm_every=0)


def _fill(path: str) -> None:
    with open(path, "wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError:  # ENOSPC: the file system is full
            pass


class Pace(Callback):
    def on_train_step_end(self, run_context):
        step = run_context.original_args().cur_step_num
        time.sleep(0.05)
        if mode == "delete" and step == 10:
            time.sleep(0.5)  # let the writer flush first
            shutil.rmtree(monitor.run_dir)
        if mode == "fill" and step == 10:
            _fill(os.path.join(log_dir, "filler.bin"))
        if mode == "fill" and step == 25:
            os.remove(os.path.join(log_dir, "filler.bin"))
        print("STEP", step, flush=True)


rng = np.random.default_rng(0)
features = rng.standard_normal((320, 4)).astype(np.float32)
targets = features.sum(axis=1, keepdims=True).astype(np.float32)
data = dataset.NumpySlicesDataset({"x": features, "y": targets}, shuffle=False).batch(8)
net = nn.Dense(4, 1)
model = Model(net, loss_fn=nn.MSELoss(), optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9))
model.train(1, data, callbacks=[Pace(), monitor], dataset_sink_mode=False)
print("DONE", flush=True)
