"""tfevents/event_file.py: one append-only event file. Its name (time first, for TensorBoard's name
order, then host, pid and a per-process serial, so two files never collide), its first record (the file
version TensorBoard expects), and Events or their bytes appended as records TensorBoard reads."""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

from mindformers_tbplugin.tfevents.event_file import EventFile
from mindformers_tbplugin.tfevents.events import encode_scalars_event, scalars_event, text_event


def _loaded(path: Path) -> list:
    return list(LegacyEventFileLoader(str(path)).Load())  # the events as written


def test_the_name_is_time_host_pid_serial_and_suffix(tmp_path: Path) -> None:
    before = int(time.time())
    first, second = EventFile(tmp_path), EventFile(tmp_path, filename_suffix=".v2")
    after = int(time.time())
    first.close()
    second.close()
    host, pid = re.escape(socket.gethostname()), os.getpid()
    (stamp, serial), (_, next_serial) = (
        re.fullmatch(rf"events\.out\.tfevents\.(\d{{10}})\.{host}\.{pid}\.(\d+)(?:\.v2)?", f.path.name).groups()
        for f in (first, second)
    )
    assert before <= int(stamp) <= after
    # Two files opened in the same second in one folder stay apart by the serial.
    assert int(next_serial) == int(serial) + 1 and second.path.name.endswith(".v2")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.path.name, second.path.name])


def test_files_opened_in_one_second_sort_in_the_order_they_were_opened(tmp_path: Path) -> None:
    # Twelve files cross a serial's digit count (9 -> 10) whatever the process opened before; the
    # names must still sort in opening order, the order TensorBoard and our viewer read them in.
    opened = [EventFile(tmp_path) for _ in range(12)]
    for file in opened:
        file.close()
    same_second = [f.path.name for f in opened if f.path.name.split(".")[3] == opened[0].path.name.split(".")[3]]
    assert len(same_second) > 1
    assert sorted(same_second) == same_second


def test_a_new_file_starts_with_the_file_version_in_a_folder_it_creates(tmp_path: Path) -> None:
    event_file = EventFile(tmp_path / "run" / "rank_3")
    event_file.close()
    (version,) = _loaded(event_file.path)
    assert version.file_version == "brain.Event:2"
    assert event_file.path.parent == tmp_path / "run" / "rank_3"


def test_events_and_their_bytes_are_appended_alike(tmp_path: Path) -> None:
    event_file = EventFile(tmp_path)
    event_file.write(scalars_event(1, 10.0, {"train/loss": 0.5}))
    event_file.write(encode_scalars_event(2, 11.0, {"train/loss": 0.25}))
    event_file.write(text_event(2, 11.0, "meta/status", "done").SerializeToString())
    event_file.flush()
    # Flushed: a reader sees every record before the file is closed.
    _, one, two, text = _loaded(event_file.path)
    event_file.close()
    assert [(e.step, e.wall_time, e.summary.value[0].simple_value) for e in (one, two)] == [
        (1, 10.0, 0.5),
        (2, 11.0, 0.25),
    ]
    assert text.summary.value[0].tensor.string_val == [b"done"]
