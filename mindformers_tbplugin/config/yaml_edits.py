"""Line edits of a YAML file at the positions of its nodes: only the lines edited change; every other
byte stays as written (comments, quotes, indentation, key order, ``True`` or ``true``).

The positions are those of the node tree ``yaml_lines.load`` composes (the parse ``mftb validate``
makes): every node knows the index where its text starts and ends. A round-trip YAML dump cannot keep
a file that way: on MindFormers' own configs it re-indents 4-space sections, joins multi-line flow
lists and respells booleans. ``mftb migrate`` is built on these edits.
"""

from __future__ import annotations

import bisect
import os
import re
import tempfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mindformers_tbplugin.errors import UsageError

_ALIAS_TOKEN = re.compile(r"[\s:-]*\*[^\s,\[\]{}]+")  # an alias after a key's end or a dash
_DASH = re.compile(r"( *)-( +)")
Edit = tuple[int, int, list[str]]  # (first line, end line) of the original text, replaced by these lines


@dataclass(frozen=True)
class Item:
    """A block list item: its first and last line, the column of its dash and of its keys."""

    first: int
    last: int
    dash: int
    keys: int


def child(node: yaml.Node | None, name: str) -> tuple[yaml.Node, yaml.Node] | None:
    """The (key, value) nodes of ``name`` in a mapping node; the last one wins, as in the document."""
    found = None
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == name:
                found = (key, value)
    return found


