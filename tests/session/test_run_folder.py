"""session/run_folder.py: which run folder a training writes. The run a resume continues (an explicit
resume_run, else the experiment's newest run when a step was restored); a new folder that only the writing
rank names and creates, learnt by every rank from one all-gather (simulated ranks in threads,
tests/fakes.py); the housekeeping of older runs and the free-space warning; the ``meta/restart`` mark of a
resumed attempt. The node exchange and the rank layout of that gather: tests/pipeline/test_rank_records.py."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import plugin_log, read_scalars
from fakes import FakeCollectives, Group, run_ranks
from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator

from mindformers_tbplugin.pipeline import rank_layout
from mindformers_tbplugin.pipeline.topology import Topology
from mindformers_tbplugin.session import run_folder
from mindformers_tbplugin.tfevents.writer import RunWriter

PATTERN = "{experiment}_{timestamp}"
ALONE = Topology(0, 1, 1, "stand_alone", False, communicating=False)


def _run(root: Path, name: str) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "events.out.tfevents.1.host.1.0").write_bytes(b"")
    return run


# -- the run a training continues -------------------------------------------------------------------
def test_a_named_resume_run_is_continued_resuming_or_not(tmp_path: Path) -> None:
    assert run_folder.run_to_continue(tmp_path, PATTERN, "exp", False, "mine", 0) == (tmp_path / "mine", None)
    assert run_folder.run_to_continue(tmp_path, PATTERN, "exp", False, "mine", 40) == (tmp_path / "mine", 40)


def test_a_resume_continues_the_experiments_newest_run_only_after_a_restored_step(tmp_path: Path) -> None:
    older, newer = _run(tmp_path, "exp_20260101-000000"), _run(tmp_path, "exp_20260102-000000")
    os.utime(older / "events.out.tfevents.1.host.1.0", (1, 1))  # the newest activity decides, not the name
    _run(tmp_path, "other_20260103-000000")
    assert run_folder.run_to_continue(tmp_path, PATTERN, "exp", True, None, 8) == (newer, 8)
    assert run_folder.run_to_continue(tmp_path, PATTERN, "exp", True, None, 0) == (None, None)  # nothing restored
    assert run_folder.run_to_continue(tmp_path, PATTERN, "exp", False, None, 8) == (None, None)  # resume: False
    assert run_folder.run_to_continue(tmp_path, PATTERN, "new", True, None, 8) == (None, None)  # no run yet


# -- opening the folder -----------------------------------------------------------------------------
def test_a_single_process_creates_its_folder_with_a_suffix_when_taken(tmp_path: Path) -> None:
    here = run_folder.RankHost.this_process()
    first, hosts = run_folder.open_run_dir(tmp_path, "{experiment}_r{rank}", "exp", None, ALONE, None)
    second, _ = run_folder.open_run_dir(tmp_path, "{experiment}_r{rank}", "exp", None, ALONE, None)
    assert (first, second, hosts) == (tmp_path / "exp_r0", tmp_path / "exp_r0-1", [here])
    assert first.is_dir() and second.is_dir()


def test_a_continued_run_is_opened_as_it_is(tmp_path: Path) -> None:
    continued = tmp_path / "exp_20260101-000000"
    assert run_folder.open_run_dir(tmp_path, PATTERN, "exp", continued, ALONE, None)[0] == continued
    assert continued.is_dir() and [p.name for p in tmp_path.iterdir()] == [continued.name]


def _open_on_every_rank(
    log_root: Path, pattern: str, world_size: int, stages: int, continued: Path | None = None
) -> list[Path]:
    group, opened = Group(world_size), [Path()] * world_size

    def script(rank: int) -> Callable[[], None]:
        def run() -> None:
            topology = Topology(rank, world_size, stages, "semi_auto_parallel", False, communicating=True)
            collectives = FakeCollectives(group, rank)
            opened[rank] = run_folder.open_run_dir(log_root, pattern, "exp", continued, topology, collectives)[0]
            assert collectives.calls == 1  # one all-gather, on every rank alike

        return run

    run_ranks(group, [script(rank) for rank in range(world_size)])
    return opened


def test_every_rank_learns_the_folder_the_writing_rank_created(tmp_path: Path) -> None:
    # Four ranks in two pipeline stages: rank 2, the last stage's first, writes and names the run.
    (tmp_path / "exp_r2").mkdir(parents=True)
    opened = _open_on_every_rank(tmp_path, "{experiment}_r{rank}", 4, 2)
    assert opened == [tmp_path / "exp_r2-1"] * 4  # the suffix travels too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp_r2", "exp_r2-1"]


def test_the_writing_ranks_timestamp_names_the_run_on_every_rank(tmp_path: Path) -> None:
    opened = _open_on_every_rank(tmp_path, PATTERN, 3, 1)
    (created,) = tmp_path.iterdir()
    assert opened == [created] * 3


def test_a_continued_run_is_every_ranks_folder(tmp_path: Path) -> None:
    continued = tmp_path / "exp_20260101-000000"
    assert _open_on_every_rank(tmp_path, PATTERN, 2, 1, continued) == [continued] * 2
    assert [p.name for p in tmp_path.iterdir()] == [continued.name]


@pytest.mark.parametrize("value", ["", "x", "-1", " "])
def test_without_a_numeric_node_rank_a_rank_has_none(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(run_folder.NODE_RANK_ENV, value)
    here = run_folder.RankHost.this_process()
    assert here == run_folder.RankHost(rank_layout.NO_NODE_RANK, socket.gethostname())


def test_every_ranks_host_name_reaches_the_writer_in_the_same_one_gather() -> None:
    """Each rank's own node rank and host name (non-ASCII, and one longer than the 63 bytes that travel,
    cut at a character boundary) arrive in rank order."""
    long_name = "n" * 62 + "点"  # 65 bytes of UTF-8: the last character does not fit
    sent = [run_folder.RankHost(0, "gpu-a01"), run_folder.RankHost(0, "节点-7"), run_folder.RankHost(1, long_name)]
    group, received = Group(3), [None] * 3

    def script(rank: int) -> Callable[[], None]:
        def run() -> None:
            topology = Topology(rank, 3, 1, "data_parallel", False, communicating=True)
            collectives = FakeCollectives(group, rank)
            values, received[rank] = run_folder._exchange(collectives, topology, [5], sent[rank])
            assert values == [5] and collectives.calls == 1

        return run

    run_ranks(group, [script(rank) for rank in range(3)])
    assert received[0] == [*sent[:2], run_folder.RankHost(1, "n" * 62)]
    writer = Topology(0, 3, 1, "data_parallel", False, communicating=True)
    layout = run_folder.rank_layout_of(received[0], writer, 10, 1024)
    assert (layout.nodes, layout.node_names) == ((0, 0, 1), ("gpu-a01", "n" * 62))


# -- housekeeping -----------------------------------------------------------------------------------
def test_housekeeping_keeps_the_last_runs_and_says_what_went(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mindformers_tbplugin")  # as inside MindFormers (log.route_to)
    runs = [_run(tmp_path / "logs", f"exp_20260101-00000{i}") for i in range(3)]
    for written, run in zip((100, 200, 300), runs, strict=True):  # runs[0] is the oldest
        os.utime(run / "events.out.tfevents.1.host.1.0", (written, written))
    with plugin_log() as messages:
        run_folder.housekeeping(tmp_path / "logs", PATTERN, "exp", runs[2], 2, tmp_path / "archive", 0.0)
    assert [p.name for p in (tmp_path / "archive").iterdir()] == [runs[0].name]
    assert messages == [f"TensorBoardMonitor: keep_last_runs=2: {runs[0]} moved to {tmp_path / 'archive'}"]


def test_keep_last_runs_0_keeps_every_run(tmp_path: Path) -> None:
    runs = [_run(tmp_path, f"exp_20260101-00000{i}") for i in range(3)]
    with plugin_log() as messages:
        run_folder.housekeeping(tmp_path, PATTERN, "exp", runs[0], 0, None, 0.0)
    assert sorted(tmp_path.iterdir()) == runs and messages == []


def test_too_little_free_space_is_a_warning(tmp_path: Path) -> None:
    with plugin_log() as messages:
        run_folder.housekeeping(tmp_path, PATTERN, "exp", tmp_path / "run", 0, None, 1e12)
    (message,) = messages
    assert message.startswith("TensorBoardMonitor: only ")
    assert message.endswith(f" GiB free on the file system of {tmp_path} (min_free_gb 1000000000000.00)")


# -- the restart mark -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("checkpoint", "named"), [("/ckpt/tiny-10_1.ckpt", "/ckpt/tiny-10_1.ckpt"), (None, "the loaded checkpoint")]
)
def test_a_resumed_attempt_marks_its_first_step(tmp_path: Path, checkpoint: str | None, named: str) -> None:
    writer = RunWriter(tmp_path / "run")
    run_folder.mark_restart(writer, 11, 10, checkpoint)
    writer.close()
    assert read_scalars(tmp_path / "run") == {"meta/restart": [(11, 10.0)]}
    accumulator = EventAccumulator(str(tmp_path / "run"), size_guidance={TENSORS: 0})
    accumulator.Reload()
    (text,) = accumulator.Tensors("meta/restart")
    assert text.step == 11
    assert text.tensor_proto.string_val[0].decode() == (
        f"Resumed at step 11 from {named} (step 10); points an earlier attempt wrote after step 10 are purged. "
        f"Process {os.getpid()} on {socket.gethostname()}."
    )
