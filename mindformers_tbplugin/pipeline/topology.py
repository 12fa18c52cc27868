"""Where this process sits in the job, as plain facts, and which rank writes the main run."""

from __future__ import annotations

from dataclasses import dataclass

# MindSpore's parallel modes in which MindFormers' parallel_config (data_parallel, model_parallel, ...)
# decides the layout: a pipeline stage's ranks are data_parallel replicas of ranks_per_replica ranks
# (tensor, context and sequence parallel split one replica's batch), consecutive ranks per replica.
# MindFormers 2.x's PyNative trainer lays its ranks out the same way ([pipeline, data, context, tensor]
# parallel, row-major: a replica's tensor x context parallel ranks are consecutive), from its config's
# ``parallelism`` section rather than MindSpore's auto-parallel context.
PYNATIVE_LAYOUT = "pynative"
SHARDED_MODES = ("semi_auto_parallel", "auto_parallel", PYNATIVE_LAYOUT)


@dataclass(frozen=True)
class Topology:
    rank: int
    world_size: int
    pipeline_stages: int
    parallel_mode: str
    full_batch: bool
    communicating: bool  # collectives are initialised (msrun + use_parallel)
    ranks_per_replica: int = 1  # ranks of one pipeline stage that share one data-parallel replica's batch

    @classmethod
    def of(
        cls,
        rank: int,
        world_size: int,
        pipeline_stages: int,
        parallel_mode: str,
        full_batch: bool,
        communicating: bool,
        data_parallel: int | None = None,
    ) -> Topology:
        """``data_parallel``: MindFormers' ``parallel_config.data_parallel``; it counts only in the
        sharded modes (in data-parallel mode every rank is a replica)."""
        per_replica = 1
        if parallel_mode in SHARDED_MODES and data_parallel and world_size > 1:
            stage_size = max(world_size // max(pipeline_stages, 1), 1)
            per_replica = max(stage_size // max(int(data_parallel), 1), 1)
        return cls(rank, world_size, max(pipeline_stages, 1), parallel_mode, full_batch, communicating, per_replica)

    @property
    def writer_rank(self) -> int:
        """The rank that writes the main run: the first rank of the last pipeline stage (rank 0
        without pipeline parallelism), since the loss lives on the last stage."""
        stages = max(self.pipeline_stages, 1)
        return self.world_size - self.world_size // stages if stages > 1 else 0

    @property
    def is_writer(self) -> bool:
        return self.rank == self.writer_rank

    @property
    def holds_data_metrics(self) -> bool:
        """Ranks of the last pipeline stage compute the loss; the others output placeholders."""
        stages = max(self.pipeline_stages, 1)
        return self.rank >= self.world_size - self.world_size // stages

    @property
    def data_parallel(self) -> int:
        """How many data-parallel replicas train the model: a pipeline stage's ranks over the ranks
        of one replica (tensor / context parallel ranks are not replicas)."""
        if self.world_size <= 1 or self.parallel_mode == "stand_alone":
            return 1
        stage_size = max(self.world_size // max(self.pipeline_stages, 1), 1)
        return max(stage_size // max(self.ranks_per_replica, 1), 1)

    @property
    def data_parallel_factor(self) -> int:
        """How many ranks each read a different batch (1 when every rank reads the full batch)."""
        return 1 if self.full_batch else self.data_parallel

    @property
    def speaks_for_a_replica(self) -> bool:
        """This rank reports one data-parallel replica's throughput for the job's: the first rank of
        each replica in the last pipeline stage (or the writing rank alone when every rank reads the
        full batch). The other ranks share the batch of one of them, so counting them too would count
        a replica twice."""
        offset = self.rank - self.writer_rank
        per_replica = max(self.ranks_per_replica, 1)
        return 0 <= offset < self.data_parallel_factor * per_replica and offset % per_replica == 0

    def describe(self) -> str:
        replicas = f", {self.data_parallel} data-parallel replica(s)" if self.world_size > 1 else ""
        return (
            f"rank {self.rank} of {self.world_size}, {self.pipeline_stages} pipeline stage(s){replicas}: "
            f"rank {self.writer_rank} writes the main run (first rank of the last pipeline stage)"
        )
