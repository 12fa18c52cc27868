"""One rank of a 2-rank msrun job that drives the YAML callbacks through MindFormers 2.x's own
``CallbackHandler``, as its PyNative trainer does, with real tensors and real collectives.

The PyNative trainer itself cannot run several ranks on a CPU (its hyper-parallel stand-ins are
single-process), so this script plays only the trainer's loop: the config is the trainer's
``TrainConfig``, the callbacks are built by the trainer's ``_build_callback`` from the YAML, and the
hooks get the trainer's arguments in its order (``mindformers/pynative/trainer/trainer.py``,
``train``, ``_inner_train_loop``, ``training_step`` and ``_forward_backward``). Each step, each rank
runs the model's forward on a batch of its own (two micro-batches, each loss over 2 and backward with
the loss sense 1/2, as the trainer does), then averages the loss over the ranks with a real all-reduce
and hands callbacks that mean, as the trainer does: what the monitor writes per rank must come from its
own read. At step SPIKE_STEP rank 1's batch is large (its loss spikes). Prints per step
``RANK_STEP <rank> <step> <own loss> <lr>`` and ``RANK_GRADS <rank> <step> {json: squared norm of each
parameter's summed gradient, without the loss sense}``.

usage: python pynative_handler_rank.py CONFIG.yaml STEPS
"""

import json
import sys

import mindspore as ms
import numpy as np
from mindspore import Tensor, communication, nn, ops

ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
communication.init()
rank = communication.get_rank()

from hyper_parallel.platform.mindspore.autograd_compat import enable_mindspore_backward_compat  # noqa: E402
from mindformers.pynative.callback import CallbackHandler  # noqa: E402
from mindformers.pynative.trainer.train_state import TrainerState  # noqa: E402
from mindformers.pynative.trainer.trainer import Trainer  # noqa: E402
from mindformers.pynative.trainer.utils import _build_callback  # noqa: E402

enable_mindspore_backward_compat()  # loss.backward(sense), as the trainer does
SPIKE_STEP, MICRO_BATCHES, WORLD = 6, 2, 2


class Tiny(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.CellList([nn.Dense(8, 8), nn.Dense(8, 8)])
        self.head = nn.Dense(8, 1)

    def construct(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return (self.head(x) ** 2).mean().reshape((1,))


def batch(step: int, micro: int) -> Tensor:
    scale = 0.5 + 0.25 * rank + 0.05 * step + 0.01 * micro + (3.0 if rank == 1 and step == SPIKE_STEP else 0.0)
    values = np.random.default_rng(100 * step + 10 * rank + micro).normal(size=(4, 8)) * scale
    return Tensor(values.astype(np.float32))


config_path, steps = sys.argv[1], int(sys.argv[2])
config = Trainer._init_config(config_path)
ms.set_seed(0)
model = Tiny()
params = model.trainable_params()
optimizer = nn.AdamWeightDecay(params, learning_rate=1e-3)
lr_scheduler = nn.learning_rate_schedule.PolynomialDecayLR(1e-3, 1e-4, steps, power=1.0)
handler = CallbackHandler(
    [_build_callback(entry) for entry in config.callbacks],
    model=[model],
    optimizer=optimizer,
    lr_scheduler=lr_scheduler,
)
state = TrainerState(max_steps=steps, epoch_step=steps, global_batch_size=16, num_accumulation_steps=MICRO_BATCHES)
all_reduce = ops.AllReduce()
handler.on_train_begin(config, state)
while state.global_step < state.max_steps:
    handler.on_step_begin(config, state)
    step = state.global_step + 1
    loss = Tensor([0.0], ms.float32)
    for micro in range(MICRO_BATCHES):
        micro_loss = model(batch(step, micro)) / MICRO_BATCHES
        micro_loss.backward(Tensor([1.0 / WORLD], ms.float32))  # the loss sense: 1 / (ranks of a stage)
        loss = loss + micro_loss
    own = float(loss.asnumpy()[0])
    squares = {p.name: float(np.sum(np.square(p.grad.asnumpy() * WORLD, dtype=np.float64))) for p in params}
    grad_norm = Tensor(np.sqrt(sum(squares.values())), ms.float32)
    for param in params:
        param.grad = None  # the trainer's zero-grad (no update: the losses stay what the batches make them)
    loss = all_reduce(loss) / WORLD  # the trainer's mean over ranks, handed to callbacks
    state.global_step += 1
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
        has_last=False,  # as the trainer passes it on a multi-card run without pipeline parallelism
    )
    print(f"RANK_STEP {rank} {step} {own!r} {float(lr_scheduler(step).asnumpy())!r}", flush=True)
    print(f"RANK_GRADS {rank} {step} {json.dumps(squares)}", flush=True)
    if step % state.epoch_step == 0:
        handler.on_epoch_end(config, state)
handler.on_train_end(config, state)