def one_line(value: Any) -> str:
    """A value written as YAML on one line (``./tb``, ``10``, ``'a: b'``)."""
    return yaml.safe_dump([value], default_flow_style=True, width=1 << 30, allow_unicode=True).strip()[1:-1]


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path``. A file is replaced atomically (a temporary file beside it, then a
    rename), keeping its mode; through a symbolic link, the file it points to. Anything else that
    exists there (a pipe, a device such as /dev/stdout) is written into, never replaced."""
    path = Path(path)
    try:
        if path.exists() and not path.resolve().is_file():
            with open(path, "wb") as stream:
                stream.write(text.encode("utf-8"))
            return
        path = path.resolve()
        if path.exists():
            mode = path.stat().st_mode & 0o7777
        else:  # a new file gets the mode open() would give it, not mkstemp's 0600
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(handle, "wb") as stream:
                stream.write(text.encode("utf-8"))
            os.chmod(temporary, mode)
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


class YamlText:
    """One file's text by lines (``\\n`` or ``\\r\\n``), where its nodes end, and edits rendered in its layout."""

    def __init__(self, text: str, label: str) -> None:
        self.text, self.label = text, label  # label: how messages name the file
        self.lines = re.findall(r"[^\n]*\n|[^\n]+$", text)
        self.starts = [0]
        for line in self.lines[:-1]:
            self.starts.append(self.starts[-1] + len(line))
        self.newline = "\r\n" if "\r\n" in text else "\n"

    def line_at(self, index: int) -> int:
        return bisect.bisect_right(self.starts, index) - 1

    def indent(self, line: int) -> int:
        return len(self.lines[line]) - len(self.lines[line].lstrip(" "))

    def is_blank(self, line: int) -> bool:
        return not self.lines[line].strip()

    def is_comment(self, line: int) -> bool:
        return self.lines[line].lstrip().startswith("#")

    def end(self, node: yaml.Node, after: int) -> int:
        """Index just past the last character of ``node``'s own text. ``after``: where its token
        starts at the earliest (a node that starts before is an alias's anchor, written elsewhere)."""
        if node.start_mark.index < after:
            match = _ALIAS_TOKEN.match(self.text, after)
            return match.end() if match else after
        # A block mapping's or sequence's own end mark lies past the comment lines after it: its last value ends it.
        if isinstance(node, yaml.MappingNode) and not node.flow_style and node.value:
            key, value = node.value[-1]
            return self.end(value, key.end_mark.index)
        if isinstance(node, yaml.SequenceNode) and not node.flow_style and node.value:
            end = node.start_mark.index
            for item in node.value:
                end = self.end(item, end)
            return end
        end = node.end_mark.index
        while end > node.start_mark.index and self.text[end - 1] in " \t\r\n":
            end -= 1
        return end

    def last_line(self, node: yaml.Node, after: int) -> int:
        return self.line_at(max(self.end(node, after) - 1, after))

    def as_written(self, node: yaml.Node | None, value: Any) -> str:
        """A carried value as the file spells it (quotes included) when it is a one-line scalar."""
        if isinstance(node, yaml.ScalarNode):
            text = self.text[node.start_mark.index : node.end_mark.index]
            if text and not {"\n", "\r"} & set(text):
                return text
        return one_line(value)

    def key_lines(self, key: yaml.Node, value: yaml.Node) -> tuple[int, int]:
        """The lines of a key and its value, with the comment lines right above it (unless they open the
        file), the deeper comment lines after it, and one blank line when it stood between blank lines:
        (first, end)."""
        line, last = self.line_at(key.start_mark.index), self.last_line(value, key.end_mark.index)
        column, first = self.indent(line), line
        while first > 0 and self.is_comment(first - 1) and self.indent(first - 1) == column:
            first -= 1
        if first == 0:  # comment lines that open the file are about the file
            first = line
        while last + 1 < len(self.lines) and self.is_comment(last + 1) and self.indent(last + 1) > column:
            last += 1
        if (first == 0 or self.is_blank(first - 1)) and last + 1 < len(self.lines) and self.is_blank(last + 1):
            last += 1
        return first, last + 1

    def item(self, pair: tuple[yaml.Node, yaml.Node], index: int) -> Item:
        """Where item ``index`` of the block list under ``pair``'s key is; other layouts are refused."""
        key, sequence = pair
        if sequence.start_mark.index < key.end_mark.index:
            raise UsageError(
                f"{self.label}: {key.value} (line {self.line_at(key.start_mark.index) + 1}) is an alias of a list "
                "written elsewhere; write the list out under it and run again"
            )
        if not isinstance(sequence, yaml.SequenceNode) or sequence.flow_style:
            raise UsageError(
                f"{self.label}: {key.value} (line {self.line_at(key.start_mark.index) + 1}) is not a block list; "
                "write it as one ('- type: ...' per entry) and run again"
            )
        node = sequence.value[index]
        after = self.end(sequence.value[index - 1], key.end_mark.index) if index else key.end_mark.index
        line = self.line_at(node.start_mark.index)
        dash = _DASH.fullmatch(self.text[self.starts[line] : node.start_mark.index])
        if node.start_mark.index < after or dash is None:
            raise UsageError(
                f"{self.label}: {key.value}[{index}] (line {line + 1}) is not written as '- key: value' on its "
                "first line; write it so and run again"
            )
        starts = [k.start_mark.index for k, _ in node.value] if isinstance(node, yaml.MappingNode) else []
        if starts != sorted(starts) or any(start < node.start_mark.index for start in starts):
            raise UsageError(  # the loader put a merge key's (<<) keys, written elsewhere, in the entry
                f"{self.label}: {key.value}[{index}] (line {line + 1}) takes keys from a merge key (<<); write them "
                "out in the entry and run again"
            )
        return Item(line, self.last_line(node, node.start_mark.index), len(dash.group(1)), len(dash.group(0)))

    def end_of_list(self, pair: tuple[yaml.Node, yaml.Node]) -> int:
        """The line after a block list's last item and the deeper comment lines that follow it."""
        layout = self.item(pair, 0)
        last = self.item(pair, len(pair[1].value) - 1).last
        while last + 1 < len(self.lines) and self.is_comment(last + 1) and self.indent(last + 1) > layout.dash:
            last += 1
        return last + 1

    def render(self, entries: list[list[tuple[str, str]]], item: Item, comment: str = "") -> list[str]:
        """Block list items ``- key: value`` (values already YAML) at ``item``'s columns."""
        out = []
        for entry in entries:
            for position, (key, value) in enumerate(entry):
                prefix = self._dash(item) if position == 0 else " " * item.keys
                tail = f"  # {comment}" if comment and position == 0 else ""
                out.append(f"{prefix}{key}: {value}{tail}{self.newline}")
        return out

    def entry_lines(self, node: yaml.MappingNode, item: Item, drop: Collection[str], retype: str) -> list[str]:
        """A block mapping item's own lines without the keys in ``drop`` and with its ``type`` value
        replaced by ``retype`` (quotes kept). Comment lines above a key go with it; when the first key
        is dropped, the first key kept takes the dash and its comment lines move to the dash's column."""
        out: list[str] = []
        previous = item.first - 1
        for key, value in node.value:
            first, last = self.line_at(key.start_mark.index), self.last_line(value, key.end_mark.index)
            start, previous = previous + 1, last
            if key.value in drop:
                continue
            lines = self.lines[start : last + 1]
            at = first - start
            if key.value == "type" and isinstance(value, yaml.ScalarNode):
                begin, end = (mark.index - self.starts[first] for mark in (value.start_mark, value.end_mark))
                quote = lines[at][begin] if value.style in ("'", '"') else ""
                lines[at] = f"{lines[at][:begin]}{quote}{retype}{quote}{lines[at][end:]}"
            if not out and first != item.first:
                lines[:at] = [" " * item.dash + line.lstrip(" ") for line in lines[:at]]
                lines[at] = self._dash(item) + lines[at][item.keys :]
            out.extend(lines)
        return out

    def apply(self, edits: list[Edit]) -> str:
        """The text with every edit made (edits of the original lines, none overlapping)."""
        lines = list(self.lines)
        for first, end, new in sorted(edits, key=lambda edit: (edit[0], edit[1]), reverse=True):
            lines[first:end] = new
        return "".join(lines)

    @staticmethod
    def _dash(item: Item) -> str:
        return " " * item.dash + "-" + " " * (item.keys - item.dash - 1)
