"""What the ``moe`` routes answer, as JSON-ready dicts, from a :class:`~.moe_store.MoeRun`.

``record``: one record's layer x expert load (and bias), small enough whole (59 x 256 at DeepSeek-V3's
size). ``strip``: per layer, MaxVio and the dead-expert count over all records, downsampled on the server
to blocks of records showing their maximum, so one record with a dead expert still marks its block.
``worst``: the layers to look at, at one step and over the run, with each dead expert's first step
of being dead (the start of its current streak: every record with a value for the layer since then
shows it dead).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from mindformers_tbplugin.pipeline.expert_records import BIAS
from mindformers_tbplugin.viewer.blocks import block_max, block_size, rounded
from mindformers_tbplugin.viewer.moe_store import MoeRun

DEFAULT_MAX_STEPS = 512
DEFAULT_WORST = 8
BUSIEST = 3  # experts named per layer as the most loaded
MAX_EXPERTS_LISTED = 16  # dead experts named per layer; the count says how many there are


def run_summary(name: str, run: MoeRun) -> dict:
    layout = run.layout
    return {
        "run": name,
        "records": run.count,
        "first_step": int(run.steps[0]),
        "last_step": int(run.steps[run.count - 1]),
        "layers": len(layout.groups),
        "experts": layout.experts,
        "groups": list(layout.groups),
        "routers": list(layout.routers),
        "top_k": layout.top_k,
        "channels": list(layout.channels),
        "steps_per_read": layout.steps_per_read,
        "reads_per_record": layout.reads_per_record,
        "dead_fraction": layout.dead_fraction,
    }


def index_at(run: MoeRun, step: int | None) -> int:
    """The record of ``step``, else the last one before it (the first when ``step`` precedes them all;
    the latest when ``step`` is None)."""
    if step is None:
        return run.count - 1
    return max(int(np.searchsorted(run.steps[: run.count], step, side="right")) - 1, 0)


def layer_row(run: MoeRun, name: str) -> int:
    groups = run.layout.groups
    if name not in groups:
        raise ValueError(f"unknown layer {name!r}; one of {groups[0]} .. {groups[-1]}")
    return groups.index(name)


def worst_between(run: MoeRun, first_step: int, last_step: int, row: int) -> int:
    """The record of steps ``first_step``..``last_step`` in which layer ``row`` was worst balanced: the most
    dead experts, then the highest MaxVio (for a click on a strip block of several records)."""
    first = int(np.searchsorted(run.steps[: run.count], first_step, side="left"))
    last = max(index_at(run, last_step), first)
    if first >= run.count:
        return run.count - 1
    span = slice(first, last + 1)
    violation = np.nan_to_num(run.violation[span, row], nan=-np.inf)
    return first + int(np.lexsort((violation, run.dead_count[span, row]))[-1])


def _significant(values: np.ndarray, digits: int = 3) -> list:
    """JSON numbers with ``digits`` significant digits of the largest (bias values may all be tiny)."""
    finite = np.abs(values[np.isfinite(values)])
    top = float(finite.max()) if finite.size else 0.0
    return rounded(values, max(0, digits - 1 - math.floor(math.log10(top))) if top > 0 else 0)


def _counts(values: np.ndarray) -> list:
    """Whole numbers as ints; null for no value."""
    return np.where(np.isfinite(values), np.nan_to_num(values).astype(np.int64), None).tolist()


def _dead_counts(run: MoeRun, records: slice | int) -> np.ndarray:
    """The records' dead-expert counts per layer as float32, NaN where a layer had no value."""
    counts = run.dead_count[records].astype(np.float32)
    counts[np.isnan(run.violation[records])] = np.nan
    return counts


def record(run: MoeRun, step: int | None = None, until: int | None = None, layer: str | None = None) -> dict:
    """One record: ``load[row][expert]`` (x the layer's mean), ``bias`` when written, per-layer statistics.
    With ``layer`` (and ``until``): the record of steps ``step``..``until`` where that layer was worst."""
    index = index_at(run, step)
    if layer is not None:
        first = int(run.steps[index]) if step is None else step
        index = worst_between(run, first, first if until is None else until, layer_row(run, layer))
    values = run.record(index).astype(np.float32)
    channels = run.layout.channels
    body = {
        "index": index,
        "step": int(run.steps[index]),
        "records": run.count,
        "load": rounded(values[0]),
        "max_violation": rounded(run.violation[index]),
        "min_load": rounded(run.low[index]),
        "dead": _counts(_dead_counts(run, index)),
    }
    if BIAS in channels:
        body["bias"] = _significant(values[channels.index(BIAS)])
    return body


def strip(run: MoeRun, max_steps: int = DEFAULT_MAX_STEPS) -> dict:
    """Per layer (rows) x blocks of records (columns): the block's largest MaxVio and dead-expert count."""
    count = run.count
    block = block_size(count, max_steps)
    violation = block_max(run.violation[:count], block, axis=0).T
    dead = block_max(_dead_counts(run, slice(0, count)), block, axis=0).T
    finite = violation[np.isfinite(violation)]
    return {
        "records": count,
        "step_block": block,
        "rows": violation.shape[0],
        "columns": violation.shape[1],
        "steps": run.steps[:count:block].tolist(),
        "record_steps": run.steps[:count].tolist(),
        "max": round(float(finite.max()), 4) if finite.size else None,
        "max_violation": rounded(violation),
        "dead": _counts(dead),
    }


