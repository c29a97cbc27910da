import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.db import connection

from labeling.models import Membership, Project, Role
from tests.browser import browser  # noqa: F401 (a fixture, shared by the browser tests)
from tests.fakes.openai_server import fake_judge  # noqa: F401 (a fixture: the fake judge)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REQUIRE_SERVICES = os.environ.get("WORKBENCH_REQUIRE_SERVICES") == "1"


@pytest.fixture
def project(db: Any) -> Project:
    return Project.objects.create(slug="acme", name="Acme")


def member(project: Project, username: str, role: str) -> User:
    user = User.objects.create_user(username=username, password="pw-for-tests-1")
    Membership.objects.create(user=user, project=project, role=role)
    return user


@pytest.fixture
def admin_user(project: Project) -> User:
    return member(project, "ada", Role.ADMIN)


@pytest.fixture
def expert_user(project: Project) -> User:
    return member(project, "eve", Role.EXPERT)


@pytest.fixture
def reviewer_user(project: Project) -> User:
    return member(project, "rob", Role.REVIEWER)


@pytest.fixture
def outsider(db: Any) -> User:
    other = Project.objects.create(slug="other", name="Other")
    return member(other, "oscar", Role.ADMIN)


def _reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 6379), 2):
            return True
    except OSError:
        return False


def service_required(url: str, *, what: str, variable: str) -> None:
    """Skip the test unless `url`'s server answers, saying which `variable` names another;
    fail instead where WORKBENCH_REQUIRE_SERVICES=1 (CI), so a missing service is not a pass."""
    if not _reachable(url):
        message = f"needs {what} at {url} (set {variable})"
        if REQUIRE_SERVICES:
            pytest.fail(message)
        pytest.skip(message)


REDIS_CACHE = os.environ.get("CACHE_TEST_URL", "redis://127.0.0.1:6379/13")


def redis_cache_use(settings: Any) -> None:
    """Django's cache on the test Redis (CACHE_TEST_URL) for this test; skipped without it."""
    service_required(REDIS_CACHE, what="Redis", variable="CACHE_TEST_URL")
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_CACHE,
        }
    }


class CeleryWorkers:
    """Real `celery worker` processes on one queue of a real broker, reading and writing the
    test database. A test may start several in turn and kill one as a crash would."""

    def __init__(self, env: dict[str, str], queue: str) -> None:
        self.env, self.queue = env, queue
        self.processes: list[subprocess.Popen[str]] = []

    def start(self, **env: str) -> subprocess.Popen[str]:
        """A worker allowed the judge hosts this test's settings allow (the fake judge's)."""
        allowed = {"JUDGE_PRIVATE_HOSTS": ",".join(django_settings.JUDGE_PRIVATE_HOSTS)}
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q", self.queue,
             "--pool=solo", "--loglevel=INFO", "--without-heartbeat", "--without-mingle",
             "--without-gossip"],
            cwd=REPO, env=self.env | allowed | env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        self.processes.append(worker)
        return worker

    def kill(self, worker: subprocess.Popen[str]) -> None:
        """SIGKILL, as the OOM killer or a lost machine would: no cleanup runs."""
        worker.kill()
        worker.wait(timeout=20)

    def stop_all(self) -> None:
        for worker in self.processes:
            if worker.poll() is None:
                worker.terminate()
            try:
                output, _ = worker.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
                output, _ = worker.communicate()
            sys.stdout.write(output[-4000:])


@pytest.fixture(params=["redis", "filesystem"])
def celery_workers(request: Any, transactional_db: Any, tmp_path: Path) -> Iterator[CeleryWorkers]:
    """Workers on Redis (the production broker) or on the file-system broker of the embedded
    default; the test process publishes to their queue. Start them with `.start()`."""
    # The test's fake judge first, so a worker started at once is allowed to call it.
    request.getfixturevalue("fake_judge")
    from config.celery import app

    if request.param == "redis":
        broker = os.environ.get("CELERY_TEST_BROKER_URL", "redis://127.0.0.1:6379/15")
        service_required(broker, what="a broker", variable="CELERY_TEST_BROKER_URL")
        transport_options: dict[str, Any] = {}
    else:
        broker = "filesystem://"
        folder = tmp_path / "broker"
        for sub in ("queue", "control"):
            (folder / sub).mkdir(parents=True)
        transport_options = {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
        }
    settings_dict = connection.settings_dict
    if connection.vendor == "sqlite" and settings_dict["NAME"].startswith(
        ("file:memorydb", ":memory:")
    ):
        pytest.skip("a worker process cannot share an in-memory SQLite test database")
    queue = f"test-{uuid.uuid4().hex[:8]}"
    # The worker's settings put the file-system broker's folders in WORKBENCH_BROKER_DIR.
    env = dict(
        os.environ,
        CELERY_BROKER_URL=broker,
        CELERY_TASK_DEFAULT_QUEUE=queue,
        WORKBENCH_VAR_DIR=str(tmp_path),
        WORKBENCH_BROKER_DIR=str(tmp_path / "broker"),
        MEDIA_ROOT=str(django_settings.MEDIA_ROOT),
    )
    if connection.vendor == "postgresql":
        user = settings_dict["USER"]
        password = settings_dict["PASSWORD"]
        auth = f"{user}:{password}@" if password else f"{user}@" if user else ""
        env["DATABASE_URL"] = (
            f"postgres://{auth}{settings_dict['HOST'] or '127.0.0.1'}:{settings_dict['PORT'] or 5432}"
            f"/{settings_dict['NAME']}"
        )
    else:
        env["DATABASE_URL"] = f"sqlite:///{settings_dict['NAME']}"
    previous = (app.conf.broker_url, app.conf.task_default_queue, app.conf.broker_transport_options)
    app.conf.broker_url, app.conf.task_default_queue = broker, queue
    app.conf.broker_transport_options = transport_options
    _broker_pools_reset(app)
    workers = CeleryWorkers(env, queue)
    try:
        yield workers
    finally:
        app.conf.broker_url, app.conf.task_default_queue, app.conf.broker_transport_options = (
            previous
        )
        # Not app.close(): it also takes the app off Celery's list of live apps, so a
        # shared_task imported by a later test (labeling.tasks, say) was never registered.
        _broker_pools_reset(app)
        workers.stop_all()


@pytest.fixture
def celery_worker_process(celery_workers: CeleryWorkers) -> str:
    """One running worker; yields its queue name."""
    celery_workers.start()
    return celery_workers.queue


def _broker_pools_reset(app: Any) -> None:
    # Celery caches a connection pool and a producer pool for the broker it first used; the
    # next publish must build both anew for the broker this test switched to.
    app._pool = None
    app.amqp._producer_pool = None


def wait_for(predicate: Any, timeout: float = 60.0, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    # The real hasher is deliberately slow; tests create hundreds of users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
