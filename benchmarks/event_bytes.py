"""Event file bytes per scalar point: this package's writer vs tensorboardX for the same points.

Both write the same steps and values; MindFormers' built-in writer calls tensorboardX ``add_scalar``
once per tag, so each point is its own event. Bytes per point = whole run folder / points.
"""

from __future__ import annotations

import tempfile
from pathlib import Path


def _folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*tfevents*"))


def _values(step: int, tags: list[str]) -> dict[str, float]:
    return {tag: 1.0 / (step + 1) + index for index, tag in enumerate(tags)}


def measure(steps: int, tag_count: int) -> tuple[float, float]:
    """(ours, tensorboardX) bytes per point for ``steps`` steps of ``tag_count`` scalars."""
    from tensorboardX import SummaryWriter

    from mindformers_tbplugin.tfevents.writer import RunWriter

    tags = [f"train/metric_{index}" for index in range(tag_count)]
    points = steps * tag_count
    with tempfile.TemporaryDirectory() as name:
        ours, tbx = Path(name) / "mftb", Path(name) / "tbx"
        writer = RunWriter(ours)
        for step in range(1, steps + 1):
            writer.add_scalars(step, _values(step, tags))
        writer.close()
        summary_writer = SummaryWriter(str(tbx))
        for step in range(1, steps + 1):
            for tag, value in _values(step, tags).items():
                summary_writer.add_scalar(tag, value, global_step=step)
        summary_writer.close()
        return _folder_bytes(ours) / points, _folder_bytes(tbx) / points


def markdown_section(quick: bool) -> tuple[str, list[str]]:
    steps = 2_000 if quick else 20_000
    lines = [
        "## Event file bytes per scalar point",
        "",
        f"{steps} steps; the same tags and values through each writer.",
        "",
        "| scalars per step | mftb bytes/point | tensorboardX `add_scalar` bytes/point | tensorboardX / mftb |",
        "|---|---|---|---|",
    ]
    missed = []
    for tag_count in (1, 10):
        ours, tbx = measure(steps, tag_count)
        lines.append(f"| {tag_count} | {ours:.1f} | {tbx:.1f} | {tbx / ours:.2f}x |")
        if ours > tbx:
            missed.append(f"{ours:.1f} bytes per point > tensorboardX's {tbx:.1f} ({tag_count} scalars per step)")
    return "\n".join([*lines, ""]), missed
