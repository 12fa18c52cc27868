"""Alerts over training scalars: one pure-Python engine for AlertMonitor (inside training) and
``mftb watch`` (over any TensorBoard logs).

``record`` (the Alert), ``statistics`` (rolling windows), ``rules`` (the rules and their parameters),
``engine`` (the ``rules:`` configuration and the engine), ``sinks`` (where alerts go) and ``watcher``
(reading runs under a log folder). No MindSpore import here.
"""
