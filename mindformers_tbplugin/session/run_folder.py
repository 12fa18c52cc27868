"""TensorBoardMonitor's run folder: the one a resume continues, or a new one the writing rank names
and creates. Every rank learns it in one all-gather at train begin, which also brings the writing rank
every rank's node and host name (for the per-rank records' layout) at no extra collective. And the writing rank's
housekeeping of older runs.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from mindformers_tbplugin.framework.collectives import Collectives
from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline import metrics, rank_layout
from mindformers_tbplugin.pipeline.rank_records import RankLayout
from mindformers_tbplugin.pipeline.topology import Topology
from mindformers_tbplugin.tfevents import run_folders
from mindformers_tbplugin.tfevents.writer import RunWriter

NODE_RANK_ENV = "MFTB_NODE_RANK"  # set by msrun_launch.sh: its --node_rank
WORKER_LOGS_ENV = "MFTB_WORKER_LOGS"  # set by msrun_launch.sh: <output_dir>/msrun_log


@dataclass(frozen=True)
class RankHost:
    """Where one rank runs, as it tells the writing rank."""

    node_rank: int  # the launcher's node rank, rank_layout.NO_NODE_RANK without one
    host: str  # its host name, at most HOST_NAME_BYTES of UTF-8

    @classmethod
    def this_process(cls) -> RankHost:
        value = os.environ.get(NODE_RANK_ENV, "").strip()
        node_rank = int(value) if value.isdigit() else rank_layout.NO_NODE_RANK
        return cls(node_rank, _fit(socket.gethostname()))


# Host names travel in the start all-gather as 24-bit ints (3 bytes each, exact in float32's 2**24), 63
# bytes at most: Linux's host names are 64 at most, and a longer one keeps its first 63 bytes.
HOST_NAME_BYTES = 63


def _fit(name: str) -> str:
    return name.encode("utf-8")[:HOST_NAME_BYTES].decode("utf-8", errors="ignore")


def _host_ints(name: str) -> list[int]:
    data = _fit(name).encode("utf-8").ljust(HOST_NAME_BYTES, b"\0")
    return [int.from_bytes(data[i : i + 3], "big") for i in range(0, HOST_NAME_BYTES, 3)]


def _host_name(ints: list[int]) -> str:
    data = b"".join(int(value).to_bytes(3, "big") for value in ints)
    return data.rstrip(b"\0").decode("utf-8", errors="replace")


def run_to_continue(
    log_root: Path, pattern: str, experiment: str, resume: bool, resume_run: str | None, step: int
) -> tuple[Path | None, int | None]:
    """The run folder to continue and the restored step it continues after (None: a new run). Every
    rank computes the same answer from the shared log folder (nothing is created yet)."""
    if resume_run:
        return log_root / resume_run, step if step > 0 else None
    if not (resume and step > 0):
        return None, None
    runs = run_folders.experiment_runs(log_root, pattern, experiment)
    return (runs[-1], step) if runs else (None, None)


def open_run_dir(
    log_root: Path,
    pattern: str,
    experiment: str,
    continued: Path | None,
    topology: Topology,
    collectives: Collectives | None,
) -> tuple[Path, list[RankHost]]:
    """The run folder (``continued``, else a new one that the writing rank names and creates) and, on
    the writing rank, every rank's :class:`RankHost`. One collective, made in both cases so that every
    rank makes the same collectives; the other ranks' ``rank_<id>`` runs land inside the folder."""
    local_time = datetime.fromtimestamp
    stamp, suffix = int(time.time()), 0
    if continued is not None:
        _, hosts = _exchange(collectives, topology, [stamp, suffix])
        continued.mkdir(parents=True, exist_ok=True)
        return continued, hosts
    if topology.is_writer:
        name = run_folders.run_name(pattern, experiment, topology.rank, local_time(stamp))
        run_dir = run_folders.create_run_dir(log_root, name)
        suffix = run_folders.collision_suffix(run_dir, name)
    (stamp, suffix), hosts = _exchange(collectives, topology, [stamp, suffix])
    name = run_folders.run_name(pattern, experiment, topology.writer_rank, local_time(stamp))
    return log_root / (f"{name}-{suffix}" if suffix else name), hosts


def _exchange(
    collectives: Collectives | None, topology: Topology, values: list[int], here: RankHost | None = None
) -> tuple[list[int], list[RankHost]]:
    """The writer rank's non-negative ``values`` on every rank, and every rank's host (``here``: this
    process's) in one all-gather: each rank's row is the writer's values, zeros elsewhere, then its
    own node rank and host name. Host collectives on CPU carry float32, exact only up to 2**24: each
    int travels as 16-bit halves (a row of 50 floats with two values: 1.6 MB gathered at 8,192 ranks).
    """
    here = here or RankHost.this_process()
    if collectives is None or not topology.communicating:
        return values, [here]
    own = [here.node_rank + 1, *_host_ints(here.host)]  # + 1: the halves are of non-negative ints
    sent = (values if topology.is_writer else [0] * len(values)) + own
    halves = np.asarray([part for value in sent for part in divmod(value, 1 << 16)], dtype=np.float32)
    rows = collectives.all_gather(halves).astype(np.int64)
    ints = rows[:, 0::2] * (1 << 16) + rows[:, 1::2]  # (world_size, len(sent))
    hosts = [RankHost(int(row[0]) - 1, _host_name(row[1:])) for row in ints[:, len(values) :].tolist()]
    return ints[topology.writer_rank, : len(values)].tolist(), hosts


def rank_layout_of(
    hosts: list[RankHost], topology: Topology, aggregate_every: int, budget_bytes_per_step: float
) -> RankLayout | None:
    """The per-rank records' layout, on the writing rank of a multi-rank job that aggregates."""
    if not (topology.is_writer and aggregate_every and topology.world_size > 1 and len(hosts) == topology.world_size):
        return None
    return rank_layout.build_layout(
        [host.node_rank for host in hosts],
        [host.host for host in hosts],
        aggregate_every,
        budget_bytes_per_step,
        os.environ.get(WORKER_LOGS_ENV) or None,
    )


def housekeeping(
    log_root: Path,
    pattern: str,
    experiment: str,
    run_dir: Path,
    keep_last_runs: int,
    archive_dir: Path | None,
    min_free_gb: float,
) -> None:
    """keep_last_runs' retention (``run_dir`` is kept) and the free-space warning."""
    if keep_last_runs:
        runs = run_folders.experiment_runs(log_root, pattern, experiment)
        for old in run_folders.apply_retention(runs, keep_last_runs, archive_dir, protect=run_dir):
            where = f"moved to {archive_dir}" if archive_dir else "deleted"
            logger.info("TensorBoardMonitor: keep_last_runs=%d: %s %s", keep_last_runs, old, where)
    free = run_folders.free_gb(log_root)
    if free < min_free_gb:
        logger.warning(
            "TensorBoardMonitor: only %.2f GiB free on the file system of %s (min_free_gb %.2f)",
            free,
            log_root,
            min_free_gb,
        )


def mark_restart(writer: RunWriter, step: int, resumed_from: int, checkpoint: str | None) -> None:
    """``meta/restart`` at the first step of a resumed attempt: the step resumed from, and what was resumed."""
    writer.add_scalars(step, {metrics.META_RESTART: float(resumed_from)})
    checkpoint = checkpoint or "the loaded checkpoint"
    writer.add_text(
        step,
        metrics.META_RESTART,
        f"Resumed at step {step} from {checkpoint} (step {resumed_from}); points an earlier attempt "
        f"wrote after step {resumed_from} are purged. Process {os.getpid()} on {socket.gethostname()}.",
    )
