"""Memory readings: real /proc/self/statm reads, re-read at most once per interval."""

from __future__ import annotations

from mindformers_tbplugin.framework.system_stats import MemoryReadings
from mindformers_tbplugin.pipeline.metrics import SYSTEM_HOST_RSS_GB


def test_memory_is_read_at_most_once_per_interval_and_repeated_in_between() -> None:
    readings = MemoryReadings(interval=1.0)
    try:
        first = readings.read(now=100.0)
        assert 0 < first[SYSTEM_HOST_RSS_GB] < 1024  # this process's resident set, in GiB
        ballast = bytearray(64 << 20)  # +64 MiB resident: a fresh read must see it
        assert readings.read(now=100.9) is first  # within the interval: the same reading, no read
        later = readings.read(now=101.0)
        assert later is not first
        assert later[SYSTEM_HOST_RSS_GB] - first[SYSTEM_HOST_RSS_GB] > 0.05
        del ballast
    finally:
        readings.close()
