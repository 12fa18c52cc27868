"""A benchmark-only callback: TensorBoardMonitor switched on and off in blocks of steps, in one training.

Loaded through MindFormers' ``auto_register`` (``mftb train --register_path benchmarks/probe``). The
probe owns a real TensorBoardMonitor and forwards MindSpore's hooks to it; a step's ``step_begin`` and
``step_end`` are forwarded only in the "on" blocks (pattern off, on, on, off, repeated, so that a linear
drift of the machine's speed cancels within each group of four). Every step's start time is stamped, so step ``s``
lasts from its start to the next one's and contains every callback's ``step_end`` of step ``s``.
The same process, compiled graph and memory layout serve both variants, which removes the
run-to-run noise that separate trainings carry. The pattern depends on the step alone, so under msrun
every rank switches at the same steps and the monitor's collectives stay matched.

Two controls check the method itself (``forward``): ``none`` gives the monitor no step at all (it is built and
started, its writer thread runs: an A/A comparison, which should show nothing), ``reads`` gives it only its
read of a logged step's outputs ahead of the step end's callbacks (the device reads, and nothing after them).
``pin`` gives each rank a core of its own (:func:`pin_to_own_core`).

At train end each rank writes ``<output>/rank_<id>.json``: step start stamps, which steps were on, the training-thread
seconds spent inside the monitor's ``step_begin``, its read ahead of the step end's first callback and its
``step_end``, and the CPU seconds the monitor's writer thread spent from step ``warmup_steps`` to the end (after
the one-off records of train begin).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from mindspore.train import Callback

from mindformers_tbplugin import TensorBoardMonitor
from mindformers_tbplugin.session.monitor_session import MonitorSession
from mindformers_tbplugin.session.step_reads import StepReads

BLOCK_PATTERN = (False, True, True, False)
FORWARD = ("all", "reads", "none")  # what the monitor gets in the "on" blocks


def thread_cpu_seconds(prefix: str) -> float:
    """CPU seconds of the threads whose names start with ``prefix``."""
    total = 0.0
    for thread in threading.enumerate():
        if thread.name.startswith(prefix) and thread.ident is not None:
            try:
                total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            except OSError:  # the thread ended between enumerate() and the read
                continue
    return total


def pin_to_own_core() -> None:
    """Every thread of this process on core RANK_ID mod the machine's cores: under msrun each rank gets a
    core of its own, as on a host with cores to spare per rank, instead of the ranks' threads migrating
    over shared cores (the scheduler's noise). Threads started later (the monitor's writer) inherit it."""
    core = {int(os.environ.get("RANK_ID", "0")) % (os.cpu_count() or 1)}
    for thread_id in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread_id), core)
        except OSError:  # the thread ended since the listing
            continue


class OverheadProbe(Callback):
    def __init__(
        self,
        block: int = 10,
        warmup_steps: int = 20,
        output: str = "probe",
        monitor: dict[str, Any] | None = None,
        forward: str = "all",
        pin: bool = False,
    ) -> None:
        super().__init__()
        self.pin = pin
        if forward not in FORWARD:
            raise ValueError(f"OverheadProbe: forward {forward!r} is not one of {FORWARD}")
        self.forward = forward
        self.block = block
        self.warmup_steps = warmup_steps
        self.writer_cpu_at_warmup = 0.0
        self.output = Path(output)
        self.monitor = TensorBoardMonitor(**(monitor or {}))
        # A logged step's outputs and an mcore model's accumulators are read ahead of MindFormers' callbacks,
        # not in the monitor's step end: in the "off" blocks they must not be read either (this process runs
        # one training: patched class-wide).
        due = MonitorSession._ahead_due
        reads = forward != "none"
        MonitorSession._ahead_due = lambda session, step: (
            due(session, step) if reads and self._is_on(step) else (False, False, False)
        )
        read_ahead = StepReads._read_ahead

        def timed_read_ahead(reads_of_step: StepReads, run_context: Any) -> None:
            began = time.perf_counter()
            read_ahead(reads_of_step, run_context)
            self._ahead_seconds = time.perf_counter() - began

        StepReads._read_ahead = timed_read_ahead
        self.starts: list[float] = []
        self.on_steps: list[int] = []
        self.inside_seconds: list[float] = []  # per "on" step: in the monitor's step_begin, read ahead, step_end
        self._begin_seconds = self._ahead_seconds = 0.0

    def __enter__(self) -> OverheadProbe:
        self.monitor.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.monitor.__exit__(*exc_info)

    def _is_on(self, step: int) -> bool:
        return BLOCK_PATTERN[(step // self.block) % len(BLOCK_PATTERN)]

    def on_train_begin(self, run_context: Any) -> None:
        if self.pin:
            pin_to_own_core()
        self.monitor.on_train_begin(run_context)

    def on_train_step_begin(self, run_context: Any) -> None:
        began = time.perf_counter()
        self.starts.append(began)
        self._begin_seconds = 0.0
        if self.forward == "all" and self._is_on(int(run_context.original_args().cur_step_num)):
            self.monitor.on_train_step_begin(run_context)
            self._begin_seconds = time.perf_counter() - began

    def on_train_step_end(self, run_context: Any) -> None:
        step = int(run_context.original_args().cur_step_num)
        if step == self.warmup_steps:
            self.writer_cpu_at_warmup = thread_cpu_seconds("mftb-writer")
        if not self._is_on(step):
            return
        began = time.perf_counter()
        if self.forward == "all":
            self.monitor.on_train_step_end(run_context)
        self.inside_seconds.append(time.perf_counter() - began + self._begin_seconds + self._ahead_seconds)
        self._ahead_seconds = 0.0
        self.on_steps.append(step)

    def on_train_end(self, run_context: Any) -> None:
        writer_cpu = thread_cpu_seconds("mftb-writer") - self.writer_cpu_at_warmup  # before the writer closes
        self.monitor.on_train_end(run_context)
        record = {
            "starts": self.starts,
            "on_steps": self.on_steps,
            "inside_seconds": self.inside_seconds,
            "writer_cpu_seconds": writer_cpu,
            "block": self.block,
            "warmup_steps": self.warmup_steps,
        }
        self.output.mkdir(parents=True, exist_ok=True)
        (self.output / f"rank_{os.environ.get('RANK_ID', '0')}.json").write_text(json.dumps(record))
