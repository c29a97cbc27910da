"""The trainers' own code, run in the virtual environments .ci/trainer-venvs builds beside the
project's (.venv-trainers/<name>). A test asks for one with `trainer_python("trl")`; it skips,
naming the reason, when that environment was not built or its build failed."""

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
