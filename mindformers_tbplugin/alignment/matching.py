"""Which values of a run and its baseline are compared: the same global steps, or the same windows.

A value at step s that is a mean over n steps covers the window (s - n, s]. Consecutive windows
that touch (the next one starts where this one ends) form a chain, in which the sum over any span
between two of their edges is known. Two series are compared over the spans between consecutive
edges both have, inside one chain on each side: a per-step series against itself step by step; a
per-step run against a baseline printed as means over 10 steps by the run's mean over the same 10
steps; two means over different intervals over their common windows. A span that is exactly one
point's window uses that point's value as it is (no sum, so no rounding of its own)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mindformers_tbplugin.imports.imported_run import Series


@dataclass(frozen=True)
class Aligned:
    """The compared points, in step order: ``steps`` the last step of each span, ``spans`` its length."""

    steps: np.ndarray
    spans: np.ndarray
    run: np.ndarray
    base: np.ndarray


@dataclass(frozen=True)
class _Edges:
    """One series' window edges: position, chain, the chain's running sum up to it, and for an end
    edge the value of the point whose window ends there (and where that window starts)."""

    position: np.ndarray
    chain: np.ndarray
    cumsum: np.ndarray
    value: np.ndarray
    own_start: np.ndarray


def arrays(series: Series) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of a series, sorted by step, as int64 and float64."""
    steps = np.fromiter(series.keys(), dtype=np.int64, count=len(series))
    values = np.fromiter(series.values(), dtype=np.float64, count=len(series))
    if len(steps) > 1 and not np.all(steps[1:] > steps[:-1]):
        order = np.argsort(steps, kind="stable")
        steps, values = steps[order], values[order]
    return steps, values


def _edges(steps: np.ndarray, values: np.ndarray, window: int) -> _Edges:
    starts = steps - window
    new_chain = np.ones(len(steps), dtype=bool)
    new_chain[1:] = starts[1:] != steps[:-1]
    chain = np.cumsum(new_chain) - 1
    totals = np.cumsum(values * window)
    first = np.flatnonzero(new_chain)
    before_chain = (totals[first] - values[first] * window)[chain]
    ends_cumsum = totals - before_chain
    position = np.concatenate([starts[first], steps])
    chains = np.concatenate([chain[first], chain])
    cumsum = np.concatenate([np.zeros(len(first)), ends_cumsum])
    value = np.concatenate([np.full(len(first), np.nan), values])
    own_start = np.concatenate([np.full(len(first), -1, dtype=np.int64), starts])
    order = np.lexsort((position, chains))
    return _Edges(position[order], chains[order], cumsum[order], value[order], own_start[order])


def _spans(edges: _Edges, common: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, mean) of the spans between consecutive common edges inside one chain, one per end."""
    keep = np.isin(edges.position, common, assume_unique=False)
    position, chain, cumsum = edges.position[keep], edges.chain[keep], edges.cumsum[keep]
    value, own_start = edges.value[keep], edges.own_start[keep]
    same = chain[1:] == chain[:-1]
    start, end = position[:-1][same], position[1:][same]
    total = cumsum[1:][same] - cumsum[:-1][same]
    exact = own_start[1:][same] == start
    mean = np.where(exact, value[1:][same], total / np.maximum(end - start, 1))
    # overlapping windows may end two spans at one step: the first is kept
    end, first = np.unique(end, return_index=True)
    return start[first], end, mean[first]


def align(run: Series, base: Series, run_window: int = 1, base_window: int = 1) -> Aligned:
    """The points of ``run`` and ``base`` compared, each a mean over ``*_window`` steps (1: the step's own)."""
    if not run or not base:
        empty = np.zeros(0)
        return Aligned(empty.astype(np.int64), empty.astype(np.int64), empty, empty)
    if run_window <= 1 and base_window <= 1:
        # every span is one point's own step: the common steps, values as they are
        run_steps, run_values = arrays(run)
        base_steps, base_values = arrays(base)
        steps, run_at, base_at = np.intersect1d(run_steps, base_steps, assume_unique=True, return_indices=True)
        return Aligned(steps, np.ones(len(steps), dtype=np.int64), run_values[run_at], base_values[base_at])
    run_edges = _edges(*arrays(run), max(run_window, 1))
    base_edges = _edges(*arrays(base), max(base_window, 1))
    common = np.intersect1d(run_edges.position, base_edges.position)
    run_start, run_end, run_mean = _spans(run_edges, common)
    base_start, base_end, base_mean = _spans(base_edges, common)
    ends, run_at, base_at = np.intersect1d(run_end, base_end, assume_unique=True, return_indices=True)
    same = run_start[run_at] == base_start[base_at]
    run_at, base_at, ends = run_at[same], base_at[same], ends[same]
    return Aligned(ends, ends - run_start[run_at], run_mean[run_at], base_mean[base_at])
