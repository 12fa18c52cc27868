"""Stable rank of chosen weights, as MindFormers' TrainingStateMonitor ``stable_rank_config`` defines it:
``weight_eigenvalue/<name>`` is the largest eigenvalue of WᵀW (the squared spectral norm) and
``weight_stable_rank/<name>`` is ||W||_F² over it. A 3-D weight is a stack of expert matrices: one value
per expert (``/expert_<i>``) and their ``/expert_max``, ``/expert_min``, ``/expert_mean``.

The training thread only copies the chosen weights to the host on a due step (they change at the next
step); a worker thread does the math and hands the values to the run's writer with the due step's
number. While it computes, later due steps are skipped, so at most one copy is held. The eigenvalue
is the largest singular value squared, by Lanczos iteration on W (matrix-vector products, never WᵀW)
to a relative tolerance of 1e-6, started from the previous due step's vector: weights move little
between due steps, so it converges in a few products. TrainingStateMonitor runs a fixed number of power
iterations (5 by default) from a random vector, which underestimates the eigenvalue (and overestimates the
stable rank) when the two largest singular values are close.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mindformers_tbplugin.framework.host_values import float32_copy
from mindformers_tbplugin.log import WarnOnce
from mindformers_tbplugin.pipeline import metrics

EXACT_UP_TO = 32  # a matrix this narrow gets all its singular values: cheaper than iterating
TOLERANCE = 1e-6  # relative, of the largest singular value (ARPACK's tol)


def largest_eigenvalue(matrix: np.ndarray, start: np.ndarray | None) -> tuple[float, np.ndarray | None]:
    """The largest eigenvalue of WᵀW (σ_max²) of a matrix, and the vector to start the next call from:
    Lanczos iteration (scipy's ARPACK, a MindSpore dependency) from the previous due step's vector."""
    if not np.any(matrix):  # ARPACK fails on a zero matrix
        return 0.0, start
    if min(matrix.shape) <= EXACT_UP_TO:
        return float(np.linalg.svd(matrix, compute_uv=False)[0]) ** 2, None
    from scipy.sparse.linalg import ArpackNoConvergence, svds

    try:
        left, singular, right = svds(matrix, k=1, tol=TOLERANCE, v0=start)
    except ArpackNoConvergence:  # all singular values instead: slower, rare
        return float(np.linalg.svd(matrix, compute_uv=False)[0]) ** 2, None
    # ARPACK iterates on the smaller of WWᵀ and WᵀW: its start vector has that side's length
    return float(singular[0]) ** 2, left[:, 0] if matrix.shape[0] <= matrix.shape[1] else right[0]


class StableRanks:
    """The chosen weights of one training, their Lanczos start vectors and the worker computing them."""

    def __init__(self, params: Sequence[Any], experts: str) -> None:
        """``experts``: one of metrics.STABLE_RANK_EXPERT_VALUES, what a 3-D weight writes."""
        self.params, self.experts = list(params), experts
        self.names = [str(param.name) for param in self.params]
        # Used by the one worker thread alive at a time (measure starts none while one runs).
        self._vectors: dict[str, list[np.ndarray | None]] = {}
        self._running: threading.Thread | None = None  # a daemon: a process that ends never waits for it
        self._warn_once = WarnOnce()

    @classmethod
    def for_parameters(cls, params: Sequence[Any], patterns: Sequence[str], experts: str) -> StableRanks | None:
        """The 2-D and 3-D parameters whose name ``re.search`` finds one of ``patterns`` in (as
        TrainingStateMonitor's ``target``); None when there is none."""
        compiled = [re.compile(pattern) for pattern in patterns]
        chosen = [
            param
            for param in params
            if len(getattr(param, "shape", ())) in (2, 3) and any(p.search(str(param.name)) for p in compiled)
        ]
        return cls(chosen, experts) if chosen else None

    def describe(self) -> str:
        return f"stable rank of {len(self.params)} weights"

    def busy(self) -> bool:
        """Whether the previous due step's values are still being computed."""
        return self._running is not None and self._running.is_alive()

    def measure(self, step: int, deliver: Callable[[int, dict[str, float]], None]) -> bool:
        """Copy the weights as they are after ``step`` and compute their values on a worker thread,
        which calls ``deliver(step, values)``; False (nothing copied) while an earlier step's run."""
        if self.busy():
            return False
        copies = [float32_copy(param) for param in self.params]
        self._running = threading.Thread(
            target=self._compute_and_deliver, args=(step, copies, deliver), name="mftb-stable-rank", daemon=True
        )
        self._running.start()
        return True

    def _compute_and_deliver(
        self, step: int, copies: list[np.ndarray], deliver: Callable[[int, dict[str, float]], None]
    ) -> None:
        try:
            deliver(step, self.tags(copies))
        except Exception as exc:  # on the worker thread: nobody else would see it
            self._warn_once("compute", f"stable rank of step {step} not written: {exc!r}; training continues")

    def tags(self, copies: Sequence[np.ndarray]) -> dict[str, float]:
        """``weight_stable_rank/*`` and ``weight_eigenvalue/*`` of the copies of ``params`` (one thread at
        a time: the start vectors carry over)."""
        values: dict[str, float] = {}
        for name, weight in zip(self.names, copies, strict=True):
            stack = weight if weight.ndim == 3 else weight[None]
            starts = self._vectors.get(name) or [None] * len(stack)
            found = [largest_eigenvalue(matrix, begin) for matrix, begin in zip(stack, starts, strict=True)]
            self._vectors[name] = [vector for _, vector in found]
            eigenvalues = np.array([value for value, _ in found], dtype=np.float64)
            frobenius = np.einsum("bmn,bmn->b", stack, stack, dtype=np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                ranks = np.where(eigenvalues > 0, frobenius / eigenvalues, 0.0)
            if weight.ndim == 2:
                values[metrics.WEIGHT_STABLE_RANK_PREFIX + name] = float(ranks[0])
                values[metrics.WEIGHT_EIGENVALUE_PREFIX + name] = float(eigenvalues[0])
            else:
                values.update(self._expert_tags(metrics.WEIGHT_STABLE_RANK_PREFIX + name, ranks))
                values.update(self._expert_tags(metrics.WEIGHT_EIGENVALUE_PREFIX + name, eigenvalues))
        return values

    def _expert_tags(self, tag: str, per_expert: np.ndarray) -> dict[str, float]:
        values: dict[str, float] = {}
        if self.experts in ("all", "full"):
            values.update({f"{tag}/expert_{index}": float(value) for index, value in enumerate(per_expert)})
        if self.experts in ("all", "statistics"):
            values[f"{tag}/expert_max"] = float(per_expert.max())
            values[f"{tag}/expert_min"] = float(per_expert.min())
            values[f"{tag}/expert_mean"] = float(per_expert.mean())
        return values

    def close(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the values being computed; False when they did not come."""
        running = self._running
        if running is not None:
            running.join(timeout)
        return not self.busy()
