"""What the articles MindFormers users read tell them to write: `type: TensorBoard` works as our
monitor and says what each of its keys became; MindSpore's SummaryCollector (whose files TensorBoard
cannot open) is refused before anything compiles, with the exact entries to write instead."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import MFTB, TINY_CONFIG, TrainingRun, read_scalars, subprocess_env, train, write_tiny_config
from tensorboard.backend.event_processing.event_accumulator import HISTOGRAMS, EventAccumulator

from mindformers_tbplugin.config.checker import check_file
from mindformers_tbplugin.registration.catalog import our_callbacks

ARTICLE_ENTRY = {"type": "TensorBoard", "log_dir": "./tb_logs/llm_finetune", "update_time": 60}


def _check(tmp_path: Path, callbacks: list) -> tuple[list[str], list[str]]:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"callbacks": callbacks}, sort_keys=False))
    report = check_file(config, our_callbacks())
    return [f.render() for f in report.errors], [f.render() for f in report.notes]


def test_the_articles_entry_validates_and_says_what_each_key_became(tmp_path: Path) -> None:
    errors, notes = _check(tmp_path, [{**ARTICLE_ENTRY, "histogram_interval": 1, "profile": 0}])
    assert errors == []
    assert "callbacks[0].type (line 2): TensorBoard is the articles' spelling of TensorBoardMonitor" in notes
    assert (
        "callbacks[0].update_time (line 4): update_time ignored: it is how often the viewer reloads; use "
        "`mftb tensorboard LOGDIR --reload_interval 60`"
    ) in notes
    assert (
        "callbacks[0].histogram_interval (line 5): histogram_interval: 1 -> parameter histograms every 1 epoch(s) "
        "(HistogramMonitor every_epochs)"
    ) in notes
    assert "callbacks[0].profile (line 6): profile ignored: profiling is MindSpore's Profiler, not these logs" in notes


def test_any_other_key_gets_the_usual_did_you_mean(tmp_path: Path) -> None:
    errors, _ = _check(tmp_path, [{**ARTICLE_ENTRY, "histogram_intervl": 1}])
    (error,) = errors
    assert error.startswith(
        "callbacks[0].histogram_intervl (line 5): unknown key 'histogram_intervl' for TensorBoard; "
        "did you mean 'histogram_interval'?"
    )


@pytest.mark.parametrize(
    ("entry", "replacement"),
    [
        (
            {"summary_collector": {"summary_dir": "./summary_dir", "collect_freq": 10}},
            [
                {"type": "TensorBoardMonitor", "log_dir": "./summary_dir", "log_every": 10},
                {"type": "HistogramMonitor", "every_steps": 10},
            ],
        ),
        (
            {"type": "SummaryCollector", "summary_dir": "/tmp/s", "collect_freq": 5, "keep_default_action": False},
            [{"type": "TensorBoardMonitor", "log_dir": "/tmp/s", "log_every": 5}],
        ),
        (
            {"type": "SummaryMonitor", "collect_tensor_freq": 100},
            [{"type": "TensorBoardMonitor", "log_every": 10}, {"type": "HistogramMonitor", "every_steps": 100}],
        ),
    ],
)
def test_summary_collector_is_refused_with_the_entries_that_replace_it(
    tmp_path: Path, entry: dict, replacement: list[dict]
) -> None:
    errors, _ = _check(tmp_path, [{"type": "MFLossMonitor"}, entry])
    (error,) = errors
    head, listing = error.split("\n", 1)
    assert head == (
        "callbacks[1] (line 3): SummaryCollector writes MindInsight summary files, which TensorBoard cannot open "
        "(it shows no runs); replace this entry with:"
    )
    assert yaml.safe_load(listing) == replacement
    # The printed replacement is itself a valid callbacks list.
    assert _check(tmp_path, [{"type": "MFLossMonitor"}, *replacement])[0] == []


@pytest.mark.process
def test_mftb_train_refuses_summary_collector_before_building_anything(tmp_path: Path) -> None:
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["callbacks"] = [{"type": "MFLossMonitor"}, {"summary_collector": {"summary_dir": str(tmp_path / "s")}}]
    path = tmp_path / "summary.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    result = subprocess.run(
        [MFTB, "train", "--config", str(path)], cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "SummaryCollector writes MindInsight summary files" in result.stderr
    assert "- type: TensorBoardMonitor" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "s").exists()


@pytest.fixture(scope="module")
def articles_run(tmp_path_factory: pytest.TempPathFactory, tiny_data: Path) -> TrainingRun:
    """16 steps in 2 epochs of the tiny LLaMA with the articles' entry (histograms every epoch)."""
    folder = tmp_path_factory.mktemp("articles")
    entry = {**ARTICLE_ENTRY, "log_dir": str(folder / "tb"), "histogram_interval": 1, "profile": 0}
    config = write_tiny_config(
        folder, tiny_data, [{"type": "MFLossMonitor"}, entry], num_samples=16, runner_config=_epochs(2)
    )
    run = train(config, folder)
    assert run.returncode == 0, run.output[-4000:]
    return run


