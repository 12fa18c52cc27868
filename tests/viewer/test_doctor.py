"""`mftb doctor` on prepared logdirs: real event files (ours and tensorboardX's), real damage, real processes."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HELPERS, MFTB, TrainingRun, read_scalars, subprocess_env
from tb_helpers import mftb_tensorboard, plain_tensorboard, wait_for
from tensorboardX import SummaryWriter

from mindformers_tbplugin.tfevents.writer import RunWriter
from mindformers_tbplugin.viewer import tensorboard_server
from mindformers_tbplugin.viewer.doctor import NO_RUNS_FOUND


def doctor(logdir: Path | str, *args: str, cwd: Path | None = None, **env: str) -> tuple[int, str]:
    result = subprocess.run(
        [MFTB, "doctor", str(logdir), *args],
        cwd=cwd,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout


def verdict(output: str, check: str) -> str:
    """The verdict line of ``check`` and its indented details."""
    match = re.search(rf"^\[[ A-Z]+\] {re.escape(check)}:.*?(?=^\[|^\d+ of \d+ checks)", output, flags=re.M | re.S)
    assert match, f"no verdict for {check!r} in:\n{output}"
    return match.group(0)


def write_mftb_run(run_dir: Path, first: int = 1, last: int = 20, start: int | None = 1) -> None:
    writer = RunWriter(run_dir)
    if start is not None:
        writer.add_session_start(start)
    for step in range(first, last + 1):
        writer.add_scalars(step, {"train/loss": 1.0 / step, "train/lr": 1e-3})
    writer.close()


def write_tensorboardx_run(run_dir: Path, first: int, last: int, **kwargs: object) -> None:
    writer = SummaryWriter(str(run_dir), **kwargs)
    for step in range(first, last + 1):
        writer.add_scalar("train/loss", 1.0 / step, step)
    writer.close()


def finished_long_ago(logdir: Path) -> None:
    """Backdate the files, as for a training that ended an hour ago (recent files count as open)."""
    past = time.time() - 3600
    for path in logdir.rglob("*tfevents*"):
        os.utime(path, (past, past))


@pytest.mark.process
def test_healthy_logdir_served_by_tensorboard_passes_every_check(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    write_mftb_run(logdir / "ours")
    write_tensorboardx_run(logdir / "tbx", 1, 20)
    finished_long_ago(logdir)
    with plain_tensorboard(logdir) as port:
        code, output = doctor(logdir, "--port", str(port))
    assert code == 0, output
    assert output.count("[ OK ]") == 7 and "7 of 7 checks passed." in output
    assert f"serves {logdir} with 2 runs" in output


def test_a_real_training_run_passes_the_file_checks(tmp_path: Path, tiny_run: TrainingRun) -> None:
    logdir = tmp_path / "tb"
    shutil.copytree(tiny_run.log_root, logdir)  # a copy, so backdating leaves the shared run alone
    finished_long_ago(logdir)
    _, output = doctor(logdir, "--port", str(tensorboard_server.free_port(17106)))
    assert output.count("[ OK ]") == 6, output  # all but the server check: no TensorBoard runs here
    assert f"[ OK ] event files: 1 runs, 1 event files under {logdir}" in output


@pytest.mark.process
def test_server_check_names_what_is_served_instead(tmp_path: Path) -> None:
    logdir, other = tmp_path / "tb", tmp_path / "other"
    write_mftb_run(logdir / "run")
    write_mftb_run(other / "run")
    finished_long_ago(tmp_path)
    with plain_tensorboard(other) as port:
        code, output = doctor(logdir, "--port", str(port))
    assert code == 1
    assert f"[FAIL] TensorBoard on port {port}: it serves {other}, not {logdir}" in output
    idle = tensorboard_server.free_port(17006)
    code, output = doctor(logdir, "--port", str(idle))
    assert f"[FAIL] TensorBoard on port {idle}: nothing listens on {idle}" in output
    assert f"fix: mftb tensorboard {logdir} --port {idle}" in output


def test_no_tensorboard_is_information_unless_a_port_was_asked_for(tmp_path: Path) -> None:
    """Without --port, a TensorBoard that is not running says nothing about the logs: exit 0."""
    logdir = tmp_path / "tb"
    write_mftb_run(logdir / "run")
    finished_long_ago(logdir)
    code, output = doctor(logdir)
    assert code == 0, output
    check = verdict(output, "TensorBoard")
    assert check.startswith(f"[INFO] TensorBoard: none serves {logdir} (")
    assert "the checks above do not need one" in check
    assert f"       to view the runs: mftb tensorboard {logdir}\n" in check and "fix:" not in check
    assert output.count("[ OK ]") == 6 and output.endswith("6 of 6 checks passed.\n")
    idle = tensorboard_server.free_port(17206)
    code, output = doctor(logdir, "--port", str(idle))
    assert code == 1
    assert f"[FAIL] TensorBoard on port {idle}: nothing listens on {idle}" in output
    assert "6 of 7 checks passed." in output


@pytest.mark.process
def test_without_port_the_tensorboard_serving_the_logdir_is_found_on_its_port(tmp_path: Path) -> None:
    """`mftb tensorboard` moves to another port when 6006 is taken: the doctor finds and checks it there."""
    logdir = tmp_path / "tb"
    write_mftb_run(logdir / "run")
    finished_long_ago(logdir)
    with mftb_tensorboard(logdir, "--port", str(tensorboard_server.free_port(17306))) as server:
        assert wait_for(lambda: tensorboard_server.get_json(server.port, "/data/runs")) == ["run"]
        code, output = doctor(logdir)
    assert code == 0, output
    assert f"[ OK ] TensorBoard on port {server.port}: serves {logdir} with 1 runs" in output
    assert "7 of 7 checks passed." in output


@pytest.mark.process
def test_a_shared_tensorboard_is_checked_with_the_token_in_the_environment(tmp_path: Path) -> None:
    """`mftb tensorboard --bind_all` asks every request for its token: without it the doctor says so
    (not "something else listens"); with MFTB_TENSORBOARD_TOKEN it checks the server as any other."""
    logdir = tmp_path / "tb"
    write_mftb_run(logdir / "run")
    finished_long_ago(logdir)
    token = {"MFTB_TENSORBOARD_TOKEN": "doctor-token-0123456789"}
    port = tensorboard_server.free_port(17606)
    with mftb_tensorboard(logdir, "--bind_all", "--port", str(port), env=token):
        code, locked = doctor(logdir, "--port", str(port))
        opened = doctor(logdir, "--port", str(port), **token)
    assert code == 1
    expected = f"a TensorBoard asking for its access token listens on {port} (set MFTB_TENSORBOARD_TOKEN to check it)"
    assert f"[FAIL] TensorBoard on port {port}: {expected}" in locked, locked
    assert opened[0] == 0 and f"[ OK ] TensorBoard on port {port}: serves {logdir} with 1 runs" in opened[1], opened


@pytest.mark.process
def test_server_flags_that_hide_points_are_named(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    write_mftb_run(logdir / "resumed", 1, 20)
    write_mftb_run(logdir / "resumed", 11, 30, start=11)
    finished_long_ago(logdir)
    with plain_tensorboard(logdir, "--samples_per_plugin", "scalars=0") as port:
        _, output = doctor(logdir, "--port", str(port))
        # What the verdict claims: once the tag is loaded, the server still hands out no points at all.
        assert wait_for(
            lambda: (
                "train/loss"
                in (tensorboard_server.get_json(port, "/data/plugin/scalars/tags") or {}).get("resumed", {})
            )
        )
        assert tensorboard_server.get_json(port, "/data/plugin/scalars/scalars?run=resumed&tag=train/loss") == []
    check = verdict(output, f"TensorBoard on port {port}")
    assert check.startswith("[FAIL]") and "--samples_per_plugin scalars=0, so every scalar chart is empty" in check
    with plain_tensorboard(logdir, "--reload_multifile=false") as port:
        _, output = doctor(logdir, "--port", str(port))
    check = verdict(output, f"TensorBoard on port {port}")
    assert check.startswith("[WARN]") and "without --reload_multifile=true" in check


def test_no_event_files_points_to_where_recent_runs_are(tmp_path: Path) -> None:
    project, home = tmp_path / "project", tmp_path / "home"
    write_mftb_run(project / "output" / "tensorboard" / "llama_20261129-101010")
    write_mftb_run(project / "output" / "tensorboard" / "llama_20261129-101010" / "rank_1")  # a sub-run of it
    write_mftb_run(home / "output" / "tensorboard" / "someone_elses_run")  # the same relative path, from home
    (project / "scripts").mkdir()
    # Trained from project/, inspected from project/scripts/: the relative log_dir resolves elsewhere.
    code, output = doctor("output/tensorboard", cwd=project / "scripts", HOME=str(home))
    assert code == 1
    check = verdict(output, "event files")
    missing = project / "scripts" / "output" / "tensorboard"
    assert check.startswith(
        f"[FAIL] event files: LOGDIR {missing} does not exist (the nearest existing folder is {project / 'scripts'})"
    )
    assert f"searched for runs: {project / 'output' / 'tensorboard'} (5 levels down)" in check
    assert re.search(
        rf"^ +{re.escape(str(project / 'output' / 'tensorboard' / 'llama_20261129-101010'))}  ", check, re.M
    )
    assert "rank_1" not in check and "someone_elses_run" not in output
    command = f"mftb tensorboard {project / 'output' / 'tensorboard'}"
    assert f"       fix: point TensorBoard at the runs found: {command}\n" in check
    assert f"       to view the runs: {command}\n" in verdict(output, "TensorBoard")


def test_a_missing_logdir_lists_runs_only_under_its_nearest_existing_folder(tmp_path: Path) -> None:
    """A mistyped LOGDIR: the runs beside it are listed; runs elsewhere (home, another job) are not."""
    job, home = tmp_path / "my job", tmp_path / "home"
    write_mftb_run(job / "output" / "tensorboard" / "llama_20261129-101010")
    write_mftb_run(job / "output" / "a" / "b" / "c" / "too_deep")  # deeper than runs of output/tensorbord
    write_mftb_run(home / "tb" / "home_run")
    write_mftb_run(tmp_path / "other_job" / "output" / "tensorboard" / "other_run")
    finished_long_ago(tmp_path)
    code, output = doctor("output/tensorbord", cwd=job, HOME=str(home))
    assert code == 1
    check = verdict(output, "event files")
    assert check.startswith(
        f"[FAIL] event files: LOGDIR {job / 'output' / 'tensorbord'} does not exist "
        f"(the nearest existing folder is {job / 'output'})\n"
        f"       searched for runs: {job / 'output'} (2 levels down)\n"
        "       runs there (newest first):\n"
        f"         {job / 'output' / 'tensorboard' / 'llama_20261129-101010'}  (modified 1 h ago)\n"
    )
    command = f"mftb tensorboard '{job / 'output' / 'tensorboard'}'"  # quoted: the path has a space
    assert check.endswith(f"       fix: point TensorBoard at the runs found: {command}\n")
    assert f"       to view the runs: {command}\n" in verdict(output, "TensorBoard")
    for elsewhere in ("too_deep", "home_run", "other_run"):
        assert elsewhere not in output
    assert output.count("mftb tensorboard") == 2


def test_a_missing_logdir_with_no_runs_under_it_suggests_no_tensorboard(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    write_mftb_run(tmp_path / "y" / "neighbours_run")
    write_mftb_run(tmp_path / "home" / "output" / "tensorboard" / "home_run")
    code, output = doctor("./nope", cwd=tmp_path / "x", HOME=str(tmp_path / "home"))
    assert code == 1
    assert verdict(output, "event files") == (
        f"[FAIL] event files: LOGDIR {tmp_path / 'x' / 'nope'} does not exist "
        f"(the nearest existing folder is {tmp_path / 'x'})\n"
        f"       searched for runs: {tmp_path / 'x'} (2 levels down)\n"
        f"       fix: {NO_RUNS_FOUND}\n"
    )
    assert NO_RUNS_FOUND.startswith("no runs found: ") and "mftb train --config" in NO_RUNS_FOUND
    assert verdict(output, "TensorBoard").endswith("\n       no runs to view (see event files)\n")
    assert "mftb tensorboard" not in output and "neighbours_run" not in output and "home_run" not in output
    idle = tensorboard_server.free_port(17406)
    code, output = doctor("./nope", "--port", str(idle), cwd=tmp_path / "x", HOME=str(tmp_path / "home"))
    assert code == 1 and "mftb tensorboard" not in output
    assert f"[FAIL] TensorBoard on port {idle}: nothing listens on {idle}" in output


@pytest.mark.process
def test_the_suggested_command_works_when_pasted(tmp_path: Path) -> None:
    job = tmp_path / "my job"
    write_mftb_run(job / "output" / "tensorboard" / "llama_20261129-101010")
    _, output = doctor("output/tensorbord", cwd=job)
    (line,) = re.findall(r"^       fix: point TensorBoard at the runs found: (.*)$", output, flags=re.M)
    program, command, logdir = shlex.split(line)  # what a shell makes of it
    assert (program, command) == ("mftb", "tensorboard")
    with mftb_tensorboard(Path(logdir), "--port", str(tensorboard_server.free_port(17506))) as server:
        assert wait_for(lambda: tensorboard_server.get_json(server.port, "/data/runs")) == ["llama_20261129-101010"]


@pytest.mark.process
def test_mindspore_summary_files_are_named_as_unreadable(tmp_path: Path) -> None:
    logdir = tmp_path / "summary"
    code = (
        "import sys\nimport mindspore as ms\nfrom mindspore.train.summary import SummaryRecord\n"
        "with SummaryRecord(sys.argv[1]) as record:\n"
        "    record.add_value('scalar', 'loss', ms.Tensor(1.5))\n    record.record(1)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(logdir)], env=subprocess_env(), check=True, timeout=300)
    _, output = doctor(logdir)
    check = verdict(output, "event files")
    assert "holds no *tfevents* files" in check
    assert "files of MindSpore's SummaryRecord/SummaryCollector are here" in check
    assert "TensorBoard cannot read them" in check


def test_torn_and_corrupt_files_are_found_with_the_byte_to_cut_at(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    for name in ("torn", "corrupt"):
        write_mftb_run(logdir / name, last=50)
    (torn,) = (logdir / "torn").glob("*tfevents*")
    with open(torn, "r+b") as handle:  # a writer killed in the middle of its last record
        handle.truncate(torn.stat().st_size - 7)
    (corrupt,) = (logdir / "corrupt").glob("*tfevents*")
    data = bytearray(corrupt.read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    finished_long_ago(logdir)

    code, output = doctor(logdir)
    assert code == 1
    check = verdict(output, "files complete")
    assert check.startswith("[FAIL] files complete: 2 event files are damaged (torn or failing a checksum)")
    # 51 complete records: file version, START, steps 1..49 (the 50th is torn)
    assert re.search(r"torn/\S+: ends inside a record after 51 complete records \(byte \d+\)", check)
    assert re.search(r"corrupt/\S+: checksum mismatch at byte \d+", check)
    # The advice is true: TensorBoard shows the points before the tear, and cutting there heals the file.
    assert [s for s, _ in read_scalars(logdir / "torn")["train/loss"]] == list(range(1, 50))
    for path, pattern in ((corrupt, r"checksum mismatch at byte (\d+)"), (torn, r"records \(byte (\d+)\)")):
        with open(path, "r+b") as handle:
            handle.truncate(int(re.search(pattern, check).group(1)))
    finished_long_ago(logdir)
    assert verdict(doctor(logdir)[1], "files complete").startswith("[ OK ] files complete")


def test_a_file_held_open_by_a_running_writer_is_reported_with_its_process(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    child = subprocess.Popen(
        [sys.executable, str(HELPERS / "doctor_writer.py"), str(logdir / "live"), "1", "5", "hold"],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        finished_long_ago(logdir)  # not recently modified: the open handle alone must show it
        code, output = doctor(logdir)
    finally:
        child.kill()
        child.wait()
    assert code == 1
    check = verdict(output, "files complete")
    assert "[WARN] files complete: 1 event files are still being written" in check
    assert f"open by pid {child.pid} (python" in check


@pytest.mark.process
def test_two_processes_writing_one_run_folder(tmp_path: Path) -> None:
    run_dir = tmp_path / "tb" / "shared_run"
    children = [
        subprocess.Popen(
            # each writes step 1, waits until both files exist, then the rest: written at the same time
            [sys.executable, str(HELPERS / "doctor_writer.py"), str(run_dir), "1", "30", "close", "2"],
            env=subprocess_env(),
        )
        for _ in range(2)
    ]
    for child in children:
        assert child.wait(timeout=120) == 0
    code, output = doctor(tmp_path / "tb")
    assert code == 1
    check = verdict(output, "one writer per run")
    assert "[FAIL] one writer per run: 1 pairs of event files written concurrently" in check
    for child in children:
        assert f"pid {child.pid}, steps 1-30" in check


def test_restart_without_purge_is_caught_and_a_purged_restart_passes(tmp_path: Path) -> None:
    logdir = tmp_path / "tb"
    write_tensorboardx_run(logdir / "tbx_no_purge", 1, 80)
    write_tensorboardx_run(logdir / "tbx_no_purge", 51, 100, filename_suffix=".restart")
    write_tensorboardx_run(logdir / "tbx_purged", 1, 80)
    write_tensorboardx_run(logdir / "tbx_purged", 51, 100, filename_suffix=".restart", purge_step=51)
    write_mftb_run(logdir / "mftb_resumed", 1, 80)
    write_mftb_run(logdir / "mftb_resumed", 51, 100, start=51)  # what TensorBoardMonitor does on resume
    code, output = doctor(logdir)
    assert code == 1
    check = verdict(output, "steps go forward")
    assert check.startswith("[FAIL] steps go forward: 1 runs have steps going backwards")
    assert re.search(r"tbx_no_purge: train/loss step 80 -> 51 in \S+\.restart$", check, flags=re.M)  # one jump
    assert "tbx_purged" not in check and "mftb_resumed" not in check


def test_non_ascii_paths_warn(tmp_path: Path) -> None:
    write_mftb_run(tmp_path / "tb" / "实验_1")
    _, output = doctor(tmp_path / "tb")
    check = verdict(output, "ASCII paths")
    assert check.startswith("[WARN] ASCII paths: 1 paths contain non-ASCII characters") and "实验_1" in check


def test_large_logdir_warns_with_sizes_and_points(tmp_path: Path) -> None:
    write_mftb_run(tmp_path / "tb" / "long", last=300)
    _, output = doctor(tmp_path / "tb", "--max_points_per_tag", "100", "--max_gb", "0.00001")
    check = verdict(output, "logdir size")
    assert "[WARN] logdir size:" in check and "TensorBoard will load slowly" in check
    assert "long train/loss: 300 points" in check and "over 1e-05 GB" in check
    _, output = doctor(tmp_path / "tb")
    assert verdict(output, "logdir size").startswith("[ OK ] logdir size")


def test_bad_options_are_usage_errors(tmp_path: Path) -> None:
    code, _ = doctor(tmp_path, "--port", "70000")
    assert code == 2


@pytest.mark.process
def test_reading_is_streaming_memory_stays_flat(tmp_path: Path) -> None:
    """~20 MB of events: peak memory of `mftb doctor` stays near its import footprint, not the file size."""
    writer = RunWriter(tmp_path / "tb" / "long", max_queue=200_000)
    values = {f"train/t{i}": 0.5 for i in range(10)}
    for step in range(1, 100_001):
        writer.add_scalars(step, values)
    writer.close(timeout=300)
    assert sum(p.stat().st_size for p in (tmp_path / "tb").rglob("*tfevents*")) > 18 * 1024**2
    # A fresh interpreter whose only child is the doctor, so the peak is the doctor's alone.
    measure = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], capture_output=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", measure, MFTB, "doctor", str(tmp_path / "tb")],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert int(result.stdout) < 60, f"peak {result.stdout.strip()} MB"
