"""Counts in Django's cache, for the limits that must hold across requests: the reward API's
per-token rate (graders/tokens.py) and the login lockout (config/login_throttle.py).

cache.add + cache.incr are atomic in the local-memory, Redis and Memcached backends. The
local-memory cache (the default: CACHE_URL unset) belongs to one process, so a count kept there
is per process and a limit of N would allow N per process; gunicorn.conf.py therefore refuses
to start more than one process unless CACHE_URL names a cache they share."""

from django.core.cache import cache


def cache_count(key: str, *, timeout: int) -> int:
    """Add one to the count under `key`, created at 0 to live `timeout` seconds if absent (an
    increment keeps its expiry), and return the new count."""
    cache.add(key, 0, timeout=timeout)
    try:
        return int(cache.incr(key))
    except ValueError:  # evicted between add and incr: this is the first
        cache.set(key, 1, timeout=timeout)
        return 1
