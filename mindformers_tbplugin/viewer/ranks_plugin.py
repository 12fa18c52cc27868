"""The ``ranks`` TensorBoard plugin: a rank x step heatmap, the stragglers, one rank's series.

Its frontend is ``ranks_frontend/index.js``; the JSON routes under ``/data/plugin/ranks/`` serve scripts
as well (docs/ranks-dashboard.md). What all record plugins share is in :mod:`.plugin_routes`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from werkzeug import wrappers

from mindformers_tbplugin.pipeline.rank_records import PLUGIN_NAME
from mindformers_tbplugin.viewer import ranks_views
from mindformers_tbplugin.viewer.plugin_routes import RecordsPlugin, int_arg
from mindformers_tbplugin.viewer.ranks_store import RanksStore, RunRecords


class RanksPlugin(RecordsPlugin):
    plugin_name = PLUGIN_NAME
    tab_name = "Ranks"

    def make_store(self, logdir: Path) -> RanksStore:
        return RanksStore(logdir)

    def run_summary(self, name: str, run: RunRecords) -> dict:
        return ranks_views.run_summary(name, run)

    def routes(self) -> dict[str, Callable]:
        return {"/matrix": self._serve_matrix, "/stragglers": self._serve_stragglers, "/rank": self._serve_rank}

    @wrappers.Request.application
    def _serve_matrix(self, request: wrappers.Request) -> wrappers.Response:
        def answer(run: RunRecords) -> dict:
            return ranks_views.matrix(
                run,
                request.args.get("channel", "step_time_ms"),
                int_arg(request, "max_ranks", ranks_views.DEFAULT_MAX_RANKS),
                int_arg(request, "max_steps", ranks_views.DEFAULT_MAX_STEPS),
            )

        return self.for_run(request, answer)

    @wrappers.Request.application
    def _serve_stragglers(self, request: wrappers.Request) -> wrappers.Response:
        limit = ranks_views.DEFAULT_STRAGGLERS
        return self.for_run(request, lambda run: ranks_views.stragglers(run, int_arg(request, "limit", limit)))

    @wrappers.Request.application
    def _serve_rank(self, request: wrappers.Request) -> wrappers.Response:
        def answer(run: RunRecords) -> dict:
            points = int_arg(request, "max_points", ranks_views.DEFAULT_SERIES_POINTS)
            return ranks_views.rank_series(run, int_arg(request, "rank"), points)

        return self.for_run(request, answer)
