"""Settings for each PostgreSQL session the app opens, run when Django connects.

jit = off. PostgreSQL compiles a statement to machine code once its estimated cost passes
jit_above_cost, which the home's and the agreement pages' counts over 100,000 labels or a
million responses do; compiling costs 15 to 20 ms each time, for statements that run once and
take 150 (bench/pages.py), as it does for most web requests. Set in the session rather than as
a startup option, which PgBouncer refuses."""

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper


def session_configure(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET jit = off")
