"""The tested version matrix (`make compat`): the compat-marked tests in every supported environment.

    python3 tests/compat/run_matrix.py [ENV ...]      (no ENV: all of them)

For each environment: build it if needed (tests/compat/build_env.sh, cached in .venvs/ENV), record
its mindspore/mindformers, install this repository into it the way a user would (`pip install
'.[test]'`, dependencies resolved by pip), check that pip left MindSpore and MindFormers alone, then
run `pytest -m compat` with the environment first on PATH. Everything an environment prints goes to
output/compat/ENV.log; a summary table ends the run. Exit status 1 when any environment failed.
A failed build is shown (its last lines, the free disk: a full disk or a registry hiccup are the
likely causes) and tried once more. `--discard` removes each environment once its tests ran (a clean
clone in CI reuses none, and three at once need ~11 GB). Needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENVS = REPO / ".venvs"
LOGS = REPO / "output" / "compat"
FRAMEWORK = ("mindspore", "mindformers")
COUNTED = ("passed", "failed", "error", "skipped")
BUILD_ATTEMPTS = 2
SHOWN_LINES = 25
# pip's note for each package the machine's local index folders lack: noise in a failure's last lines.
PIP_NOISE = re.compile(r"^WARNING: Location '.*' is ignored")


@dataclass(frozen=True)
class Env:
    name: str
    mindspore: str
    mindformers: str
    checkout: bool = False  # mindformers comes from a release checkout on PYTHONPATH, not an installed package

    @property
    def venv(self) -> Path:
        return VENVS / self.name

    @property
    def checkout_dir(self) -> Path:
        return self.venv / "mindformers-checkout"

    @property
    def expected(self) -> dict[str, str | None]:
        """What the installed distributions must be, before and after installing the plugin."""
        return {"mindspore": self.mindspore, "mindformers": None if self.checkout else self.mindformers}


ENVS = {
    env.name: env
    for env in (
        Env("mf1.7", "2.7.1", "1.7.0"),
        Env("mf1.8", "2.7.2", "1.8.0"),
        Env("mf1.9", "2.9.0", "1.9.0"),
        Env("mf1.9-ms2.10", "2.10.0", "1.9.0"),
        Env("mf2.0", "2.10.0", "2.0.0"),
        Env("checkout-r1.8", "2.7.2", "1.8.0", checkout=True),
        Env("checkout-r1.7", "2.7.1", "1.7.0", checkout=True),
    )
}

# What the environment holds: every installed distribution and its version (PYTHONPATH unset).
LIST_DISTRIBUTIONS = """
import importlib.metadata as m, json
print(json.dumps({(d.metadata["Name"] or "?").lower().replace("_", "-"): d.version for d in m.distributions()}))
"""


class EnvFailure(Exception):
    """The environment failed before its tests could tell anything."""


@dataclass
class Result:
    env: str
    build_s: float = 0.0
    install_s: float = 0.0
    test_s: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem


def say(log: IO[str], message: str) -> None:
    """One line to the console and to the environment's log."""
    print(message, flush=True)
    log.write(message + "\n")
    log.flush()


def base_environment() -> dict[str, str]:
    """This process's environment without what would leak another Python setup into the children."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "MFTB_NO_AUTOREGISTER", "MFTB_MINDFORMERS_CHECKOUT"):
        env.pop(name, None)
    return env


def run_logged(command: list[str], log: IO[str], env: dict[str, str] | None = None, echo: str = "") -> tuple[int, str]:
    """Run ``command`` from the repository root with its output in the log; lines starting with
    ``echo`` (all lines when it is "*") also go to the console. Returns the exit status and the output."""
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    lines = []
    with subprocess.Popen(
        command, cwd=REPO, env=env or base_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            lines.append(line)
            if echo == "*" or (echo and line.startswith(echo)):
                print(line, end="", flush=True)
    log.flush()
    return process.returncode, "".join(lines)


def distributions(env: Env) -> dict[str, str]:
    output = subprocess.run(
        [str(env.venv / "bin" / "python"), "-c", LIST_DISTRIBUTIONS],
        cwd=REPO,
        env=base_environment(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(output)


def framework(installed: dict[str, str]) -> dict[str, str | None]:
    return {name: installed.get(name) for name in FRAMEWORK}


def describe_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    changes = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old != new:
            changes.append(f"{name} {old or '(none)'} -> {new or '(none)'}")
    return changes


def checkout_version(env: Env) -> str:
    init = (env.checkout_dir / "mindformers" / "__init__.py").read_text()
    match = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", init, flags=re.M)
    if not match:
        raise EnvFailure(f"no __version__ in {env.checkout_dir}/mindformers/__init__.py")
    return match.group(1)


def pytest_counts(output: str) -> dict[str, int]:
    """Counts from pytest's final line, e.g. '==== 3 failed, 17 passed, 2 skipped in 95.1s ===='."""
    finals = [line for line in output.splitlines() if re.match(r"^=+ .* in [\d.]+s", line)]
    if not finals:
        return {}
    return {re.sub(r"^errors$", "error", kind): int(n) for n, kind in re.findall(r"(\d+) (\w+)", finals[-1])}


def last_lines(output: str, count: int = SHOWN_LINES) -> list[str]:
    return [line for line in output.splitlines() if not PIP_NOISE.match(line)][-count:]


def free_disk(path: Path) -> str:
    existing = next(parent for parent in (path, *path.parents) if parent.exists())
    return f"{shutil.disk_usage(existing).free / 2**30:.1f} GiB free on {existing}"


