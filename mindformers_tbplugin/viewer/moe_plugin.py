"""The ``moe`` TensorBoard plugin: a mixture-of-experts model's layer x expert load at one step, each
layer's balance (MaxVio, dead experts) over the run, and the worst layers.

Its frontend is ``moe_frontend/index.js``. The JSON routes under ``/data/plugin/moe/`` (``runs``,
``record``, ``strip``, ``worst``) serve scripts as well. What all record plugins share is in
:mod:`.plugin_routes`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from werkzeug import wrappers

from mindformers_tbplugin.pipeline.expert_records import PLUGIN_NAME
from mindformers_tbplugin.viewer import moe_views
from mindformers_tbplugin.viewer.moe_store import MoeRun, MoeStore
from mindformers_tbplugin.viewer.plugin_routes import RecordsPlugin, int_arg


def _step(request: wrappers.Request, name: str = "step") -> int | None:
    return int_arg(request, name) if name in request.args else None


class MoePlugin(RecordsPlugin):
    plugin_name = PLUGIN_NAME
    tab_name = "MoE"

    def make_store(self, logdir: Path) -> MoeStore:
        return MoeStore(logdir)

    def run_summary(self, name: str, run: MoeRun) -> dict:
        return moe_views.run_summary(name, run)

    def routes(self) -> dict[str, Callable]:
        return {"/record": self._serve_record, "/strip": self._serve_strip, "/worst": self._serve_worst}

    @wrappers.Request.application
    def _serve_record(self, request: wrappers.Request) -> wrappers.Response:
        def answer(run: MoeRun) -> dict:
            return moe_views.record(run, _step(request), _step(request, "until"), request.args.get("layer"))

        return self.for_run(request, answer)

    @wrappers.Request.application
    def _serve_strip(self, request: wrappers.Request) -> wrappers.Response:
        steps = moe_views.DEFAULT_MAX_STEPS
        return self.for_run(request, lambda run: moe_views.strip(run, int_arg(request, "max_steps", steps)))

    @wrappers.Request.application
    def _serve_worst(self, request: wrappers.Request) -> wrappers.Response:
        def answer(run: MoeRun) -> dict:
            return moe_views.worst(run, _step(request), int_arg(request, "limit", moe_views.DEFAULT_WORST))

        return self.for_run(request, answer)
