"""The trainers' own code, run in the virtual environments .ci/trainer-venvs builds beside the
project's (.venv-trainers/<name>). A test asks for one with `trainer_python("trl")`; it skips,
naming the reason, when that environment was not built or its build failed."""

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENVS = ROOT / ".venv-trainers"


def _log_tail(name: str) -> str:
    log = VENVS / f"{name}.log"
    if not log.exists():
        return ""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return " | ".join(lines[-3:])


@pytest.fixture
def trainer_python() -> Callable[[str], Path]:
    def find(name: str) -> Path:
        python = VENVS / name / "bin" / "python"
        if not (VENVS / name / ".requirements").exists() or not python.exists():
            tail = _log_tail(name)
            reason = f"the {name} venv is not built (run .ci/trainer-venvs {name})"
            pytest.skip(f"{reason}: its build failed: {tail}" if tail else reason)
        return python

    return find


def run_in_trainer(
    python: Path, script: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run a script of tests/trainers/scripts in a trainer's venv, with the project's root on
    PYTHONPATH (the runtime needs nothing else from it) and no network beyond loopback."""
    full_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **(env or {}),
    }
    done = subprocess.run(
        [str(python), str(script), *args],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{script.name} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
        )
    return done
