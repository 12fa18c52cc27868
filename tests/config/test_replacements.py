"""config/replacements.py: what replaces SummaryCollector entries, MindFormers' own TensorBoard writers
(the top-level ``tensorboard:`` section, ``monitor.tensorboard``), the articles' ``type: TensorBoard`` and
a top-level print_separate_loss. Its tables held to the callback classes, to MindFormers' source (when
installed) and to BENCHMARKS.md; each function on hand-written settings with its exact result. Whole
configs through `mftb migrate` and `mftb validate`: tests/config/test_migration.py, test_checker.py."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO

from mindformers_tbplugin.config import replacements
from mindformers_tbplugin.schema import params_of

# MindFormers master's PyNative trainer config (real, unchanged): its monitor.tensorboard holds every key.
PYNATIVE_CONFIG = Path(__file__).resolve().parent / "migrate_configs" / "pynative_train_config_master.yaml"


# -- the tables against the classes, MindFormers and BENCHMARKS.md ----------------------------------
def test_the_tables_agree_with_the_classes_and_mindformers() -> None:
    from mindformers_tbplugin.callbacks import TensorBoardMonitor
    from mindformers_tbplugin.callbacks.tensorboard_alias import TensorBoard

    monitor = {p.name: p.default for p in params_of(TensorBoardMonitor)}
    assert monitor["aggregate_every"] == replacements.MONITOR_AGGREGATE_EVERY
    assert set(replacements.ALIAS_KEYS) == {p.name for p in params_of(TensorBoard)} - set(monitor)
    assert set(replacements.BUILTIN_OPTIONS.values()) <= set(monitor)
    # Every switch MindFormers' writer reads from the section has a line in the tables.
    spec = importlib.util.find_spec("mindformers")
    if spec is None or spec.origin is None:
        pytest.skip("no MindFormers installed")
    source = Path(spec.origin).parent / "utils" / "tensorboard.py"
    switches = re.search(r"_GLOBAL_TENSORBOARD_WRITER_ARGS = \{(.*?)\}", source.read_text(), flags=re.S).group(1)
    known = {*replacements.BUILTIN_OPTIONS, *replacements.BUILTIN_ALWAYS, *replacements.BUILTIN_NONE}
    assert set(re.findall(r"'(\w+)'", switches)) | {"tensorboard_dir", "tensorboard_queue_size"} <= known


def test_the_pynative_table_has_every_key_of_master() -> None:
    """Every key of master's monitor.tensorboard (the real config lists them all) has a line in the table."""
    section = yaml.safe_load(PYNATIVE_CONFIG.read_text())["monitor"]["tensorboard"]
    table = replacements.PYNATIVE
    assert set(section) == {*table.options, *table.always, *table.none}
    assert set(table.renamed.values()) == set(section) and table.dir_keys[0] in section
    from mindformers_tbplugin.callbacks import TensorBoardMonitor

    monitor = {p.name for p in params_of(TensorBoardMonitor)}
    assert set(table.options.values()) <= monitor


def test_the_loss_part_note_says_what_mindformers_does() -> None:
    """MindFormers' wrapper registers the loss-part accumulators only with print_separate_loss (true by default)
    and a model that is not a legacy one; MFLossMonitor writes the tags from them."""
    spec = importlib.util.find_spec("mindformers")
    if spec is None or spec.origin is None:
        pytest.skip("no MindFormers installed")
    package = Path(spec.origin).parent
    wrapper = (package / "wrapper" / "wrapper.py").read_text()
    guarded = re.findall(
        r"self\.print_separate_loss = bool\(print_separate_loss and not self\.use_legacy\)\n"
        r"(?:.*\n){0,6}?\s*if self\.print_separate_loss:\n"
        r"\s*self\.indexer_loss_parameter = parameter_register\.register\(\"indexer_loss\".*\n"
        r"\s*self\.aux_loss_parameter = parameter_register\.register\(\"aux_loss\".*\n"
        r"\s*self\.mtp_loss_parameter = parameter_register\.register\(\"mtp_loss\".*\n"
        r"\s*self\.lm_loss_parameter = parameter_register\.register\(\"lm_loss\"",
        wrapper,
    )
    assert len(guarded) == wrapper.count('parameter_register.register("lm_loss"') == 2  # both train wrappers
    trainer = (package / "trainer" / "base_trainer.py").read_text()
    assert 'print_separate_loss = getattr(self.config, "print_separate_loss", True)' in trainer
    assert '"print_separate_loss": print_separate_loss,' in trainer  # handed to the wrapper


