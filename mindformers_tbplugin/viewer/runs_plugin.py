"""The ``runs`` TensorBoard plugin: ``mftb runs``' table of every run under the logdir, each row linking to
that run's charts. Its frontend is ``runs_frontend/index.js``; its one JSON route, ``/table``, answers
``{"root", "stale_after", "read_s", "rows": [...]}`` (the rows as ``mftb runs --json`` prints them).
Ordinary plugin routes: whatever guards TensorBoard's routes guards them.
"""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from mindformers_tbplugin.pipeline.status_record import DEFAULT_STALE_AFTER_SECS
from mindformers_tbplugin.viewer import runs_table
from mindformers_tbplugin.viewer.plugin_routes import RecordsPlugin

PLUGIN_NAME = "runs"


class RunsPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        # A local logdir only: --logdir_spec and remote logdirs leave context.logdir empty or not a folder.
        logdir = Path(context.logdir) if getattr(context, "logdir", None) else None
        self.root = logdir if logdir is not None and logdir.is_dir() else None

    def get_plugin_apps(self) -> dict:
        return {"/index.js": self._serve_module, "/table": self._serve_table}

    def is_active(self) -> bool:
        return self.root is not None and next(runs_table.run_folders(self.root), None) is not None

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Runs", disable_reload=False)

    @wrappers.Request.application
    def _serve_module(self, request: wrappers.Request) -> wrappers.Response:
        source = resources.files(__package__).joinpath("runs_frontend", "index.js").read_text(encoding="utf-8")
        return http_util.Respond(request, source, "text/javascript")

    @wrappers.Request.application
    def _serve_table(self, request: wrappers.Request) -> wrappers.Response:
        raw = request.args.get("stale_after", str(DEFAULT_STALE_AFTER_SECS))
        try:
            stale_after = float(raw)
        except ValueError:
            stale_after = -1.0
        if not stale_after > 0:
            return RecordsPlugin.error(request, 400, f"parameter 'stale_after' must be a positive number, got {raw!r}")
        began = time.perf_counter()
        rows = runs_table.list_runs(self.root, stale_after) if self.root is not None else []
        body = {
            "root": str(self.root or ""),
            "stale_after": stale_after,
            "read_s": round(time.perf_counter() - began, 3),
            "rows": [row.as_json() for row in runs_table.sort_rows(rows)],
        }
        return RecordsPlugin.json(request, body)
