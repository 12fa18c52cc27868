"""Installing into the MindSpore/MindFormers a user already has: nothing replaced, nothing added, and
one clear message when a framework package is missing or of a release we do not support."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MFTB, REPO, subprocess_env, write_tiny_config

from mindformers_tbplugin.framework import versions

FRAMEWORK = ("mindspore", "mindformers")


@pytest.mark.compat
@pytest.mark.process
def test_installing_the_plugin_changes_no_framework_package(tmp_path: Path) -> None:
    """What ``pip install mindformers-tbplugin`` would do to this environment, asked of pip itself."""
    report = tmp_path / "report.json"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    would_install = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert would_install & set(FRAMEWORK) == set(), would_install


@pytest.mark.compat
def test_the_environment_holds_the_framework_it_was_built_with() -> None:
    """``make compat`` names each environment's pair; installing the plugin must have left it alone."""
    expected = os.environ.get("MFTB_EXPECT_FRAMEWORK")
    if not expected:
        pytest.skip("MFTB_EXPECT_FRAMEWORK is set by make compat")
    found = {name: versions.find(name).version for name in FRAMEWORK}
    assert found == dict(item.split("==") for item in expected.split()), found


def test_the_package_requires_mindspore_and_mindformers_only_through_its_extra() -> None:
    requirements = importlib.metadata.requires("mindformers-tbplugin") or []
    framework = [r for r in requirements if re.match(r"[\w.-]+", r).group(0).lower() in FRAMEWORK]
    assert len(framework) == 2 and all("extra == 'framework'" in r for r in framework), requirements


