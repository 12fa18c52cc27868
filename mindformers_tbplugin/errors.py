"""Exceptions for user mistakes, reported by ``mftb`` as a message without a traceback."""

from __future__ import annotations


class UsageError(ValueError):
    """A mistake in the command line, a file path or a file's contents (exit status 2)."""
