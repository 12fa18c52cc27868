"""Runs users already have, in other tools' formats: one reader module per format, each yielding an
:class:`~.imported_run.ImportedRun`, beside a registry that detects the format from content."""
