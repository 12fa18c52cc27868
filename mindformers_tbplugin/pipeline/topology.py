"""Where this process sits in the job, as plain facts, and which rank writes the main run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Topology:
    rank: int
    world_size: int
    pipeline_stages: int
    parallel_mode: str
    full_batch: bool
    communicating: bool  # collectives are initialised (msrun + use_parallel)

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
    def data_parallel_factor(self) -> int:
        """How many ranks each read a different batch (1 when every rank reads the full batch)."""
        if self.world_size <= 1 or self.full_batch or self.parallel_mode == "stand_alone":
            return 1
        return max(self.world_size // max(self.pipeline_stages, 1), 1)

    @property
    def speaks_for_a_replica(self) -> bool:
        """This rank reports one data-parallel replica's throughput for the job's: the
        ``data_parallel_factor`` ranks from the writing rank on (the last pipeline stage, or the
        writing rank alone when every rank reads the full batch). The other ranks share the batch of
        one of them, so counting them too would count a replica twice."""
        return 0 <= self.rank - self.writer_rank < self.data_parallel_factor

    def describe(self) -> str:
        return (
            f"rank {self.rank} of {self.world_size}, {self.pipeline_stages} pipeline stage(s): "
            f"rank {self.writer_rank} writes the main run (first rank of the last pipeline stage)"
        )
