"""Production settings: refuse the default secret key, and pass Django's deployment check."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_debug_off_refuses_the_default_secret_key() -> None:
    result = manage("check", DEBUG="0", SECRET_KEY="insecure-development-key-change-me")
    assert result.returncode != 0
    assert "set SECRET_KEY" in result.stderr


def test_deploy_check_is_clean_with_a_real_key() -> None:
    key = "k" * 20 + "-Zq8!v2#Lp0@xY7$wR4%tN6^mB1&cH9*" + "j" * 20
    result = manage("check", "--deploy", "--fail-level", "WARNING", DEBUG="0", SECRET_KEY=key)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def cache_backend(cache_url: str) -> str:
    """The default cache's class and location as a fresh process configures them."""
    show = (
        "from django.core.cache import caches; c = caches['default']; "
        "print(type(c).__name__, getattr(c, '_servers', ''))"
    )
    result = manage("shell", "-v", "0", "-c", show, CACHE_URL=cache_url)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_cache_url_puts_the_cache_in_redis_for_every_process() -> None:
    assert cache_backend("redis://127.0.0.1:6379/3") == "RedisCache ['redis://127.0.0.1:6379/3']"
    assert cache_backend("").startswith("LocMemCache")


def test_the_tests_enqueue_on_a_broker_folder_of_their_own() -> None:
    """A later `make run` worker reads var/broker: messages left there by the tests would name
    rows only the test database had (it logged DoesNotExist for each)."""
    from django.conf import settings

    if not settings.CELERY_BROKER_URL.startswith("filesystem://"):
        pytest.skip("the file-system broker is not in use (CELERY_BROKER_URL is set)")
    assert settings.BROKER_DIR == settings.VAR_DIR / "test-broker"
    folders = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    assert folders["data_folder_in"] == str(settings.VAR_DIR / "test-broker" / "queue")


def test_the_benches_load_the_settings_with_debug_off() -> None:
    """With DEBUG off by default and no SECRET_KEY, settings once refused to load, and every
    bench stopped at django.setup()."""
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    code = (
        "from bench.database import bench_environment; bench_environment(); import django; "
        "django.setup(); from django.conf import settings; print(settings.DEBUG)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_with_no_secret_key_a_checkout_keeps_one_random_key(tmp_path: Path) -> None:
    """A bare `manage.py` command on a checkout works with DEBUG off: the key is made once in
    the var folder, owner-only, and every later process reads the same one."""
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY")}
    env |= {"DJANGO_SETTINGS_MODULE": "config.settings", "WORKBENCH_VAR_DIR": str(tmp_path)}
    show = "from django.conf import settings; print(settings.SECRET_KEY)"
    keys = []
    for _ in range(2):
        result = subprocess.run(
            [sys.executable, "manage.py", "shell", "-v", "0", "-c", show],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        keys.append(result.stdout.strip())
    kept = tmp_path / "secret_key"
    assert keys[0] == keys[1] == kept.read_text() and len(keys[0]) >= 50
    assert kept.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    result = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
