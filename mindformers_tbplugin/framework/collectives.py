"""MindSpore's view of the job: this process's topology and the host-side collectives.

The only module that calls collectives. Per aggregation interval a multi-rank job communicates once
(see :mod:`mindformers_tbplugin.pipeline.aggregation` for what the vector carries).
"""

from __future__ import annotations

import os
import time

import numpy as np

from mindformers_tbplugin.pipeline.topology import Topology


def _env_int(*names: str, default: int) -> int:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return default


def current_topology(
    pipeline_stages: int | None = None, data_parallel: int | None = None, layout: str | None = None
) -> Topology:
    """This process's place in the job. Without initialised communication every process is its
    own single-rank job (it cannot agree with others on anything), whatever msrun's env says.
    ``pipeline_stages``: as the trainer's config says (MindFormers 2.x's PyNative trainer does not
    use MindSpore's auto-parallel context); by default that context's value. ``data_parallel``:
    MindFormers' ``parallel_config.data_parallel``, which decides the replicas under (semi-)auto
    parallel; without it, the first dimension of MindSpore's dataset strategy. ``layout``: the
    parallel mode to use instead of the auto-parallel context's (the PyNative trainer's)."""
    rank = _env_int("RANK_ID", "MS_NODE_ID", default=0)
    world_size, parallel_mode, full_batch, communicating = 1, "stand_alone", False, False
    try:
        from mindspore import communication, context

        if communication.GlobalComm.INITED:
            rank, world_size = communication.get_rank(), communication.get_group_size()
            communicating = world_size > 1
        parallel_mode = layout or str(context.get_auto_parallel_context("parallel_mode"))
        full_batch = bool(context.get_auto_parallel_context("full_batch"))
        if pipeline_stages is None:
            pipeline_stages = int(context.get_auto_parallel_context("pipeline_stages") or 1)
        if not data_parallel:
            data_parallel = _dataset_strategy_replicas(context.get_auto_parallel_context("dataset_strategy"))
    except Exception:  # no MindSpore context: a plain single process
        pass
    return Topology.of(rank, world_size, pipeline_stages or 1, parallel_mode, full_batch, communicating, data_parallel)


def _dataset_strategy_replicas(strategy: object) -> int | None:
    """``((dp, 1), (dp, 1), ...)``: the batch dimension's split of the first input."""
    try:
        first = strategy[0][0]  # type: ignore[index]
    except (TypeError, IndexError, KeyError):
        return None  # "full_batch" or "data_parallel"
    return first if isinstance(first, int) and first > 0 else None


def device_name() -> str | None:
    """The Ascend part this process trains on as MindSpore names it (e.g. ``Ascend910B3``), else None."""
    try:
        from mindspore import context, hal

        if str(context.get_context("device_target")) != "Ascend":
            return None
        return str(hal.get_device_name(0, "Ascend"))
    except Exception:  # an older MindSpore without mindspore.hal, or no device
        return None


def device_target() -> str:
    """MindSpore's ``device_target`` (``Ascend``, ``GPU`` or ``CPU``)."""
    from mindspore import context

    return str(context.get_context("device_target"))


class Collectives:
    """Small host-side collectives over the world group, counted (tests check the count); the
    :class:`~mindformers_tbplugin.pipeline.aggregation.CollectiveOps` of a real job."""

    def __init__(self) -> None:
        from mindspore import ops

        self._all_reduce = ops.AllReduce()
        self._all_gather = ops.AllGather()
        self.calls = 0
        self.reduced_bytes = 0  # sent in all-reduces, and the seconds they took on this thread
        self.reduce_seconds = 0.0

    def all_reduce_sum(self, vector: np.ndarray) -> np.ndarray:
        from mindspore import Tensor

        self.calls += 1
        start = time.perf_counter()
        reduced = self._all_reduce(Tensor(vector)).asnumpy()
        self.reduce_seconds += time.perf_counter() - start
        self.reduced_bytes += vector.nbytes
        return reduced

    def all_gather(self, vector: np.ndarray) -> np.ndarray:
        """Rows of every rank's ``vector``, in rank order."""
        from mindspore import Tensor

        self.calls += 1
        return self._all_gather(Tensor(vector[None, :])).asnumpy()


def wait_for_every_rank() -> None:
    """Return once every rank of the job has called this (one small all-reduce); at once without
    communication."""
    if current_topology().communicating:
        Collectives().all_reduce_sum(np.zeros(1, dtype=np.float32))
