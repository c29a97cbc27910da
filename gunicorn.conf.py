"""gunicorn's settings for serving the workbench in production (read from the working
directory): `gunicorn -b 0.0.0.0:8000` in the repository, with DEBUG=0 and the other settings in
the environment. One process per core, as Python runs one thread at a time per process; threads
in each, as a reward request mostly waits for the judge. WEB_CONCURRENCY (gunicorn's own
variable) sets the processes, WEB_THREADS the threads of each."""

import os

wsgi_app = "config.wsgi:application"
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", os.cpu_count() or 2))
threads = int(os.environ.get("WEB_THREADS", 8))
# Training jobs keep connections open between requests.
keepalive = 30
# Each process imports the app itself after the fork, so nothing made at import (the reward
# API's judge event loop, database connections) is shared across processes.
preload_app = False


def post_worker_init(worker: object) -> None:
    """Keep the garbage collector off the application's own objects: gc.freeze() moves
    everything loaded so far (Django, the URL conf, models) out of the collected generations,
    and a larger first generation makes collections rarer. Without it a full collection walks
    every module's objects and adds tens of milliseconds to whichever request triggers it
    (bench/reward_api.py: p99 overhead about halved)."""
    import gc

    gc.freeze()
    gc.set_threshold(20_000, 20, 50)
