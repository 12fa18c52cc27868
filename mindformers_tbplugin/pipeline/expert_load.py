"""Mixture-of-experts routing health from the routers' per-expert load. numpy only, no I/O.

A router's load is the share of the step's routed slots (tokens x top-k) each of its experts got,
as MindFormers' routers accumulate it (``expert_load`` of expert-bias routers, ``fi_accu`` of
``gbs_aux_loss`` routers); any positive scale works, rows are normalised here. Per MoE layer
(``group``, named as the gradient groups are: ``layers.3``, ``mtp.layers.0``):

* ``moe/<group>/max_violation``: MaxVio = max load / mean load - 1, the load-balance measure of
  DeepSeek's auxiliary-loss-free balancing (0 = balanced; at most experts / top-k - 1);
* ``moe/<group>/min_load``: the least-loaded expert's load over the mean (1 = balanced, 0 = unused);
* ``moe/<group>/dead_experts``: experts whose load is under ``dead_fraction`` of the mean;
* ``moe/<group>/bias_range``: max - min of the expert bias (expert-bias routers);
* ``moe/max_violation`` (the worst layer's) and ``moe/dead_experts`` (over all layers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mindformers_tbplugin.pipeline import metrics

EXPERT_BIAS = "expert_bias"  # DeepSeek-style router: top-k on score + bias, bias updated from the load
AUX_LOSS = "aux_loss"  # router balanced by an auxiliary loss only
DEFAULT_DEAD_FRACTION = 0.1


@dataclass(frozen=True)
class RouterSet:
    """The MoE layers of a model, in the order their loads arrive (rows of the load matrix)."""

    groups: tuple[str, ...]
    experts: int  # routed experts per layer
    top_k: int
    kinds: tuple[str, ...]  # EXPERT_BIAS or AUX_LOSS, per layer

    def __len__(self) -> int:
        return len(self.groups)

    @property
    def has_bias(self) -> bool:
        return EXPERT_BIAS in self.kinds


def layer_statistics(relative: np.ndarray, dead_fraction: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For relative loads of shape (..., layers, experts), e.g. many records at once: per layer MaxVio
    (max - 1), the least load and the dead-expert mask (load < ``dead_fraction``), as the ``moe/*``
    scalars define them. A layer without a value (NaN) has NaN statistics and no dead expert."""
    known = ~np.isnan(relative[..., 0])
    rows = np.where(known[..., None], relative, 1.0)
    violation = np.where(known, rows.max(axis=-1) - 1.0, np.nan).astype(np.float32)
    low = np.where(known, rows.min(axis=-1), np.nan).astype(np.float32)
    return violation, low, rows < dead_fraction


class LoadStatistics:
    """The ``moe/*`` scalars of one read of every router, with their tag names spelled once."""

    def __init__(self, routers: RouterSet, dead_fraction: float = DEFAULT_DEAD_FRACTION) -> None:
        self.routers = routers
        self.dead_fraction = dead_fraction
        prefix = metrics.MOE_PREFIX
        violation, minimum, dead = metrics.MOE_LAYER_STATISTICS
        self._violation_tags = [f"{prefix}{group}/{violation}" for group in routers.groups]
        self._min_tags = [f"{prefix}{group}/{minimum}" for group in routers.groups]
        self._dead_tags = [f"{prefix}{group}/{dead}" for group in routers.groups]
        self._bias_tags = [f"{prefix}{group}/{metrics.MOE_BIAS_RANGE}" for group in routers.groups]
        self._bias_rows = [index for index, kind in enumerate(routers.kinds) if kind == EXPERT_BIAS]

    @staticmethod
    def scale(loads: np.ndarray) -> np.ndarray:
        """Per layer, what makes its loads (float32, L x E) relative to their mean: experts / the row's sum;
        NaN for a layer without load (rather than a division by zero: no warning to silence, and
        np.errstate costs as much as the division)."""
        sums = loads.sum(axis=1)
        return np.float32(loads.shape[1]) / np.where(sums > 0, sums, np.float32(np.nan))

    def relative(self, loads: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
        """Each expert's load over its layer's mean (float32 like the routers', L x E); NaN rows for layers
        without load. ``scale``: :meth:`scale` of ``loads``, when already known."""
        loads = np.asarray(loads, dtype=np.float32)
        return loads * (self.scale(loads) if scale is None else scale)[:, None]

    def scalars(self, loads: np.ndarray, bias: np.ndarray | None = None, scale: np.ndarray | None = None) -> dict:
        """The tags of one read, from its loads and the expert bias (L x E, or None): the numbers of
        :func:`layer_statistics`. ``scale``: :meth:`scale` of raw ``loads``; None: ``loads`` are relative
        already. Computed for one read on the training thread with whole-matrix reductions of the loads as
        read (a row's max and min times its scale are the relative row's, bit for bit: rounding keeps order)
        and plain lists zipped with the tag names (no Python loop over the layers, and the dead experts
        counted only in the rows that have one)."""
        maxima, lowest = loads.max(axis=1), loads.min(axis=1)
        if scale is not None:
            maxima, lowest = maxima * scale, lowest * scale
        violations = (maxima - 1.0).tolist()
        lows = lowest.tolist()
        dead = [0.0] * len(lows)
        for index in np.flatnonzero(lowest < self.dead_fraction).tolist():  # usually none: counted row by row
            row = loads[index] if scale is None else loads[index] * scale[index]
            dead[index] = float(np.count_nonzero(row < self.dead_fraction))
        values = dict(zip(self._violation_tags, violations, strict=True))
        values.update(zip(self._min_tags, lows, strict=True))
        values.update(zip(self._dead_tags, dead, strict=True))
        held = [index for index, low in enumerate(lows) if low == low]  # NaN: a layer without load
        if len(held) < len(lows):
            for index in set(range(len(lows))) - set(held):
                del values[self._violation_tags[index]], values[self._min_tags[index]], values[self._dead_tags[index]]
            violations = [violations[index] for index in held]
            dead = [dead[index] for index in held]
        if not held:
            return {}
        values[metrics.MOE_MAX_VIOLATION] = max(violations)
        values[metrics.MOE_DEAD_EXPERTS] = sum(dead)
        if bias is not None and self._bias_rows:
            ranges = (bias.max(axis=1) - bias.min(axis=1)).tolist()
            values.update(
                (self._bias_tags[index], ranges[index]) for index in self._bias_rows if lows[index] == lows[index]
            )
        return values

    def describe_collapse(self, relative: np.ndarray, group_index: int, top: int = 4) -> str:
        """``layers.2: experts 0, 1 took 2.00x, 2.00x the mean load; experts 2, 3 under 10% of it (0.00x, 0.00x)``."""
        row = relative[group_index].tolist()
        by_load = sorted(range(len(row)), key=lambda expert: (row[expert], expert))
        busy = sorted((e for e in by_load[::-1][:top] if row[e] > 1.0), key=lambda expert: (-row[expert], expert))
        idle = [e for e in by_load[:top] if row[e] < self.dead_fraction]
        parts = []
        if busy:
            loads = ", ".join(f"{row[e]:.2f}x" for e in busy)
            parts.append(f"{_experts(busy)} took {loads} the mean load")
        if idle:
            loads = ", ".join(f"{row[e]:.2f}x" for e in idle)
            parts.append(f"{_experts(idle)} under {self.dead_fraction:.0%} of it ({loads})")
        return f"{self.routers.groups[group_index]}: " + "; ".join(parts)


def _experts(indices: list[int]) -> str:
    return f"expert{'s' if len(indices) > 1 else ''} {', '.join(map(str, indices))}"
