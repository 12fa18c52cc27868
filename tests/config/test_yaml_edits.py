"""config/yaml_edits.py: line edits of a YAML file at its nodes' positions, on hand-written files parsed
as ``mftb validate`` parses them (yaml_lines.py). Lines with either line ending; the lines of a key
with its comments and one of its blank lines; a block list's items and their columns, and the layouts
that are refused with the line to fix; an entry's own lines with keys dropped and its type respelt;
rendered items, edits applied, values written on one line or as the file spells them; and the file
written in place keeping its mode. Whole configs through `mftb migrate`: tests/config/test_migration.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from mindformers_tbplugin.config.yaml_edits import Item, YamlText, child, one_line, write_text
from mindformers_tbplugin.errors import UsageError
from mindformers_tbplugin.yaml_lines import load


def parsed(text: str) -> tuple[YamlText, Any]:
    return YamlText(text, "cfg.yaml"), load(text)[1]


def test_lines_keep_their_endings_and_indices_map_to_lines() -> None:
    src = YamlText("a: 1\r\nb:\r\n  c: 2", "cfg.yaml")
    assert src.lines == ["a: 1\r\n", "b:\r\n", "  c: 2"]
    assert (src.newline, src.starts) == ("\r\n", [0, 6, 10])
    assert [src.line_at(i) for i in (0, 5, 6, 10, 15)] == [0, 0, 1, 2, 2]
    assert YamlText("a: 1\n", "cfg.yaml").newline == "\n"


def test_the_last_key_with_a_name_wins_as_in_the_document() -> None:
    _, root = parsed("a: 1\nb: 2\na: 3\n")
    key, value = child(root, "a")
    assert (key.start_mark.line, value.value) == (2, "3")
    assert child(root, "missing") is None
    assert child(None, "a") is None


KEYS = """\
# about the file
a: 1

# about b
b:
  c: 2
  # about c, deeper
# about d
d: 3

e: 4

f: 5
"""


@pytest.mark.parametrize(
    ("key", "lines"),
    [
        ("a", (1, 2)),  # the comment that opens the file stays
        ("b", (3, 7)),  # its comment above and the deeper one after, not the next key's
        ("d", (7, 9)),
        ("e", (10, 12)),  # between blank lines: one of them goes with it
    ],
)
def test_a_keys_lines_take_its_comments_and_one_blank_line(key: str, lines: tuple[int, int]) -> None:
    src, root = parsed(KEYS)
    assert src.key_lines(*child(root, key)) == lines


def test_removing_a_key_leaves_every_other_byte() -> None:
    src, root = parsed(KEYS)
    removed = src.apply([(*src.key_lines(*child(root, "b")), []), (*src.key_lines(*child(root, "e")), [])])
    assert removed == "# about the file\na: 1\n\n# about d\nd: 3\n\nf: 5\n"


LIST = """\
callbacks:
  - type: A   # first
    k: 1
  -   type: B
      k: [1,
          2]
    # deeper: after the list
other: 1
"""


def test_block_list_items_know_their_lines_and_columns() -> None:
    src, root = parsed(LIST)
    pair = child(root, "callbacks")
    assert src.item(pair, 0) == Item(first=1, last=2, dash=2, keys=4)
    assert src.item(pair, 1) == Item(first=3, last=5, dash=2, keys=6)
    assert src.end_of_list(pair) == 7  # after the deeper comment line


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "callbacks: [{type: A}]\n",
            "cfg.yaml: callbacks (line 1) is not a block list; write it as one ('- type: ...' per entry) and run again",
        ),
        (
            "base: &l\n  - type: A\ncallbacks: *l\n",
            "cfg.yaml: callbacks (line 3) is an alias of a list written elsewhere; write the list out under it and "
            "run again",
        ),
        (
            "callbacks:\n  -\n    type: A\n",
            "cfg.yaml: callbacks[0] (line 3) is not written as '- key: value' on its first line; write it so and "
            "run again",
        ),
        (
            "defaults: &d {k: 1}\ncallbacks:\n  - type: A\n    <<: *d\n",
            "cfg.yaml: callbacks[0] (line 3) takes keys from a merge key (<<); write them out in the entry and run "
            "again",
        ),
    ],
    ids=["flow list", "alias", "dash alone", "merge key"],
)
def test_other_list_layouts_are_refused_with_the_line_to_fix(text: str, message: str) -> None:
    src, root = parsed(text)
    with pytest.raises(UsageError) as caught:
        src.item(child(root, "callbacks"), 0)
    assert str(caught.value) == message


ENTRY = """\
callbacks:
  - profile: 0   # dropped
    # the type
    type: 'TensorBoard'
    log_dir: ./tb   # kept
  - type: TensorBoard
    profile: 0
