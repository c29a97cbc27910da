"""The production server's settings (gunicorn.conf.py) hold what the reward API's latency
depends on: the collector's freezes and thresholds."""

import gc
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

CONF = Path(__file__).resolve().parents[1] / "gunicorn.conf.py"


def conf() -> ModuleType:
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
    settings = conf()
    calls: list[tuple[str, int]] = []
    served = [0]
    monkeypatch.setattr(gc, "collect", lambda: calls.append(("collect", served[0])))
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(("freeze", served[0])))
    while served[0] < 2000:
        served[0] += 1
        settings.post_request(None, None, None, None)
    # Collected first, so no garbage is frozen for good.
    assert calls == [(step, n) for n in (1, 10, 100, 1000) for step in ("collect", "freeze")]


def test_workers_freeze_the_loaded_app_and_keep_young_collections_small(collector: Any) -> None:
    settings = conf()
    gc.unfreeze()
    settings.post_worker_init(None)
    assert gc.get_freeze_count() > 1000
    assert gc.get_threshold() == (2_000, 10, 10)
    assert settings.worker_class == "gthread"
