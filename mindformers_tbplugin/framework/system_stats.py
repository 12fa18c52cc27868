"""Host and device memory readings for the training thread, taken at most once per second."""

from __future__ import annotations

import os
from typing import Any

from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline.metrics import (
    SYSTEM_DEVICE_MEM_ALLOCATED_GB,
    SYSTEM_DEVICE_MEM_PEAK_GB,
    SYSTEM_HOST_RSS_GB,
)

_GB = float(1 << 30)
MEMORY_READ_SECS = 1.0


class HostMemory:
    """Resident set size from ``/proc/self/statm`` (one pread on a kept-open fd, ~2 us)."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        try:
            self._fd: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._fd = None

    def read(self) -> dict[str, float]:
        if self._fd is None:
            return {}
        try:
            resident_pages = int(os.pread(self._fd, 128, 0).split()[1])
        except (OSError, IndexError, ValueError):
            return {}
        return {SYSTEM_HOST_RSS_GB: resident_pages * self._page / _GB}

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class DeviceMemory:
    """MindSpore's device allocator statistics, when the backend reports them.

    The CPU backend reports zeros; a reading that is zero at its first use switches this off, as does
    any error (said once): device memory is written only where the backend exposes it.
    """

    def __init__(self) -> None:
        self._runtime: Any = None
        self._enabled = True
        self._checked = False

    def read(self) -> dict[str, float]:
        if not self._enabled:
            return {}
        try:
            if self._runtime is None:
                import mindspore.runtime as runtime

                self._runtime = runtime
            allocated = float(self._runtime.memory_allocated())
            peak = float(self._runtime.max_memory_allocated())
        except Exception as exc:  # monitoring must not stop training
            self._enabled = False
            logger.warning("device memory is not available from this backend (%s); not logging it.", exc)
            return {}
        if not self._checked:
            self._checked = True
            if allocated == 0 and peak == 0:
                self._enabled = False
                return {}
        return {SYSTEM_DEVICE_MEM_ALLOCATED_GB: allocated / _GB, SYSTEM_DEVICE_MEM_PEAK_GB: peak / _GB}


class MemoryReadings:
    """Host and device memory, re-read at most once per ``interval`` seconds and repeated in between.

    Memory moves slowly next to a step, while a read costs ~15 us of the training thread's time at a
    step end (the training has just evicted the interpreter's data from the CPU caches).
    """

    def __init__(self, interval: float = MEMORY_READ_SECS) -> None:
        self.host = HostMemory()
        self.device = DeviceMemory()
        self._interval = interval
        self._values: dict[str, float] = {}
        self._next_read = float("-inf")

    def read(self, now: float) -> dict[str, float]:
        """The latest readings; ``now`` is ``time.perf_counter()``. Do not mutate the result."""
        if now >= self._next_read:
            self._values = {**self.host.read(), **self.device.read()}
            self._next_read = now + self._interval
        return self._values

    def close(self) -> None:
        self.host.close()
