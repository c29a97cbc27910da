"""The conftest of the runtime's tests where they run against the installed wheel
(wheel.runtime_tests_tree copies this file to the copied tree's root): no Django there, so
pytest-django's `settings` fixture, which the fake judge's fixture asks for, is stood in for."""

import sys
import types
from pathlib import Path

import pytest

import graders.engine.runtime
from tests.fakes.openai_server import fake_judge  # noqa: F401 (a fixture: the fake judge)

ROOT = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    # The point of the run: the runtime comes from the wheel, not from a checkout.
    where = Path(graders.engine.runtime.__file__).resolve()
    if ROOT in where.parents or Path(sys.prefix).resolve() not in where.parents:
        raise pytest.UsageError(f"graders.engine.runtime was imported from {where}")
    if "django" in sys.modules:
        raise pytest.UsageError("Django was imported")


@pytest.fixture
def settings() -> types.SimpleNamespace:
    # The fake judge adds its host to the workbench's JUDGE_PRIVATE_HOSTS; the runtime reads
    # its egress policy from the bundle, not from settings.
    return types.SimpleNamespace(JUDGE_PRIVATE_HOSTS=[])
