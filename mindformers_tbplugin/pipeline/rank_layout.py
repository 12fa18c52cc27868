"""The :class:`~mindformers_tbplugin.pipeline.rank_records.RankLayout` of a job, from what every rank
sent in the run-folder all-gather at train begin: its launcher node rank (or none) and a hash of its
host name. numpy-free, no I/O: the callers read the environment and the host name.
"""

from __future__ import annotations

import zlib

from mindformers_tbplugin.pipeline.rank_records import CHANNELS, RankLayout, intervals_per_record

NO_NODE_RANK = -1


def host_hash(hostname: str) -> int:
    """A 32-bit id of a host name: ranks with equal ids share a host."""
    return zlib.crc32(hostname.encode("utf-8")) & 0xFFFFFFFF


def node_indices(node_ranks: list[int], host_hashes: list[int]) -> tuple[int, ...]:
    """Each rank's node: the launcher's node rank when every rank has one, else hosts numbered in the
    order of their first rank (a job started without the launcher, or by an older one)."""
    if node_ranks and all(node >= 0 for node in node_ranks):
        return tuple(node_ranks)
    first_seen: dict[int, int] = {}
    return tuple(first_seen.setdefault(host, len(first_seen)) for host in host_hashes)


def node_names(nodes: tuple[int, ...], writer_rank: int, writer_host: str) -> tuple[str, ...]:
    """``node <i>`` for each node index; the writing rank's node also says its host name (the only
    one it knows: the others arrive as hashes)."""
    count = max(nodes, default=-1) + 1
    return tuple(
        f"node {index} ({writer_host})" if nodes and index == nodes[writer_rank] else f"node {index}"
        for index in range(count)
    )


def worker_log_pattern(worker_logs: str | None) -> str | None:
    """Where each rank's log is, ``{node}`` and ``{rank}`` to fill in, when the launcher said where
    (MFTB_WORKER_LOGS, ``<output_dir>/msrun_log``)."""
    return f"{worker_logs.rstrip('/')}/{{node}}/worker_{{rank}}.log" if worker_logs else None


def build_layout(
    nodes: tuple[int, ...],
    writer_rank: int,
    writer_host: str,
    steps_per_interval: int,
    budget_bytes_per_step: float,
    worker_logs: str | None,
) -> RankLayout:
    """The layout of a job of ``len(nodes)`` ranks, its stride chosen to keep within the budget."""
    world_size = len(nodes)
    return RankLayout(
        world_size=world_size,
        channels=CHANNELS,
        steps_per_interval=steps_per_interval,
        intervals_per_record=intervals_per_record(world_size, steps_per_interval, budget_bytes_per_step),
        nodes=nodes,
        node_names=node_names(nodes, writer_rank, writer_host),
        worker_log=worker_log_pattern(worker_logs),
    )
