"""What the ``ranks`` and ``moe`` TensorBoard plugins share: a store of every run's records read in the
background, the ES module, the ``runs`` route, and JSON answers with ``{"error": ...}`` and 400/404.

TensorBoard finds each plugin through the ``tensorboard_plugins`` entry point of this package, so plain
``tensorboard --logdir ...`` and ``mftb tensorboard`` both load them. A plugin's frontend is one ES module
(``<name>_frontend/index.js``), loaded in TensorBoard's plugin iframe.
"""

from __future__ import annotations

import json
import threading
from abc import abstractmethod
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from mindformers_tbplugin.viewer.tensor_records import RunCatalog

JSON = "application/json"
ACTIVE_WAIT_SECS = 2.0


def int_arg(request: wrappers.Request, name: str, default: int | None = None) -> int:
    """An integer query parameter; ``default`` when absent, or a ValueError (a 400) without a default."""
    raw = request.args.get(name)
    if raw is None:
        if default is None:
            raise ValueError(f"missing parameter {name!r}")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"parameter {name!r} must be an integer, got {raw!r}") from None


class RecordsPlugin(base_plugin.TBPlugin):
    """A plugin over one tag's records: subclasses name the plugin and its tab, make the store and
    describe a run for the ``runs`` route, and add their routes to :meth:`routes`."""

    plugin_name = ""
    tab_name = ""

    def __init__(self, context: base_plugin.TBContext) -> None:
        # A local logdir only: --logdir_spec and remote logdirs leave context.logdir empty or not a folder.
        logdir = Path(context.logdir) if getattr(context, "logdir", None) else None
        self.store: RunCatalog | None = self.make_store(logdir) if logdir is not None and logdir.is_dir() else None
        self._loading: threading.Thread | None = None
        self._loading_lock = threading.Lock()

    @abstractmethod
    def make_store(self, logdir: Path) -> RunCatalog: ...

    @abstractmethod
    def run_summary(self, name: str, run: object) -> dict: ...

    def routes(self) -> dict[str, Callable]:
        """The plugin's own JSON routes, beside ``/index.js`` and ``/runs``."""
        return {}

    def get_plugin_apps(self) -> dict:
        return {"/index.js": self._serve_module, "/runs": self._serve_runs, **self.routes()}

    def is_active(self) -> bool:
        # TensorBoard asks only when its own data provider has seen no record of this plugin yet. The
        # first read of a large run takes seconds, and TensorBoard's page waits for this answer: the
        # runs are read in the background, and what was found after a short wait answers.
        if self.store is None:
            return False
        if not self.store.has_records():
            with self._loading_lock:
                if self._loading is None or not self._loading.is_alive():
                    name = f"mftb-{self.plugin_name}-read"
                    self._loading = threading.Thread(target=self.store.runs, name=name, daemon=True)
                    self._loading.start()
            self._loading.join(timeout=ACTIVE_WAIT_SECS)
        return self.store.has_records()

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name=self.tab_name, disable_reload=False)

    @wrappers.Request.application
    def _serve_module(self, request: wrappers.Request) -> wrappers.Response:
        folder = f"{self.plugin_name}_frontend"
        source = resources.files(__package__).joinpath(folder, "index.js").read_text(encoding="utf-8")
        return http_util.Respond(request, source, "text/javascript")

    @wrappers.Request.application
    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        runs = self.store.runs() if self.store is not None else {}
        return self.json(request, [self.run_summary(name, run) for name, run in runs.items()])

    def for_run(self, request: wrappers.Request, answer: Callable[[object], dict]) -> wrappers.Response:
        """``{"run": name, **answer(run)}`` for the ``run`` parameter; a ValueError from ``answer`` is a 400."""
        name = request.args.get("run")
        if name is None:
            return self.error(request, 400, "missing parameter 'run'")
        run = self.store.run(name) if self.store is not None else None
        if run is None:
            return self.error(request, 404, f"no {self.plugin_name} records in run {name!r}")
        try:
            with run.lock:  # a refresh appending meanwhile would change the arrays under us
                body = {"run": name, **answer(run)}
        except ValueError as exc:
            return self.error(request, 400, str(exc))
        return self.json(request, body)

    @staticmethod
    def json(request: wrappers.Request, body: object) -> wrappers.Response:
        return http_util.Respond(request, json.dumps(body, separators=(",", ":")), JSON)

    @staticmethod
    def error(request: wrappers.Request, code: int, message: str) -> wrappers.Response:
        return http_util.Respond(request, json.dumps({"error": message}), JSON, code=code)
