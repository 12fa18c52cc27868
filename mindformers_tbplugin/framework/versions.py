"""Which MindSpore and MindFormers the environment provides, and whether we support them.

Neither is a dependency of the package: on a cluster MindSpore is the vendor's build that matches the
CANN driver, and MindFormers is a pip-installed release or a release checkout on ``sys.path``.
Versions are read without importing either (``import mindformers`` takes seconds).
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# Release lines measured by `make compat`, with the MindSpore each was tested on.
TESTED_PAIRS = (("1.7.0", "2.7.1"), ("1.8.0", "2.7.2"), ("1.9.0", "2.9.0"), ("2.0.0", "2.10.0"))
SUPPORTED_MINDFORMERS = tuple(sorted({mf.rsplit(".", 1)[0] for mf, _ in TESTED_PAIRS}))
SUPPORTED_MINDSPORE = tuple(
    sorted({ms.rsplit(".", 1)[0] for _, ms in TESTED_PAIRS}, key=lambda line: tuple(map(int, line.split("."))))
)
FRAMEWORK_EXTRA = "pip install 'mindformers-tbplugin[framework]'"
_VERSION_LINE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)


@dataclass(frozen=True)
class Found:
    """One framework package as this interpreter would import it."""

    name: str
    version: str | None  # None: not importable
    location: str | None  # the package folder (a release checkout shows here)

    @property
    def release_line(self) -> str | None:
        return release_line(self.version) if self.version else None

    def describe(self) -> str:
        return f"{self.name} {self.version} ({self.location})" if self.version else f"{self.name}: not found"


def release_line(version: str) -> str:
    """``"1.8"`` for ``"1.8.0"``: the part the supported releases are listed by."""
    return ".".join(version.split(".")[:2])


def find(name: str) -> Found:
    """``name``'s version and folder as ``import name`` would find them, without importing it.

    The path finder is asked directly (not ``importlib.util.find_spec``), so import hooks on the
    meta path, ours included, are left alone. The version comes from the package's own
    ``__version__`` line, which a release checkout has too, else from the installed distribution.
    """
    spec = importlib.machinery.PathFinder.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return Found(name, None, None)
    folder = Path(next(iter(spec.submodule_search_locations)))
    return Found(name, _declared_version(folder) or _distribution_version(name), str(folder))


def _declared_version(folder: Path) -> str | None:
    for candidate in ("__init__.py", "version.py"):
        try:
            match = _VERSION_LINE.search((folder / candidate).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if match:
            return match.group(1)
    return None


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


_SUPPORTED = {"mindspore": SUPPORTED_MINDSPORE, "mindformers": SUPPORTED_MINDFORMERS}
_DISPLAY_NAMES = {"mindspore": "MindSpore", "mindformers": "MindFormers"}


def check(required: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` for a command that needs the ``required`` framework packages: a missing
    required one is an error; any present one outside the supported releases a warning (it may
    still work)."""
    errors, warnings = [], []
    for package in _SUPPORTED:
        item = find(package)
        if item.version is None:
            if package in required:
                errors.append(missing_message(package))
        elif item.release_line not in _SUPPORTED[package]:
            warnings.append(unsupported_message(package, item.describe()))
    return errors, warnings


def unsupported_message(package: str, found: str) -> str:
    return (
        f"{found} is not a supported release (supported: {package} {', '.join(_SUPPORTED[package])}; "
        f"tested pairs: {tested_pairs_text()}); monitoring may fail"
    )


def use_checkout_in(folder: Path) -> Found | None:
    """When ``folder`` is the root of a MindFormers release checkout, import mindformers from it, as
    ``python run_mindformer.py`` run there does (the script's folder comes first on ``sys.path``)."""
    if not (folder / "mindformers" / "__init__.py").is_file():
        return None
    root = str(folder.resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    return Found("mindformers", _declared_version(folder / "mindformers"), str(folder / "mindformers"))


def missing_message(package: str) -> str:
    where = {
        "mindspore": "install your vendor's MindSpore build (Ascend clusters), or on a fresh machine",
        "mindformers": "pip-install a MindFormers release, run from the root of a MindFormers release checkout "
        "(or put it on PYTHONPATH), or on a fresh machine",
    }[package]
    return f"{package} is not importable in this Python environment: {where} {FRAMEWORK_EXTRA}"


def import_failure_message(package: str, exc: BaseException) -> str:
    """``cannot import mindformers: ModuleNotFoundError: No module named 'x' (raised in FILE:LINE)`` and what
    to do: for an installed ``package`` whose import raised ``exc``."""
    import traceback

    found = find(package)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")]
    where = []
    if isinstance(exc, SyntaxError) and exc.filename:  # the broken file is not a frame of the traceback
        where.append(f"raised in {exc.filename}:{exc.lineno}")
    elif frames:
        where.append(f"raised in {frames[-1].filename}:{frames[-1].lineno}")
        inside = [f for f in frames if found.location and f.filename.startswith(found.location + "/")]
        if inside and inside[-1] is not frames[-1]:
            where.append(f"imported by {inside[-1].filename}:{inside[-1].lineno}")
    text = f"cannot import {package}: {type(exc).__name__}: {exc}" + (f" ({', '.join(where)})" if where else "")
    name = _DISPLAY_NAMES[package]
    if found.location and _distribution_version(package):
        reinstall = f"pip install --force-reinstall --no-deps {package}=={found.version}"
    else:
        reinstall = f"restore the checkout at {found.location}"
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing and missing.partition(".")[0] != package:
        return (
            f"{text}. Install the missing module '{missing.partition('.')[0]}' into this Python environment "
            f"({sys.executable}), or reinstall the package that should provide it; if the files of {name} itself are "
            f"damaged: {reinstall}"
        )
    return f"{text}. {name} or a package it imports is broken there: reinstall that package (for {name}: {reinstall})"


def tested_pairs_text() -> str:
    return ", ".join(f"mindformers {mf} + mindspore {ms}" for mf, ms in TESTED_PAIRS)


def unsupported_loaded() -> list[str]:
    """Warnings for the framework modules this process has loaded (a callback being built); an
    absent mindformers is a plain MindSpore training, which is supported."""
    found = []
    for package in _SUPPORTED:
        module = sys.modules.get(package)
        version = str(getattr(module, "__version__", "")) if module is not None else ""
        if version and release_line(version) not in _SUPPORTED[package]:
            found.append(unsupported_message(package, f"{package} {version}"))
    return found
