"""What the ``ranks`` routes answer, as JSON-ready dicts, from a :class:`~.ranks_store.RunRecords`.

The heatmap is downsampled on the server: rows are blocks of ranks (in node order), columns blocks of
records, and a block shows its maximum, so one slow rank in one record still colours its block. Step
time is shown relative to each record's median over ranks: within a record that division is by one
positive number, so the ranks are reduced on the raw float16 values first (the big reduction), then
divided, then the records are reduced.
"""

from __future__ import annotations

import numpy as np

from mindformers_tbplugin.pipeline.rank_records import CHANNELS
from mindformers_tbplugin.viewer.blocks import block_max, block_size, rounded
from mindformers_tbplugin.viewer.ranks_store import SLOW_FACTOR, STEP_TIME, RunRecords

DEFAULT_MAX_RANKS = 256
DEFAULT_MAX_STEPS = 512
DEFAULT_SERIES_POINTS = 2000
DEFAULT_STRAGGLERS = 20
MAX_CACHED = 4  # rank-block reductions kept per run (10 MB each at 10,000 records x 256 blocks)


def run_summary(name: str, run: RunRecords) -> dict:
    layout = run.layout
    return {
        "run": name,
        "world_size": run.world_size,
        "records": run.count,
        "channels": list(layout.channels),
        "nodes": len(layout.node_names),
        "first_step": int(run.steps[0]),
        "last_step": int(run.steps[run.count - 1]),
        "steps_per_interval": layout.steps_per_interval,
        "intervals_per_record": layout.intervals_per_record,
    }


def rank_order(run: RunRecords) -> np.ndarray | None:
    """Ranks sorted by node (stable); None when they already are (the usual case: no copy needed)."""
    nodes = np.asarray(run.layout.nodes)
    if len(nodes) != run.world_size or np.all(nodes[:-1] <= nodes[1:]):
        return None
    return np.argsort(nodes, kind="stable")


def _block_max16(values16: np.ndarray, block: int) -> np.ndarray:
    """:func:`~.blocks.block_max` over the last axis of float16 values, as float32, computed on their bits.

    Non-negative float16 values order as their bits do; NaN (and negative values, which no channel
    has) become 0 and every other value its bits + 1, so a block's maximum is 0 only when it has no value.
    """
    bits = values16.view(np.uint16)
    shifted = np.where(bits > 0x7C00, np.uint16(0), bits + np.uint16(1))
    top = _block_max_int(shifted, block)
    out = (top - np.uint16(1)).view(np.float16).astype(np.float32)
    out[top == 0] = np.nan
    return out


def _block_max_int(values: np.ndarray, block: int) -> np.ndarray:
    pad = -values.shape[-1] % block
    if pad:
        values = np.pad(values, [(0, 0), (0, pad)])
    return values.reshape(len(values), -1, block).max(axis=2)


