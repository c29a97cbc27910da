"""gunicorn's settings for serving the workbench in production (read from the working
directory): `gunicorn -b 0.0.0.0:8000` in the repository, with DEBUG=0 and the other settings in
the environment. One process per core, as Python runs one thread at a time per process; threads
in each, as a reward request mostly waits for the judge. WEB_CONCURRENCY (gunicorn's own
variable) sets the processes (more than one needs CACHE_URL, below), WEB_THREADS the threads
of each."""

import itertools
import os

wsgi_app = "config.wsgi:application"
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", os.cpu_count() or 2))
# The reward API's per-token limits and the login lockout count in Django's cache, which is one
# per process unless CACHE_URL names a shared one (config/cache_counts.py): N processes would
# each allow the whole limit.
if workers > 1 and not os.environ.get("CACHE_URL"):
    raise SystemExit(
        f"gunicorn.conf.py: {workers} web processes need CACHE_URL (redis://...), as the "
        "reward API's rate limits and the login lockout are counted in the cache, which is "
        "per process without it. Set CACHE_URL, or WEB_CONCURRENCY=1."
    )
threads = int(os.environ.get("WEB_THREADS", 8))
# Training jobs keep connections open between requests.
keepalive = 30
# Each process imports the app itself after the fork, so nothing made at import (the reward
# API's judge event loop, database connections) is shared across processes.
preload_app = False


def post_worker_init(worker: object) -> None:
    """Keep the garbage collector off the application's own objects: gc.freeze() moves
    everything loaded so far (Django, the URL conf, models) out of the collected generations,
    so a full collection does not walk every module's objects. A first generation of 2,000
    objects keeps each young collection short: a request leaves a few hundred objects in
    reference cycles (Django's and DRF's request, view and serializer objects), and at
    20,000 a collection paused the process for 15 to 50 ms, at 2,000 for at most about 5."""
    import gc

    gc.freeze()
    gc.set_threshold(2_000, 10, 10)


# Requests after which a process freezes again what it has built lazily since (URL
# resolvers, serializers' fields, the reward API's parsed programs and connection pools), so
# later full collections skip it. bench/reward_api.py: a full collection took 55 to 75 ms
# without this, under 1 ms after the tenth request with it; p99 overhead 42 -> 34 ms.
REFREEZE_AFTER = frozenset({1, 10, 100, 1000})
_served = itertools.count(1)


def post_request(worker: object, req: object, environ: object, resp: object) -> None:
    """After the answer is sent: collect, then freeze the survivors (the one full collection
    each of these times costs is paid four times in a process's life)."""
    if next(_served) in REFREEZE_AFTER:
        import gc

        gc.collect()
        gc.freeze()
