"""config/cache_counts.py: the same count on the local-memory cache (add + incr) and on Redis
(one pipelined round trip), each on the real backend."""

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import caches

from config.cache_counts import cache_count
from tests.conftest import redis_cache_use


@pytest.fixture(params=["locmem", "redis"])
def backend(request: Any, settings: Any) -> Iterator[str]:
    if request.param == "redis":
        redis_cache_use(settings)
    else:
        settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    yield request.param


def test_counts_from_one_and_keeps_the_first_expiry(backend: str) -> None:
    key = f"count-test:{uuid.uuid4().hex}"  # Redis outlives the test
    assert [cache_count(key, timeout=90) for _ in range(3)] == [1, 2, 3]
    cache = caches["default"]
    assert cache.get(key) == 3  # readable as the int it is, either way
    if backend == "redis":
        name = cache.make_and_validate_key(key)
        ttl = cache._cache.get_client(name).ttl(name)
        assert 0 < ttl <= 90  # set by the first count, not reset by the others
        cache.delete(key)


def test_an_expired_count_starts_again_at_one(backend: str) -> None:
    key = f"count-test:{uuid.uuid4().hex}"
    cache_count(key, timeout=90)
    cache_count(key, timeout=90)
    caches["default"].delete(key)  # as expiry or eviction would
    assert cache_count(key, timeout=90) == 1
    caches["default"].delete(key)
