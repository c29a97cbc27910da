"""The production server's settings (gunicorn.conf.py) hold what the reward API's latency
depends on (the collector's freezes and thresholds) and refuse several processes whose rate
limits would each count alone."""

import gc
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

CONF = Path(__file__).resolve().parents[1] / "gunicorn.conf.py"


def conf(monkeypatch: pytest.MonkeyPatch, **env: str) -> ModuleType:
    """gunicorn.conf.py as gunicorn reads it, in an environment of one process unless `env`
    says otherwise."""
    monkeypatch.delenv("CACHE_URL", raising=False)
    monkeypatch.setenv("WEB_CONCURRENCY", "1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location("gunicorn_conf_under_test", CONF)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def collector() -> Any:
    """The collector's state, restored after the test."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_a_process_freezes_what_it_built_after_its_1st_10th_100th_and_1000th_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = conf(monkeypatch)
    calls: list[tuple[str, int]] = []
    served = [0]
    monkeypatch.setattr(gc, "collect", lambda: calls.append(("collect", served[0])))
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(("freeze", served[0])))
    while served[0] < 2000:
        served[0] += 1
        settings.post_request(None, None, None, None)
    # Collected first, so no garbage is frozen for good.
    assert calls == [(step, n) for n in (1, 10, 100, 1000) for step in ("collect", "freeze")]


def test_workers_freeze_the_loaded_app_and_keep_young_collections_small(
    collector: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = conf(monkeypatch)
    gc.unfreeze()
    settings.post_worker_init(None)
    assert gc.get_freeze_count() > 1000
    assert gc.get_threshold() == (2_000, 10, 10)
    assert settings.worker_class == "gthread"


def test_several_processes_without_a_shared_cache_refuse_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(SystemExit, match="2 web processes need CACHE_URL"):
        conf(monkeypatch, WEB_CONCURRENCY="2")
    assert conf(monkeypatch, WEB_CONCURRENCY="2", CACHE_URL="redis://127.0.0.1:6379/1").workers == 2
    assert conf(monkeypatch, WEB_CONCURRENCY="1").workers == 1


def test_gunicorn_itself_exits_with_the_reason() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CACHE_URL"}
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "--check-config"],
        cwd=CONF.parent, env=env | {"WEB_CONCURRENCY": "3"}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    assert "3 web processes need CACHE_URL" in result.stderr
