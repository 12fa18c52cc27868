"""The ``ranks`` TensorBoard plugin: a rank x step heatmap, the stragglers, one rank's series.

TensorBoard finds it through the ``tensorboard_plugins`` entry point of this package, so plain
``tensorboard --logdir ...`` and ``mftb tensorboard`` both load it. Its frontend is one ES module
(``ranks_frontend/index.js``), loaded in TensorBoard's plugin iframe; the JSON routes under
``/data/plugin/ranks/`` serve scripts as well (see the README).
"""

from __future__ import annotations

import json
import threading
from importlib import resources
from pathlib import Path

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from mindformers_tbplugin.pipeline.rank_records import PLUGIN_NAME
from mindformers_tbplugin.viewer import ranks_views
from mindformers_tbplugin.viewer.ranks_store import RanksStore

JSON = "application/json"
ACTIVE_WAIT_SECS = 2.0


def _int(request: wrappers.Request, name: str, default: int | None = None) -> int:
    raw = request.args.get(name)
    if raw is None:
        if default is None:
            raise ValueError(f"missing parameter {name!r}")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"parameter {name!r} must be an integer, got {raw!r}") from None


class RanksPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        # A local logdir only: --logdir_spec and remote logdirs leave context.logdir empty or not a folder.
        logdir = Path(context.logdir) if getattr(context, "logdir", None) else None
        self.store = RanksStore(logdir) if logdir is not None and logdir.is_dir() else None
        self._loading: threading.Thread | None = None
        self._loading_lock = threading.Lock()

    def get_plugin_apps(self) -> dict:
        return {
            "/index.js": self._serve_module,
            "/runs": self._serve_runs,
            "/matrix": self._serve_matrix,
            "/stragglers": self._serve_stragglers,
            "/rank": self._serve_rank,
        }

    def is_active(self) -> bool:
        # TensorBoard asks only when its own data provider has seen no record of this plugin yet. The
        # first read of a large run takes seconds, and TensorBoard's page waits for this answer: the
        # runs are read in the background, and what was found after a short wait answers.
        if self.store is None:
            return False
        if not self.store.has_records():
            with self._loading_lock:
                if self._loading is None or not self._loading.is_alive():
                    self._loading = threading.Thread(target=self.store.runs, name="mftb-ranks-read", daemon=True)
                    self._loading.start()
            self._loading.join(timeout=ACTIVE_WAIT_SECS)
        return self.store.has_records()

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Ranks", disable_reload=False)

    # -- routes ------------------------------------------------------------------------------------
    @wrappers.Request.application
    def _serve_module(self, request: wrappers.Request) -> wrappers.Response:
        source = resources.files(__package__).joinpath("ranks_frontend", "index.js").read_text(encoding="utf-8")
        return http_util.Respond(request, source, "text/javascript")

    @wrappers.Request.application
    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        runs = self.store.runs() if self.store is not None else {}
        return self._json(request, [ranks_views.run_summary(name, run) for name, run in runs.items()])

    @wrappers.Request.application
    def _serve_matrix(self, request: wrappers.Request) -> wrappers.Response:
        def answer(run):
            return ranks_views.matrix(
                run,
                request.args.get("channel", "step_time_ms"),
                _int(request, "max_ranks", ranks_views.DEFAULT_MAX_RANKS),
                _int(request, "max_steps", ranks_views.DEFAULT_MAX_STEPS),
            )

        return self._for_run(request, answer)

    @wrappers.Request.application
    def _serve_stragglers(self, request: wrappers.Request) -> wrappers.Response:
        return self._for_run(
            request, lambda run: ranks_views.stragglers(run, _int(request, "limit", ranks_views.DEFAULT_STRAGGLERS))
        )

    @wrappers.Request.application
    def _serve_rank(self, request: wrappers.Request) -> wrappers.Response:
        def answer(run):
            points = _int(request, "max_points", ranks_views.DEFAULT_SERIES_POINTS)
            return ranks_views.rank_series(run, _int(request, "rank"), points)

        return self._for_run(request, answer)

    # -- helpers -----------------------------------------------------------------------------------
    def _for_run(self, request: wrappers.Request, answer) -> wrappers.Response:
        name = request.args.get("run")
        if name is None:
            return self._error(request, 400, "missing parameter 'run'")
        run = self.store.run(name) if self.store is not None else None
        if run is None:
            return self._error(request, 404, f"no ranks records in run {name!r}")
        try:
            with run.lock:  # a refresh appending meanwhile would change the arrays under us
                body = {"run": name, **answer(run)}
        except ValueError as exc:
            return self._error(request, 400, str(exc))
        return self._json(request, body)

    @staticmethod
    def _json(request: wrappers.Request, body: object) -> wrappers.Response:
        return http_util.Respond(request, json.dumps(body, separators=(",", ":")), JSON)

    @staticmethod
    def _error(request: wrappers.Request, code: int, message: str) -> wrappers.Response:
        return http_util.Respond(request, json.dumps({"error": message}), JSON, code=code)
