"""What the config checker found, as ``mftb validate`` and ``mftb train`` print it, and keeping the
noise of importing MindSpore or MindFormers off the terminal while it checks."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Finding:
    """One problem, warning or note: the YAML path (``callbacks[2].log_every``), its line, and what is wrong."""

    path: str
    line: int | None
    message: str
    source: str = ""  # where the value came from when not this file: the team defaults' ``FILE line N``

    def render(self) -> str:
        where = self.path
        if self.source:
            where = f"{where} ({self.source})" if where else self.source
        elif self.line:
            where = f"{where} (line {self.line})" if where else f"line {self.line}"
        return f"{where}: {self.message}" if where else self.message


@dataclass
class Report:
    """The outcome for one file. ``unusable``: it could not be read, parsed or walked (exit status 2)."""

    source: Path
    errors: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)  # facts worth knowing, nothing to change
    log_dirs: list[Path] = field(default_factory=list)  # where the monitors will write, in entry order
    unusable: bool = False
    entries_checked: int = 0
    effective: list[str] = field(default_factory=list)  # every option of our entries and where it came from

    @property
    def exit_code(self) -> int:
        return 2 if self.unusable else 1 if self.errors else 0

    def render(self) -> str:
        """The file's block in ``mftb validate`` output: a header, then errors and warnings by line."""
        if self.unusable:
            head = f"{self.source}: cannot be checked"
        elif self.errors:
            head = f"{self.source}: {count(len(self.errors), 'problem')}"
        else:
            checked = count(self.entries_checked, "callback entry", "callback entries")
            head = f"{self.source}: OK ({checked} checked)"
        lines = [head]
        lines += [f"  error: {f.render()}" for f in sorted(self.errors, key=_by_line)]
        lines += [f"  warning: {f.render()}" for f in sorted(self.warnings, key=_by_line)]
        lines += [f"  note: {f.render()}" for f in sorted(self.notes, key=_by_line)]
        lines += self.effective
        return "\n".join(lines)


def _by_line(finding: Finding) -> int:
    return finding.line or 0


def count(n: int, singular: str, plural: str | None = None) -> str:
    """``1 problem``, ``3 problems``."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


@contextlib.contextmanager
def quiet_output() -> Iterator[None]:
    """Silence what importing mindspore or mindformers prints (deprecation and optional-model warnings)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