def test_a_training_with_the_articles_entry_writes_scalars_and_epoch_histograms(articles_run: TrainingRun) -> None:
    run = articles_run
    assert "TensorBoard: TensorBoard is the articles' spelling of TensorBoardMonitor; " in run.output
    assert "update_time ignored" in run.output and "profile ignored" in run.output
    assert [step for step, _ in read_scalars(run.run_dir)["train/loss"]] == list(range(1, 17))
    tags = _histograms(run.run_dir)
    assert tags and all(tag.startswith("params/") for tag in tags)
    assert [step for step, _ in next(iter(tags.values()))] == [8, 16]  # the end of each epoch


def test_the_migrated_articles_entry_writes_the_same_run(articles_run: TrainingRun, tmp_path: Path) -> None:
    """`mftb migrate` of the articles' config (type: TensorBoard -> TensorBoardMonitor + a HistogramMonitor
    for histogram_interval), trained: the same scalar tags at the same steps with the same values (timings
    and memory aside, which differ between two trainings), the same histograms at the same steps."""
    migrated = tmp_path / "migrated.yaml"
    result = subprocess.run(
        [MFTB, "migrate", str(articles_run.folder / "tiny.yaml"), "-o", str(migrated)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(migrated.read_text())
    assert [entry["type"] for entry in config["callbacks"]] == [
        "MFLossMonitor",
        "TensorBoardMonitor",
        "HistogramMonitor",
    ]
    config["callbacks"][1]["log_dir"] = str(tmp_path / "tb")  # the original's folder holds the original's run
    config["output_dir"] = str(tmp_path / "output")
    migrated.write_text(yaml.safe_dump(config, sort_keys=False))
    run = train(migrated, tmp_path)
    assert run.returncode == 0, run.output[-4000:]
    assert "the articles' spelling" not in run.output
    original, ours = read_scalars(articles_run.run_dir), read_scalars(run.run_dir)
    assert set(ours) == set(original) and {"train/loss", "train/lr", "train/grad_norm", "perf/step_time_ms"} <= set(
        original
    )
    for tag, points in original.items():
        assert [step for step, _ in ours[tag]] == [step for step, _ in points], tag
        if not tag.startswith(("perf/", "system/")):
            assert [value for _, value in ours[tag]] == pytest.approx([value for _, value in points], rel=1e-5), tag
    original_histograms, our_histograms = _histograms(articles_run.run_dir), _histograms(run.run_dir)
    assert set(our_histograms) == set(original_histograms)
    for tag, events in original_histograms.items():
        assert [step for step, _ in our_histograms[tag]] == [step for step, _ in events], tag
        for (step, ours_at), (_, theirs_at) in zip(our_histograms[tag], events, strict=True):
            assert ours_at.num == theirs_at.num, (tag, step)
            for field in ("min", "max", "sum", "sum_squares"):
                assert getattr(ours_at, field) == pytest.approx(getattr(theirs_at, field), rel=1e-5), (tag, step)


def test_mftb_import_of_the_run_keeps_every_tag_value_and_histogram(articles_run: TrainingRun, tmp_path: Path) -> None:
    """A run of ours through `mftb import`: every tag as it is, the same points and histograms as
    TensorBoard's reader reads in the original."""
    result = subprocess.run(
        [MFTB, "import", str(articles_run.run_dir), "--logdir", str(tmp_path), "--name", "again"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert read_scalars(tmp_path / "again") == read_scalars(articles_run.run_dir)
    original, imported = _histograms(articles_run.run_dir), _histograms(tmp_path / "again")
    assert set(imported) == set(original) and original
    for tag, events in original.items():
        for (step, ours_at), (their_step, theirs_at) in zip(imported[tag], events, strict=True):
            assert (step, ours_at) == (their_step, theirs_at), tag


def _histograms(run_dir: Path) -> dict[str, list[tuple[int, object]]]:
    """Each histogram tag's (step, HistogramValue) through TensorBoard's reader."""
    accumulator = EventAccumulator(str(run_dir), size_guidance={HISTOGRAMS: 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.histogram_value) for event in accumulator.Histograms(tag)]
        for tag in accumulator.Tags()["histograms"]
    }


def _epochs(count: int) -> dict:
    runner = dict(yaml.safe_load(TINY_CONFIG.read_text())["runner_config"])
    runner["epochs"] = count
    return runner
