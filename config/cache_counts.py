"""Counts in Django's cache, for the limits that must hold across requests: the reward API's
per-token rate (graders/tokens.py) and the login lockout (config/login_throttle.py).

cache.add + cache.incr are atomic in the local-memory, Redis and Memcached backends. The
local-memory cache (the default: CACHE_URL unset) belongs to one process, so a count kept there
is per process and a limit of N would allow N per process; gunicorn.conf.py therefore refuses
to start more than one process unless CACHE_URL names a cache they share.

On Redis the count is one round trip (SET NX EX and INCR in one pipeline) where add + incr
are two, each building a client: the reward API counts every request (bench/reward_api.py).
Django's Redis backend stores an int as itself, so either way leaves the same value."""

from django.core.cache import DEFAULT_CACHE_ALIAS, cache, caches
from django.core.cache.backends.redis import RedisCache


def cache_count(key: str, *, timeout: int) -> int:
    """Add one to the count under `key`, created at 0 to live `timeout` seconds if absent (an
    increment keeps its expiry), and return the new count."""
    backend = caches[DEFAULT_CACHE_ALIAS]
    if isinstance(backend, RedisCache):
        return _redis_count(backend, key, timeout)
    cache.add(key, 0, timeout=timeout)
    try:
        return int(cache.incr(key))
    except ValueError:  # evicted between add and incr: this is the first
        cache.set(key, 1, timeout=timeout)
        return 1


def _redis_count(backend: RedisCache, key: str, timeout: int) -> int:
    name = backend.make_and_validate_key(key)
    client = backend._cache.get_client(name, write=True)
    # Not a transaction: INCR after SET NX is right whatever runs between them (a key
    # evicted in between is recreated by INCR at 1, without expiry, as add + incr's retry
    # would set it; the next window uses another key).
    pipeline = client.pipeline(transaction=False)
    pipeline.set(name, 0, ex=timeout, nx=True)
    pipeline.incr(name)
    _, count = pipeline.execute()
    return int(count)
