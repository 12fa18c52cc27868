"""A benchmark-only run of MindFormers 2.x's PyNative trainer on CPU with the monitor's training-thread work
timed where it happens (run with the MindFormers 2.x environment's Python):

    python benchmarks/probe/pynative_probe.py CONFIG.yaml OUTPUT.json

Timed per step, on the training thread: TensorBoardMonitor's ``on_step_begin`` and ``on_step_end``, its
reads in front of LossCallback's and MaxLogitsMonitor's model calls (``StepReads._capture_now``), and the
gradient hooks (``hooks``: the time inside the hook functions during the backward; ``hook_setup``: their
registration at a logged step's begin and the read at its end, which the monitor's time includes). Each
step's length is from one step begin to the next. Writes ``{"steps": [...], "monitor": [...], ...}``, one
entry per step, seconds (``hook_calls``: how many hook calls). With PYNATIVE_PROBE_BLOCK=N the hooks are
on only in the "on" blocks of N steps (off, on, on, off, repeated: a drift of the machine's speed cancels)
and ``on_steps`` lists the steps they were on.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import mindspore as ms

ms.set_device("CPU")
ms.set_context(mode=ms.PYNATIVE_MODE)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "compat" / "mf2x_cpu"))
import cpu_compat  # noqa: E402  (the CPU stand-ins for Ascend-only kernels: benchmark and test support)

cpu_compat.apply()

from mindformers.pynative.trainer import Trainer  # noqa: E402

from mindformers_tbplugin import TensorBoardMonitor  # noqa: E402
from mindformers_tbplugin.framework.gradient_hooks import GradientHooks  # noqa: E402
from mindformers_tbplugin.session.step_reads import StepReads  # noqa: E402

clock = time.perf_counter
current = {"monitor": 0.0, "taps": 0.0, "hooks": 0.0, "hook_setup": 0.0, "hook_calls": 0.0}
timings: dict[str, list[float]] = {"steps": [], **{key: [] for key in current}}
started: list[float] = []


def timed(key: str, function):
    def wrapper(*args, **kwargs):
        begin = clock()
        try:
            return function(*args, **kwargs)
        finally:
            current[key] += clock() - begin

    return wrapper


def step_begin(function):
    def wrapper(self, args, state, **kwargs):
        now = clock()
        if started:
            timings["steps"].append(now - started[-1])
            for key in current:
                timings[key].append(current[key])
                current[key] = 0.0
        started.append(now)
        return timed("monitor", function)(self, args, state, **kwargs)

    return wrapper


def counted_hook(make):
    def maker(self, index, param):
        hook = make(self, index, param)

        def wrapper(grad):
            current["hook_calls"] += 1
            return timed("hooks", hook)(grad)

        return wrapper

    return maker


TensorBoardMonitor.on_step_begin = step_begin(TensorBoardMonitor.on_step_begin)
TensorBoardMonitor.on_step_end = timed("monitor", TensorBoardMonitor.on_step_end)
StepReads._capture_now = timed("taps", StepReads._capture_now)
BLOCK = int(os.environ.get("PYNATIVE_PROBE_BLOCK", "0"))  # hooks on and off in blocks of steps: off, on, on, off
on_steps: list[int] = []


def in_blocks(step_began):
    def wrapper(self, logged):
        step = len(started)  # the step beginning now, counted from 1
        on = logged and (not BLOCK or (False, True, True, False)[(step - 1) // BLOCK % 4])
        if on:
            on_steps.append(step)
        return step_began(self, on)

    return wrapper


GradientHooks.step_began = timed("hook_setup", in_blocks(GradientHooks.step_began))  # in "monitor" too
GradientHooks.read = timed("hook_setup", GradientHooks.read)  # inside on_step_end: in "monitor" too
GradientHooks._host_hook = counted_hook(GradientHooks._host_hook)
GradientHooks._device_hook = counted_hook(GradientHooks._device_hook)

if __name__ == "__main__":
    config, output = sys.argv[1], Path(sys.argv[2])
    os.chdir(Path(config).resolve().parent)
    Trainer(config=config).train()
    output.write_text(json.dumps({**timings, "on_steps": on_steps}))
