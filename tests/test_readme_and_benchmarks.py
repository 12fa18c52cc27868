"""README and docs/ stay in step with the code; the benchmark harness produces a well-formed table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, documentation, read_scalars, subprocess_env, train, write_tiny_config
from tensorboard.backend.event_processing.event_accumulator import TENSORS, EventAccumulator

from mindformers_tbplugin.callbacks import HistogramMonitor, TensorBoardMonitor
from mindformers_tbplugin.schema import params_of


def _yaml_value(text: str) -> object:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:  # e.g. "{experiment}_{timestamp}" is a plain string
        return text


def _option_rows(readme: str, callback: type) -> dict[str, str]:
    """``{option: default}`` from the table that follows "Every parameter of `<callback>`"."""
    start = readme.index(f"Every parameter of `{callback.__name__}`")
    table = re.search(r"(?:^\|.*\n)+", readme[start:], flags=re.M).group(0)
    return dict(re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", table, flags=re.M))


@pytest.mark.parametrize("callback", [TensorBoardMonitor, HistogramMonitor])
def test_readme_documents_every_option_with_its_default(callback: type) -> None:
    rows = _option_rows(documentation(), callback)
    params = params_of(callback)
    assert set(rows) == {p.name for p in params}
    for param in params:
        assert _yaml_value(rows[param.name]) == param.default, param.name
        assert param.doc, f"{param.name} has no line in the class docstring"


def test_readme_starts_with_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert readme.index("make demo") < readme.index("make test") < readme.index("```yaml\ncallbacks:")


@pytest.mark.process
def test_benchmark_harness_writes_a_table(tmp_path: Path) -> None:
    output = tmp_path / "BENCH.md"
    subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--output", str(output)],
        cwd=REPO,
        env=subprocess_env(),
        check=True,
        capture_output=True,
        timeout=600,
    )
    text = output.read_text()
    assert "| mftb RunWriter.add_scalars (10 scalars) |" in text
    # measured where the MindFormers 2.x environment exists (make compat COMPAT_ENVS=mf2.0), else said so
    heading = "## MindFormers 2.x's PyNative trainer: the monitor's training-thread cost per step\n\n"
    row = r"\| tiny DeepSeek-V3 \(MoE, MTP\) \| \+ layer_grad_norms, log_every 10 \| \d+ \| [0-9.]+ \|"
    assert heading in text
    assert text.split(heading)[1].startswith("Not measured: needs `.venvs/mf2.0`") or re.search(row, text)
    assert "| tensorboardX add_scalar x10 |" in text
    imported = r"\| Megatron-LM \(core_r0\.16 line\) \| 5,000 \| 5,000 \| [0-9.]+ \| [0-9.]+ \| [\d,]+ \| 5,000 \|"
    assert re.search(imported, text)
    assert re.search(r"Ratio tensorboardX / mftb: \*\*[0-9.]+x\*\*", text)
    assert re.search(r"\| tiny LLaMA, sampled to 65,536 \| 21 \| 133,440 \| [0-9.]+ \| [0-9.]+ \|", text)
    assert re.search(r"\| synthetic LLaMA 4 layers \(float16\), sampled to 65,536 \| 38 \| 336,609,280 \|", text)
    assert re.search(r"\| python \| 10 scalars \| encode_scalars_event \(wire format\) \| [0-9.]+ \|", text)
    assert re.search(r"\| python \| moe/load 2 x 59 x 256 \| tensor_event \(wire format\) \| [0-9.]+ \|", text)
    assert re.search(r"\| 10 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \|", text)  # event bytes per point
    assert re.search(r"\| hook on \(the installed `.pth` imports the package\) \| [0-9.]+ \|", text)
    assert re.search(r"\| max_queue 10,000 \| \d+ \| [0-9.]+ \| 10,000 \| [\d,]+ \| 1 \|", text)
    assert re.search(r"\| read_source \(the run folder\) \| 20,000 \| 120,000 \| [0-9.]+ \| [0-9.]+ \| [\d,]+ \|", text)
    assert re.search(r"\| MFLossMonitor only \| [0-9.]+ \| [0-9.]+-[0-9.]+ \| baseline \|", text)
    assert re.search(r"\| \+ TensorBoardMonitor, log_every 1 \| [0-9.]+ \| [0-9.-]+ \| [+-][0-9.]+% \|", text)
    # TensorBoardMonitor switched on and off in blocks within one real training
    assert re.search(
        r"\| 1 \| 1 \| 400 \| [0-9.]+ \| [0-9.]+ \| [+-][0-9.]+% \| [+-][0-9.]+% to [+-][0-9.]+% \| \d+ \|", text
    )
    on_off = r"on vs off [+-][0-9.]+%, upper 95% bound [+-][0-9.]+% \+ writer threads [0-9.]+% = [+-][0-9.]+%"
    assert re.search(r"- tiny LLaMA, 1 rank\(s\): " + on_off, text)
    assert re.search(r"- tiny DeepSeek-V3, 1 rank\(s\): " + on_off, text)
    control = r" \| 1 \| 200 \| [0-9.]+ \| [0-9.]+ \| [+-][0-9.]+% \| [+-][0-9.]+% to [+-][0-9.]+% \| \d+ \|"
    assert re.search(r"\| nothing \(A/A\)" + control, text)
    assert re.search(r"\| only the read of the step's outputs" + control, text)
    # the controls really differ: given only its reads, the monitor spends the read's wait for the graph
    inside = {
        gets: float(re.search(rf"\| {re.escape(gets)} \| 1 \| 200 \|.* \| ([0-9.]+) \|$", text, re.M).group(1))
        for gets in ("nothing (A/A)", "only the read of the step's outputs")
    }
    assert inside["nothing (A/A)"] < inside["only the read of the step's outputs"]
    # the one event decoder beside protobuf's, and the mcore models' reads
    assert re.search(r"\| 10 scalars \| [0-9.]+ \| ([0-9.]+|n/a) \| [0-9.]+ \|", text)
    default_reads = r"\+ loss parts \+ expert loads, moe_every 10 \(default\)"
    training_and_writer = r" \| [0-9.]+ \| [0-9.]+-[0-9.]+ \| [+-][0-9.]+ \| [0-9.]+ \|"
    assert re.search(r"\| DeepSeek-V3 size \(59 x 256\) \| " + default_reads + training_and_writer, text)
    assert re.search(r"\| synthetic LLaMA \(80 layers\) \| 723 \| mftb OptimizerState.tags .*\| [0-9.]+ \|", text)
    assert re.search(r"\| synthetic LLaMA \(80 layers\) \| 723 \| mftb ParameterUpdates: .*\| [0-9.]+ \|", text)
    assert re.search(r"\| synthetic LLaMA \(80 layers\) \| 562 \| mftb StableRanks.measure .*\| [0-9.]+ \|", text)
    assert re.search(
        r"- Tiny LLaMA: the signals at their defaults cost \*\*[+-][0-9.]+ µs per ordinary logged step", text
    )
    compared = r"\| `mftb compare RUN BASELINE --json PATH` \(a new process; both folders read\)( \| [0-9.-]+){3} \|"
    assert "## mftb compare: two runs of 20,000 steps" in text and re.search(compared, text)


def _block(readme: str, language: str, first_line: str) -> str:
    """The code block in ``language`` whose first line is ``first_line``."""
    match = re.search(rf"```{language}\n({re.escape(first_line)}\n.*?)```", readme, flags=re.S)
    assert match, f"no {language} block starting with {first_line!r} in docs/custom-metrics.md"
    return match.group(1)


def test_the_documented_callback_example_runs_as_written(tmp_path: Path, tiny_data: Path) -> None:
    readme = (REPO / "docs" / "custom-metrics.md").read_text()
    folder = tmp_path / "team_callbacks"
    folder.mkdir()
    (folder / "epoch_notes.py").write_text(_block(readme, "python", "# team_callbacks/epoch_notes.py"))
    callbacks = yaml.safe_load(_block(readme, "yaml", "callbacks:\n  - type: TensorBoardMonitor\n  - type: EpochNotes"))
    callbacks = callbacks["callbacks"]
    callbacks[0]["log_dir"] = str(tmp_path / "tb")
    config = write_tiny_config(tmp_path, tiny_data, callbacks, num_samples=8)
    run = train(config, tmp_path, env=subprocess_env(REGISTER_PATH=str(folder)))
    assert run.returncode == 0, run.output[-4000:]
    assert read_scalars(run.run_dir)["custom/epoch"] == [(step, 1.0) for step in range(1, 5)]
    accumulator = EventAccumulator(str(run.run_dir), size_guidance={TENSORS: 0})
    accumulator.Reload()
    (note,) = accumulator.Tensors("notes/run")
    assert note.tensor_proto.string_val[0].decode() == "tokenizer v2, dedup pass 3"


def test_readme_is_a_first_read() -> None:
    """The reference lives in docs/; the README stays short."""
    assert len((REPO / "README.md").read_text().splitlines()) <= 300


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (outside code blocks)."""
    anchors, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        fenced = fenced != line.startswith("```")
        if not fenced and (heading := re.match(r"#+ (.*)", line)):
            anchors.add(re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("page", ["README.md", *sorted(p.name for p in (REPO / "docs").glob("*.md"))])
def test_every_link_between_the_pages_leads_somewhere(page: str) -> None:
    path = REPO / page if page == "README.md" else REPO / "docs" / page
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.exists(), f"{page}: {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page}: {target}"