def _dead_since(run: MoeRun, row: int, index: int) -> list[dict]:
    """The experts of layer ``row`` dead in record ``index``, each with the first step of its streak."""
    dead = run.dead(row, index + 1)
    now = np.flatnonzero(dead[-1])
    if not now.size:
        return []
    known = np.isfinite(run.violation[: index + 1, row])
    alive = ~dead[:, now] & known[:, None]  # records showing the expert alive
    last_alive = np.where(alive.any(axis=0), index - alive[::-1].argmax(axis=0), -1)
    known_rows = np.flatnonzero(known)  # holds ``index``: a dead expert's layer had a value there
    since = known_rows[np.searchsorted(known_rows, last_alive + 1)]
    steps = run.steps[since]
    entries = [{"expert": int(e), "since_step": int(s)} for e, s in zip(now, steps, strict=True)]
    return sorted(entries, key=lambda entry: (entry["since_step"], entry["expert"]))[:MAX_EXPERTS_LISTED]


def _at_step(run: MoeRun, index: int, limit: int) -> list[dict]:
    violation, dead = run.violation[index], run.dead_count[index]
    rows = np.flatnonzero(np.isfinite(violation))
    rows = rows[np.lexsort((-violation[rows], -dead[rows]))][:limit]
    load = run.record(index)[0].astype(np.float32) if rows.size else None
    entries = []
    for row in rows.tolist():
        busiest = np.argsort(-load[row], kind="stable")[:BUSIEST]
        entries.append(
            {
                "layer": run.layout.groups[row],
                "row": row,
                "max_violation": round(float(violation[row]), 4),
                "min_load": round(float(run.low[index, row]), 4),
                "dead_count": int(dead[row]),
                "dead": _dead_since(run, row, index),
                "busiest": [{"expert": int(e), "load": round(float(load[row, e]), 3)} for e in busiest],
            }
        )
    return entries


def _over_run(run: MoeRun) -> list[dict]:
    """Every layer's balance over all records (kept until new records arrive: the strip and the lists
    ask for it on every step the user picks)."""
    cached = run.cache.get("over_run")
    if cached is not None:
        return cached
    count = run.count
    violation = run.violation[:count]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a layer without any value: NaN mean
        means = np.nanmean(violation, axis=0)
    peaks = np.nan_to_num(violation, nan=-np.inf).argmax(axis=0)
    with_dead = (run.dead_count[:count] > 0).sum(axis=0)
    entries = []
    for row, group in enumerate(run.layout.groups):
        entry = {
            "layer": group,
            "row": row,
            "mean_max_violation": round(float(means[row]), 4) if np.isfinite(means[row]) else None,
            "peak_max_violation": round(float(violation[peaks[row], row]), 4) if np.isfinite(means[row]) else None,
            "peak_step": int(run.steps[peaks[row]]),
            "records_with_dead": int(with_dead[row]),
            "dead_now_count": 0,
            "dead_now": [],
            "dead_before": [],
        }
        if with_dead[row]:
            dead = run.dead(row, count)
            tally = dead.sum(axis=0)
            first, latest = dead.argmax(axis=0), count - 1 - dead[::-1].argmax(axis=0)
            now = int(np.flatnonzero(np.isfinite(violation[:, row]))[-1])  # the layer's latest record with a value
            entry["dead_now_count"] = int(dead[now].sum())
            entry["dead_now"] = _dead_since(run, row, now)
            recovered = np.flatnonzero((tally > 0) & ~dead[now])  # dead once, alive in that record
            recovered = recovered[np.argsort(-tally[recovered], kind="stable")][:MAX_EXPERTS_LISTED]
            entry["dead_before"] = [
                {
                    "expert": e,
                    "records": int(tally[e]),
                    "first_step": int(run.steps[first[e]]),
                    "last_step": int(run.steps[latest[e]]),
                }
                for e in recovered.tolist()
            ]
        entries.append(entry)
    entries.sort(key=lambda e: (-e["records_with_dead"], -(e["mean_max_violation"] or 0.0)))
    run.cache["over_run"] = entries
    return entries


def worst(run: MoeRun, step: int | None = None, limit: int = DEFAULT_WORST) -> dict:
    """The worst layers of the record at ``step`` (most dead experts, then highest MaxVio) and over the
    run (most records with a dead expert, then highest mean MaxVio)."""
    index = index_at(run, step)
    limit = max(limit, 0)
    return {
        "index": index,
        "step": int(run.steps[index]),
        "records": run.count,
        "dead_fraction": run.layout.dead_fraction,
        "at_step": _at_step(run, index, limit),
        "over_run": _over_run(run)[:limit],
    }
