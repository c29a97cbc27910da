"""Running a script in a trainer's venv (conftest.py finds the venv)."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
