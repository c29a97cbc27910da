"""graders.engine is what training jobs import: it must load with no Django, DRF or Celery."""

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import graders.engine

REPO = Path(__file__).resolve().parents[3]
FORBIDDEN = ("django", "rest_framework", "celery")


def test_engine_modules_import_without_django() -> None:
    # Every module of the package and its subpackages (graders.engine.synthesis), so that a
    # new one is covered without editing this test.
    modules = sorted(
        module.name
        for module in pkgutil.walk_packages(graders.engine.__path__, prefix="graders.engine.")
    )
    assert "graders.engine.synthesis.validation" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.partition('.')[0] in {FORBIDDEN!r}))\n"
    )
    # A fresh interpreter, with no settings module to tempt anything into setting Django up.
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}

    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    assert {"graders.engine.programs", "graders.engine.reward", "graders.engine.fence"} <= set(
        modules
    )
    assert "graders.engine.baseline" in modules
    assert "graders.engine.synthesis.evaluator" in modules
