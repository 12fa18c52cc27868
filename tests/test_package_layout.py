"""The package's shape, as docs/architecture.md states it: rooms by concern, small modules, no import
circle, MindSpore/MindFormers known only to framework/, the file format spelled in one module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mindformers_tbplugin"
NAME = PACKAGE.name
MAX_TOP_LEVEL_MODULES = 12
MAX_MODULE_LINES = 450


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_names(path: Path) -> list[str]:
    """Every absolute import in the module, at any depth (a function-level import counts too)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def package_imports(module: str) -> set[str]:
    """The modules of ours that ``module`` imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    return {name for name in imported_names(MODULES[module]) if name in MODULES and name != module}


def test_few_modules_directly_in_the_package():
    top_level = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top_level) <= MAX_TOP_LEVEL_MODULES, top_level


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_is_small(module):
    lines = MODULES[module].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_MODULE_LINES, f"{module}: {lines} lines"


def test_no_import_circle():
    graph = {module: package_imports(module) for module in MODULES}
    # A package __init__ that imports its own modules is not a circle with them.
    for module, targets in graph.items():
        if MODULES[module].name == "__init__.py":
            graph[module] = {t for t in targets if not t.startswith(module + ".")}
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not circles, circles


# The rooms from the bottom up: each imports only rooms below it (docs/architecture.md, "The rooms").
LAYERS = (
    "errors",
    "log",
    "schema",
    "yaml_lines",
    "tfevents",
    "pipeline",
    "imports",
    "alignment",
    "framework",
    "registration",
    "config",
    "session",
    "alerts",
    "callbacks",
    "viewer",
    "commands",
    "cli",
    "__main__",
    "",  # the package itself
)
MAX_CALLBACK_MODULE_LINES = 250


def room(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def test_every_module_is_in_a_layer():
    assert {room(module) for module in MODULES} <= set(LAYERS)


def test_no_room_imports_a_room_above_it():
    level = {name: index for index, name in enumerate(LAYERS)}
    upward = sorted(
        f"{module} -> {target}"
        for module in MODULES
        for target in package_imports(module)
        if level[room(target)] > level[room(module)]
    )
    assert not upward


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(f"{NAME}.callbacks.")))
def test_callbacks_are_thin(module):
    lines = MODULES[module].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_CALLBACK_MODULE_LINES, f"{module}: {lines} lines"


def test_no_global_statement():
    """A training's state lives in its Run (pipeline/run.py), not in module globals."""
    found = [
        module
        for module, path in MODULES.items()
        if any(isinstance(node, ast.Global) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
    ]
    assert not found


def test_only_framework_imports_mindspore_or_mindformers():
    offenders = {
        module: sorted({name.split(".")[0] for name in imported_names(path)} & {"mindspore", "mindformers"})
        for module, path in MODULES.items()
        if not module.startswith(f"{NAME}.framework")
    }
    assert not {module: found for module, found in offenders.items() if found}


def test_tfevents_knows_only_itself():
    """The file format room is a library: it uses nothing of the pipeline, framework or callbacks."""
    allowed = (f"{NAME}.tfevents", f"{NAME}.log", f"{NAME}.errors")
    outside = {
        module: sorted(t for t in package_imports(module) if not t.startswith(allowed))
        for module in MODULES
        if module.startswith(f"{NAME}.tfevents")
    }
    assert not {module: found for module, found in outside.items() if found}


def test_pipeline_is_plain_data():
    """Step values to runs without MindSpore or MindFormers: the pipeline runs in unit tests as it is."""
    outside = {
        module: sorted(t for t in package_imports(module) if t.startswith((f"{NAME}.framework", f"{NAME}.callbacks")))
        for module in MODULES
        if module.startswith(f"{NAME}.pipeline")
    }
    assert not {module: found for module, found in outside.items() if found}


def test_record_framing_lives_in_one_module():
    """The masked-CRC constant is part of the record framing: exactly one module may spell it."""
    spelling = [name for name, path in MODULES.items() if "0xa282ead8" in path.read_text(encoding="utf-8").lower()]
    assert spelling == [f"{NAME}.tfevents.records"]


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
# One module per YAML type or sub-command: the doc describes those rooms as a whole.
ROOMS_DESCRIBED_AS_A_WHOLE = ("callbacks", "commands")


def test_architecture_page_names_every_module_and_only_existing_ones():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    unnamed = [
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.glob("*/*.py")
        if path.name != "__init__.py"
        and path.parent.name not in ROOMS_DESCRIBED_AS_A_WHOLE
        and f"`{path.name}`" not in text
        and f"{path.parent.name}/{path.name}" not in text
    ]
    assert not unnamed, f"docs/architecture.md says nothing of {unnamed}"
    named = set(re.findall(r"\b((?:[a-z_]+/)+[a-z_]+\.py)\b", text))
    missing = sorted(p for p in named if not (PACKAGE / p).exists() and not (PACKAGE.parent / p).exists())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


# -- the tests' shape ---------------------------------------------------------------------------------
TESTS = Path(__file__).resolve().parent
# tests/ holds what the tests share (conftest.py, fakes.py, tb_helpers.py, helpers/), the rules of the
# package and of its documentation, and the tests of top-level modules; jobs/ the whole-product tests.
TOP_LEVEL_TESTS = {"test_package_layout.py", "test_readme_and_benchmarks.py"}
NOT_ROOMS = {"jobs", "helpers", "compat", "__pycache__"}


def test_tests_mirror_the_package() -> None:
    """tests/<room>/test_<module>.py tests mindformers_tbplugin/<room>/<module>.py."""
    misplaced = []
    for test_file in sorted(TESTS.rglob("test_*.py")):
        relative = test_file.relative_to(TESTS)
        if relative.parts[0] in NOT_ROOMS or relative.name in TOP_LEVEL_TESTS:
            continue
        module = PACKAGE.joinpath(*relative.parts[:-1], relative.name.removeprefix("test_"))
        if not module.is_file():
            misplaced.append(f"{relative}: no {module.relative_to(PACKAGE.parent)}")
    assert not misplaced, "test files named after no module:\n" + "\n".join(misplaced)


def test_tests_share_helpers_through_the_shared_modules_only() -> None:
    """A test module imports no other test module: what tests share is in conftest.py, fakes.py or
    tb_helpers.py."""
    test_modules = {path.stem for path in TESTS.rglob("test_*.py")}
    offenders = sorted(
        f"{path.relative_to(TESTS)} imports {name}"
        for path in TESTS.rglob("*.py")
        if "compat" not in path.relative_to(TESTS).parts
        for name in imported_names(path)
        if name.split(".")[0] in test_modules
    )
    assert not offenders, "\n".join(offenders)
