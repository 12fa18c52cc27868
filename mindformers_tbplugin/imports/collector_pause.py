"""Python's cyclic garbage collector paused while a command reads or writes whole runs at once.

A long run is millions of small objects (texts, floats, tuples, dict entries) in containers that hold
no reference cycle; the collector's generational passes traverse them again and again while they are
made, and find nothing to free. Without those passes a 1,000,000-step log reads about 10% faster
(BENCHMARKS.md). For commands only: a training process (a live baseline read on a thread of its own)
keeps its collector as its user set it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block; the collector as it was after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
