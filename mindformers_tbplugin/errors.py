"""Exceptions for user mistakes, reported by ``mftb`` as a message without a traceback."""

from __future__ import annotations


class UsageError(ValueError):
    """A mistake in the command line, a file path or a file's contents (exit status 2)."""


class FrameworkImportError(UsageError):
    """MindSpore or MindFormers is installed but fails to import: its original error, once, and what to do."""
