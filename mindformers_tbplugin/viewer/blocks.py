"""Server-side downsampling and JSON numbers, shared by the ``ranks`` and ``moe`` views.

A long series is shown as blocks of consecutive records, each showing its maximum: one bad record
(a straggler, a dead expert) still colours its block, where a mean or a sample could hide it.
"""

from __future__ import annotations

import numpy as np

LIMIT = 4096  # the largest number of blocks a request may ask for, per axis


def block_size(count: int, most: int) -> int:
    """How many consecutive items a block takes so that ``count`` items make at most ``most`` blocks
    (``most`` clamped to 1..LIMIT)."""
    return max(-(-count // min(max(most, 1), LIMIT)), 1)


def block_max(values: np.ndarray, block: int, axis: int) -> np.ndarray:
    """NaN-ignoring maximum over consecutive blocks of ``block`` along ``axis`` (the last one padded)."""
    size = values.shape[axis]
    pad = -size % block
    if pad:
        widths = [(0, 0)] * values.ndim
        widths[axis] = (0, pad)
        values = np.pad(values, widths, constant_values=np.nan)
    shape = list(values.shape)
    shape[axis : axis + 1] = [shape[axis] // block, block]
    with np.errstate(invalid="ignore"):
        return np.fmax.reduce(values.reshape(shape), axis=axis + 1)


def rounded(values: np.ndarray, decimals: int = 3) -> list:
    """JSON numbers with ``decimals`` decimals (colours need no more); null for no value."""
    values = np.round(np.asarray(values, dtype=np.float64), decimals)
    return np.where(np.isfinite(values), values, None).tolist()
