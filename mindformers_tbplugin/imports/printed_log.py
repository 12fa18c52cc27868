"""What the readers of printed training logs share: a log's files (its rotated parts, oldest first)
read in large blocks of lines, and the ``key: value`` lines gathered by layout.

A training prints the same fields in the same order at every logged step, so each layout (its tuple
of keys) gets one compiled pattern, anchored at line starts. A block of text whose step lines all
match the last layout's pattern is read by one ``findall``, in C; only a block with another layout,
or with a line that does not parse, is walked line by line. Values stay text until the end, where
each column is converted at once: a 1,000,000-step log takes seconds.

Each row holds, in this order: the line's timestamp (or ""), the layout's values, and the format's
tail (what follows the line, or "").
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

_IMPORT_NAME = re.compile(r"[^0-9a-z]+")
_EXPONENT = re.compile(r"[eE]([-+]?\d+)$")
TIMESTAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[,.]\d+)?)"
_TIMESTAMP = re.compile(TIMESTAMP)
BLOCK_CHARS = 1 << 22  # text read at a time: 4 Mi characters, then up to the end of that line
SHOWN_LINES = 5  # line numbers named for the lines that did not parse

Row = tuple[str, ...]
Split = Callable[[str, int, str], tuple[tuple[str, ...], Row] | None]


def timestamp_in(prefix: str) -> str:
    found = _TIMESTAMP.search(prefix)
    return found.group() if found else ""


class Table:
    """The step lines of one source in file order, as blocks of rows of one layout each.

    ``split(text, pos, line)`` parses the line at ``pos`` of ``text`` by hand into (keys, row), or None
    when it does not parse; ``compile_layout(keys)`` makes the layout's pattern, whose groups are the
    row ``split`` gives; ``is_step_line(line)`` says which lines are meant as step lines."""

    def __init__(self, split: Split, compile_layout: Callable[[tuple[str, ...]], re.Pattern[str]]) -> None:
        self._split = split
        self._compile = compile_layout
        self._patterns: dict[tuple[str, ...], re.Pattern[str]] = {}
        self._last: tuple[str, ...] | None = None
        self.blocks: list[tuple[tuple[str, ...], list[Row]]] = []
        self.bad: list[int] = []  # numbers of the lines that did not parse
        self.paths: list[Path] = []
        self._starts: list[int] = []

    def read(
        self, paths: list[Path], count: Callable[[str], int], is_step_line: Callable[[str], bool]
    ) -> Iterator[str]:
        """Reads the files; yields each block of text after its step lines are taken (for the lines a
        format reads besides them). ``count(text)`` counts the step lines of a block."""
        first = 1
        for path in paths:
            self.paths.append(path)
            self._starts.append(first - 1)
            with open(path, encoding="utf-8", errors="replace") as handle:
                while text := handle.read(BLOCK_CHARS):
                    if not text.endswith("\n"):
                        text += handle.readline()
                    if is_step_line(text[text.rfind("\n", 0, -1) + 1 :]):  # what follows it, in the block too
                        text += handle.readline()
                    self._take(text, first, count(text), is_step_line)
                    first += text.count("\n")
                    yield text

    def _take(self, text: str, first: int, candidates: int, is_step_line: Callable[[str], bool]) -> None:
        if not candidates:
            return
        last = self._last
        if last is not None:
            rows = self._patterns[last].findall(text)
            if len(rows) == candidates:
                self._append(last, rows)
                return
        pos = 0
        for number, bare in enumerate(text.split("\n"), first):  # "\n" alone, as the line numbers count
            line = bare + "\n"
            if is_step_line(line):
                found = self._patterns[last].match(text, pos) if last is not None else None
                if found is not None:
                    self._append(last, [found.groups("")])
                else:
                    parsed = self._split(text, pos, line)
                    if parsed is None:
                        self.bad.append(number)
                    else:
                        keys, row = parsed
                        if keys not in self._patterns:
                            self._patterns[keys] = self._compile(keys)
                        self._append(keys, [row])
                        last = self._last = keys
            pos += len(line)

    def _append(self, keys: tuple[str, ...], rows: list[Row]) -> None:
        if self.blocks and self.blocks[-1][0] == keys:
            self.blocks[-1][1].extend(rows)
        else:
            self.blocks.append((keys, rows))

    def columns(self) -> Iterator[tuple[tuple[str, ...], list[tuple[str, ...]]]]:
        """Per block, in file order: its keys and one tuple of texts per key. Each block's rows are let go
        once its columns are made (a long log's texts are most of the memory a read takes)."""
        self.blocks.reverse()
        while self.blocks:
            keys, rows = self.blocks.pop()
            columns = list(zip(*rows, strict=True))
            del rows
            yield keys, columns

    def where(self, number: int) -> str:
        index = max(i for i, start in enumerate(self._starts) if start < number)
        return f"{self.paths[index].name}:{number - self._starts[index]}"

    def bad_lines_note(self, what: str) -> str:
        shown = ", ".join(self.where(number) for number in self.bad[:SHOWN_LINES])
        more = ", ..." if len(self.bad) > SHOWN_LINES else ""
        return f"{len(self.bad)} line(s) that look like {what} but do not parse ({shown}{more})"


def numbers(texts: tuple[str, ...] | list[str]) -> tuple[list[float | None], int]:
    """The texts as floats (None where a text is not a number) and how many were not."""
    try:
        return list(map(float, texts)), 0
    except ValueError:
        pass
    values: list[float | None] = []
    for text in texts:
        try:
            values.append(float(text))
        except ValueError:
            values.append(None)
    return values, values.count(None)


def series(steps: list[int], values: list[float | None], not_numbers: int) -> dict[int, float]:
    if not_numbers:
        return {s: v for s, v in zip(steps, values, strict=True) if v is not None}
    return dict(zip(steps, values, strict=True))  # type: ignore[arg-type]


def decimals(text: str) -> int:
    """Digits after the point of a printed number (of its mantissa when it has an exponent)."""
    mantissa = _EXPONENT.sub("", text.strip())
    point = mantissa.find(".")
    return 0 if point < 0 else len(mantissa) - point - 1


def resolution(text: str, largest: float) -> float:
    """The smallest step a field printed like ``text`` shows: 10^-decimals for a fixed-point format
    (``{:.3f}``: 0.001), 10^(exponent - decimals) at the largest value for an exponent format
    (``{:.6E}`` of 3.2: 1e-6)."""
    places = decimals(text)
    if _EXPONENT.search(text.strip()) and largest > 0 and math.isfinite(largest):
        return 10.0 ** (math.floor(math.log10(largest)) - places)
    return 10.0**-places


def import_name(key: str) -> str:
    """A field without a tag of ours, as ``import/<name>``: ``elapsed time per iteration (ms)`` ->
    ``elapsed_time_per_iteration_ms``."""
    return _IMPORT_NAME.sub("_", key.lower()).strip("_")


def wall_times(steps: list[int], stamps: tuple[str, ...]) -> dict[int, float]:
    """Step -> seconds since the epoch of the lines' local-time stamps (``2026-12-07 17:50:37,266``,
    ``2024-05-01 10:00:00.123456``; "" where a line has none)."""
    if not all(stamps):
        kept = [(step, text) for step, text in zip(steps, stamps, strict=True) if text]
        steps, stamps = [step for step, _ in kept], tuple(text for _, text in kept)
    if not stamps:
        return {}
    texts = "\n".join(stamps).replace(",", ".").split("\n")
    moments = map(datetime.fromisoformat, texts)
    return dict(zip(steps, map(datetime.timestamp, moments), strict=True))


def pairwise_gaps(steps: list[int]) -> list[int]:
    return [b - a for a, b in itertools.pairwise(steps) if b > a]