def _rank_blocks(run: RunRecords, index: int, rank_block: int, order: np.ndarray | None) -> np.ndarray:
    """Each record's maximum per block of ranks, (records, blocks) float32, kept on the run and
    extended by the records that arrived since (records only append; a rewrite clears the cache)."""
    key = ("rank_blocks", index, rank_block)
    done, parts = run.cache.get(key, (0, []))
    for view in run.channel(index, start=done):
        parts.append(_block_max16(view if order is None else view[:, order], rank_block))
    if len(parts) > 1:
        parts = [np.concatenate(parts)]
    run.cache[key] = (run.count, parts)
    for stale in [k for k in run.cache if k[0] == "rank_blocks"][:-MAX_CACHED]:  # the oldest go first
        del run.cache[stale]
    return parts[0] if parts else np.zeros((0, -(-run.world_size // rank_block)), np.float32)


def _channel_index(channel: str) -> int:
    if channel not in CHANNELS:
        raise ValueError(f"unknown channel {channel!r}; one of {', '.join(CHANNELS)}")
    return CHANNELS.index(channel)


def matrix(
    run: RunRecords, channel: str, max_ranks: int = DEFAULT_MAX_RANKS, max_steps: int = DEFAULT_MAX_STEPS
) -> dict:
    """The downsampled heatmap: ``values[row][column]``, row = rank block, column = record block."""
    index = _channel_index(channel)
    world, count = run.world_size, run.count
    rank_block, step_block = block_size(world, max_ranks), block_size(count, max_steps)
    order = rank_order(run)
    reduced = _rank_blocks(run, index, rank_block, order)  # (records, rank blocks)
    relative = index == STEP_TIME
    if relative:
        with np.errstate(invalid="ignore", divide="ignore"):
            reduced = reduced / run.medians[:count, index][:, None]
        reduced[~np.isfinite(reduced)] = np.nan
    grid = block_max(reduced, step_block, axis=0).T  # (rank blocks, record blocks)
    ranks = order if order is not None else np.arange(world)
    first_ranks = ranks[::rank_block]
    nodes = np.asarray(run.layout.nodes)
    finite = grid[np.isfinite(grid)]
    return {
        "channel": channel,
        "relative_to_median": relative,
        "world_size": world,
        "records": count,
        "rank_block": rank_block,
        "step_block": step_block,
        "rows": grid.shape[0],
        "columns": grid.shape[1],
        "first_rank": first_ranks.tolist(),
        "node": nodes[first_ranks].tolist() if len(nodes) == world else [0] * len(first_ranks),
        "node_names": list(run.layout.node_names),
        "steps": run.steps[:count:step_block].tolist(),
        "min": round(float(finite.min()), 4) if finite.size else None,
        "max": round(float(finite.max()), 4) if finite.size else None,
        "values": rounded(grid),
    }


def _mean(total: float, count: int) -> float | None:
    """A mean over ``count`` records, None when there were none: a rank never the slowest has no
    "relative step time when slowest", and 0 would read as a measurement."""
    return round(float(total) / count, 4) if count > 0 else None


def stragglers(run: RunRecords, limit: int = DEFAULT_STRAGGLERS) -> dict:
    """Ranks by how often they were slow (above SLOW_FACTOR x the record's median), then how often the
    slowest of a record, then by how much (in a large job some rank is the slowest of each record by
    noise alone, so that count comes second); and the nodes whose ranks were all slow at once. Each
    rank of such a node says so: it is slow because its host is, and rarely the slowest rank."""
    tallies, count = run.tallies, run.count
    mean_excess = np.divide(
        tallies.excess, tallies.slowest, out=np.zeros_like(tallies.excess), where=tallies.slowest > 0
    )
    order = np.lexsort((-mean_excess, -tallies.slowest, -tallies.slow))
    order = order[(tallies.slowest[order] > 0) | (tallies.slow[order] > 0)][: max(limit, 0)]
    nodes, names = run.layout.nodes, run.layout.node_names
    ranks = []
    for rank in order.tolist():
        node = nodes[rank] if rank < len(nodes) else 0
        first, last = int(tallies.first[rank]), int(tallies.last[rank])
        whole = int(tallies.node_whole[node]) if node < len(tallies.node_whole) else 0
        ranks.append(
            {
                "rank": rank,
                "node": node,
                "node_name": names[node] if node < len(names) else None,
                "slowest": int(tallies.slowest[rank]),
                "slow": int(tallies.slow[rank]),
                "mean_relative_when_slowest": _mean(tallies.excess[rank], int(tallies.slowest[rank])),
                "mean_relative_when_slow": _mean(tallies.slow_excess[rank], int(tallies.slow[rank])),
                "since_step": int(run.steps[first]) if 0 <= first < count else None,
                "last_slow_step": int(run.steps[last]) if 0 <= last < count else None,
                "slow_node": {"records": whole, "mean_relative": _mean(tallies.node_excess[node], whole)}
                if whole
                else None,
            }
        )
    return {"records": count, "slow_factor": SLOW_FACTOR, "ranks": ranks, "nodes": _slow_nodes(run, limit)}


def _slow_nodes(run: RunRecords, limit: int) -> list[dict]:
    """Nodes that had every one of their ranks slow in some record (a host, not a rank), most often
    first: ``node host5: 8 of 8 ranks slow in 12 records, since step 4500``, with the median of its
    ranks' relative step time in those records, averaged."""
    tallies, count, names = run.tallies, run.count, run.layout.node_names
    sizes = tallies.nodes.sizes
    order = np.lexsort((np.arange(len(sizes)), -tallies.node_whole))
    nodes = []
    for node in order[tallies.node_whole[order] > 0][: max(limit, 0)].tolist():
        first, last = int(tallies.node_first[node]), int(tallies.node_last[node])
        records = int(tallies.node_whole[node])
        nodes.append(
            {
                "node": node,
                "node_name": names[node] if node < len(names) else None,
                "ranks": int(sizes[node]),
                "records": records,
                "mean_relative": _mean(tallies.node_excess[node], records),
                "since_step": int(run.steps[first]) if 0 <= first < count else None,
                "last_slow_step": int(run.steps[last]) if 0 <= last < count else None,
            }
        )
    return nodes


def worker_log(run: RunRecords, rank: int) -> str | None:
    """The rank's log file: ``{node}`` is the node index (the launcher's node rank names the folder)."""
    layout = run.layout
    if not layout.worker_log:
        return None
    node = layout.nodes[rank] if rank < len(layout.nodes) else 0
    try:
        return layout.worker_log.format(node=node, rank=rank)
    except (KeyError, IndexError, ValueError):  # a pattern with other placeholders: shown as written
        return layout.worker_log


def rank_series(run: RunRecords, rank: int, max_points: int = DEFAULT_SERIES_POINTS) -> dict:
    """One rank's values per channel (block maxima past ``max_points``) and each record's median."""
    if not 0 <= rank < run.world_size:
        raise ValueError(f"rank {rank} is not in 0..{run.world_size - 1}")
    count = run.count
    block = block_size(count, max_points)
    values = block_max(run.series(rank), block, axis=1)
    medians = block_max(run.medians[:count].T, block, axis=1)
    node = run.layout.nodes[rank] if rank < len(run.layout.nodes) else 0
    names = run.layout.node_names
    return {
        "rank": rank,
        "node": node,
        "node_name": names[node] if node < len(names) else None,
        "worker_log": worker_log(run, rank),
        "step_block": block,
        "steps": run.steps[:count:block].tolist(),
        "channels": {name: rounded(values[i]) for i, name in enumerate(CHANNELS)},
        "medians": {name: rounded(medians[i]) for i, name in enumerate(CHANNELS)},
    }
