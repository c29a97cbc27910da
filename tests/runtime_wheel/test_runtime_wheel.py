"""The runtime's wheel, built by pip from graders/engine/pyproject.toml: it holds exactly the
import closure of graders.engine.runtime and of the trainers package's modules, which a trainer
may load by dotted path (so a module added to the closure and not to the packaging list fails
here, and so does a module of trainers/ that imports beyond the closure); that closure needs only the standard library and the three HTTP
libraries the wheel depends on, and the wheel passes the runtime's own tests in a venv of each
Python from 3.10 to 3.13 (.ci/runtime-wheel builds them with the wheel's dependencies from the
package index; here the wheel of this checkout is reinstalled there with --no-deps, offline)."""

import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from fnmatch import fnmatch
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.runtime_wheel.wheel import (
    INTERPRETERS,
    REPO,
    VENVS,
    closure_files,
    runtime_closure,
    runtime_entries,
    runtime_tests_run,
    runtime_tests_tree,
    wheel_build,
    wheel_install,
    wheel_names,
)

HTTP_LIBRARIES = {"httpx", "aiohttp", "httpx_aiohttp"}
# aiohttp's own dependency, whose header type judge_http names.
VIA_AIOHTTP = {"multidict"}
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # With this venv's hatchling, so that the build reaches no package index.
    return wheel_build(tmp_path_factory.mktemp("runtime-wheel"), isolated=False)


def test_the_wheel_holds_the_runtime_s_import_closure_and_nothing_else(wheel: Path) -> None:
    names = wheel_names(wheel)
    metadata = {name for name in names if name.split("/")[0].endswith(".dist-info")}
    modules = names - metadata

    assert modules == closure_files()
    assert {"graders/engine/runtime.py", "graders/engine/trainers/verl.py"} <= modules
    # Nothing of the workbench's Django side: no app module, model, template or migration.
    assert not {name for name in modules if not name.endswith(".py")}
    assert not {name for name in modules if name.split("/")[0] != "graders"}
    assert "graders/models.py" not in modules
    assert not {name for name in modules if "migrations" in name or "synthesis" in name}


def test_the_closure_imports_only_the_standard_library_and_the_three_http_libraries() -> None:
    closure = runtime_closure()
    allowed = set(sys.stdlib_module_names) | HTTP_LIBRARIES | VIA_AIOHTTP | {"graders"}

    outside = {module: names - allowed for module, names in closure.items() if names - allowed}

    assert outside == {}
    assert {"graders.engine.judge_http", "graders.engine.trainers.groups"} <= closure.keys()
    assert not {"graders.engine.metrics", "graders.engine.baseline"} & closure.keys()


def test_the_wheel_carries_the_project_s_version_and_its_http_ranges(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (metadata_name,) = (name for name in archive.namelist() if name.endswith("/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    requires = {Requirement(line) for line in metadata.get_all("Requires-Dist", [])}
    workbench = {Requirement(line) for line in PROJECT["project"]["dependencies"]}

    assert metadata["Name"] == "grading-workbench-runtime"
    assert metadata["Version"] == PROJECT["project"]["version"]
    assert metadata["Requires-Python"] == ">=3.10"
    assert {requirement.name for requirement in requires} == {"httpx", "httpx-aiohttp", "aiohttp"}
    # The same ranges as the workbench's own, which the engine's tests run with.
    assert requires <= workbench


def test_the_documented_command_builds_the_same_wheel_from_the_git_repository(
    wheel: Path, tmp_path: Path
) -> None:
    guide = (REPO / "docs" / "trainers.md").read_text()
    (command,) = re.findall(r"^pip install .*git\+https://\S+$", guide, flags=re.MULTILINE)
    assert "pip install ./graders/engine" in guide  # the checkout's variant
    (requirement,) = shlex.split(command)[2:]
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    )
    if head.returncode != 0:
        pytest.skip(f"{REPO} is no git repository")
    # This repository at its last commit instead of the guide's placeholder address; built
    # with this venv's hatchling, which needs no package index.
    local = re.sub(r"git\+https://[^#]+", f"git+file://{REPO}@{head.stdout.strip()}", requirement)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), local],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip

    (built,) = tmp_path.glob("*.whl")
    assert built.name == wheel.name
    assert wheel_names(built) == wheel_names(wheel)


def test_ruff_keeps_every_module_of_the_closure_to_python_3_10_syntax() -> None:
    patterns = PROJECT["tool"]["ruff"]["per-file-target-version"]

    unguarded = {
        path
        for path in closure_files()
        if not any(fnmatch(path, pattern) and patterns[pattern] == "py310" for pattern in patterns)
    }

    assert unguarded == set()


def runtime_venv(version: str) -> Path:
    """The venv .ci/runtime-wheel built for `version`, or a skip that says why there is none."""
    python, venv = INTERPRETERS[version], VENVS / version
    if not python.exists():
        pytest.skip(f"no Python {version} here ({python})")
    if not (venv / ".requirements").exists():
        log = VENVS / f"{version}.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        reason = f"the runtime venv for Python {version} is not built (run .ci/runtime-wheel)"
        pytest.skip(f"{reason}: its build failed: {' | '.join(tail)}" if tail else reason)
    return venv / "bin" / "python"


@pytest.mark.parametrize("version", sorted(INTERPRETERS))
def test_the_runtime_s_tests_pass_against_the_installed_wheel(
    version: str, wheel: Path, tmp_path: Path
) -> None:
    venv_python = runtime_venv(version)
    wheel_install(venv_python, "--no-deps", "--force-reinstall", str(wheel))
    # The dependencies the wheel declares are what the venv holds.
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv_python), "check"],
        check=True, capture_output=True,
    )  # fmt: skip

    result = runtime_tests_run(venv_python, runtime_tests_tree(tmp_path / "tree"))

    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout.splitlines()[-1]
    # Every entry a training job may import loads from the wheel alone, and brings no Django.
    entries = ", ".join(runtime_entries())
    imported = subprocess.run(
        [str(venv_python), "-c", f"import sys, {entries}; print(sorted(sys.modules))"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    ).stdout  # fmt: skip
    for absent in ("django", "numpy", "labeling", "reviews", "config"):
        assert f"'{absent}'" not in imported
