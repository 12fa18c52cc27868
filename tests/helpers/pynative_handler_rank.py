"""One rank of a 2-rank msrun job that drives the YAML callbacks through MindFormers 2.x's own
``CallbackHandler``, as its PyNative trainer does, with real tensors and real collectives.

The PyNative trainer itself cannot run several ranks on a CPU (its hyper-parallel stand-ins are
single-process), so this script plays only the trainer's loop: the config is the trainer's
``TrainConfig``, the callbacks are built by the trainer's ``_build_callback`` from the YAML, and the
hooks get the trainer's arguments in its order (``mindformers/pynative/trainer/trainer.py``,
``train`` and ``_inner_train_loop``). Each rank reports a loss of its own, so the main run must hold
their mean. Prints ``RANK_STEP <rank> <step> <loss> <lr>`` per step.

usage: python pynative_handler_rank.py CONFIG.yaml STEPS
"""

import sys

import mindspore as ms
from mindspore import Tensor, communication, nn

ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
communication.init()
rank = communication.get_rank()

from mindformers.pynative.callback import CallbackHandler  # noqa: E402
from mindformers.pynative.trainer.train_state import TrainerState  # noqa: E402
from mindformers.pynative.trainer.trainer import Trainer  # noqa: E402
from mindformers.pynative.trainer.utils import _build_callback  # noqa: E402

config_path, steps = sys.argv[1], int(sys.argv[2])
config = Trainer._init_config(config_path)
model = nn.Dense(8, 4)
optimizer = nn.AdamWeightDecay(model.trainable_params(), learning_rate=1e-3)
lr_scheduler = nn.learning_rate_schedule.PolynomialDecayLR(1e-3, 1e-4, steps, power=1.0)
handler = CallbackHandler(
    [_build_callback(entry) for entry in config.callbacks],
    model=[model],
    optimizer=optimizer,
    lr_scheduler=lr_scheduler,
)
state = TrainerState(max_steps=steps, epoch_step=steps, global_batch_size=4)
handler.on_train_begin(config, state)
while state.global_step < state.max_steps:
    handler.on_step_begin(config, state)
    state.global_step += 1
    step = state.global_step
    loss = Tensor([2.0 + rank + 0.1 * step], ms.float32)
    grad_norm = Tensor(0.5 + 0.01 * step, ms.float32)
    handler.on_step_end(
        config,
        state,
        loss=loss,
        grad_norm=grad_norm,
        monitor=None,
        metric_reduce_group=None,
        metric_reduce_group_size=None,
        pp_metric_reduce_group=None,
        pp_metric_reduce_group_size=None,
        has_last=True,
    )
    print(f"RANK_STEP {rank} {step} {float(loss.asnumpy()[0])!r} {float(lr_scheduler(step).asnumpy())!r}", flush=True)
    if step % state.epoch_step == 0:
        handler.on_epoch_end(config, state)
handler.on_train_end(config, state)
