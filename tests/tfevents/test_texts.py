"""One tag's text summaries read back from real event files written by the product's RunWriter."""

from __future__ import annotations

from pathlib import Path

from mindformers_tbplugin.tfevents.run_folders import event_files
from mindformers_tbplugin.tfevents.texts import read_texts
from mindformers_tbplugin.tfevents.writer import RunWriter


def test_texts_of_one_tag_in_the_order_written(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    writer.add_text(3, "alerts/incident", "**spike** at step 3\n- ranks: rank 1 4.38 (非ASCII)")
    writer.add_scalars(3, {"alerts/incident": 1.0})  # a scalar of the same name is not a text
    writer.add_text(4, "alerts/messages", "another tag")
    writer.add_text(9, "alerts/incident", "second")
    writer.close()
    assert list(read_texts(event_files(tmp_path), "alerts/incident")) == [
        (3, "**spike** at step 3\n- ranks: rank 1 4.38 (非ASCII)"),
        (9, "second"),
    ]