"""


def test_an_entrys_lines_drop_keys_and_respell_its_type_in_its_quotes() -> None:
    src, root = parsed(ENTRY)
    pair = child(root, "callbacks")
    first, second = pair[1].value
    # The first kept key takes the dash; its comment moves to the dash's column.
    assert src.entry_lines(first, src.item(pair, 0), {"profile"}, "TensorBoardMonitor") == [
        "  # the type\n",
        "  - type: 'TensorBoardMonitor'\n",
        "    log_dir: ./tb   # kept\n",
    ]
    assert src.entry_lines(second, src.item(pair, 1), {"profile"}, "TensorBoardMonitor") == [
        "  - type: TensorBoardMonitor\n"
    ]


def test_rendered_items_take_the_lists_columns_and_the_files_line_ending() -> None:
    src = YamlText("callbacks:\r\n    -   type: A\r\n", "cfg.yaml")
    entries = [[("type", "TensorBoardMonitor"), ("log_every", "10")], [("type", "HistogramMonitor")]]
    assert src.render(entries, Item(1, 1, 4, 8), comment="added") == [
        "    -   type: TensorBoardMonitor  # added\r\n",
        "        log_every: 10\r\n",
        "    -   type: HistogramMonitor  # added\r\n",
    ]


def test_edits_replace_insert_and_delete_original_lines() -> None:
    src = YamlText("a\nb\nc\nd\n", "cfg.yaml")
    assert src.apply([(1, 2, ["B\n", "B2\n"]), (3, 3, ["inserted\n"]), (0, 1, [])]) == "B\nB2\nc\ninserted\nd\n"


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("./tb", "./tb"),
        (10, "10"),
        (0.5, "0.5"),
        (True, "true"),
        (None, "null"),
        ("a: b", "'a: b'"),
        ("10", "'10'"),
        ([1, "x"], "[1, x]"),
        ("日志", "日志"),
    ],
)
def test_a_value_on_one_line(value: Any, written: str) -> None:
    assert one_line(value) == written


def test_a_carried_scalar_keeps_the_files_spelling() -> None:
    src, root = parsed("a: './tb'   # c\nb: \"x\"\nc: >\n  folded\n  text\n")
    assert src.as_written(child(root, "a")[1], "./tb") == "'./tb'"
    assert src.as_written(child(root, "b")[1], "x") == '"x"'
    # A scalar written over several lines is written anew, as YAML that reads back as its value.
    rewritten = src.as_written(child(root, "c")[1], "folded text\n")
    assert rewritten == one_line("folded text\n") and yaml.safe_load(f"c: {rewritten}") == {"c": "folded text\n"}
    assert src.as_written(None, 3) == "3"


def test_a_file_is_replaced_keeping_its_mode_and_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text("old\n")
    path.chmod(0o640)
    write_text(path, "new ✓\n")
    assert path.read_text(encoding="utf-8") == "new ✓\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["cfg.yaml"]


def test_writing_through_a_link_writes_the_file_it_points_to(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    real, link = tmp_path / "real" / "cfg.yaml", tmp_path / "link.yaml"
    real.write_text("old\n")
    link.symlink_to(real)
    write_text(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert sorted(os.listdir(tmp_path / "real")) == ["cfg.yaml"]  # the temporary file was beside the target


def test_a_file_that_cannot_be_written_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        write_text(tmp_path / "missing" / "cfg.yaml", "x\n")
    assert str(caught.value) == f"cannot write {tmp_path / 'missing' / 'cfg.yaml'}: No such file or directory"