def test_the_saving_quoted_is_the_one_benchmarks_md_measured() -> None:
    text = (REPO / "BENCHMARKS.md").read_text()
    table = text[text.index("## End-to-end step time") :]

    def row(variant: str) -> tuple[float, str]:
        match = re.search(rf"^\| {re.escape(variant)} \| ([0-9.]+) \| [^|]+ \| ([^|]+) \|", table, flags=re.M)
        assert match, variant
        return float(match.group(1)), match.group(2).strip()

    assert row("MFLossMonitor only")[0] == replacements.BUILTIN_COST["baseline_ms"]
    assert row("+ MindFormers `tensorboard:` (tensorboardX)") == (
        replacements.BUILTIN_COST["section_ms"],
        f"+{replacements.BUILTIN_COST['section_pct']:.2f}%",
    )
    assert row("+ TensorBoardMonitor, log_every 1")[1] == f"{replacements.BUILTIN_COST['monitor_pct']:+.2f}%"


# -- SummaryCollector -------------------------------------------------------------------------------
def test_summary_entries_are_a_type_or_the_articles_key() -> None:
    assert replacements.summary_settings({"type": "SummaryMonitor", "collect_freq": 5}) == {"collect_freq": 5}
    assert replacements.summary_settings({"summary_collector": {"summary_dir": "s"}}) == {"summary_dir": "s"}
    assert replacements.summary_settings({"summary_collector": None}) == {}  # a bare key: the defaults
    assert replacements.summary_settings({"type": "X", "summary_collector": {"a": 1}}) is None  # typed: not it
    assert replacements.summary_settings({"type": "TensorBoardMonitor"}) is None


@pytest.mark.parametrize(
    ("settings", "collects"),
    [
        ({}, True),  # by default the collector writes the first five parameters' histograms
        ({"keep_default_action": False}, False),
        ({"collect_specified_data": {"histogram_regular": "layers"}, "keep_default_action": False}, True),
        ({"collect_specified_data": {"histogram_regular": None}, "keep_default_action": False}, False),
        ({"collect_specified_data": {"histogram_regular": None}}, True),  # the default action still does
        ({"collect_specified_data": "not a mapping", "keep_default_action": False}, False),
    ],
)
def test_whether_the_collector_wrote_parameter_histograms(settings: dict[str, Any], collects: bool) -> None:
    assert replacements.collects_parameters(settings) is collects


@pytest.mark.parametrize(
    ("settings", "entries"),
    [
        ({}, [{"type": "TensorBoardMonitor", "log_every": 10}, {"type": "HistogramMonitor", "every_steps": 10}]),
        (
            {"summary_dir": "./s", "collect_freq": 4, "collect_tensor_freq": 50},
            [
                {"type": "TensorBoardMonitor", "log_dir": "./s", "log_every": 4, "aggregate_every": 12},
                {"type": "HistogramMonitor", "every_steps": 50},
            ],
        ),
        # A frequency that is no positive integer is the collector's default; a blank folder is no folder.
        (
            {"collect_freq": True, "summary_dir": "  ", "keep_default_action": False},
            [{"type": "TensorBoardMonitor", "log_every": 10}],
        ),
        (
            {"collect_freq": 0, "collect_tensor_freq": 0},
            [{"type": "TensorBoardMonitor", "log_every": 10}, {"type": "HistogramMonitor", "every_steps": 10}],
        ),
        (
            {"collect_freq": 5, "collect_tensor_freq": "often"},
            [{"type": "TensorBoardMonitor", "log_every": 5}, {"type": "HistogramMonitor", "every_steps": 5}],
        ),
    ],
    ids=["defaults", "all set", "invalid", "zero", "tensor freq invalid"],
)
def test_the_replacement_entries_log_what_the_collector_did(settings: dict[str, Any], entries: list[dict]) -> None:
    assert replacements.replacement_entries(settings) == entries


@pytest.mark.parametrize(
    ("log_every", "aggregate_every"), [(1, None), (2, None), (5, None), (10, None), (3, 12), (4, 12), (7, 14), (25, 25)]
)
def test_aggregate_every_is_the_default_or_the_next_multiple_of_log_every(
    log_every: int, aggregate_every: int | None
) -> None:
    # TensorBoardMonitor needs aggregate_every to be a multiple of log_every; its default is 10.
    assert replacements.aggregate_every_for(log_every) == aggregate_every


def test_the_refusal_spells_the_yaml_to_write_instead() -> None:
    assert replacements.summary_replacement_message({"summary_dir": "./s", "keep_default_action": False}) == (
        "SummaryCollector writes MindInsight summary files, which TensorBoard cannot open (it shows no runs); "
        "replace this entry with:\n"
        "      - type: TensorBoardMonitor\n"
        "        log_dir: ./s\n"
        "        log_every: 10"
    )


