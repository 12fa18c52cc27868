"""Rank and topology facts: who this process is and who writes the main run.

Kept free of collectives for now; cross-rank aggregation lives here too when it is added.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    rank: int
    world_size: int
    pipeline_stages: int
    parallel_mode: str
    full_batch: bool

    @property
    def is_writer(self) -> bool:
        """The rank that writes the main run: one of the last pipeline stage, in the first replica
        (rank 0 without pipeline parallelism), since the loss lives on the last stage."""
        return self.rank == self.writer_rank

    @property
    def writer_rank(self) -> int:
        return self.world_size - self.world_size // max(self.pipeline_stages, 1) if self.pipeline_stages > 1 else 0

    @property
    def data_parallel_factor(self) -> int:
        """How many ranks each read a different batch (1 when every rank reads the full batch)."""
        if self.world_size <= 1 or self.full_batch or self.parallel_mode == "stand_alone":
            return 1
        return max(self.world_size // max(self.pipeline_stages, 1), 1)


def _env_int(*names: str, default: int) -> int:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return default


def current_topology() -> Topology:
    """Facts of this process, from MindSpore's communication and parallel context when set up,
    else from the launcher's environment (msrun sets RANK_ID / RANK_SIZE)."""
    rank = _env_int("RANK_ID", "MS_NODE_ID", default=0)
    world_size = _env_int("RANK_SIZE", "MS_WORKER_NUM", default=1)
    pipeline_stages, parallel_mode, full_batch = 1, "stand_alone", False
    try:
        from mindspore import communication, context

        if communication.GlobalComm.INITED:
            rank, world_size = communication.get_rank(), communication.get_group_size()
        pipeline_stages = int(context.get_auto_parallel_context("pipeline_stages") or 1)
        parallel_mode = str(context.get_auto_parallel_context("parallel_mode"))
        full_batch = bool(context.get_auto_parallel_context("full_batch"))
    except Exception:  # facts from the environment are good enough for naming
        pass
    return Topology(rank, world_size, pipeline_stages, parallel_mode, full_batch)
