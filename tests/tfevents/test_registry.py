"""tfevents/registry.py: one writer per run folder per process, however the folder is spelt; every
writer closed, with all its points on disk, by ``close_all``, at interpreter exit, on an uncaught
exception and on SIGTERM (whose exit status stays the signal's). The exit paths run in a child process
(tests/helpers/writer_child.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HELPERS, read_scalars, subprocess_env

from mindformers_tbplugin.tfevents.registry import close_all, get_writer


def test_one_writer_per_run_folder_per_process(tmp_path: Path) -> None:
    first = get_writer(tmp_path / "run")
    assert get_writer(str(tmp_path / "run" / ".")) is first
    first.close()
    second = get_writer(tmp_path / "run")
    assert second is not first
    second.close()


def _child(tmp_path: Path, mode: str, count: int = 500) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, str(HELPERS / "writer_child.py"), str(tmp_path / "run"), mode, str(count)],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "ready"
    return child


def test_sigterm_closes_with_every_point_and_keeps_the_exit_status(tmp_path: Path) -> None:
    child = _child(tmp_path, "sigterm")
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=30) == -signal.SIGTERM
    assert [s for s, _ in read_scalars(tmp_path / "run")["train/loss"]] == list(range(1, 501))


@pytest.mark.parametrize(("mode", "status"), [("exit", 0), ("raise", 1)])
def test_interpreter_exit_and_uncaught_exception_close_the_file(tmp_path: Path, mode: str, status: int) -> None:
    child = _child(tmp_path, mode)
    assert child.wait(timeout=30) == status
    assert len(read_scalars(tmp_path / "run")["train/loss"]) == 500


def test_the_first_use_sets_the_writers_options(tmp_path: Path) -> None:
    first = get_writer(tmp_path / "run", flush_secs=3600, max_queue=100)
    try:
        # A later caller shares the open writer: its own options do not make a second one.
        assert get_writer(tmp_path / "run", flush_secs=1, max_queue=500) is first
    finally:
        first.close()


def test_close_all_writes_every_open_writer_and_forgets_it(tmp_path: Path) -> None:
    writers = [get_writer(tmp_path / name, flush_secs=3600) for name in ("a", "b")]
    for step, writer in enumerate(writers, start=1):
        writer.add_scalars(step, {"train/loss": float(step)})
    close_all(timeout=10)
    assert all(writer.closed for writer in writers)
    # flush_secs is an hour: only closing put the points on disk.
    assert read_scalars(tmp_path / "a") == {"train/loss": [(1, 1.0)]}
    assert read_scalars(tmp_path / "b") == {"train/loss": [(2, 2.0)]}
    reopened = get_writer(tmp_path / "a")
    try:
        assert reopened not in writers and not reopened.closed
    finally:
        reopened.close()
