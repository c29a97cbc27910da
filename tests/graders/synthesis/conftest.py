from collections.abc import Iterator
from typing import Any

import pytest

from tests.graders.synthesis.hook import Hook


@pytest.fixture
def hook(settings: Any) -> Iterator[Hook]:
    """A started stand-in rollout webhook the egress policy allows (worker processes started
    meanwhile too: tests/conftest.py CeleryWorkers passes JUDGE_PRIVATE_HOSTS on)."""
    server = Hook()
    settings.JUDGE_PRIVATE_HOSTS = [*settings.JUDGE_PRIVATE_HOSTS, server.host_port]
    yield server
    server.server.shutdown()
