"""README stays in step with the code; the benchmark harness produces a well-formed table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, subprocess_env

from mindformers_tbplugin.callbacks import HistogramMonitor, TensorBoardMonitor
from mindformers_tbplugin.config.schema import params_of


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
    rows = _option_rows((REPO / "README.md").read_text(), callback)
    params = params_of(callback)
    assert set(rows) == {p.name for p in params}
    for param in params:
        assert _yaml_value(rows[param.name]) == param.default, param.name
        assert param.doc, f"{param.name} has no line in the class docstring"


def test_readme_starts_with_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert readme.index("make demo") < readme.index("make test") < readme.index("```yaml\ncallbacks:")


@pytest.mark.slow
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
    assert "| tensorboardX add_scalar x10 |" in text
    assert re.search(r"Ratio tensorboardX / mftb: \*\*[0-9.]+x\*\*", text)
    assert re.search(r"\| tiny LLaMA, sampled to 65,536 \| 21 \| 133,440 \| [0-9.]+ \| [0-9.]+ \|", text)
    assert re.search(r"\| synthetic LLaMA 4 layers \(float16\), sampled to 65,536 \| 38 \| 336,609,280 \|", text)
    assert re.search(r"\| python \| encode_scalars_event \(wire format\) \| [0-9.]+ \|", text)
    assert re.search(r"\| 10 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \|", text)  # event bytes per point
    assert re.search(r"\| hook on \(the installed `.pth` imports the package\) \| [0-9.]+ \|", text)
    assert re.search(r"\| max_queue 10,000 \| \d+ \| [0-9.]+ \| 10,000 \| [\d,]+ \| 1 \|", text)
    assert re.search(r"\| MFLossMonitor only \| [0-9.]+ \| [0-9.]+-[0-9.]+ \| baseline \|", text)
    assert re.search(r"\| \+ TensorBoardMonitor, log_every 1 \| [0-9.]+ \| [0-9.-]+ \| [+-][0-9.]+% \|", text)
    # TensorBoardMonitor switched on and off in blocks within one real training
    assert re.search(
        r"\| 1 \| 1 \| 400 \| [0-9.]+ \| [0-9.]+ \| [+-][0-9.]+% \| [+-][0-9.]+% to [+-][0-9.]+% \| \d+ \|", text
    )
    assert re.search(r"- 1 rank\(s\): on vs off [+-][0-9.]+% \+ writer threads [0-9.]+% = [+-][0-9.]+%", text)
