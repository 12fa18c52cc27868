"""`mftb train` with a stand-in for MindSpore's Barrier, which has no CPU kernel (test only).

MindFormers calls ``comm_func.barrier()`` when it loads checkpoints of a multi-rank job (resume). On
an NPU that is a real Barrier; here a one-element all-reduce over the world group, a real collective
that no rank leaves before every rank has entered it, takes its place. It is patched before
mindformers is imported, so every module that binds the name gets it.

argv: the arguments of ``mftb train``.
"""

import sys

import mindspore  # noqa: F401  (first: the plugin's imports expect it loaded)
import numpy as np
from mindspore import Tensor, ops
from mindspore.communication import GlobalComm, comm_func


def barrier_by_all_reduce(group: str = GlobalComm.WORLD_COMM_GROUP) -> None:
    ops.AllReduce(group=group)(Tensor(np.zeros(1, dtype=np.float32))).asnumpy()


comm_func.barrier = barrier_by_all_reduce

from mindformers_tbplugin.cli import main  # noqa: E402  (after the patch)

sys.exit(main(["train", *sys.argv[1:]]))