def test_each_collector_argument_has_a_fate() -> None:
    settings = {
        "summary_dir": "s",
        "collect_specified_data": {"collect_metric": True, "histogram_regular": "x", "collect_input_data": True},
        "export_options": None,
        "collect_specified_data_typo": 1,
    }
    mapped, unmapped = replacements.summary_option_fates(settings)
    assert mapped == {
        "summary_dir": "TensorBoardMonitor log_dir",
        "collect_specified_data.collect_metric": "train/loss is always written",
    }
    mindinsight = "no TensorBoardMonitor equivalent (MindInsight only)"
    assert list(unmapped) == [
        "collect_specified_data.histogram_regular",
        "collect_specified_data.collect_input_data",
        "export_options",
        "collect_specified_data_typo",
    ]
    assert unmapped["collect_specified_data.histogram_regular"].startswith("a regular expression; HistogramMonitor")
    assert {unmapped[key] for key in list(unmapped)[1:]} == {mindinsight}


# -- the articles' type: TensorBoard ----------------------------------------------------------------
def test_the_articles_keys_each_say_what_they_became() -> None:
    notes = replacements.alias_notes({"log_dir": "./tb", "histogram_interval": 2, "update_time": 1.5, "profile": 0})
    assert notes == [
        ("type", "TensorBoard is the articles' spelling of TensorBoardMonitor"),
        ("log_dir", "log_dir -> TensorBoardMonitor log_dir"),
        (
            "histogram_interval",
            "histogram_interval: 2 -> parameter histograms every 2 epoch(s) (HistogramMonitor every_epochs)",
        ),
        (
            "update_time",
            "update_time ignored: it is how often the viewer reloads; use "
            "`mftb tensorboard LOGDIR --reload_interval 1.5`",
        ),
        ("profile", "profile ignored: profiling is MindSpore's Profiler, not these logs"),
    ]
    assert replacements.alias_notes({"histogram_interval": 0})[1:] == [
        ("histogram_interval", "histogram_interval: 0 -> no parameter histograms")
    ]
    assert replacements.alias_notes({}) == [("type", "TensorBoard is the articles' spelling of TensorBoardMonitor")]


# -- MindFormers' writer sections -------------------------------------------------------------------
def test_a_section_is_found_by_its_path() -> None:
    document = {"tensorboard": {"tensorboard_dir": "a"}, "monitor": {"tensorboard": {"output_dir": "b"}}}
    assert replacements.section_of(document, replacements.BUILTIN) == {"tensorboard_dir": "a"}
    assert replacements.section_of(document, replacements.PYNATIVE) == {"output_dir": "b"}
    assert replacements.section_of({"monitor": "text"}, replacements.PYNATIVE) is None


@pytest.mark.parametrize(
    ("section", "older_names", "folder"),
    [
        ({"tensorboard_dir": "tb"}, False, "tb"),
        ({"tensorboard_dir": "tb", "tensorboard_on": False}, False, None),
        ({"tensorboard_dir": "tb", "tensorboard_on": True}, False, "tb"),
        ({"tensorboard_dir": "   "}, False, None),
        ({"tensorboard_dir": 3}, False, None),
        ("not a mapping", False, None),
    ],
)
def test_the_builtin_writer_wrote_only_with_a_folder_and_not_switched_off(
    section: Any, older_names: bool, folder: str | None
) -> None:
    document = {"tensorboard": section}
    assert replacements.writer_dir(document, replacements.BUILTIN, older_names) == folder


def test_the_pynative_writer_wrote_only_under_the_current_key_name() -> None:
    older = {"monitor": {"tensorboard": {"tensorboard_dir": "old"}}}
    assert replacements.writer_dir(older, replacements.PYNATIVE) is None  # MindFormers 2.0 wrote nothing from it
    assert replacements.writer_dir(older, replacements.PYNATIVE, older_names=True) == "old"
    both = {"monitor": {"tensorboard": {"tensorboard_dir": "old", "output_dir": "new"}}}
    assert replacements.writer_dir(both, replacements.PYNATIVE, older_names=True) == "new"


def test_the_builtin_writers_warning_names_its_rank_folders_without_a_double_slash() -> None:
    message = replacements.writer_message(replacements.BUILTIN, "out/tb/", "callbacks[1]")
    assert "(tensorboard_dir: out/tb/) besides the TensorBoardMonitor at callbacks[1]" in message
    assert "tensorboardX into out/tb/rank_<id> on every rank" in message


# -- print_separate_loss ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("document", "kind"),
    [
        ({}, None),
        ({"print_separate_loss": True, "use_legacy": False}, "mapped"),
        ({"print_separate_loss": 1, "use_legacy": False}, "mapped"),  # MindFormers takes any true value
        ({"print_separate_loss": False, "use_legacy": False}, "notes"),
        ({"print_separate_loss": True}, "unmapped"),  # use_legacy defaults to True: a legacy model
        ({"print_separate_loss": False, "use_legacy": "False"}, "unmapped"),  # a string is not False
    ],
)
def test_print_separate_loss_matters_only_for_mcore_models(document: dict[str, Any], kind: str | None) -> None:
    fate = replacements.loss_parts_fate(document)
    assert (fate[0] if fate else None) == kind
    if kind == "mapped":
        assert fate[1].startswith(f"-> {replacements.LOSS_PARTS}: ")
