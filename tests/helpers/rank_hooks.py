"""Test-only callbacks and metrics for multi-rank runs (loaded through REGISTER_PATH/auto_register).

Environment: MFTB_TEST_SLOW_RANK=R makes rank R sleep MFTB_TEST_SLOW_SECONDS (default 0.15) per step;
MFTB_TEST_FAIL_RANK=R makes rank R raise at step 3.
"""

import os
import time

from mindspore.train import Callback

from mindformers_tbplugin import metric


def _rank() -> int:
    return int(os.environ.get("RANK_ID", "0"))


class SlowRank(Callback):
    """Placed before TensorBoardMonitor, so its sleep counts in that rank's step time."""

    def on_train_step_end(self, run_context):
        if os.environ.get("MFTB_TEST_SLOW_RANK") == str(_rank()):
            time.sleep(float(os.environ.get("MFTB_TEST_SLOW_SECONDS", "0.15")))


class FailRank(Callback):
    def on_train_step_end(self, run_context):
        if os.environ.get("MFTB_TEST_FAIL_RANK") == str(_rank()) and run_context.original_args().cur_step_num == 3:
            raise RuntimeError(f"rank {_rank()} failed on purpose")


@metric(kind="data")
def one_data_metric(cb_params):
    return {"custom/d0": float(_rank())}


@metric(kind="data")
def twenty_data_metrics(cb_params):
    return {f"custom/d{i:02d}": float(_rank() + i) for i in range(20)}
