"""``AlertMonitor``: alert rules on the values TensorBoardMonitor writes, inside training."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mindformers_tbplugin.alerts import culprits
from mindformers_tbplugin.alerts.alert_text import tensorboard_url as team_tensorboard
from mindformers_tbplugin.alerts.engine import DEFAULT_RULES, AlertEngine, build_rules, parse_rules
from mindformers_tbplugin.alerts.expert_culprits import ExpertCulprits
from mindformers_tbplugin.alerts.incident import IncidentRecorder
from mindformers_tbplugin.alerts.record import Alert
from mindformers_tbplugin.alerts.sinks import Dispatcher, build_sinks, parse_sinks, unavailable_sinks, usable_sinks
from mindformers_tbplugin.framework.checkpoints import checkpoints_of
from mindformers_tbplugin.framework.data_rows import data_order_of
from mindformers_tbplugin.framework.trainers import CLASSIC, MonitorCallback, TrainStart
from mindformers_tbplugin.log import logger
from mindformers_tbplugin.pipeline import metrics
from mindformers_tbplugin.pipeline.run import Run, training_run
from mindformers_tbplugin.schema import ConfigError, Problem, check_entry, did_you_mean

DEFAULT_SINKS = ("log", "tensorboard")


class AlertMonitor(MonitorCallback):
    """Evaluate alert rules on every step TensorBoardMonitor writes; report, and stop training on request.

    Rules see exactly the values of the main run (after cross-rank aggregation), on the rank that
    writes it, so a TensorBoardMonitor must be in the same ``callbacks:`` list. A rule with
    ``action: stop`` ends training at the end of the step that fired it (classic trainer: MindSpore's
    ``run_context.request_stop()``; MindFormers 2.x's PyNative trainer: its step limit), so
    checkpoints and event files are closed normally. With several ranks the request rides in
    TensorBoardMonitor's next cross-rank aggregation, and every rank stops
    after that step (at most one aggregation interval later). The run's ``meta/status`` then reads
    ``stopped by AlertMonitor (<rule> on <tag>) at step N`` and ``mftb train`` exits with status 3.
    With per-layer gradient norms (``runner_wrapper.local_norm``), an alert on a gradient norm names
    the three groups that stand out most against their own recent median; an alert on a ``moe/`` tag
    of a mixture-of-experts model names the MoE layer and its busiest and idle experts. Every alert
    carries an incident: the ranks' losses at its step, the layers, the last checkpoint before it and
    the lines that resume past it (alerts/incident.py).

    Args:
        rules: Alert rules, e.g. ``[{rule: nonfinite, action: stop}, {rule: spike, tag: train/loss, k: 6}]``;
            null: nonfinite, spike, throughput_drop, loss_scale_collapse, expert_collapse and
            baseline_divergence (which judges only a run with a baseline) with their defaults.
        sinks: Where alerts go: ``log``, ``tensorboard``, ``{jsonl: path}``, ``{command: [argv...]}``,
            ``{webhook: url}``, ``{feishu: url, secret_env: VAR}``, ``{dingtalk: url, secret_env: VAR}``,
            ``{wecom: url}``, ``{slack: url}``, ``{email: {host, to, from, ...}}``; null: ``[log, tensorboard]``.
        tensorboard_url: The team's TensorBoard address, for a link to the run in chat and mail alerts;
            null: the environment variable MFTB_TENSORBOARD_URL, else no link.
    """

    def __init__(
        self, rules: list[dict] | None = None, sinks: list[str | dict] | None = None, tensorboard_url: str | None = None
    ) -> None:
        super().__init__()
        arguments = {"rules": rules, "sinks": sinks, "tensorboard_url": tensorboard_url}
        problems = check_entry(type(self), arguments)  # the same checks as `mftb validate`
        if problems:
            raise ConfigError.for_owner(type(self).__name__, problems)
        self.rule_specs = list(DEFAULT_RULES if rules is None else rules)
        self.sink_specs = list(DEFAULT_SINKS if sinks is None else sinks)
        self.tensorboard_url = tensorboard_url
        self._engine: AlertEngine | None = None
        self._dispatcher: Dispatcher | None = None
        self._request_stop: Any = None
        self._several_ranks = False
        self._stop_refused = False
        self._steps_seen = 0
        self._unwritten: set[str] = set()  # tags the rules name that no written step has held yet
        self._culprits = culprits.GradientCulprits()
        self._experts = ExpertCulprits()
        self._held: list[Alert] = []  # gradient alerts whose step's group norms are not written yet
        self.fired: list[Alert] = []
        self._run = Run()  # the training's, from train begin
        self._incidents = IncidentRecorder(self._run, self._culprits)

    @classmethod
    def check_cross_fields(cls, arguments: Mapping[str, Any]) -> list[Problem]:
        """Each rule and sink entry: names, parameters and their types (top-level types are already right)."""
        rules = arguments.get("rules")
        sinks = arguments.get("sinks")
        _, problems = build_rules(DEFAULT_RULES if rules is None else rules, "rules")
        _, sink_problems = build_sinks(DEFAULT_SINKS if sinks is None else sinks, "sinks")
        return problems + sink_problems

    @classmethod
    def config_warnings(cls, arguments: Mapping[str, Any]) -> list[Problem]:
        """Rules on a tag the monitor does not write that looks like a misspelt one it does; sinks whose
        secret is not set here."""
        found = _custom_rule_tags(arguments)
        warnings = [Problem(key, f"no monitor writes {tag!r}; {hint}") for key, tag, hint in found if hint]
        return warnings + unavailable_sinks(arguments.get("sinks") or ())

    @classmethod
    def config_notes(cls, arguments: Mapping[str, Any]) -> list[Problem]:
        """Rules on tags that only extra_metrics or log_scalars can write."""
        return [
            Problem(key, f"{tag!r} is not a tag TensorBoardMonitor writes itself: extra_metrics or log_scalars must")
            for key, tag, hint in _custom_rule_tags(arguments)
            if not hint
        ]

    # -- training events (either trainer) ---------------------------------------------------------
    def train_started(self, start: TrainStart) -> None:
        topology = start.topology
        if not topology.is_writer:
            return  # the values are published where the main run is written
        self._several_ranks = topology.communicating
        rules = parse_rules(self.rule_specs, owner=type(self).__name__)
        link = team_tensorboard(self.tensorboard_url)
        sinks = usable_sinks(parse_sinks(self.sink_specs, owner=type(self).__name__, tensorboard=link))
        self._engine = AlertEngine(rules)
        self._dispatcher = Dispatcher(sinks)
        # A default tag may exist only in some trainings: only the tags the rules name are followed.
        self._unwritten = {tag for _, tag in _named_tags(self.rule_specs)}
        watched = "; ".join(f"{rule.name} on {', '.join(rule.tags()) or 'progress'} ({rule.action})" for rule in rules)
        logger.info("AlertMonitor: rules %s; alerts to %s", watched, ", ".join(sink.describe() for sink in sinks))
        self._request_stop = start.request_stop
        self._steps_seen = 0
        self._run = training_run(start.training)
        config = start.config.config if start.config is not None else None
        saved = checkpoints_of(start.trainer == CLASSIC, start.eval_callbacks, start.steps_per_epoch, config)
        self._incidents = IncidentRecorder(self._run, self._culprits, saved, data_order_of(start))
        self._run.subscribe(self._on_values)
        self._run.subscribe_expert_loads(self._experts.remember)

    def train_ended(self, failure: str | None) -> None:
        self._finish()

    # -- internals --------------------------------------------------------------------------------
    def _on_values(self, step: int, values: dict[str, float]) -> None:
        """Bus listener, on the training thread: rule updates only; sinks do their work off-thread."""
        self._steps_seen += 1
        self._incidents.remember(step, values)
        if self._unwritten:  # empty after the first steps: nothing to do on the hot path
            self._unwritten.difference_update(values.keys())
        if not self._engine.run:  # TensorBoardMonitor names its run at its own train begin
            self._engine.run = self._run.name
        fired = [self._experts.annotate(alert) for alert in self._engine.observe(step, values)]
        if not self._run.gradient_groups:  # else wait for a step's group norms to name culprits
            if fired:
                self._report(step, fired)
            return
        with_groups = metrics.GRAD_NORM_TOTAL in values
        if fired or self._held:
            self._report(step, self._with_culprits(step, fired, values if with_groups else None))
        if with_groups:
            self._culprits.remember(values)

    def _with_culprits(self, step: int, fired: list[Alert], values: dict[str, float] | None) -> list[Alert]:
        """The alerts to report now. On a multi-rank job the group norms of a step are written at the
        next cross-rank aggregation, after ``train/grad_norm``: an alert on a gradient norm waits for
        them (at most one aggregation interval), or goes out as it is once a later step's arrive."""
        ready, held = [], []
        for alert in [*self._held, *fired]:
            if values is not None and alert.step == step:
                ready.append(self._culprits.annotate(alert, values))
            elif culprits.is_gradient_tag(alert.tag) and (values is None or alert.step > step):
                held.append(alert)
            else:
                ready.append(alert)
        self._held = held
        return ready

    def _report(self, step: int, alerts: list[Alert]) -> None:
        for alert in map(self._incidents.attach, alerts):
            self.fired.append(alert)
            self._run.note_alert(alert.rule, alert.step, alert.incident is not None)
            self._dispatcher.dispatch(alert)
            if alert.action == "stop" and self._request_stop is not None:
                self._stop(step, alert)

    def _stop(self, step: int, alert: Alert) -> None:
        cause = f"{alert.rule} on {alert.tag}"
        if not self._several_ranks:
            logger.warning("AlertMonitor: stopping training after step %d (%s: %s)", step, alert.rule, alert.tag)
            self._run.stop.alone(cause, step)
            self._request_stop()
        elif self._run.stop.request(cause, step):
            logger.warning(
                "AlertMonitor: %s: %s at step %d; every rank stops after the next cross-rank aggregation",
                alert.rule,
                alert.tag,
                step,
            )
        elif not self._stop_refused:
            self._stop_refused = True
            logger.warning(
                "AlertMonitor: action stop not carried out (%s: %s at step %d): with several ranks it travels "
                "in TensorBoardMonitor's cross-rank aggregation, which aggregate_every: 0 turns off, and "
                "stopping this rank alone would leave the others waiting",
                alert.rule,
                alert.tag,
                step,
            )

    def _finish(self) -> None:
        if self._engine is None:
            return
        self._run.settle()  # the values still computed off the training thread (moe/*) reach the rules first
        self._run.unsubscribe(self._on_values)
        self._run.unsubscribe_expert_loads(self._experts.remember)
        for alert in map(self._incidents.attach, self._held):  # their group norms never came; no stop now
            self.fired.append(alert)
            self._run.note_alert(alert.rule, alert.step, alert.incident is not None)
            self._dispatcher.dispatch(alert)
        self._held = []
        unwritten = sorted(self._unwritten)
        if unwritten and self._steps_seen:
            logger.warning(
                "AlertMonitor: the rules watched %s, which nothing wrote in this training; check the tag names "
                "against TensorBoard's, or the extra_metrics / log_scalars that should write them",
                ", ".join(unwritten),
            )
        self._engine, self._request_stop = None, None
        dispatcher, self._dispatcher = self._dispatcher, None
        dispatcher.close()
        if not self._steps_seen:
            message = (
                "AlertMonitor received no values: it evaluates what TensorBoardMonitor writes, so add a "
                "TensorBoardMonitor to the same callbacks list."
            )
            logger.warning(message)


def _named_tags(rules: Any) -> list[tuple[str, str]]:
    """``(YAML key, tag)`` for each tag the rule entries name themselves (not their defaults)."""
    named = []
    for index, spec in enumerate(rules or ()):
        tags = spec.get("tag") if isinstance(spec, dict) else None
        for tag in [tags] if isinstance(tags, str) else tags if isinstance(tags, list) else ():
            if isinstance(tag, str):
                named.append((f"rules[{index}].tag", tag))
    return named


def _custom_rule_tags(arguments: Mapping[str, Any]) -> list[tuple[str, str, str | None]]:
    """``(YAML key, tag, did-you-mean)`` for each named rule tag that the monitor does not write."""
    return [
        (key, tag, did_you_mean(tag, metrics.BUILTIN_TAGS))
        for key, tag in _named_tags(arguments.get("rules"))
        if not metrics.is_builtin_tag(tag)
    ]