def test_missing_frameworks_are_named_with_what_to_do() -> None:
    """An interpreter that sees neither MindSpore nor MindFormers (site-packages left out)."""
    code = (
        "import sys; sys.path[:] = [p for p in sys.path if 'site-packages' not in p]; "
        "from mindformers_tbplugin.framework import versions; "
        "errors, warnings = versions.check(('mindspore', 'mindformers')); print('\\n'.join(errors))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("mindspore is not importable in this Python environment: install your vendor's")
    assert "run from the root of a MindFormers release checkout" in lines[1]
    assert all("pip install 'mindformers-tbplugin[framework]'" in line for line in lines)


@pytest.mark.process
def test_an_unsupported_mindformers_gets_one_warning_at_mftb_start(tmp_path: Path) -> None:
    """A MindFormers release outside the supported lines, first on the path: mftb says so once and goes on."""
    fake = tmp_path / "site" / "mindformers"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "0.9.1"\n')
    config = tmp_path / "c.yaml"
    config.write_text("callbacks:\n  - type: TensorBoardMonitor\n    log_dir: ./tb\n")
    result = subprocess.run(
        [MFTB, "validate", str(config)],
        cwd=tmp_path,
        env=subprocess_env(PYTHONPATH=str(tmp_path / "site"), MFTB_NO_AUTOREGISTER="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    warning = (
        f"mftb: warning: mindformers 0.9.1 ({fake}) is not a supported release "
        "(supported: mindformers 1.7, 1.8, 1.9, 2.0; tested pairs: mindformers 1.7.0 + mindspore 2.7.1,"
    )
    assert result.stderr.count(warning) == 1, result.stderr
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_release_checkout_in_the_working_directory_is_found_without_importing_it(tmp_path: Path) -> None:
    (tmp_path / "mindformers").mkdir()
    (tmp_path / "mindformers" / "__init__.py").write_text('raise SystemExit("imported")\n__version__ = "1.8.0"\n')
    found = versions.use_checkout_in(tmp_path)
    try:
        assert found == versions.Found("mindformers", "1.8.0", str(tmp_path / "mindformers"))
        assert sys.path[0] == str(tmp_path.resolve())
        assert versions.find("mindformers").version == "1.8.0"
    finally:
        sys.path.remove(str(tmp_path.resolve()))
    assert versions.use_checkout_in(tmp_path / "elsewhere") is None


def test_supported_release_lines_come_from_the_tested_pairs() -> None:
    assert versions.SUPPORTED_MINDFORMERS == ("1.7", "1.8", "1.9", "2.0")
    assert versions.SUPPORTED_MINDSPORE == ("2.7", "2.9", "2.10")


@pytest.mark.process
def test_a_monitor_built_under_an_unsupported_mindformers_warns_once(tmp_path: Path) -> None:
    """A process that already runs a MindFormers release we do not support (stood in for by a module
    object: no such release installs here) builds two monitors: one warning, and they work."""
    code = f"""
import logging, sys, types
fake = types.ModuleType("mindformers")
fake.__version__ = "0.9.1"
sys.modules["mindformers"] = fake
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from mindformers_tbplugin.callbacks import TensorBoardMonitor
TensorBoardMonitor(log_dir={str(tmp_path / "a")!r})
TensorBoardMonitor(log_dir={str(tmp_path / "b")!r})
print("built")
"""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=subprocess_env(MFTB_NO_AUTOREGISTER="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.stdout.strip() == "built", result.stderr
    warning = "mindformers 0.9.1 is not a supported release (supported: mindformers 1.7, 1.8, 1.9, 2.0; tested"
    assert result.stderr.count(warning) == 1, result.stderr


@pytest.fixture
def broken_dependency(tmp_path: Path) -> Path:
    """A folder to put first on PYTHONPATH: a broken install of sentencepiece (its compiled part is
    missing), which MindFormers' tokenizers import while ``import mindformers`` runs."""
    site = tmp_path / "site"
    (site / "sentencepiece").mkdir(parents=True)
    (site / "sentencepiece" / "__init__.py").write_text("import _sentencepiece_ext  # the compiled part\n")
    return site


@pytest.mark.process
def test_a_mindformers_that_fails_to_import_is_named_once_by_train_validate_and_the_launcher(
    tmp_path: Path, broken_dependency: Path
) -> None:
    """The original error, once, without a traceback, exit status 2; not the NameError that a second
    import of the half-imported package raises."""
    data = tmp_path / "data.mindrecord"  # never read: nothing gets that far
    monitor = {"type": "TensorBoardMonitor", "log_dir": str(tmp_path / "tb")}
    config = write_tiny_config(tmp_path, data, [{"type": "MFLossMonitor"}, monitor])
    # Only our entries: mftb validate has no reason to import mindformers, mftb train's registration has.
    ours_only = write_tiny_config(tmp_path, data, [monitor], name="ours_only.yaml")
    error = (
        "cannot import mindformers: ModuleNotFoundError: No module named '_sentencepiece_ext' "
        f"(raised in {broken_dependency / 'sentencepiece' / '__init__.py'}:1, imported by "
    )
    advice = "Install the missing module '_sentencepiece_ext' into this Python environment"
    output = tmp_path / "launch"
    launcher = [str(REPO / "scripts" / "msrun_launch.sh"), "--config", str(config), "--worker_num", "1"]
    runs = (  # (argv, who prints the error)
        ([MFTB, "train", "--config", str(config)], "mftb train"),
        ([MFTB, "train", "--config", str(ours_only)], "mftb train"),
        ([MFTB, "validate", str(config)], "mftb validate"),
        (["bash", *launcher, "--output_dir", str(output)], "mftb validate"),
    )
    for argv, who in runs:
        result = subprocess.run(
            argv,
            cwd=tmp_path,
            env=subprocess_env(PYTHONPATH=str(broken_dependency)),
            capture_output=True,
            text=True,
            timeout=300,
        )
        said = result.stdout + result.stderr
        assert result.returncode == 2, f"{argv}: {said}"
        assert said.count(error) == 1 and said.count(advice) == 1, f"{argv}: {said}"
        assert f"{who}: error: {error}" in result.stderr, f"{argv}: {said}"
        assert "Traceback" not in said and "NameError" not in said, f"{argv}: {said}"
    assert "no rank was started" in result.stderr and not (output / "msrun_log").exists()


@pytest.mark.process
def test_a_failed_import_mindformers_reaches_the_importer_unchanged_and_is_not_retried(
    tmp_path: Path, broken_dependency: Path
) -> None:
    """The import hook that registers our classes (installed by the .pth file) lets the user's own
    ``import mindformers`` fail as it would without us; what we look up in mindformers afterwards
    reports that same error instead of importing the half-imported package again."""
    code = """
import traceback
try:
    import mindformers
except ImportError:
    print("import mindformers:", traceback.format_exc().splitlines()[-1])
from mindformers_tbplugin.framework.mindformers_api import resolve
try:
    resolve("Trainer")
except Exception as exc:
    print(f"then: {type(exc).__name__}: {exc}")
"""
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=subprocess_env(PYTHONPATH=str(broken_dependency)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = result.stdout + result.stderr
    (imported,) = [line for line in result.stdout.splitlines() if line.startswith("import mindformers:")]
    assert imported == "import mindformers: ModuleNotFoundError: No module named '_sentencepiece_ext'", said
    (then,) = [line for line in result.stdout.splitlines() if line.startswith("then:")]
    assert then.startswith(
        "then: FrameworkImportError: cannot import mindformers: ModuleNotFoundError: No module named "
        f"'_sentencepiece_ext' (raised in {broken_dependency / 'sentencepiece' / '__init__.py'}:1"
    ), said
    assert "could not register" not in said
