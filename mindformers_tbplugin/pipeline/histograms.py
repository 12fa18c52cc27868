"""Histograms of parameter values with a bounded cost: numpy only, no I/O.

A tensor larger than ``max_elements`` is summarised from a deterministic strided sample of at most
``max_elements`` values, so one histogram costs about the same for a 1,000-element bias and a
500M-element embedding. The stride is coprime with the last dimension, so the sample walks through
every column of a matrix instead of hitting the same few. The same positions are sampled at every
round: differences between rounds come from training, not from sampling.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mindformers_tbplugin.pipeline import gradient_groups, metrics
from mindformers_tbplugin.tfevents.events import histogram_event


@dataclass(frozen=True)
class Histogram:
    """Plain numbers for :meth:`RunWriter.add_histogram`; ``counts[i]`` covers (limits[i-1], limits[i]]."""

    stats: dict[str, float]  # min, max, num, sum, sum_squares of the (sampled) finite values
    limits: list[float]
    counts: list[float]


def sample_stride(size: int, last_dim: int, max_elements: int) -> int:
    """The step of a strided sample of at most ``max_elements`` values, coprime with ``last_dim``."""
    stride = max(math.ceil(size / max_elements), 1)
    while stride > 1 and math.gcd(stride, max(last_dim, 1)) != 1:
        stride += 1
    return stride


def sampled_values(tensor: Any, max_elements: int, on_device: bool = False) -> np.ndarray:
    """At most ``max_elements`` values of ``tensor`` (numpy array or MindSpore Tensor), flattened.

    ``on_device`` slices a MindSpore tensor before copying it to the host, so an NPU copies only the
    sample; on the CPU ``asnumpy()`` shares memory and slicing in numpy is cheaper.
    """
    shape = tuple(getattr(tensor, "shape", ()) or (1,))
    size = math.prod(shape)
    stride = sample_stride(size, shape[-1], max_elements)
    if on_device and hasattr(tensor, "asnumpy"):
        flat = tensor.reshape((-1,))
        return (flat[::stride] if stride > 1 else flat).asnumpy()
    array = tensor.asnumpy() if hasattr(tensor, "asnumpy") else np.asarray(tensor)
    return array.reshape(-1)[::stride]


def histogram(values: np.ndarray, bins: int) -> Histogram | None:
    """``bins`` equal-width buckets between the smallest and largest finite value; None if none is finite."""
    values = values.astype(np.float64, copy=False)
    finite = values[np.isfinite(values)] if not np.isfinite(values).all() else values
    if finite.size == 0:
        return None
    low, high = float(finite.min()), float(finite.max())
    if high > low:
        counts, edges = np.histogram(finite, bins=bins, range=(low, high))
        limits, bucket_counts = edges[1:].tolist(), counts.astype(np.float64).tolist()
    else:  # a constant tensor (e.g. a freshly initialised norm weight): one bucket at its value
        limits, bucket_counts = [high], [float(finite.size)]
    stats = {
        "min": low,
        "max": high,
        "num": float(finite.size),
        "sum": float(finite.sum()),
        "sum_squares": float(np.dot(finite, finite)),
    }
    return Histogram(stats, limits, bucket_counts)


def select_names(names: Iterable[str], include: Sequence[str] | None, exclude: Sequence[str] | None) -> list[str]:
    """Names matching any ``include`` pattern (all when None) and no ``exclude`` pattern (fnmatch)."""
    chosen = []
    for name in names:
        if include and not any(fnmatch.fnmatchcase(name, pattern) for pattern in include):
            continue
        if exclude and any(fnmatch.fnmatchcase(name, pattern) for pattern in exclude):
            continue
        chosen.append(name)
    return chosen


NORM_HISTOGRAM_BINS = 30


def gradient_norms_histogram_event(squares: np.ndarray, step: int, wall_time: float) -> Any:
    """On the writer thread: the distribution of log10 per-parameter gradient norms
    (``grad_norm/per_param_log10``) from their squares; None (nothing written) when none is finite and
    non-zero."""
    summary = histogram(gradient_groups.log10_norms(squares), NORM_HISTOGRAM_BINS)
    if summary is None:
        return None
    return histogram_event(step, wall_time, metrics.GRAD_NORM_HISTOGRAM, summary.stats, summary.limits, summary.counts)
