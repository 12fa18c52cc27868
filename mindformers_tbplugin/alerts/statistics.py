"""Rolling statistics for the alert rules: bounded memory, cheap enough for every training step."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque


class RollingWindow:
    """The last ``size`` values, also kept sorted: median in O(1), MAD in O(log n), add in O(n) memmove."""

    __slots__ = ("_fifo", "_sorted", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._fifo: deque[float] = deque()
        self._sorted: list[float] = []

    def __len__(self) -> int:
        return len(self._sorted)

    def add(self, value: float) -> None:
        if len(self._fifo) == self.size:
            oldest = self._fifo.popleft()
            del self._sorted[bisect_left(self._sorted, oldest)]
        self._fifo.append(value)
        insort(self._sorted, value)

    def median(self) -> float:
        s, n = self._sorted, len(self._sorted)
        return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2

    def mad(self, median: float) -> float:
        """Median absolute deviation from ``median``, without building the list of deviations."""
        n = len(self._sorted)
        if n % 2:
            return self._kth_deviation(median, n // 2)
        return (self._kth_deviation(median, n // 2 - 1) + self._kth_deviation(median, n // 2)) / 2

    def _kth_deviation(self, center: float, k: int) -> float:
        """The k-th smallest |x - center| (0-based): k-th of two sorted sequences, by binary search.

        Left deviations ``center - s[p-1-i]`` and right deviations ``s[p+j] - center`` are both
        ascending; find how many of the k+1 smallest come from the left.
        """
        s = self._sorted
        p = bisect_left(s, center)
        n_left, n_right = p, len(s) - p
        lo, hi = max(0, k + 1 - n_right), min(k + 1, n_left)
        while lo < hi:
            take_left = (lo + hi) // 2
            take_right = k + 1 - take_left
            if center - s[p - 1 - take_left] < s[p + take_right - 1] - center:
                lo = take_left + 1
            else:
                hi = take_left
        take_right = k + 1 - lo
        last_left = center - s[p - lo] if lo > 0 else -math.inf
        last_right = s[p + take_right - 1] - center if take_right > 0 else -math.inf
        return max(last_left, last_right)
