"""An :class:`~.imported_run.ImportedRun` written as one run folder of ours, so that TensorBoard
overlays it with monitored runs and a comparison reads it back with what it must know.

Written: every scalar, histogram, image and text with our event encoders; sub-runs (ranks) as
``<folder>/<name>``; a text ``import/source`` saying where the run came from, its format and what was
not imported; and ``mftb_import.json`` beside the event files (format, ``averaged_over``,
``resolution``), which :mod:`.tensorboard_folder` restores when the folder is read again.
"""

from __future__ import annotations

import json
import struct
import time
from bisect import bisect_left
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2

from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.imports.imported_run import METADATA_FILE, ImportedRun
from mindformers_tbplugin.pipeline.metrics import IMPORT_SOURCE
from mindformers_tbplugin.tfevents.event_file import EventFile
from mindformers_tbplugin.tfevents.events import (
    encode_scalars_event,
    histogram_event,
    session_start_event,
    text_event,
)
from mindformers_tbplugin.tfevents.scalar_blocks import scalar_records

_PNG = b"\x89PNG\r\n\x1a\n"
MAX_LISTED = 20  # skipped items listed in the text; the rest counted


def write_run(run: ImportedRun, folder: Path) -> list[Path]:
    """Write ``run`` (and its sub-runs) into ``folder``, which must hold no event files yet. Returns
    the run folders written, the main one first."""
    if folder.exists() and any(folder.glob("*tfevents*")):
        raise UsageError(f"{folder} already holds a run; choose another --name or --logdir")
    written = [_write_one(run, folder)]
    for name, sub in run.sub_runs.items():
        written.append(_write_one(sub, folder / name))
    return written


def _write_one(run: ImportedRun, folder: Path) -> Path:
    """One event file, written on this thread (an import has no training to keep waiting)."""
    now = time.time()
    events = EventFile(folder)
    try:
        steps = sorted(set().union(*run.scalars.values()))
        events.write(session_start_event(steps[0] if steps else 0, now))  # a later resume's START is honoured
        _write_scalars(events, run, steps, now)
        for tag, points in run.histograms.items():
            for step, histogram in sorted(points.items()):
                events.write(
                    histogram_event(
                        step, run.wall_times.get(step) or now, tag, histogram.stats, histogram.limits, histogram.counts
                    )
                )
        for tag, images in run.images.items():
            for step, encoded in sorted(images.items()):
                events.write(_image_event(step, run.wall_times.get(step) or now, tag, encoded))
        for tag, texts in run.texts.items():
            if tag == IMPORT_SOURCE:  # a run imported before: its text is replaced by this import's
                continue
            for step, text in sorted(texts.items()):
                events.write(text_event(step, run.wall_times.get(step) or now, tag, text))
        events.write(text_event(0, now, IMPORT_SOURCE, describe(run)))
    finally:
        events.close()
    metadata = {
        "format": run.format,
        "source": [str(path) for path in run.source],
        "averaged_over": run.averaged_over,
        "resolution": run.resolution,
        "notes": run.notes,
    }
    (folder / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")
    return folder


def _write_scalars(events: EventFile, run: ImportedRun, steps: list[int], now: float) -> None:
    """One event per step. The steps holding exactly the tags present at every step (all of them, in
    most runs) are framed in blocks from columns read at once; the others one by one."""
    full = [tag for tag, series in run.scalars.items() if len(series) == len(steps)]
    partial = [(tag, series) for tag, series in run.scalars.items() if len(series) != len(steps)]
    wall_times = run.wall_times
    walls = [wall_times.get(step) or now for step in steps]
    columns = [list(map(run.scalars[tag].__getitem__, steps)) for tag in full]
    extras = {step for _, series in partial for step in series}
    start = 0
    for cut in [*sorted(extras), None]:  # runs of full-only steps between the steps with partial tags
        stop = len(steps) if cut is None else bisect_left(steps, cut, start)
        if stop > start:
            part = [column[start:stop] for column in columns]
            for block in scalar_records(full, steps[start:stop], walls[start:stop], part):
                events.write_framed(block)
        if cut is None:
            break
        row = {tag: column[stop] for tag, column in zip(full, columns, strict=True)}
        row.update({tag: series[cut] for tag, series in partial if cut in series})
        events.write(encode_scalars_event(cut, walls[stop], row))
        start = stop + 1


def describe(run: ImportedRun) -> str:
    """What the ``import/source`` text says (Markdown, as TensorBoard's text dashboard shows it)."""
    lines = [f"Imported by `mftb import` from **{run.format}**:", ""]
    lines += [f"- `{path}`" for path in run.source]
    points = sum(len(series) for series in run.scalars.values())
    lines += ["", f"{points} scalar points in {len(run.scalars)} tags."]
    if run.averaged_over:
        spans = ", ".join(f"`{tag}` over {n} steps" for tag, n in sorted(run.averaged_over.items()))
        lines.append(f"Values that are means of several steps: {spans}.")
    if run.resolution:
        lines.append(
            "Printed resolution: " + ", ".join(f"`{t}` {r:g}" for t, r in sorted(run.resolution.items())) + "."
        )
    lines += [f"{note[0].upper()}{note[1:]}." for note in run.notes]
    if run.stopped_at:
        lines += ["", f"**Truncated:** {run.stopped_at}."]
    if run.skipped:
        lines += ["", "**Not imported:**"]
        lines += [f"- {what}" for what in run.skipped[:MAX_LISTED]]
        if len(run.skipped) > MAX_LISTED:
            lines.append(f"- ... and {len(run.skipped) - MAX_LISTED} more")
    return "\n".join(lines)


def _image_event(step: int, wall_time: float, tag: str, encoded: bytes) -> event_pb2.Event:
    """An image value; height and width read from a PNG's header (0 for other encodings, which
    TensorBoard's image dashboard does not need)."""
    width = height = 0
    if encoded.startswith(_PNG) and len(encoded) >= 24:
        width, height = struct.unpack(">II", encoded[16:24])
    image = summary_pb2.Summary.Image(height=height, width=width, encoded_image_string=encoded)
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, image=image)])
    return event_pb2.Event(step=step, wall_time=wall_time, summary=summary)
