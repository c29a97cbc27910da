"""Build the runtime's wheel, find its import closure in the source, and run the runtime's own
tests against the installed wheel in a venv of a given interpreter. Used by the tests beside
this file, by .ci/runtime-wheel (which builds the venvs) and by bench/runtime_import.py."""

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGING = REPO / "graders" / "engine"  # where the runtime's pyproject.toml lives
TRAINERS = PACKAGING / "trainers"
# The pyenv builds on this machine, one per minor version the runtime supports.
PYENV = Path.home() / ".pyenv" / "versions"
VENVS = REPO / ".venv-runtime"  # .ci/runtime-wheel builds <version>/ there
INTERPRETERS = {
    "3.10": PYENV / "3.10.13" / "bin" / "python3.10",
    "3.11": PYENV / "3.11.7" / "bin" / "python3.11",
    "3.12": PYENV / "3.12.1" / "bin" / "python3.12",
    "3.13": PYENV / "3.13.0" / "bin" / "python3.13",
}
# The engine tests that exercise the runtime and need nothing beyond it (no Django, numpy or
# engine modules outside the closure), by name in tests/graders/engine/, and below, the test
# modules and files they import. A new test_runtime_*, test_follow_* or test_capture_client_*
# file runs against the wheel too.
ENGINE_TESTS = REPO / "tests" / "graders" / "engine"
RUNTIME_TESTS = (
    "test_runtime*.py",
    "test_follow*.py",
    "test_capture_client*.py",
    "test_trainer_docs.py",
    "test_judge.py",
    "test_egress.py",
    "test_jsonout.py",
    "test_reward.py",
    "test_slots.py",
)
SUPPORT_FILES = (
    "tests/__init__.py",
    "tests/fakes/__init__.py",
    "tests/fakes/openai_server.py",
    "tests/graders/__init__.py",
    "tests/graders/engine/__init__.py",
    "docs/trainers.md",  # test_trainer_docs runs its examples
)
# test_judge's own code uses datetime.UTC (3.11+); the judge client it tests runs on 3.10 and
# is exercised there through test_runtime.
NEEDS_311 = {"tests/graders/engine/test_judge.py"}
PYTEST = "pytest>=8,<10"


def _imported_modules(path: Path) -> set[str]:
    """Absolute module names a source file imports anywhere (module level or in a function)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import"
            assert node.module is not None
            names.add(node.module)
            # `from graders.engine import fence` imports the submodule fence.
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _source(module: str) -> Path | None:
    """The file of one of our modules, or None for a name that is no module of ours."""
    base = REPO.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def runtime_entries() -> list[str]:
    """What a training job imports: graders.engine.runtime, and every module of the trainers
    package, as a trainer may load one by its dotted path (a reward manager, a function)."""
    trainers = [f"graders.engine.trainers.{path.stem}" for path in TRAINERS.glob("*.py")]
    return ["graders.engine.runtime", *sorted(trainers)]


def runtime_closure() -> dict[str, set[str]]:
    """Every module of ours that importing the runtime's entries loads, each with the
    top-level names of everything it imports (ours and third-party)."""
    closure: dict[str, set[str]] = {}
    pending = runtime_entries()
    while pending:
        module = pending.pop()
        if module in closure:
            continue
        path = _source(module)
        assert path is not None, module
        imported = _imported_modules(path)
        closure[module] = {name.partition(".")[0] for name in imported}
        # Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
        parts = module.split(".")
        parents = {".".join(parts[:end]) for end in range(1, len(parts))}
        ours = {name for name in imported if name.startswith("graders") and _source(name)}
        pending.extend((ours | parents) - closure.keys())
    return closure


def closure_files() -> set[str]:
    """The closure as paths inside the repository (and the wheel)."""
    return {
        str(path.relative_to(REPO))
        for path in (_source(module) for module in runtime_closure())
        if path is not None
    }


def wheel_build(folder: Path, *, isolated: bool = True) -> Path:
    """The runtime's wheel, built by pip from graders/engine/pyproject.toml as the documented
    command builds it; `isolated=False` uses the hatchling of this venv (a dev dependency), so
    that the build reaches no package index."""
    isolation = [] if isolated else ["--no-build-isolation"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation,
         "--wheel-dir", str(folder), str(PACKAGING)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    (wheel,) = folder.glob("grading_workbench_runtime-*.whl")
    return wheel


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def clean_environment() -> dict[str, str]:
    """This process's environment without what would point a child at the checkout or at
    Django settings."""
    dropped = {"DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    return {key: value for key, value in os.environ.items() if key not in dropped}


def wheel_install(venv_python: Path, *requirements: str) -> None:
    """pip install into a venv that has no pip of its own (.ci/runtime-wheel makes them so:
    a current pip for every Python, and no bundled pip to set up per venv)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv_python), "install", "--quiet",
         *requirements],
        check=True, capture_output=True, text=True, timeout=600, env=clean_environment(),
    )  # fmt: skip


def runtime_test_files() -> list[str]:
    """The runtime's test modules, as paths inside the repository."""
    found = {path for pattern in RUNTIME_TESTS for path in ENGINE_TESTS.glob(pattern)}
    return sorted(str(path.relative_to(REPO)) for path in found)


def runtime_tests_tree(folder: Path) -> Path:
    """A copy of the runtime's tests with no conftest of the workbench's (which set Django up)
    and no package of ours beside them, so `graders` can only come from the installed wheel."""
    for name in (*runtime_test_files(), *SUPPORT_FILES):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, folder / name)
    shutil.copyfile(Path(__file__).with_name("venv_conftest.py"), folder / "conftest.py")
    (folder / "pytest.ini").write_text("[pytest]\naddopts = -ra --strict-markers\n")
    return folder


def runtime_tests_run(venv_python: Path, tree: Path) -> subprocess.CompletedProcess[str]:
    """pytest over the copied runtime tests, in the venv, from the tree's root."""
    version = subprocess.run(
        [str(venv_python), "-c", "import sys; print(sys.version_info[:2] >= (3, 11))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    tests = [name for name in runtime_test_files() if version == "True" or name not in NEEDS_311]
    return subprocess.run(
        [str(venv_python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=tree, capture_output=True, text=True, timeout=900, env=clean_environment(),
    )  # fmt: skip
