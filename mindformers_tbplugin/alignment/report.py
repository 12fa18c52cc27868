"""A comparison as people read it: a table (terminal or Markdown) with each rule's check, the first
divergent step's neighbourhood, and as JSON."""

from __future__ import annotations

from typing import Any

from mindformers_tbplugin.alignment.comparison import FIELDS, TagComparison
from mindformers_tbplugin.alignment.run_comparison import RunComparison

NEIGHBOURS = 3  # compared steps shown either side of the first divergent one


def as_json(result: RunComparison, run: str, baseline: str) -> dict[str, Any]:
    """``verdict`` and ``tags`` (each tag's FIELDS, relative errors as fractions), then the rest."""
    return {
        "verdict": result.verdict,
        "tags": {tag: {name: c.summary[name] for name in FIELDS} for tag, c in result.tags.items()},
        "run": run,
        "baseline": baseline,
        "x": result.axis,
        "criteria": {"name": result.criteria.name, "source": result.criteria.source},
        "checks": {
            tag: [{"name": k.name, "rule": k.rule, "pass": k.ok, "detail": k.detail} for k in c.checks]
            for tag, c in result.tags.items()
        },
        "step_rule": None
        if result.step_rule is None
        else {
            "rule": result.step_rule.rule,
            "pass": result.step_rule.ok,
            "detail": result.step_rule.detail,
            "strict": result.strict,
        },
        "noise": {tag: judgement.fields() for tag, judgement in result.noise.items()},
        "notes": _notes(result),
    }


def _cell(name: str, value: Any) -> str:
    if value is None:
        return "-"
    if name == "pass":
        return "pass" if value else "FAIL"
    if name.endswith("rel_err"):
        return f"{value * 100:.4g}%"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _notes(result: RunComparison) -> list[str]:
    notes = list(result.notes)
    for tag, comparison in result.tags.items():
        notes.extend(f"{tag}: {note}" for note in comparison.notes)
        if comparison.passed is None:
            notes.append(f"{tag}: reported, not judged (the criteria {result.criteria.name} have no tolerance for it)")
    return notes


def _rows(result: RunComparison) -> tuple[list[str], list[list[str]]]:
    header = ["", *result.tags]
    rows = [[name, *(_cell(name, c.summary[name]) for c in result.tags.values())] for name in FIELDS]
    return header, rows


def _check_rows(result: RunComparison) -> list[list[str]]:
    rows = [
        [tag, k.name, k.rule, k.detail, "ok" if k.ok else "FAIL"] for tag, c in result.tags.items() for k in c.checks
    ]
    if result.step_rule is not None:
        rule = result.step_rule
        outcome = "ok" if rule.ok else ("FAIL" if result.strict else "not met (fails with --strict)")
        rows.append(["", rule.name, rule.rule, rule.detail, outcome])
    noise_rule = result.criteria.noise
    for tag, j in result.noise.items():
        rows.append(
            [
                tag,
                "baseline spread",
                f"within at >= {noise_rule.within_fraction:.0%} of steps, "
                f"|bias| <= {noise_rule.bias_factor:g} x spread",
                f"within at {j.within_fraction:.1%} of {j.steps} steps; "
                f"bias {j.bias:.6g}, spread mean {j.spread_mean_abs_err:.6g}",
                "ok" if j.passed else "FAIL",
            ]
        )
    return rows


def _neighbourhood(comparison: TagComparison) -> list[list[str]]:
    at = comparison.divergent_index
    if at is None:
        return []
    aligned = comparison.aligned
    rows = []
    for i in range(max(at - NEIGHBOURS, 0), min(at + NEIGHBOURS + 1, len(aligned.steps))):
        rows.append(
            [
                (">" if i == at else "") + str(int(aligned.steps[i])),
                f"{aligned.run[i]:.6g}",
                f"{aligned.base[i]:.6g}",
                f"{comparison.abs_err[i]:.6g}",
                _cell(
                    "rel_err", float(comparison.rel_err[i]) if comparison.rel_err[i] == comparison.rel_err[i] else None
                ),
            ]
        )
    return rows


_NEIGHBOUR_HEADER = ["step", "run", "baseline", "abs_err", "rel_err"]
_CHECK_HEADER = ["tag", "check", "rule", "measured", ""]


def _plain(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]
    )


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows)
    return "\n".join(lines)


def as_text(result: RunComparison, run: str, baseline: str, markdown: bool = False) -> str:
    table = _markdown if markdown else _plain
    heading = (lambda text: f"### {text}") if markdown else (lambda text: f"{text}:")
    criteria = result.criteria
    parts = [
        f"## Run against its baseline: {result.verdict.upper()}" if markdown else f"verdict: {result.verdict}",
        f"run: `{run}`  \nbaseline: `{baseline}`" if markdown else f"run: {run}\nbaseline: {baseline}",
        f"criteria: {criteria.name}, {criteria.source}; compared by {result.axis}",
        table(*_rows(result)),
    ]
    checks = _check_rows(result)
    if checks:
        parts += [heading("checks"), table(_CHECK_HEADER, checks)]
    for tag, comparison in result.tags.items():
        rows = _neighbourhood(comparison)
        if rows:
            step = comparison.summary["first_divergent_step"]
            parts += [heading(f"{tag}: first divergent step {step} and its neighbours"), table(_NEIGHBOUR_HEADER, rows)]
    notes = _notes(result)
    if notes:
        parts += [heading("notes"), "\n".join(f"- {note}" for note in notes)]
    return "\n\n".join(parts) + "\n"
