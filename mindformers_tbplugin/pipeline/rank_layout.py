"""The :class:`~mindformers_tbplugin.pipeline.rank_records.RankLayout` of a job, from what every rank
sent in the run-folder all-gather at train begin: its launcher node rank (or none) and its host name.
numpy-free, no I/O: the callers read the environment and the host name.
"""

from __future__ import annotations

from collections import Counter

from mindformers_tbplugin.pipeline.rank_records import CHANNELS, RankLayout, intervals_per_record

NO_NODE_RANK = -1


def node_indices(node_ranks: list[int], hosts: list[str]) -> tuple[int, ...]:
    """Each rank's node: the launcher's node rank when every rank has one, else hosts numbered in the
    order of their first rank (a job started without the launcher, or by an older one)."""
    if node_ranks and all(node >= 0 for node in node_ranks):
        return tuple(node_ranks)
    first_seen: dict[str, int] = {}
    return tuple(first_seen.setdefault(host, len(first_seen)) for host in hosts)


def node_names(nodes: tuple[int, ...], hosts: list[str]) -> tuple[str, ...]:
    """One name per node index: the host name of its first rank (``host (node i)`` when two nodes share
    one, ``node i`` for an index that holds no rank of this job, or a rank that sent no name)."""
    host_of: dict[int, str] = {}
    for node, host in zip(nodes, hosts, strict=True):
        host_of.setdefault(node, host)
    shared = {host for host, count in Counter(host_of.values()).items() if count > 1}
    names = []
    for index in range(max(nodes, default=-1) + 1):
        host = host_of.get(index, "")
        names.append(f"{host} (node {index})" if host in shared else host or f"node {index}")
    return tuple(names)


def worker_log_pattern(worker_logs: str | None) -> str | None:
    """Where each rank's log is, ``{node}`` and ``{rank}`` to fill in, when the launcher said where
    (MFTB_WORKER_LOGS, ``<output_dir>/msrun_log``)."""
    return f"{worker_logs.rstrip('/')}/{{node}}/worker_{{rank}}.log" if worker_logs else None


def build_layout(
    node_ranks: list[int],
    hosts: list[str],
    steps_per_interval: int,
    budget_bytes_per_step: float,
    worker_logs: str | None,
) -> RankLayout:
    """The layout of a job of ``len(hosts)`` ranks, from each rank's launcher node rank and host name,
    its stride chosen to keep within the budget."""
    nodes = node_indices(node_ranks, hosts)
    world_size = len(nodes)
    return RankLayout(
        world_size=world_size,
        channels=CHANNELS,
        steps_per_interval=steps_per_interval,
        intervals_per_record=intervals_per_record(world_size, steps_per_interval, budget_bytes_per_step),
        nodes=nodes,
        node_names=node_names(nodes, hosts),
        worker_log=worker_log_pattern(worker_logs),
    )
