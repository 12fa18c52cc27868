"""What the installed ``.pth`` hook adds to every Python process of the environment.

The hook imports ``mindformers_tbplugin`` at interpreter start unless ``MFTB_NO_AUTOREGISTER=1``.
Two interpreters started side by side, alternating run by run: ``python -c pass`` with the hook
switched off and with it on (the process never imports mindformers). Also ``-X importtime``'s
cumulative figure for the package, which excludes process start-up noise.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time

TARGET_MS = 5.0


def _start_ms(hook_on: bool) -> float:
    env = dict(os.environ)
    env.pop("MFTB_NO_AUTOREGISTER", None)
    if not hook_on:
        env["MFTB_NO_AUTOREGISTER"] = "1"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    return (time.perf_counter() - start) * 1000.0


def importtime_us() -> int:
    """``-X importtime`` cumulative microseconds of ``mindformers_tbplugin`` (the hook's import)."""
    env = {k: v for k, v in os.environ.items() if k != "MFTB_NO_AUTOREGISTER"}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"], env=env, capture_output=True, text=True, check=True
    )
    found = re.findall(r"import time:\s+\d+ \|\s+(\d+) \|\s+mindformers_tbplugin$", result.stderr, flags=re.M)
    return int(found[-1]) if found else 0


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    rounds = 20 if quick else 100
    off, on = [], []
    for index in range(rounds):
        pair = [(False, off), (True, on)]
        for hook_on, samples in pair[:: -1 if index % 2 else 1]:
            samples.append(_start_ms(hook_on))
    ratios = [b / a for a, b in zip(off, on, strict=True)]
    added = statistics.median(on) - statistics.median(off)
    cumulative = statistics.median(importtime_us() for _ in range(5 if quick else 15)) / 1000.0
    lines = [
        "## `import mindformers_tbplugin` in a process that never imports mindformers",
        "",
        f"`python -c pass`, {rounds} starts per variant, alternating; wall ms per start.",
        "",
        "| variant | median ms | min-max |",
        "|---|---|---|",
        f"| hook off (`MFTB_NO_AUTOREGISTER=1`) | {statistics.median(off):.1f} | {min(off):.1f}-{max(off):.1f} |",
        f"| hook on (the installed `.pth` imports the package) | {statistics.median(on):.1f} "
        f"| {min(on):.1f}-{max(on):.1f} |",
        "",
        f"Added per process: **{added:.2f} ms** (difference of medians; median per-pair ratio "
        f"{statistics.median(ratios):.3f}); `-X importtime` cumulative for the package: **{cumulative:.2f} ms** "
        "(median of runs).",
        "",
    ]
    missed = []
    if cumulative > TARGET_MS:
        missed.append(f"package import {cumulative:.2f} ms > {TARGET_MS} ms")
    return "\n".join(lines), missed
