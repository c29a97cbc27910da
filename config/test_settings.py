"""The test suite's settings (pyproject.toml): config.settings as a development checkout runs
them, DEBUG=1 at import so that no HTTPS redirect or secure cookie applies (pytest-django still
runs each test with DEBUG off). Set in the environment, so the processes tests start (Celery
workers, manage.py) read the same; a DEBUG already set wins."""

import os

os.environ.setdefault("DEBUG", "1")

from config.settings import *  # noqa: F403
