"""The test suite's settings (pyproject.toml): config.settings as a development checkout runs
them, DEBUG=1 at import so that no HTTPS redirect or secure cookie applies (pytest-django still
runs each test with DEBUG off). Set in the environment, so the processes tests start (Celery
workers, manage.py) read the same; a DEBUG already set wins."""

import os
from pathlib import Path

os.environ.setdefault("DEBUG", "1")
# Messages the tests enqueue on the file-system broker go to a folder of their own, or the
# worker of a later `make run` would take them up for rows that only the test database had.
os.environ.setdefault(
    "WORKBENCH_BROKER_DIR",
    str(
        Path(os.environ.get("WORKBENCH_VAR_DIR", Path(__file__).resolve().parent.parent / "var"))
        / "test-broker"
    ),
)

from config.settings import *  # noqa: F403
