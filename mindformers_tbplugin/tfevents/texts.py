"""The text summaries of one tag in a run's event files, in the order they were written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from mindformers_tbplugin.tfevents.decode import decode_event, tensor_strings
from mindformers_tbplugin.tfevents.records import RecordReader


def read_texts(files: list[Path], tag: str) -> Iterator[tuple[int, str]]:
    """``(step, text)`` of each text summary of ``tag`` (only records whose bytes hold the tag are decoded)."""
    needle = tag.encode("utf-8")
    for path in files:
        for _, buf, spans in RecordReader(path).chunks():
            for start, stop, intact in spans:
                if not intact or buf.find(needle, start, stop) < 0:
                    continue
                event = decode_event(bytes(buf[start:stop]))
                for value in event.values if event is not None else ():
                    if value.tag == tag and value.tensor is not None:
                        for text in tensor_strings(value.tensor):
                            yield event.step, text.decode("utf-8", "replace")
