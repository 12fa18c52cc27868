"""Does a run match its baseline: step matching, per-tag errors and a verdict against criteria, pure
arithmetic on :class:`~mindformers_tbplugin.imports.imported_run.ImportedRun` series."""