def build(env: Env, log: IO[str], result: Result) -> None:
    """build_env.sh, once more after a failure (it starts over from an unfinished environment)."""
    command = ["bash", str(HERE / "build_env.sh"), env.name, str(env.venv)]
    started = time.monotonic()
    for attempt in range(1, BUILD_ATTEMPTS + 1):
        status, output = run_logged(command, log, echo="[build_env")
        if not status:
            break
        say(log, f"[compat {env.name}] build_env.sh exited with {status} ({free_disk(env.venv)}); its last lines:")
        for line in last_lines(output):
            say(log, f"    {line}")
        if attempt < BUILD_ATTEMPTS:
            say(log, f"[compat {env.name}] building again")
    result.build_s = time.monotonic() - started
    if status:
        raise EnvFailure(f"build_env.sh exited with {status}")


def install_plugin(env: Env, log: IO[str], result: Result) -> None:
    """`pip install '.[test]'` as a user would, proving it leaves MindSpore and MindFormers alone."""
    pip = [str(env.venv / "bin" / "python"), "-m", "pip"]
    started = time.monotonic()
    run_logged([*pip, "uninstall", "-y", "mindformers-tbplugin"], log)  # a fresh install each time
    before = distributions(env)
    if framework(before) != env.expected:
        raise EnvFailure(f"the environment holds {framework(before)}, expected {env.expected}: rm -rf {env.venv}")
    say(log, f"[compat {env.name}] before: {' '.join(f'{k}=={v}' for k, v in framework(before).items())}")
    status, _ = run_logged([*pip, "install", ".[test]"], log)
    result.install_s = time.monotonic() - started
    if status:
        raise EnvFailure(f"pip install '.[test]' exited with {status}")
    after = distributions(env)
    changes = describe_changes(before, after)
    say(log, f"[compat {env.name}] pip install '.[test]' changed: {'; '.join(changes) or 'nothing'}")
    if framework(after) != framework(before):
        raise EnvFailure(f"pip changed the framework: {framework(before)} -> {framework(after)}")


def run_tests(env: Env, log: IO[str], result: Result) -> None:
    bin_dir = env.venv / "bin"
    variables = base_environment()
    variables["PATH"] = f"{bin_dir}{os.pathsep}{variables.get('PATH', '')}"
    variables["VIRTUAL_ENV"] = str(env.venv)
    variables["MFTB_EXPECT_FRAMEWORK"] = f"mindspore=={env.mindspore} mindformers=={env.mindformers}"
    if env.checkout:
        version = checkout_version(env)
        if version != env.mindformers:
            raise EnvFailure(f"the checkout holds mindformers {version}, expected {env.mindformers}")
        variables["MFTB_MINDFORMERS_CHECKOUT"] = str(env.checkout_dir)
        variables["PYTHONPATH"] = str(env.checkout_dir)
        say(log, f"[compat {env.name}] mindformers {version} from the checkout {env.checkout_dir}")
    command = [
        str(bin_dir / "python"),
        "-m",
        "pytest",
        "-m",
        "compat",
        "-v",
        "--basetemp",
        str(LOGS / "tmp" / env.name),
    ]
    say(log, f"[compat {env.name}] MFTB_EXPECT_FRAMEWORK='{variables['MFTB_EXPECT_FRAMEWORK']}' {' '.join(command)}")
    started = time.monotonic()
    status, output = run_logged(command, log, env=variables, echo="*")
    result.test_s = time.monotonic() - started
    result.counts = pytest_counts(output)
    if status:
        result.problem = f"pytest exited with {status}" + (" (no compat tests collected)" if status == 5 else "")


def discard(env: Env, log: IO[str]) -> None:
    if (env.venv / "pyvenv.cfg").is_file():
        shutil.rmtree(env.venv)
        say(log, f"[compat {env.name}] removed {env.venv} ({free_disk(env.venv)})")


def run_env(env: Env, discard_after: bool = False) -> Result:
    result = Result(env.name)
    (LOGS / "tmp").mkdir(parents=True, exist_ok=True)  # pytest's --basetemp needs its parent
    with open(LOGS / f"{env.name}.log", "w") as log:
        say(
            log,
            f"=== {env.name}: mindspore {env.mindspore}, mindformers {env.mindformers}"
            + (" (release checkout, not installed)" if env.checkout else ""),
        )
        try:
            build(env, log, result)
            install_plugin(env, log, result)
            run_tests(env, log, result)
        except (EnvFailure, subprocess.CalledProcessError, OSError) as problem:
            result.problem = str(problem)
        if result.problem:
            say(log, f"[compat {env.name}] FAILED: {result.problem} (log: {log.name})")
        if discard_after:
            discard(env, log)
    return result


def summary(results: list[Result]) -> str:
    header = ("env", "build s", "install s", "test s", *COUNTED, "status")
    rows = [
        (
            r.env,
            f"{r.build_s:.0f}",
            f"{r.install_s:.0f}",
            f"{r.test_s:.0f}",
            *(str(r.counts.get(kind, 0)) for kind in COUNTED),
            "ok" if r.ok else f"FAILED: {r.problem}",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
        for row in (header, *rows)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("envs", nargs="*", metavar="ENV", help=f"environments to run (default: {' '.join(ENVS)})")
    parser.add_argument("--discard", action="store_true", help="remove each environment once its tests ran")
    arguments = parser.parse_args(argv)
    names = arguments.envs or list(ENVS)
    unknown = [name for name in names if name not in ENVS]
    if unknown:
        parser.error(f"unknown environment(s) {' '.join(unknown)}; known: {' '.join(ENVS)}")
    results = [run_env(ENVS[name], arguments.discard) for name in names]
    table = summary(results)
    (LOGS / "summary.txt").write_text(table + "\n")
    print(f"\n{table}\n(logs: {LOGS}/ENV.log)")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
