"""The runtime's own distribution (graders/engine/pyproject.toml): its wheel holds exactly the
runtime's import closure, and installs and passes the runtime's tests on Python 3.10 to 3.13."""
